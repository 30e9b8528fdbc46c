// Every example, from its samples.yaml, through the same life: created → Ready; a child deleted
// by hand comes back (drift); the object deleted → its children go and finalizers have run.
// The function runs as its own process (`kfn serve`) or as a Lambda (AWS's runtime client).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { TestContext } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { ApiError, applyObject, collectionPath, objectPath } from '../../kube/api.ts';
import { loadFunction } from '../../cli/functions.ts';
import { testCluster, testNamespace } from './cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines, stackReport, type FunctionRuntime } from './functions.ts';
import { nodePorts } from './ports.ts';

/** One source of NodePorts per runner for the whole process: every example's samples take theirs in turn. */
const examplePorts = { 'e2e/examples': nodePorts('e2e/examples'), 'e2e/lambda': nodePorts('e2e/lambda') };

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string; finalizers?: string[] };
  status?: { conditions?: { type: string; status: string }[] };
}

// Examples that need another one beside them, and the ones whose children must not be
// recreated by hand-deletion in a test (a backup Job would run again).
const companions: Record<string, string[]> = { certificate: ['issuer'] };
const noDrift = new Set(['databasebackup']);

/** The examples to run: every function folder but the ones that run as another's companion. */
export const exampleNames = (dirs: string[]) => dirs.map((d) => basename(d)).filter((n) => n !== 'issuer');

export async function exampleLifecycle(t: TestContext, dir: string, options: { runtime?: FunctionRuntime } = {}): Promise<void> {
  const name = basename(dir);
  const cluster = await testCluster();
  const ns = await testNamespace(t, cluster, `${options.runtime === 'lambda' ? 'lx' : 'ex'}-${name}`);
  const stacks: Awaited<ReturnType<typeof functionStack>>[] = [];
  for (const fn of [...(companions[name] ?? []), name]) stacks.push(await functionStack(t, cluster, fn, { namespace: ns, runtime: options.runtime }));
  const api = stacks[0]!.api;
  const samples: Obj[] = [];
  for (const fn of [...(companions[name] ?? []), name]) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, '..', fn, 'samples.yaml'), 'utf8'))) samples.push({ ...(doc.toJS() as Obj), metadata: { ...(doc.toJS() as Obj).metadata, namespace: ns } });
  }
  const pathOf = async (o: Obj) => objectPath(await api.resource(o.apiVersion, o.kind), o.metadata.name, ns);
  const reconciler = await loadFunction(dir);
  // MyWeb samples use fixed node ports; give this run its own (see ports.ts).
  const nextPort = examplePorts[options.runtime === 'lambda' ? 'e2e/lambda' : 'e2e/examples'];
  for (const s of samples) {
    if (s.kind === 'MyWeb') (s as unknown as { spec: { nodePortNumber: number } }).spec.nodePortNumber = await nextPort(api);
    await applyObject(api, s as never, 'kfn-test');
  }
  for (const s of samples) {
    await waitFor(`${s.kind} ${s.metadata.name} to be Ready`, async () => {
      const o = await api.request<Obj>('GET', await pathOf(s));
      if (o.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) return true;
      throw new Error(`status: ${JSON.stringify(o.status ?? {})}`);
    }, { timeoutMs: 90_000 }).catch((e: Error) => {
      // Say what the bridge delivered and what the function printed, not only the status.
      throw new Error(`${e.message}\n${stacks.map((st) => stackReport(st)).join('\n')}`, { cause: e });
    });
  }
  const mine = samples.filter((s) => s.kind === reconciler.for.kind);
  for (const s of mine) {
    const live = await api.request<Obj>('GET', await pathOf(s));
    const owned = async () => {
      const out: Obj[] = [];
      for (const kind of reconciler.owns ?? []) {
        const resource = await api.resource(kind.apiVersion, kind.kind);
        const list = await api.request<{ items: Obj[] }>('GET', collectionPath(resource, ns), { query: { labelSelector: `kfn.dev/owner-uid=${live.metadata.uid}` } });
        out.push(...list.items.map((i) => ({ ...i, apiVersion: kind.apiVersion, kind: kind.kind })));
      }
      return out;
    };
    const children = await owned();
    assert.equal(children.length > 0, (reconciler.owns ?? []).length > 0, `${s.kind} ${s.metadata.name} has its children`);
    if (reconciler.finalizer) assert.ok((live.metadata as { finalizers?: string[] }).finalizers?.includes(reconciler.finalizer), `${s.kind} ${s.metadata.name} carries ${reconciler.finalizer}`);
    if (children.length && !noDrift.has(name)) {
      const victim = children[0]!;
      await api.request('DELETE', await pathOf(victim));
      await waitFor(`${victim.kind} ${victim.metadata.name} to be recreated`, async () => {
        const again = await api.request<Obj>('GET', await pathOf(victim)).catch(() => undefined);
        return (again && again.metadata.uid !== victim.metadata.uid) || undefined;
      }, { timeoutMs: 60_000 });
    }
    await api.request('DELETE', await pathOf(s));
    await waitFor(`${s.kind} ${s.metadata.name} and its children to be gone`, async () => {
      const gone = await api.request('GET', await pathOf(s)).then(() => false, (e) => e instanceof ApiError && e.status === 404);
      return (gone && (await owned()).length === 0) || undefined;
    }, { timeoutMs: 90_000 });
    if (reconciler.finalizer) {
      // It went because the function ran its cleanup and removed the finalizer — not by force.
      // The bridge journals a delivery once the answer is back, which can be after the object
      // is seen gone (the finalizer's removal lets the apiserver delete it at once): wait for it.
      const stack = stacks.at(-1)!;
      const finalized = await waitFor(`the journal to show the function finalizing ${s.kind} ${s.metadata.name}`, async () =>
        journalLines(stack.journal).find((l) => l.key === `${ns}/${s.metadata.name}` && l.response?.changes?.some((c) => c.action === 'finalizer' && c.detail?.startsWith('removed'))),
        { timeoutMs: 20_000 },
      ).catch((e: Error) => assert.fail(`the function finalized ${s.kind} ${s.metadata.name}: ${e.message}\n${stackReport(stack, 25)}`));
      assert.ok(finalized);
    }
  }
}
