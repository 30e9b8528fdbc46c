// `kfn demo`'s namespace for the samples, made fresh for each run: a previous run's namespace is
// deleted first, and the objects its functions did not live to finalize (a run killed or crashed)
// are let go, so that the show starts from nothing.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { applyObject, collectionPath, KubeApi, objectPath } from '../kube/api.ts';
import { repoRoot } from '../cluster/paths.ts';
import { isKfnFinalizer } from '../core/names.ts';
import { functionDirs, loadFunction } from './functions.ts';
import { dim, say } from './demo-print.ts';

/** Where the demo applies the samples. */
export const demoNamespace = 'kfn-demo';

/** The demo namespace, emptied of a previous run's objects so the show starts from nothing. */
export async function freshNamespace(api: KubeApi): Promise<void> {
  const path = `/api/v1/namespaces/${demoNamespace}`;
  const exists = await api.request('GET', path).then(
    () => true,
    () => false,
  );
  if (exists) {
    say(`Removing the previous demo's namespace ${demoNamespace}…`);
    await api.request('DELETE', path).catch(() => undefined);
    const started = Date.now();
    let said = '';
    for (;;) {
      if (!(await api.request('GET', path).then(() => true, () => false))) break;
      const held = await heldByFinalizers(api);
      const waited = Date.now() - started;
      // A previous run stopped before its functions could finalize their objects (killed, or
      // crashed): nobody is left to run that cleanup, and the namespace would stay terminating
      // forever. Its objects are demo data inside the namespace being deleted: let them go.
      if (held.length && waited > 10_000) {
        say(`  The previous run stopped before its functions finalized ${held.length} object(s); letting them go: ${held.map((h) => `${h.kind} ${h.name} (${h.finalizers.join(', ')})`).join(', ')}`);
        for (const h of held) await api.request('PATCH', h.path, { body: { metadata: { finalizers: h.finalizers.length === h.all.length ? null : h.all.filter((f) => !isKfnFinalizer(f)) } }, contentType: 'application/merge-patch+json' }).catch(() => undefined);
      } else {
        const what = held.length ? `waiting for ${held.length} object(s) with kfn finalizers: ${held.map((h) => `${h.kind} ${h.name}`).join(', ')}` : 'waiting for its objects to be deleted';
        if (what !== said) say(dim(`  ${what}…`));
        said = what;
      }
      if (waited > 120_000) throw new Error(`namespace ${demoNamespace} is still being deleted after 2 minutes; see: kubectl get all -n ${demoNamespace}, and remove what holds it`);
      await sleep(500);
    }
  }
  await applyObject(api, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: demoNamespace } }, 'kfn-demo');
}

/** Objects in the demo namespace that carry a kfn.dev finalizer (any served kind that lists). */
async function heldByFinalizers(api: KubeApi): Promise<{ kind: string; name: string; path: string; finalizers: string[]; all: string[] }[]> {
  const out: { kind: string; name: string; path: string; finalizers: string[]; all: string[] }[] = [];
  const kinds: { apiVersion: string; kind: string }[] = [{ apiVersion: 'v1', kind: 'ConfigMap' }];
  for (const dir of functionDirs(join(repoRoot, 'functions'))) {
    const reconciler = await loadFunction(dir).catch(() => undefined);
    if (reconciler) kinds.push({ apiVersion: reconciler.for.apiVersion, kind: reconciler.for.kind });
  }
  for (const k of kinds) {
    const resource = await api.resource(k.apiVersion, k.kind).catch(() => undefined);
    if (!resource) continue;
    const list = await api.request<{ items: { metadata: { name: string; finalizers?: string[] } }[] }>('GET', collectionPath(resource, demoNamespace)).catch(() => ({ items: [] }));
    for (const item of list.items) {
      const all = item.metadata.finalizers ?? [];
      const ours = all.filter(isKfnFinalizer);
      if (ours.length) out.push({ kind: k.kind, name: item.metadata.name, path: objectPath(resource, item.metadata.name, demoNamespace), finalizers: ours, all });
    }
  }
  return out;
}
