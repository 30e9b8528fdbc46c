import { createHash } from 'node:crypto';
// Records and offline replay, without any cluster: a record captured from a real MyWeb reconcile
// (functions/myweb/testdata) replayed with the function as it is, and with a changed one; what
// the reader does with bad lines; Secret redaction; the CLI's exit status.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import pino from 'pino';
import { authenticate } from '../../core/authentication.ts';
import { encodeReconcileEvent } from '../../core/event.ts';
import { KubeApi, type Method, type RequestOptions, type Tap } from '../../kube/api.ts';
import { repoRoot } from '../../cluster/paths.ts';
import MyWebFunction, { MyWeb } from '../myweb/index.ts';
import { compareWrites, diffValues } from './diff.ts';
import { defineReconciler, Secret, type Reconciler } from './index.ts';
import { readRecords, redactExchange, type InvocationRecord } from './record.ts';
import { recordedClock, replayOffline } from './replay.ts';
import { createApp } from './app.ts';

const fixture = join(repoRoot, 'functions', 'myweb', 'testdata', 'updated.record.json');
const recorded = (): InvocationRecord => JSON.parse(readFileSync(fixture, 'utf8')) as InvocationRecord;

/** MyWeb with one change to its Deployment: what a fix (or a regression) looks like. */
const withReplicas = (n: number): Reconciler =>
  ({
    ...MyWebFunction,
    async reconcile(obj: never, ctx: never) {
      const result = await MyWebFunction.reconcile(obj, ctx);
      const deployment = result.children!.find((c) => c.kind === 'Deployment')! as unknown as { spec: { replicas: number } };
      deployment.spec.replicas = n;
      return result;
    },
  }) as unknown as Reconciler;

/** No cluster: every request is answered with one MyWeb (without status), as a tiny fake apiserver would. */
function oneObjectApi(): KubeApi {
  const connection = { server: 'http://fake.invalid', send: () => Promise.reject(new Error('no apiserver here')), reset() {}, headers: () => ({}), source: 'test' };
  class OneObjectApi extends KubeApi {
    override withTap(tap: Tap): KubeApi {
      return new OneObjectApi(connection, { tap });
    }
    override withSignal(): KubeApi {
      return this;
    }
    override async text(method: Method, path: string, options: RequestOptions = {}): Promise<string> {
      const body = JSON.stringify({ apiVersion: MyWeb.apiVersion, kind: 'MyWeb', metadata: { name: 'site', namespace: 'demo', uid: 'u', generation: 1 }, spec: { nodePortNumber: 30000 } });
      this.tap?.request({ method, path, status: 200, ...(options.body !== undefined ? { body: options.body } : {}), response: JSON.parse(body) });
      return body;
    }
  }
  return new OneObjectApi(connection);
}

describe('offline replay', () => {
  test('the function as it is makes exactly the recorded writes, at the recorded time', async () => {
    const record = recorded();
    const out = await replayOffline(MyWebFunction, record);
    assert.equal(out.record.error, undefined);
    assert.deepEqual(
      out.comparisons.map((c) => [c.key, c.status]),
      record.writes.map((w) => [`${w.method} ${w.path}`, 'same']),
    );
    assert.equal(out.same, true);
    assert.deepEqual(out.unrecordedReads, []);
    // The replay read exactly what was recorded, and its record says what it replays.
    assert.equal(out.record.reads.length, record.reads.length);
    assert.deepEqual(out.record.replay, { of: record.id, mode: 'offline' });
  });

  test('a changed function: the one write that differs, with the field that changed', async () => {
    const out = await replayOffline(withReplicas(3), recorded());
    assert.equal(out.same, false);
    const changed = out.comparisons.filter((c) => c.status !== 'same');
    assert.equal(changed.length, 1);
    assert.match(changed[0]!.key, /^PATCH \/apis\/apps\/v1\/namespaces\/devtest\/deployments\/web-1$/);
    assert.deepEqual(changed[0]!.changes, [{ path: 'spec.replicas', change: 'changed', from: 1, to: 3 }]);
  });

  test('a read the record cannot answer, a different kind: said plainly', async () => {
    const reader = defineReconciler({
      for: MyWeb,
      name: 'myweb',
      uses: [{ kind: Secret, verbs: ['get'] }],
      async reconcile(_web, ctx) {
        await ctx.get(Secret, 'not-recorded');
        return {};
      },
    });
    const out = await replayOffline(reader as Reconciler, recorded());
    assert.equal(out.same, false);
    assert.match(out.record.error!.message, /was not read by the recorded invocation/);
    assert.ok(out.unrecordedReads.some((r) => /the kind Secret|secrets\/not-recorded/.test(r)), out.unrecordedReads.join('; '));

    const other = { ...MyWebFunction, for: { ...MyWeb, kind: 'OtherWeb' } } as unknown as Reconciler;
    await assert.rejects(replayOffline(other, recorded()), /record is of a operator\.k8s-summit\.org\/v1 MyWeb .* this function reconciles .*OtherWeb/);
  });

  test('a delivery with a deadline: the replay reads the clock as the invocation did (condition times match)', async () => {
    const records: InvocationRecord[] = [];
    const becomesReady = defineReconciler({ for: MyWeb, name: 'myweb', reconcile: () => ({ ready: true }) });
    // A clock that moves 7 ms at each reading, so a reading taken out of turn shows.
    let t = Date.now();
    const now = () => new Date((t += 7));
    const app = createApp(becomesReady as Reconciler, { credentials: { kind: 'hmac', secret: 'k' }, api: oneObjectApi(), now, log: pino({ level: 'info' }, { write: () => {} }), record: (r) => records.push(r) });
    const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: MyWeb.apiVersion, kind: 'MyWeb', namespace: 'demo', name: 'site' }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000);
    const signed = authenticate(message, { kind: 'hmac', secret: 'k' });
    const res = await app.request('/', { method: 'POST', headers: signed.headers, body: signed.body });
    assert.equal(res.status, 200, await res.text());
    const r = records[0]!;
    assert.ok(r.event.deadline, 'the record keeps the delivery deadline');
    assert.ok(r.writes.some((w) => w.path.endsWith('/status')), 'the Ready condition was written');
    const out = await replayOffline(becomesReady as Reconciler, r);
    assert.deepEqual(out.comparisons.filter((c) => c.status !== 'same').map((c) => c.changes), []);
    assert.equal(out.same, true);
  });

  test('a deadline farther ahead than a timer can hold does not stop the reconcile at once', async () => {
    const records: InvocationRecord[] = [];
    // The function's clock 30 days behind the bridge's: Node would fire a plain timer of that length at once.
    const behind = () => new Date(Date.now() - 30 * 24 * 3600_000);
    const slow = defineReconciler({
      for: MyWeb,
      name: 'myweb',
      async reconcile() {
        await new Promise((done) => setTimeout(done, 20));
        return { ready: true };
      },
    });
    // Unsigned (development mode): a signed event this far off the function's clock is refused by its time window.
    const app = createApp(slow as Reconciler, { credentials: { kind: 'none' }, api: oneObjectApi(), now: behind, log: pino({ level: 'info' }, { write: () => {} }), record: (r) => records.push(r) });
    const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: MyWeb.apiVersion, kind: 'MyWeb', namespace: 'demo', name: 'site' }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000);
    const signed = authenticate(message, { kind: 'none' });
    const res = await app.request('/', { method: 'POST', headers: signed.headers, body: signed.body });
    assert.equal(res.status, 200, await res.text());
    assert.equal(records[0]!.error, undefined);
  });

  test('the clock reads as it did, then moves on', () => {
    const now = recordedClock({ ...recorded(), time: '2026-01-01T00:00:00.000Z', clock: ['2026-01-01T00:00:01.000Z'] });
    assert.equal(now().toISOString(), '2026-01-01T00:00:00.000Z');
    assert.equal(now().toISOString(), '2026-01-01T00:00:01.000Z');
    assert.ok(now().getTime() >= Date.parse('2026-01-01T00:00:01.000Z'));
  });
});

describe('records', () => {
  test('a truncated line, a record of another format and log lines: named, the rest is read', () => {
    const good = JSON.stringify(recorded());
    const text = [
      '{"level":30,"msg":"a function log line"}',
      good,
      good.slice(0, 200),
      JSON.stringify({ ...recorded(), kfnRecord: 2 }),
      'plain text log',
      JSON.stringify({ time: 't', id: 'e1', reconciler: 'myweb', key: 'a/b', reason: 'created', attempt: 1, primary: { apiVersion: 'v1', kind: 'X', name: 'b' }, observedAt: 't', sink: 's', outcome: 'done', durationMs: 1 }),
    ].join('\n');
    const read = readRecords(text, 'f.jsonl');
    assert.equal(read.records.length, 1);
    assert.equal(read.deliveries.length, 1);
    assert.equal(read.problems.length, 2);
    assert.match(read.problems[0]!, /^f\.jsonl:3: not a complete JSON line \(truncated\?\)/);
    assert.match(read.problems[1]!, /^f\.jsonl:4: a record of format 2; this kfn reads format 1/);
  });

  test('Secret data is replaced by a keyed digest wherever it is read or written, and the record says where', () => {
    const secret = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 's' }, data: { password: 'c2VjcmV0' } };
    const read = redactExchange({ method: 'GET', path: '/api/v1/namespaces/a/secrets/s', status: 200, response: secret });
    assert.match(JSON.stringify(read.exchange), /redacted:hmac:[0-9a-f]{16}/);
    const again = redactExchange({ method: 'GET', path: '/api/v1/namespaces/a/secrets/s', status: 200, response: secret });
    assert.equal(JSON.stringify(again.exchange), JSON.stringify(read.exchange), 'equal values redact alike within a process');
    assert.doesNotMatch(JSON.stringify(read.exchange), new RegExp(createHash('sha256').update('c2VjcmV0').digest('hex').slice(0, 16)), 'not the plain hash a dictionary reverses');
    assert.doesNotMatch(JSON.stringify(read.exchange), /c2VjcmV0/);
    assert.equal(read.redacted, 'GET /api/v1/namespaces/a/secrets/s: data.password');
    const list = redactExchange({ method: 'GET', path: '/api/v1/secrets', status: 200, response: { items: [{ metadata: { name: 's' }, stringData: { k: 'v' } }] } });
    assert.doesNotMatch(JSON.stringify(list.exchange), /"v"/);
    const applied = redactExchange({ method: 'PATCH', path: '/api/v1/namespaces/a/secrets/s', status: 200, body: secret, response: secret });
    assert.doesNotMatch(JSON.stringify(applied.exchange), /c2VjcmV0/);
    const configMap = redactExchange({ method: 'GET', path: '/api/v1/namespaces/a/configmaps/c', status: 200, response: { kind: 'ConfigMap', data: { k: 'v' } } });
    assert.equal(configMap.redacted, undefined);
    assert.deepEqual(configMap.exchange.response, { kind: 'ConfigMap', data: { k: 'v' } });
  });

  test('a function serving with a record sink writes one record per invocation, with its logs and error', async () => {
    const records: InvocationRecord[] = [];
    const failing = defineReconciler({
      for: MyWeb,
      name: 'myweb',
      reconcile() {
        throw new Error('the page template is broken');
      },
    });
    const api = oneObjectApi();
    const app = createApp(failing as Reconciler, { credentials: { kind: 'hmac', secret: 'k' }, api, log: pino({ level: 'info' }, { write: () => {} }), record: (r) => records.push(r) });
    const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: MyWeb.apiVersion, kind: 'MyWeb', namespace: 'demo', name: 'site' }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test');
    const signed = authenticate(message, { kind: 'hmac', secret: 'k' });
    const res = await app.request('/', { method: 'POST', headers: signed.headers, body: signed.body });
    assert.equal(res.status, 500);
    assert.equal(records.length, 1);
    const r = records[0]!;
    assert.equal(r.reads.length, 1);
    assert.match(r.error!.message, /reconcile for MyWeb demo\/site failed: the page template is broken/);
    assert.match(r.error!.cause!.stack!, /replay\.test\.ts/);
    assert.ok(r.logs.some((l) => l.level === 'error' && l.msg === 'reconcile failed'));
  });
});

describe('diff', () => {
  test('field paths, added/removed/changed, and writes paired by method and path', () => {
    assert.deepEqual(diffValues({ a: { 'x.y': 1, b: [1, 2] } }, { a: { 'x.y': 2, b: [1] }, c: true }), [
      { path: 'a.b[1]', change: 'removed', from: 2 },
      { path: 'a["x.y"]', change: 'changed', from: 1, to: 2 },
      { path: 'c', change: 'added', to: true },
    ]);
    const w = (path: string, body: unknown) => ({ method: 'PATCH' as const, path, status: 200, body });
    const out = compareWrites([w('/a', { v: 1 }), w('/b', {})], [w('/a', { v: 2 }), w('/c', {})]);
    assert.deepEqual(
      out.map((c) => [c.key, c.status]),
      [
        ['PATCH /a', 'changed'],
        ['PATCH /c', 'added'],
        ['PATCH /b', 'removed'],
      ],
    );
  });
});

describe('kfn replay (offline, no cluster)', () => {
  const run = (args: string[]) =>
    promisify(execFile)(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'replay', ...args], { cwd: repoRoot, env: { ...process.env, KUBECONFIG: '/nonexistent' } }).then(
      (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
    );

  test('exit 0 when the writes are the same, 1 when they differ (with the diff), 2 for bad input', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kfn-replay-'));
    const file = join(dir, 'records.jsonl');
    writeFileSync(file, `${JSON.stringify(recorded())}\n{"kfnRecord":1,"id":"cut`);
    const same = await run([file, '--expect-same']);
    assert.equal(same.code, 0, same.out + same.err);
    assert.match(same.err, /records\.jsonl:2: not a complete JSON line/);

    // The same record against a changed copy of the function.
    const changed = join(dir, 'changed');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(changed);
    writeFileSync(
      join(changed, 'index.ts'),
      `import base from ${JSON.stringify(join(repoRoot, 'functions', 'myweb', 'index.ts'))};
export default { ...base, async reconcile(o: never, c: never) { const r = await base.reconcile(o, c); (r.children!.find((x) => x.kind === 'Deployment') as { spec: { replicas: number } }).spec.replicas = 2; return r; } };
`,
    );
    const differs = await run([file, '--function', changed]);
    assert.equal(differs.code, 1, differs.out + differs.err);
    assert.match(differs.out, /~ PATCH \/apis\/apps\/v1\/namespaces\/devtest\/deployments\/web-1 {2}\(changed\)\n {4}~ spec\.replicas: 1 → 2/);
    assert.match(differs.out, /✗ the writes differ from the recorded ones \(1 changed\)/);

    const none = await run([file, '--object', 'nowhere/nothing']);
    assert.equal(none.code, 2);
    assert.match(none.err, /nothing to replay: 1 record\(s\) and 0 delivery line\(s\) in .*none matching the selection/);
  });

  test('a record file is read with its rotations, oldest first, each bad line named in its own file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kfn-replay-'));
    const file = join(dir, 'records.jsonl');
    writeFileSync(`${file}.1`, `${JSON.stringify({ ...recorded(), id: 'rotated0000000001' })}\n{"kfnRecord":1,"id":"cut`);
    writeFileSync(file, `${JSON.stringify({ ...recorded(), id: 'current000000001' })}\n`);
    const out = await run([file, '--expect-same']);
    assert.equal(out.code, 0, out.out + out.err);
    assert.match(out.err, /records\.jsonl\.1:2: not a complete JSON line/);
    const order = [...out.out.matchAll(/^record (\w+)/gm)].map((m) => m[1]);
    assert.deepEqual(order, ['rotated0000000001', 'current000000001']);
  });

  test('a record of a function that no longer exists, and one with redacted Secret data: said plainly', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kfn-replay-'));
    const gone = join(dir, 'gone.jsonl');
    writeFileSync(gone, `${JSON.stringify({ ...recorded(), function: 'renamed-away' })}\n`);
    const missing = await run([gone]);
    assert.equal(missing.code, 2, missing.out + missing.err);
    assert.match(missing.err, /the record is of function renamed-away, and no folder under functions\/ defines it \(renamed or removed\?\): pass --function <dir>/);

    const redacted = join(dir, 'redacted.jsonl');
    writeFileSync(redacted, `${JSON.stringify({ ...recorded(), redacted: ['GET /api/v1/namespaces/devtest/secrets/db: data.password'] })}\n`);
    const out = await run([redacted, '--expect-same']);
    assert.equal(out.code, 0, out.out + out.err);
    assert.match(out.out, /redacted in the record \(the function saw hashes, not the values\): GET \/api\/v1\/namespaces\/devtest\/secrets\/db: data\.password/);
  });
});
