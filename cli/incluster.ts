// The bridge in the cluster: in the local one as `kubectl apply -k manifests/` installs it (its
// journal on its output), a reader of that journal from the leading replica's log, and the
// check that the bridges of any cluster speak the functions' event contract.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { applyObject, type KubeApi } from '../kube/api.ts';
import { namespaceReady } from '../kube/namespace.ts';
import type { JournalEntry } from '../core/journal.ts';
import { ensureBinaries } from '../cluster/build.ts';
import { clusterPaths, kfnVersion, repoRoot } from '../cluster/paths.ts';
import { importImages } from '../cluster/images.ts';
import { nodePaths } from '../cluster/node.ts';
import { bridgeImage } from './artifacts/images.ts';
import { UsageError } from './command.ts';
import { kfnChart, kfnFile, localBridgeInstall } from './invocation.ts';
import { contractAnnotation } from '../core/names.ts';
import { contractVersion, contractVersions } from '../core/event.ts';

export const bridgeNamespace = 'kfn-system';
/** The bridge's pods and Deployments, as manifests/ and the Helm chart label them. */
const bridgeSelector = 'app.kubernetes.io/name=kfn-bridge';

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
        const pods = await api.request<{ items: { metadata: { name: string } }[] }>('GET', `/api/v1/namespaces/${namespace}/pods?labelSelector=${bridgeSelector}`);
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

/**
 * The bridges in the cluster (Deployments labelled app.kubernetes.io/name=kfn-bridge) must speak
 * the event contract of this kfn's SDK, which the functions are built with: a mismatch is refused
 * here, at deploy time, rather than found at the first delivery (a 400 from the function).
 */
export async function checkBridgeContract(api: KubeApi, log: (line: string) => void): Promise<void> {
  const bridges = await api
    .request<{ items: { metadata: { name: string; namespace: string; annotations?: Record<string, string> } }[] }>('GET', '/apis/apps/v1/deployments', { query: { labelSelector: bridgeSelector } })
    .then((l) => l.items, () => undefined);
  if (!bridges) return; // not allowed to look: the first delivery will tell
  if (!bridges.length) {
    log(`No kfn bridge runs in the cluster yet: the functions get no events until one does (${localBridgeInstall()}, or kfn's Helm chart ${kfnChart()})`);
    return;
  }
  const spoken = (contractVersions as readonly number[]).map(String);
  const other = bridges.filter((b) => !spoken.includes(b.metadata.annotations?.[contractAnnotation] ?? String(contractVersion)));
  if (other.length) {
    const b = other[0]!;
    throw new UsageError(`the bridge ${b.metadata.namespace}/${b.metadata.name} speaks event contract v${b.metadata.annotations![contractAnnotation]}, and these functions (kfn ${kfnVersion}) speak v${contractVersions.join(' and v')}: upgrade the bridge to kfn ${kfnVersion} (helm upgrade with its image, or kubectl apply -k ${kfnFile('manifests/')} of this kfn), or deploy with the kfn that matches it`, 1);
  }
  // An older bridge sends contract 1 to these functions too: they work, reading what they need themselves.
  const older = bridges.find((b) => Number(b.metadata.annotations?.[contractAnnotation] ?? contractVersion) < contractVersion);
  if (older) log(`The bridge ${older.metadata.namespace}/${older.metadata.name} speaks event contract v${older.metadata.annotations![contractAnnotation]}: its events carry no observed state, so these functions read the apiserver for it (slower). Upgrade the bridge to kfn ${kfnVersion} for contract v${contractVersion}.`);
}
