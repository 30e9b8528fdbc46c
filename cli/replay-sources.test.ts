import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import type { JournalEntry } from '../core/journal.ts';
import { KubeApi } from '../kube/api.ts';
import { connectionFor, resolveKubeconfig } from '../kube/kubeconfig.ts';
import { readRecords } from '../functions/sdk/record.ts';
import { repoRoot } from '../cluster/paths.ts';
import { startExecApiServer, type FakePod } from '../test/support/exec-apiserver.ts';
import { execInPod } from './pod-exec.ts';
import { journalOf, readSource, type ClusterAccess } from './replay-sources.ts';

const journalPath = '/var/lib/kfn/journal/journal.jsonl';

function delivery(id: string, name: string, extra: Partial<JournalEntry> = {}): JournalEntry {
  return {
    time: `2026-01-01T00:00:${id.padStart(2, '0')}.000Z`,
    id: `event-${id}`,
    reconciler: 'myweb',
    key: `operator.k8s-summit.org/MyWeb/web/${name}`,
    reason: 'updated',
    attempt: 1,
    primary: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', namespace: 'web', name, uid: `uid-${name}` },
    observedAt: '2026-01-01T00:00:00.000Z',
    sink: 'http://kfn-fn-myweb.kfn-system.svc.cluster.local/',
    status: 200,
    outcome: 'done',
    durationMs: 12,
    response: { result: 'done', changes: [{ action: 'applied', ref: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'web', name: `${name}-page` } }] },
    ...extra,
  };
}

const lines = (...entries: JournalEntry[]) => entries.map((e) => `${JSON.stringify(e)}\n`).join('');

/** A bridge pod as manifests/ runs it, its journal's folder under `root`. */
function bridgePod(name: string, root: string, args = ['bridge', '--leader-elect', `--journal=${journalPath}`]): FakePod {
  return { name, root, labels: { 'app.kubernetes.io/name': 'kfn-bridge' }, containers: [{ name: 'bridge', command: ['/usr/local/bin/node', '--no-opt', '/app/kfn.mjs'], args }] };
}

function journalIn(root: string, files: Record<string, string>): void {
  const dir = join(root, 'var/lib/kfn/journal');
  mkdirSync(dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
}

/** The fake apiserver as `kfn replay` reaches it: its kubeconfig chosen (--kubeconfig), its API and pods/exec. */
function access(t: TestContext, kubeconfig: string): ClusterAccess {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-access-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'kubeconfig'), kubeconfig);
  const cluster = resolveKubeconfig({ kubeconfig: join(dir, 'kubeconfig') });
  return { api: new KubeApi(connectionFor(cluster)), exec: (target, command) => execInPod(cluster, target, command) };
}

test('the journal a bridge pod names: the last --journal on its command line, in either spelling', () => {
  const pod = (args: string[]) => ({ metadata: { name: 'p' }, spec: { containers: [{ name: 'sidecar' }, { name: 'bridge', command: ['node', 'kfn.mjs'], args }] } });
  assert.equal(journalOf(pod(['bridge', '--journal=/a/j.jsonl'])).journal, '/a/j.jsonl');
  assert.equal(journalOf(pod(['bridge', '--journal', '/b/j.jsonl'])).container.name, 'bridge');
  assert.equal(journalOf(pod(['bridge', '--journal', '/b/j.jsonl'])).journal, '/b/j.jsonl');
  assert.equal(journalOf(pod(['bridge', '--journal=/a/j.jsonl', '--journal=/dev/stdout'])).journal, '/dev/stdout', 'the bridge takes the last');
  assert.equal(journalOf(pod(['bridge'])).journal, undefined);
  assert.equal(journalOf(pod(['bridge'])).container.name, 'bridge');
});

test('cluster:bridge reads each bridge pod\'s journal out of the pod, its rotations oldest first, and passes over a replica with none', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'kfn-journal-pods-'));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const leader = join(work, 'leader');
  journalIn(leader, { 'journal.jsonl.2': lines(delivery('1', 'site')), 'journal.jsonl.1': `${lines(delivery('2', 'other'))}{"half a li`, 'journal.jsonl': lines(delivery('3', 'site', { reason: 'resync' })) });
  const standby = join(work, 'standby');
  mkdirSync(standby);
  const server = await startExecApiServer('kfn-system', [bridgePod('kfn-bridge-a', leader), bridgePod('kfn-bridge-b', standby), { name: 'kfn-fn-myweb-x', labels: { 'kfn.dev/function': 'myweb' }, containers: [{ name: 'function' }] }]);
  t.after(() => server.close());
  const said: string[] = [];
  const texts = await readSource('cluster:bridge', () => access(t, server.kubeconfig), 'kfn-system', (l) => said.push(l));
  // (The stand-in's pod reads its files under `leader`, and names them so.)
  assert.deepEqual(texts.map((s) => s.name.replace(leader, '')), [
    `cluster:bridge pod kfn-bridge-a:${journalPath}.2`,
    `cluster:bridge pod kfn-bridge-a:${journalPath}.1`,
    `cluster:bridge pod kfn-bridge-a:${journalPath}`,
  ]);
  const read = texts.map((s) => readRecords(s.text, s.name));
  assert.deepEqual(read.flatMap((r) => r.deliveries.map((d) => d.id)), ['event-1', 'event-2', 'event-3']);
  assert.deepEqual(read.flatMap((r) => r.problems.map((p) => p.replace(leader, ''))), [`cluster:bridge pod kfn-bridge-a:${journalPath}.1:2: not a complete JSON line (truncated?): {"half a li`], 'a half line is named in its own file, and costs no other line');
  assert.deepEqual(server.execs.map((e) => [e.pod, e.container, e.command[0], e.command[1], e.command.at(-1)]), [
    ['kfn-bridge-a', 'bridge', '/usr/local/bin/node', '-e', journalPath],
    ['kfn-bridge-b', 'bridge', '/usr/local/bin/node', '-e', journalPath],
  ], "run by the bridge container's own Node, with the path its --journal names");
  assert.ok(said.some((l) => /pod kfn-bridge-a: \/var\/lib\/kfn\/journal\/journal\.jsonl and 2 rotated file\(s\)/.test(l)), said.join('\n'));
  assert.ok(said.some((l) => /kfn-bridge-b .*no journal at .*journal\.jsonl/.test(l)), said.join('\n'));
});

test('cluster:bridge: a bridge without --journal, or none at all, is said plainly; one journaling to its output is read from its log', async (t) => {
  const server = await startExecApiServer('kfn-system', [bridgePod('kfn-bridge-a', '/nowhere', ['bridge', '--leader-elect'])]);
  t.after(() => server.close());
  const cluster = access(t, server.kubeconfig);
  await assert.rejects(readSource('cluster:bridge', () => cluster, 'kfn-system', () => {}), /no bridge journal to read in namespace kfn-system: pod kfn-bridge-a runs the bridge without --journal, so it journals nothing/);
  await assert.rejects(readSource('cluster:bridge', () => cluster, 'elsewhere', () => {}), /no bridge pods in namespace elsewhere \(label app\.kubernetes\.io\/name=kfn-bridge\): is the bridge installed there/);
  server.pods.splice(0, 1, { ...bridgePod('kfn-bridge-a', '/nowhere', ['bridge', '--journal=/var/lib/x.jsonl', '--journal=/dev/stdout']), logs: { bridge: { current: `{"level":30,"msg":"started"}\n${lines(delivery('4', 'site'))}` } } });
  const texts = await readSource('cluster:bridge', () => cluster, 'kfn-system', () => {});
  assert.deepEqual(texts.map((s) => s.name), ['cluster:bridge pod kfn-bridge-a (log)']);
  assert.deepEqual(readRecords(texts[0]!.text, 'log').deliveries.map((d) => d.id), ['event-4']);
  assert.equal(server.execs.length, 0, 'no exec for a journal on the output');
});

test('cluster:<function> reads the function container\'s log, and the log before its restart', async (t) => {
  const fnPod: FakePod = {
    name: 'kfn-fn-myweb-x',
    labels: { 'kfn.dev/function': 'myweb' },
    // On Knative the queue proxy runs beside the function.
    containers: [{ name: 'queue-proxy' }, { name: 'function' }],
    restartCount: 1,
    logs: { function: { current: 'after\n', previous: 'before the crash\n' }, 'queue-proxy': { current: 'proxy\n' } },
  };
  const server = await startExecApiServer('kfn-system', [fnPod]);
  t.after(() => server.close());
  const cluster = access(t, server.kubeconfig);
  const texts = await readSource('cluster:myweb', () => cluster, 'kfn-system');
  assert.deepEqual(texts, [
    { text: 'before the crash\n', name: 'cluster:myweb pod kfn-fn-myweb-x (before its restart)' },
    { text: 'after\n', name: 'cluster:myweb pod kfn-fn-myweb-x' },
  ]);
  fnPod.logs!.function!.previous = undefined;
  assert.deepEqual((await readSource('cluster:myweb', () => cluster, 'kfn-system')).map((s) => s.text), ['after\n'], 'a previous log the kubelet no longer has is no error');
  await assert.rejects(readSource('cluster:gone', () => cluster, 'kfn-system'), /no pods of function gone in namespace kfn-system/);
});

test('kfn replay cluster:bridge --object: the object\'s deliveries from every bridge pod, listed with what the function answered (exit 0)', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'kfn-replay-bridge-'));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  const a = join(work, 'a');
  const b = join(work, 'b');
  journalIn(a, { 'journal.jsonl': lines(delivery('1', 'site', { reason: 'created' }), delivery('2', 'other')) });
  // The other replica led later: its journal holds the later deliveries.
  journalIn(b, { 'journal.jsonl': lines(delivery('5', 'site', { outcome: 'retry', status: 503, why: 'HTTP 503', response: undefined })) });
  const server = await startExecApiServer('kfn-system', [bridgePod('kfn-bridge-a', a), bridgePod('kfn-bridge-b', b)]);
  t.after(() => server.close());
  const kubeconfig = join(work, 'kubeconfig');
  writeFileSync(kubeconfig, server.kubeconfig);
  const run = (args: string[]) =>
    promisify(execFile)(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'replay', ...args], { cwd: repoRoot, env: { ...process.env, KUBECONFIG: kubeconfig } }).then(
      (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
    );
  const out = await run(['cluster:bridge', '--object', 'web/site']);
  assert.equal(out.code, 0, out.out + out.err);
  assert.deepEqual([...out.out.matchAll(/^delivery (event-\d)\S*\s+myweb\s+MyWeb web\/site\s+reason (\w+)/gm)].map((m) => `${m[1]} ${m[2]}`), ['event-1 created', 'event-5 updated'], 'oldest first, across both pods');
  assert.match(out.out, /\n {2}changes: applied ConfigMap web\/site-page\n/);
  assert.match(out.out, /\n {2}why: HTTP 503\n/);
  assert.match(out.out, /2 deliveries from the journal, listed: a journal holds no reads to replay offline\. --dry-run runs one against the cluster now/);
  const asked = await run(['cluster:bridge', '--object', 'web/site', '--offline']);
  assert.equal(asked.code, 1, 'asked to replay offline, a delivery without reads is a failure');
  assert.match(asked.out, /a bridge delivery carries no reads/);
});
