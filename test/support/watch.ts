// Running a bridge Watcher in a test and looking at what it reported.
import type { TestContext } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import { kubeApi } from './cluster.ts';
import { Watcher, type WatcherOptions } from '../../bridge/watcher.ts';
import type { WatchEvent } from '../../bridge/store.ts';

export interface RecordedWatch {
  watcher: Watcher;
  /** Events for objects in `namespace` (and every `synced`), in order. */
  events: WatchEvent[];
  /** "apply cm-a", "delete cm-b (inferred)", "synced" … for readable assertions. */
  summary(): string[];
}

export async function recordWatch(
  t: TestContext,
  kc: KubeConfig,
  apiVersion: string,
  kind: string,
  namespace: string,
  options: Partial<WatcherOptions> = {},
): Promise<RecordedWatch> {
  const api = kubeApi(kc);
  const resource = await api.resource(apiVersion, kind);
  const watcher = new Watcher(api, resource, { projection: 'metadata', backoffMs: [100, 1000], ...options });
  const events: WatchEvent[] = [];
  watcher.subscribe((e) => {
    if (e.type === 'synced' || e.object.metadata.namespace === namespace) events.push(e);
  });
  watcher.start();
  t.after(() => watcher.stop());
  await watcher.waitForSync();
  return {
    watcher,
    events,
    summary: () =>
      events.map((e) => (e.type === 'synced' ? (e.relist ? 'relisted' : 'synced') : `${e.type} ${e.object.metadata.name}${e.type === 'delete' && e.inferred ? ' (inferred)' : ''}`)),
  };
}
