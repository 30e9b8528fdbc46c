// The bridge in the local cluster as `kubectl apply -k manifests/` installs it (its journal on
// its output), and a reader of that journal from the leading replica's log.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { applyObject, type KubeApi } from '../kube/api.ts';
import { namespaceReady } from '../kube/namespace.ts';
import type { JournalEntry } from '../core/journal.ts';
import { ensureBinaries } from '../cluster/build.ts';
import { clusterPaths, repoRoot } from '../cluster/paths.ts';
import { importImages } from '../cluster/images.ts';
import { nodePaths } from '../cluster/node.ts';
import { bridgeImage } from './deploy.ts';

export const bridgeNamespace = 'kfn-system';

/** Builds and imports the bridge image, then applies manifests/ with `--journal=/dev/stdout` added. */
export async function installBridge(api: KubeApi, binDir: string, fieldManager: string, log: (line: string) => void): Promise<void> {
  await namespaceReady(api, bridgeNamespace, { fieldManager, say: log });
  const binaries = await ensureBinaries({ log });
  importImages(nodePaths(clusterPaths().dir).containerdSocket, [(await bridgeImage(binaries, log)).tarball]);
  const rendered = execFileSync(join(binDir, 'kubectl'), ['kustomize', join(repoRoot, 'manifests')], { encoding: 'utf8' });
  for (const doc of parseAllDocuments(rendered)) {
    const obj = doc.toJS() as { kind: string; spec?: { template: { spec: { containers: { args: string[] }[] } } } };
    if (obj.kind === 'Deployment') obj.spec!.template.spec.containers[0]!.args.push('--journal=/dev/stdout');
    await applyObject(api, obj as Parameters<typeof applyObject>[1], fieldManager);
  }
}

/**
 * Follows the journal of the bridge that holds the Lease, from its pod's log, calling `onEntry`
 * once per entry (across takeovers and reconnects) until the returned controller is aborted.
 */
export function followBridgeJournal(api: KubeApi, namespace: string, onEntry: (entry: JournalEntry) => void): AbortController {
  const abort = new AbortController();
  // A log read again after the stream ended starts from the beginning: each entry once.
  const seen = new Set<string>();
  void (async () => {
    while (!abort.signal.aborted) {
      try {
        const lease = await api.request<{ spec?: { holderIdentity?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases/kfn-bridge`);
        const pods = await api.request<{ items: { metadata: { name: string } }[] }>('GET', `/api/v1/namespaces/${namespace}/pods?labelSelector=app.kubernetes.io/name=kfn-bridge`);
        const leader = pods.items.find((p) => lease.spec?.holderIdentity?.startsWith(p.metadata.name));
        if (leader) {
          // A pod's log holds more than the journal's JSON lines (the bridge's first line says
          // which cluster it uses): those are passed over.
          await api.stream(`/api/v1/namespaces/${namespace}/pods/${leader.metadata.name}/log?follow=true`, { signal: abort.signal, onText: () => {} }, (line) => {
            if (!line || typeof line !== 'object' || !('outcome' in line)) return;
            const entry = line as unknown as JournalEntry;
            const key = `${entry.id}|${entry.attempt}|${entry.time}`;
            if (seen.has(key)) return;
            seen.add(key);
            onEntry(entry);
          });
        }
      } catch {
        /* no leader yet, or the log ended (takeover): look again */
      }
      await sleep(1000);
    }
  })();
  return abort;
}
