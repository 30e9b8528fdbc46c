// `npm run chaos`: a bounded chaos soak on the local cluster (loopback only; stops by itself).
//
// Objects of two example kinds — MyApp (no pods: replicas 0) and ReverseWordsApp (a real pod and
// a finalizer) — are created, edited and deleted at random while:
//   - two bridges (leader election) run as processes and the leader is SIGKILLed or SIGTERMed
//     (a rollout: it hands over what it still holds) again and again,
//   - the sinks answer 404 for 5 s (a route being programmed),
//   - the bridges' Reconcilers are edited (their configuration file) while deliveries run,
//   - the auth keys are rotated, both ways round: the Secret first and a new leader signing with
//     the new key before the functions have it (401s); then the functions' key files first,
//   - the bridges roll from one leader-elected replica to two shards (--shards 2),
//   - a third of the ReverseWordsApps are created with kfn's finalizer already in their manifest,
//   - a proxy in front of each function fails 20 % of deliveries (500) and holds 5 % past the
//     Reconciler's timeoutSeconds (then lets them through late, as a slow function would),
//   - kube-apiserver restarts twice, and etcd is compacted before the second restart (410s),
//   - 3 % of the functions' answers reach the bridge as a 200 that is not the contract's response
//     (the function did the work; the bridge must retry), and 3 % of the requests are sent to the
//     function a second time, as a captured request replayed (it must refuse them: 409),
//   - a Reconciler whose identity may not list its kind (it must deliver nothing),
//   - the two functions' clocks are 50 s ahead and 50 s behind the bridges' (the deadline each
//     event carries is counted down on the function's own monotonic clock),
//   - Deployments forged in another namespace the MyApp Reconciler watches, each naming a live
//     MyApp as its controller (no event may carry one as that MyApp's child),
//   - an author who may edit Reconcilers but not impersonate the ServiceAccount one names tries,
//     every 5 s, to move its sink to a receiver of the soak's own: the apiserver's identity policy
//     must refuse it (403, impersonate), and that receiver must never be called,
//   - in the middle of a storm of RBAC changes (a Role rewritten every 500–900 ms for 20 s), an
//     identity's RoleBinding is deleted: its Reconciler's deliveries must stop within 15 s, and
//     start again, missing no change, once the binding is back,
//   - how a watch resumed from before the compaction learns of its 410 is probed (an ERROR line
//     or the answer's status), and the bridges' 410s and relists after it are counted,
//   - a third function's clock jumps 2 minutes ahead for 20 s, then is set right: its deliveries
//     are refused (400, ClockSkew) and retried with backoff, its Reconciler says Ready=False
//     ClockSkew, and everything converges once the clock is right.
// Two bridges take their Reconcilers from a file; a third takes them from the cluster, as a
// deployed bridge does: the identity policy and the Ready conditions act on those, so the
// Reconcilers of the identity and clock faults are its. The revocation and the clock's jump come
// after the apiserver's restarts (past the churn's end in a short run): a review that cannot reach
// the apiserver keeps its last verdict for 30 s, by design, which is not what is measured here.
// Then the churn and the faults stop and the soak waits for the cluster to converge, and checks:
// every live object Ready at its generation with exactly the children it wants, no orphans,
// every finalizer ran, no object delivered twice at once (across all bridges), no hot loop once
// idle, and no auth key in any log or journal. It prints the figures and exits 1 when an invariant fails.
//
//   npm run chaos -- [--objects 300] [--seconds 240] [--kill-every 20] [--seed N]
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { ApiError, applyObject, KubeApi } from '../../kube/api.ts';
import { connectionFromKubeconfigText } from '../../kube/kubeconfig.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../../kube/serviceaccount.ts';
import { applyFunction, loadFunction, startFunction } from '../../cli/functions.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import type { Reconciler } from '../../functions/sdk/reconciler.ts';
import { freePort } from '../support/bridge.ts';
import { compactEtcd } from '../../cluster/etcd.ts';
import { kubeApi, restartApiserver, testCluster, uniqueName } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { identityForAnnotation } from '../../core/names.ts';
import { functionTimeHeader } from '../../core/response.ts';

const { values } = parseArgs({
  options: {
    objects: { type: 'string', default: '300' },
    seconds: { type: 'string', default: '240' },
    'kill-every': { type: 'string', default: '20' },
    seed: { type: 'string' },
    'converge-seconds': { type: 'string', default: '300' },
  },
});
const total = Number(values.objects);
const churnMs = Number(values.seconds) * 1000;
const killEveryMs = Number(values['kill-every']) * 1000;
let seed = Number(values.seed ?? Date.now() % 100_000);
const startSeed = seed;
/** A small seeded generator, so that a failing run can be repeated with --seed. */
const random = () => {
  seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
  return seed / 2 ** 31;
};
const pick = <T>(xs: T[]) => xs[Math.floor(random() * xs.length)]!;
const log = (line: string) => console.log(`[chaos ${((Date.now() - began) / 1000).toFixed(0).padStart(4)}s] ${line}`);
const began = Date.now();
const timeoutSeconds = 3;

const cluster = await testCluster();
const api = kubeApi(cluster.kc);
const ns = uniqueName('kfn-chaos');
const dir = mkdtempSync(join(tmpdir(), 'kfn-chaos-'));
log(`seed ${startSeed}, ${total} objects, ${churnMs / 1000} s of churn, namespace ${ns}, files in ${dir}`);
// The Reconciler CRD, and the policy that makes naming an identity a right over it (docs/bridge.md,
// "Who can see what"), as manifests/ installs them.
for (const file of [join('crds', 'reconciler.yaml'), join('policies', 'reconciler-identity.yaml')]) {
  for (const doc of parseAllDocuments(readFileSync(join(repoRoot, 'manifests', file), 'utf8'))) await applyObject(api, doc.toJS(), 'kfn-chaos');
}
const policyApplied = Date.now();
const reconcilersPath = '/apis/kfn.dev/v1alpha1/reconcilers';
// Reconcilers an earlier soak left (cluster-scoped, they outlive its namespace): the bridge that
// reads the cluster's Reconcilers would serve them beside this soak's.
const earlier = await api.request<{ items: { metadata: { name: string }; spec?: { serviceAccount?: { namespace?: string } } }[] }>('GET', reconcilersPath).catch(() => ({ items: [] }));
for (const r of earlier.items) {
  if (r.spec?.serviceAccount?.namespace?.startsWith('kfn-chaos-')) await api.request('DELETE', `${reconcilersPath}/${r.metadata.name}`).catch(() => undefined);
}

// --- the functions, each behind a fault-injecting proxy -------------------------------------
const figures = { skewedFunctions: 0, forged: 0, forgedCarried: 0, malformed: 0, replays: 0, replaysRefused: 0, replaysRun: 0, noRightDeliveries: 0, deliveries: 0, failed500: 0, heldPastTimeout: 0, notFound: 0, refused401: 0, retries: 0, bridgeKills: 0, bridgeTerms: 0, bridgeExits: 0, reconcilerEdits: 0, keyRotations: 0, shardRollouts: 0, apiserverRestarts: 0, compactions: 0, creates: 0, createdWithFinalizer: 0, edits: 0, deletes: 0 };
/** The author's edits moving a sink: how the apiserver answered, and what reached the rogue sink. */
const sinkMoves = { tried: 0, refused: 0, refusedOtherwise: 0, accepted: 0, unanswered: 0, rogueDeliveries: 0, policyInForceMs: undefined as number | undefined };
/** The revocation in an RBAC storm: when the binding went and came back, and what the sink saw. */
const revocation = { rbacChanges: 0, stormSeconds: 0, edits: 0, before: 0, revokedAt: 0, stoppedAfterMs: undefined as number | undefined, forbiddenSaid: '', restoredAt: 0, resumedAfterMs: undefined as number | undefined };
/** The etcd compaction: how a watch from before it learnt of it, and the bridges' 410s and relists after it. */
const gone = { compactedAt: 0, arrived: 'not probed', lines: 0, relists: 0 };
/** The clock 2 minutes ahead: the refusals the proxy saw (by object, and the highest attempt), and what the Reconciler said. */
const clockJump = { refusals: 0, mostAttempt: 0, refusalsPerKey: new Map<string, number>(), skewSaid: '', edits: 0 };
/** What kept one of those faults from happening as planned (each a failure). */
const faultProblems: string[] = [];
/**
 * Once armed, the next delivery opens a 5 s window in which the sinks answer 404 to everything
 * (a route being programmed): no change may be lost.
 */
let notFoundArmed = false;
let notFoundUntil = 0;
/** Each object's deliveries as the proxy saw them (reason, attempt, answer): what a failed invariant reports. */
const deliveryLog = new Map<string, string[]>();
const inFlight = new Map<string, number>();
let maxPerKey = 0;
const deliveriesPerKey = new Map<string, number>();
let faultsOn = true;
const children: ChildProcess[] = [];

function faultProxy(target: number): Promise<number> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      let key = '?';
      try {
        const data = JSON.parse(body.toString()) as { primary: { namespace?: string; name: string }; observed?: { children: { metadata: { namespace?: string; name: string } }[] } };
        key = `${data.primary.namespace}/${data.primary.name}`;
        // A child from another namespace, carried as this primary's: a forgery the bridge vouched for.
        for (const c of data.observed?.children ?? []) {
          if (c.metadata.namespace === data.primary.namespace) continue;
          figures.forgedCarried++;
          log(`an event for ${key} carried ${c.metadata.namespace}/${c.metadata.name} as its child`);
        }
      } catch {
        /* not an event: forwarded as it is */
      }
      figures.deliveries++;
      deliveriesPerKey.set(key, (deliveriesPerKey.get(key) ?? 0) + 1);
      const seen = (answer: string) => {
        const lines = deliveryLog.get(key) ?? [];
        lines.push(`+${((Date.now() - began) / 1000).toFixed(1)}s ${req.headers['ce-kfnreason']} attempt ${req.headers['ce-kfnattempt']}: ${answer}`);
        deliveryLog.set(key, lines.slice(-30));
      };
      if (notFoundArmed && !notFoundUntil) {
        notFoundUntil = Date.now() + 5000;
        log('the sinks answer 404 for 5 s (a route being programmed)');
      }
      if (Date.now() < notFoundUntil) {
        figures.notFound++;
        seen('404 (sink not ready)');
        return void res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found');
      }
      if (Number(req.headers['ce-kfnattempt'] ?? 1) > 1) figures.retries++;
      const n = (inFlight.get(key) ?? 0) + 1;
      inFlight.set(key, n);
      maxPerKey = Math.max(maxPerKey, n);
      const done = () => inFlight.set(key, (inFlight.get(key) ?? 1) - 1);
      const roll = random();
      if (faultsOn && roll < 0.2) {
        figures.failed500++;
        done();
        seen('500 (injected)');
        return void res.writeHead(500).end('chaos: injected failure');
      }
      const malformed = faultsOn && roll >= 0.25 && roll < 0.28;
      const replayed = faultsOn && roll >= 0.28 && roll < 0.31;
      /** The same request again, as a captured one replayed: the function must refuse it, not run it. */
      const replay = () => {
        figures.replays++;
        const again = httpRequest({ host: '127.0.0.1', port: target, method: 'POST', path: req.url, headers: req.headers }, (answer) => {
          answer.resume();
          answer.on('end', () => {
            // A clock the event's time is outside of refuses it too (400, with the function's time).
            if (answer.statusCode === 409 || answer.statusCode === 401 || (answer.statusCode === 400 && answer.headers[functionTimeHeader])) figures.replaysRefused++;
            else figures.replaysRun++;
            seen(`replayed: ${answer.statusCode}`);
          });
        });
        again.on('error', () => figures.replaysRefused++);
        again.end(body);
      };
      const forward = (reply: boolean) => {
        const out = httpRequest({ host: '127.0.0.1', port: target, method: 'POST', path: req.url, headers: req.headers }, (answer) => {
          const parts: Buffer[] = [];
          answer.on('data', (c: Buffer) => parts.push(c));
          answer.on('end', () => {
            done();
            if (answer.statusCode === 401) figures.refused401++;
            if (answer.statusCode === 400 && answer.headers[functionTimeHeader]) {
              clockJump.refusals++;
              clockJump.mostAttempt = Math.max(clockJump.mostAttempt, Number(req.headers['ce-kfnattempt'] ?? 1));
              clockJump.refusalsPerKey.set(key, (clockJump.refusalsPerKey.get(key) ?? 0) + 1);
            }
            seen(`${answer.statusCode}${reply ? '' : ' (after the deadline, unseen by the bridge)'}${malformed ? ' (answered as not the contract\'s)' : ''} ${Buffer.concat(parts).toString().slice(0, 400)}`);
            if (malformed && reply && !res.headersSent) {
              figures.malformed++;
              res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"fine","changes":[null]}');
            } else if (reply && !res.headersSent) res.writeHead(answer.statusCode ?? 502, answer.headers).end(Buffer.concat(parts));
            if (replayed) replay();
          });
        });
        out.on('error', (err) => {
          done();
          if (reply && !res.headersSent) res.writeHead(502).end(`chaos proxy: ${err.message}`);
        });
        out.end(body);
      };
      if (faultsOn && roll < 0.25) {
        // A function too slow for the deadline: it still does the work, after the bridge gave up.
        figures.heldPastTimeout++;
        setTimeout(() => forward(false), timeoutSeconds * 1000 + 500);
        return;
      }
      forward(true);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

/** The file bridges' Reconcilers (their configuration file). */
const reconcilers: Record<string, unknown>[] = [];
/** Each function whose key is rotated: its name and key file; and every key any function has had (none may be logged). */
const functions: { name: string; keyFile: string; log: string }[] = [];
const keys: string[] = [];
const kinds: Record<'MyApp' | 'ReverseWordsApp', { path: string; name: string }> = {
  MyApp: { path: `/apis/app.example.com/v1/namespaces/${ns}/myapps`, name: 'myapp' },
  ReverseWordsApp: { path: `/apis/apps.example.com/v1beta1/namespaces/${ns}/reversewordsapps`, name: 'reversewordsapp' },
};
let rwFinalizer = '';
// Where forged children are made: a namespace the MyApp Reconciler watches too, holding no MyApp.
const elsewhere = `${ns}-elsewhere`;
await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: elsewhere } } });
// The functions' clocks, skewed both ways: a preload moves Date (the wall clock), not the monotonic one.
const skews: Record<string, number> = { myapp: 50_000, reversewordsapp: -50_000 };
const skewPreload = join(dir, 'clock-skew.mjs');
writeFileSync(
  skewPreload,
  [
    "import { readFileSync } from 'node:fs';",
    '// A fixed skew, or one read again every 200 ms from a file: a clock set right while the process runs.',
    'let skew = Number(process.env.KFN_CHAOS_CLOCK_SKEW_MS ?? 0);',
    'const file = process.env.KFN_CHAOS_CLOCK_SKEW_FILE;',
    'if (file) {',
    "  const read = () => { try { skew = Number(readFileSync(file, 'utf8')) || 0; } catch { /* being rewritten: the last value stands */ } };",
    '  read();',
    '  setInterval(read, 200).unref();',
    '}',
    'const Real = Date;',
    'class Skewed extends Real { constructor(...args) { if (args.length === 0) super(Real.now() + skew); else super(...args); } static now() { return Real.now() + skew; } }',
    'globalThis.Date = Skewed;',
    '',
  ].join('\n'),
);
/**
 * Starts a function (`kfn serve`) behind a fault proxy, its manifests applied, and answers its
 * Reconciler (with the soak's timeout). `inCluster`: its Reconciler is applied too, for the
 * cluster bridge; otherwise it is left out of the cluster, for the file bridges alone: an object
 * delivered by both would be two invocations at once. `env` goes to the clock preload.
 */
async function startBehindProxy(fnDir: string, reconciler: Reconciler, options: { namespaces: string[]; inCluster: boolean; env?: Record<string, string> }): Promise<{ reconciler: Record<string, unknown>; keyFile: string; log: string }> {
  const port = await freePort();
  const proxyPort = await faultProxy(port);
  const objects = functionManifests(reconciler, { namespace: ns, sinkUri: `http://127.0.0.1:${proxyPort}/`, namespaces: options.namespaces, resyncPeriodSeconds: 30 });
  const own = objects.find((o) => o.kind === 'Reconciler')!;
  (own.spec as Record<string, unknown>).timeoutSeconds = timeoutSeconds;
  await applyFunction(api, reconciler.name, options.inCluster ? objects : objects.filter((o) => o !== own), ns);
  // startFunction hands the soak's environment to the function: the preload's settings are put there for the while.
  Object.assign(process.env, options.env);
  const fn = await startFunction({ dir: fnDir, name: reconciler.name, port, adminKubeconfig: cluster.paths.kubeconfig, namespace: ns, workDir: dir, nodeOptions: options.env ? [`--import=${skewPreload}`] : [] }).finally(() => {
    for (const name of Object.keys(options.env ?? {})) delete process.env[name];
  });
  children.push(fn.process);
  keys.push(readFileSync(fn.keyFile, 'utf8'));
  return { reconciler: own, keyFile: fn.keyFile, log: fn.log };
}
for (const kind of Object.values(kinds)) {
  const fnDir = join(repoRoot, 'functions', kind.name);
  const reconciler = await loadFunction(fnDir);
  if (kind.name === 'reversewordsapp') rwFinalizer = reconciler.finalizer!;
  kind.path = `/apis/${reconciler.for.apiVersion}/namespaces/${ns}/${reconciler.for.plural}`;
  const skew = skews[reconciler.name] ?? 0;
  const started = await startBehindProxy(fnDir, reconciler, { namespaces: kind.name === 'myapp' ? [ns, elsewhere] : [ns], inCluster: false, env: skew ? { KFN_CHAOS_CLOCK_SKEW_MS: String(skew) } : undefined });
  if (skew) {
    figures.skewedFunctions++;
    log(`function ${reconciler.name} runs with its clock ${Math.abs(skew) / 1000} s ${skew > 0 ? 'ahead' : 'behind'}`);
  }
  reconcilers.push(started.reconciler);
  functions.push({ name: reconciler.name, keyFile: started.keyFile, log: started.log });
}
// A third function: myapp's code under a name of its own, for the MyApps of a namespace of its
// own; its Reconciler is the cluster's. Its clock is read from a file: 2 minutes ahead for a
// while mid-run, then set right.
const clockNs = `${ns}-clock`;
await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: clockNs } } });
const myappDir = join(repoRoot, 'functions', 'myapp');
const clockFn: Reconciler = { ...(await loadFunction(myappDir)), name: 'chaos-clock' };
const clockApps = `/apis/${clockFn.for.apiVersion}/namespaces/${clockNs}/${clockFn.for.plural}`;
const skewFile = join(dir, `${clockFn.name}.skew`);
writeFileSync(skewFile, '0');
const clockSink = ((await startBehindProxy(myappDir, clockFn, { namespaces: [clockNs], inCluster: true, env: { KFN_CHAOS_CLOCK_SKEW_FILE: skewFile } })).reconciler.spec as { sink: { uri: string } }).sink.uri;
const clockAppNames = ['clock-0', 'clock-1', 'clock-2', 'clock-3', 'clock-4', 'clock-5'];
for (const name of clockAppNames) await api.request('POST', clockApps, { body: { apiVersion: clockFn.for.apiVersion, kind: clockFn.for.kind, metadata: { name }, spec: { replicas: 0, image: 'kfn.local/nginx:1.22' } } });

/** A sink that must never be called: each call is counted, and answered 500. */
async function sinkNeverToCall(count: () => void): Promise<{ server: Server; uri: string }> {
  const server = createServer((_req, res) => {
    count();
    res.writeHead(500).end('this sink must never be called');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, uri: `http://127.0.0.1:${(server.address() as AddressInfo).port}/` };
}
// A Reconciler whose identity agrees to serve it but may not list its kind: nothing may reach its
// sink. Its timeout is the others': a new leader holds every key for the longest timeout it serves.
const noRight = await sinkNeverToCall(() => figures.noRightDeliveries++);
await applyObject(api, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'no-rights', namespace: ns, annotations: { [identityForAnnotation]: 'no-rights' } } } as never, 'kfn-chaos');
reconcilers.push({
  apiVersion: 'kfn.dev/v1alpha1',
  kind: 'Reconciler',
  metadata: { name: 'no-rights' },
  spec: { for: { apiVersion: 'app.example.com/v1', kind: 'MyApp' }, contract: 2, namespaces: [ns], sink: { uri: noRight.uri }, serviceAccount: { name: 'no-rights', namespace: ns }, resyncPeriodSeconds: 30, timeoutSeconds },
});

// --- an author who may edit Reconcilers but not lend the identity one names ---------------------
const rbacGroup = 'rbac.authorization.k8s.io';
const rogue = await sinkNeverToCall(() => sinkMoves.rogueDeliveries++);
const authorRole = `${ns}-author`;
await applyObject(api, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'author', namespace: ns } }, 'kfn-chaos');
await applyObject(api, { apiVersion: `${rbacGroup}/v1`, kind: 'ClusterRole', metadata: { name: authorRole }, rules: [{ apiGroups: ['kfn.dev'], resources: ['reconcilers'], verbs: ['get', 'list', 'patch', 'update'] }] } as never, 'kfn-chaos');
await applyObject(api, { apiVersion: `${rbacGroup}/v1`, kind: 'ClusterRoleBinding', metadata: { name: authorRole }, roleRef: { apiGroup: rbacGroup, kind: 'ClusterRole', name: authorRole }, subjects: [{ kind: 'ServiceAccount', name: 'author', namespace: ns }] } as never, 'kfn-chaos');
const authorToken = await requestServiceAccountToken(api, { namespace: ns, name: 'author' }, Math.max(3600, churnMs / 1000 + 600));
const author = new KubeApi(connectionFromKubeconfigText(kubeconfigForToken(cluster.paths.kubeconfig, authorToken), `ServiceAccount ${ns}/author`));
/** The author's edit: chaos-clock's deliveries, and what its identity may read, sent to the rogue sink. */
const moveSink = (query?: { dryRun: 'All' }) => author.request('PATCH', `${reconcilersPath}/${clockFn.name}`, { body: { spec: { sink: { uri: rogue.uri } } }, contentType: 'application/merge-patch+json', query });
const refusedForIdentity = (err: unknown) => err instanceof ApiError && err.status === 403 && /impersonate/.test(err.message);
// The apiserver loads the policy a moment after it is applied: in force once the author's edit,
// tried as a dry run (nothing stored), is refused for the identity.
if (await waitFor('the identity policy in force', () => moveSink({ dryRun: 'All' }).then(() => undefined, (err: unknown) => refusedForIdentity(err) || undefined), { timeoutMs: 60_000, intervalMs: 500 }).catch(() => false)) {
  sinkMoves.policyInForceMs = Date.now() - policyApplied;
} else faultProblems.push('the identity policy (kfn-reconciler-identity) did not refuse the author\'s edit within 60 s of being applied');

// --- an identity whose RoleBinding goes in the middle of an RBAC storm --------------------------
const rbacNs = `${ns}-rbac`;
const revocableName = 'chaos-revocable';
await api.request('POST', '/api/v1/namespaces', { body: { metadata: { name: rbacNs } } });
const ticks = ['tick-0', 'tick-1', 'tick-2'];
const revocableBinding = { apiVersion: `${rbacGroup}/v1`, kind: 'RoleBinding', metadata: { name: 'revocable-reads', namespace: rbacNs }, roleRef: { apiGroup: rbacGroup, kind: 'Role', name: 'read-configmaps' }, subjects: [{ kind: 'ServiceAccount', name: 'revocable', namespace: rbacNs }] };
for (const o of [
  { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'revocable', namespace: rbacNs, annotations: { [identityForAnnotation]: revocableName } } },
  { apiVersion: `${rbacGroup}/v1`, kind: 'Role', metadata: { name: 'read-configmaps', namespace: rbacNs }, rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list', 'watch'] }] },
  revocableBinding,
  // What the storm rewrites: bound to no one, yet each change is one after which the bridges review every identity.
  { apiVersion: `${rbacGroup}/v1`, kind: 'Role', metadata: { name: 'storm', namespace: rbacNs }, rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['get'] }] },
  ...ticks.map((name) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: rbacNs }, data: { n: '0' } })),
]) {
  await applyObject(api, o as never, 'kfn-chaos');
}
/** Each delivery to the revocable Reconciler's sink: when, and which ConfigMap at which version. */
const revocableDeliveries: { at: number; name: string; resourceVersion: string }[] = [];
const revocableSink = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let name = '?';
    let resourceVersion = '';
    try {
      const data = JSON.parse(Buffer.concat(chunks).toString()) as { primary: { name: string; resourceVersion?: string } };
      name = data.primary.name;
      resourceVersion = data.primary.resourceVersion ?? '';
    } catch {
      /* not an event: counted all the same */
    }
    const key = `${rbacNs}/${name}`;
    figures.deliveries++;
    deliveriesPerKey.set(key, (deliveriesPerKey.get(key) ?? 0) + 1);
    revocableDeliveries.push({ at: Date.now(), name, resourceVersion });
    const n = (inFlight.get(key) ?? 0) + 1;
    inFlight.set(key, n);
    maxPerKey = Math.max(maxPerKey, n);
    // Answered a moment later, so that a second delivery of the object at once would overlap it.
    setTimeout(() => {
      inFlight.set(key, (inFlight.get(key) ?? 1) - 1);
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"done","changes":[]}');
    }, 50);
  });
});
await new Promise<void>((resolve) => revocableSink.listen(0, '127.0.0.1', resolve));
await applyObject(
  api,
  {
    apiVersion: 'kfn.dev/v1alpha1',
    kind: 'Reconciler',
    metadata: { name: revocableName },
    spec: { for: { apiVersion: 'v1', kind: 'ConfigMap' }, contract: 2, namespaces: [rbacNs], sink: { uri: `http://127.0.0.1:${(revocableSink.address() as AddressInfo).port}/` }, serviceAccount: { name: 'revocable', namespace: rbacNs }, resyncPeriodSeconds: 30, timeoutSeconds },
  } as never,
  'kfn-chaos',
);

const config = join(dir, 'bridge.yaml');
const writeConfig = () => writeFileSync(config, reconcilers.map((r) => stringify(r)).join('---\n'));
writeConfig();

// --- the bridges: two with leader election, whose leader dies again and again; one for the cluster's Reconcilers
interface BridgeProc {
  child: ChildProcess;
  metrics: string;
}
let generation = 0;
/** The bridges' layout: one leader-elected replica delivers, or (after the rollout) two shards. */
let shards = 1;
/** Bridges the soak stopped itself; any other that exits is restarted, as its Deployment would. */
const stoppedBySoak = new Set<ChildProcess>();
let soakOver = false;
/**
 * A bridge process: one of the leader-elected replicas that take their Reconcilers from the file
 * (`from: 'file'`), or the one that takes them from the cluster, as a deployed bridge does.
 */
async function spawnBridge(from: 'file' | 'cluster' = 'file'): Promise<BridgeProc> {
  const port = await freePort();
  const n = ++generation;
  const out = openSync(join(dir, `bridge-${n}.log`), 'a');
  const layout = shards > 1 ? [`--shards=${shards}`, `--shard=${n % shards}`] : [];
  const source = from === 'file' ? [`--config=${config}`, '--leader-elect', ...layout, `--lease-namespace=${ns}`, '--lease-name=chaos'] : [];
  const child = spawn(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'bridge', `--kubeconfig=${cluster.paths.kubeconfig}`, ...source, `--metrics-addr=127.0.0.1:${port}`, `--journal=${join(dir, `journal-${n}.jsonl`)}`], { stdio: ['ignore', out, out] });
  closeSync(out);
  children.push(child);
  const proc = { child, metrics: `http://127.0.0.1:${port}/metrics` };
  child.on('exit', (code, signal) => {
    if (stoppedBySoak.has(child) || soakOver) return;
    figures.bridgeExits++;
    log(`bridge ${n}${from === 'cluster' ? " (the cluster's Reconcilers)" : ''} exited by itself (${signal ?? `status ${code}`}; see bridge-${n}.log): restarted, as its Deployment would`);
    void spawnBridge(from).then((next) => {
      if (from === 'file') bridges = [...bridges.filter((x) => x !== proc), next];
    });
  });
  return proc;
}
/** True while the bridge holds a Lease (the leader's, or a shard's). */
const isLeader = async (b: BridgeProc) => {
  const text = await fetch(b.metrics, { signal: AbortSignal.timeout(1000) }).then((r) => r.text()).catch(() => '');
  return /^leader_election_master_status\{[^}]*\} 1/m.test(text);
};
let bridges = [await spawnBridge(), await spawnBridge()];
// Never stopped by the soak: the faults on its Reconcilers are the identity policy's and the clock's.
await spawnBridge('cluster');

// --- the churn ---------------------------------------------------------------------------------
interface Live {
  kind: keyof typeof kinds;
  name: string;
}
const live: Live[] = [];
const deleted: Live[] = [];
/** When (s into the run) each object was created and deleted: a failed invariant says it. */
const lifetimes = new Map<string, string[]>();
const lived = (name: string, what: string) => lifetimes.set(name, [...(lifetimes.get(name) ?? []), `${what} +${((Date.now() - began) / 1000).toFixed(1)}s`]);
let serial = 0;
const images = ['kfn.local/nginx:1.22', 'kfn.local/nginx:1.22-a', 'kfn.local/nginx:1.22-b'];
const withRetry = async <T>(what: () => Promise<T>): Promise<T> => {
  for (let i = 0; ; i++) {
    try {
      return await what();
    } catch (err) {
      // The apiserver is restarting: the churn waits for it like any client.
      if (i === 39) throw err;
      await sleep(500);
    }
  }
};
async function create(): Promise<void> {
  // ReverseWordsApps run a real pod each: one in ten, at most 30.
  const rw = live.filter((l) => l.kind === 'ReverseWordsApp').length;
  const kind: keyof typeof kinds = random() < 0.1 && rw < 30 ? 'ReverseWordsApp' : 'MyApp';
  const name = `${kind === 'MyApp' ? 'app' : 'rw'}-${++serial}`;
  const spec = kind === 'MyApp' ? { replicas: 0, image: pick(images) } : { replicas: 1 };
  // One ReverseWordsApp in three comes with kfn's finalizer already in its manifest (a restore
  // from a backup, exported YAML): its deletion must finish all the same.
  const finalizers = kind === 'ReverseWordsApp' && random() < 1 / 3 ? [rwFinalizer] : undefined;
  await withRetry(() => api.request('POST', kinds[kind].path, { body: { apiVersion: kinds[kind].path.split('/').slice(2, 4).join('/'), kind, metadata: { name, ...(finalizers ? { finalizers } : {}) }, spec } }));
  live.push({ kind, name });
  lived(name, 'created');
  figures.creates++;
  if (finalizers) figures.createdWithFinalizer++;
}
async function edit(): Promise<void> {
  const target = pick(live);
  const patch = target.kind === 'MyApp' ? { spec: { image: pick(images) } } : { metadata: { labels: { touched: String(serial++) } } };
  await withRetry(() => api.request('PATCH', `${kinds[target.kind].path}/${target.name}`, { body: patch, contentType: 'application/merge-patch+json' }));
  figures.edits++;
}
async function remove(): Promise<void> {
  const i = Math.floor(random() * live.length);
  const [target] = live.splice(i, 1);
  await withRetry(() => api.request('DELETE', `${kinds[target!.kind].path}/${target!.name}`).catch((e: { status?: number }) => (e.status === 404 ? undefined : Promise.reject(e))));
  deleted.push(target!);
  lived(target!.name, 'deleted');
  figures.deletes++;
}

log('creating the objects');
for (let i = 0; i < total; i++) await create();
log(`churn for ${churnMs / 1000} s, faults on`);
const churnEnd = Date.now() + churnMs;
const faults = (async () => {
  const at = (fraction: number) => sleep(Math.max(0, churnEnd - churnMs * (1 - fraction) - Date.now()));
  await at(1 / 3);
  log('restarting kube-apiserver');
  await restartApiserver({ downtimeMs: 2000 });
  figures.apiserverRestarts++;
  await at(2 / 3);
  log('compacting etcd, then restarting kube-apiserver (watches resume into 410 Gone)');
  // A resourceVersion from before the compaction: how a watch resumed from it is told is probed below.
  const before = await withRetry(() => api.request<{ metadata: { resourceVersion: string } }>('GET', kinds.MyApp.path, { query: { limit: 1 } }));
  await compactEtcd();
  gone.compactedAt = Date.now();
  figures.compactions++;
  await restartApiserver({ downtimeMs: 2000 });
  figures.apiserverRestarts++;
  gone.arrived = await howGoneArrives(kinds.MyApp.path, before.metadata.resourceVersion);
  log(`a watch resumed from before the compaction was told ${gone.arrived}`);
})();
/**
 * How the apiserver tells a watch resumed from a compacted resourceVersion: by the answer's status
 * (410), or by a first line of type ERROR carrying 410. The bridge's watcher takes both the same
 * way, and its logs and metrics do not say which came: this says which one the bridges met.
 */
async function howGoneArrives(path: string, resourceVersion: string): Promise<string> {
  const stop = new AbortController();
  const seen: { first?: { type?: string; object?: { code?: number } } } = {};
  try {
    await api.stream(path, { query: { watch: 'true', resourceVersion, timeoutSeconds: 10 }, signal: AbortSignal.any([stop.signal, AbortSignal.timeout(15_000)]) }, (line) => {
      seen.first ??= line as typeof seen.first;
      stop.abort();
    });
  } catch (err) {
    if (err instanceof ApiError && err.status === 410) return "by the answer's status (410)";
    if (!seen.first) return `nothing (${(err as Error).message})`;
  }
  if (seen.first?.type === 'ERROR' && seen.first.object?.code === 410) return 'by an ERROR line (410)';
  return seen.first ? `nothing: the watch resumed (its first line ${seen.first.type})` : 'nothing: the watch ended without a line';
}

/** The author tries to move chaos-clock's sink to the rogue one; the apiserver must refuse it for the identity. */
async function moveSinkAsAuthor(): Promise<void> {
  sinkMoves.tried++;
  try {
    await moveSink();
  } catch (err) {
    if (refusedForIdentity(err)) sinkMoves.refused++;
    else if (err instanceof ApiError && err.status >= 400 && err.status < 500) {
      // Refused, but not for the identity: an apiserver just restarted, its authorizer or the policy not loaded yet.
      sinkMoves.refusedOtherwise++;
      log(`the author's edit of ${clockFn.name}'s sink was refused, not for the identity: ${err.status} ${err.message.slice(0, 200)}`);
    } else sinkMoves.unanswered++;
    return;
  }
  sinkMoves.accepted++;
  log(`the author, who may not impersonate ${clockFn.name}'s identity, moved its sink: put back`);
  await withRetry(() => api.request('PATCH', `${reconcilersPath}/${clockFn.name}`, { body: { spec: { sink: { uri: clockSink } } }, contentType: 'application/merge-patch+json' }));
}
const sinkMoving = (async () => {
  while (Date.now() + 5000 < churnEnd) {
    await sleep(5000);
    await moveSinkAsAuthor();
  }
})();

/** A Reconciler's Ready condition, as the cluster bridge wrote it. */
const readyOf = async (name: string) =>
  (await api.request<{ status?: { conditions?: { type: string; status: string; reason?: string; message?: string }[] } }>('GET', `${reconcilersPath}/${name}`)).status?.conditions?.find((c) => c.type === 'Ready');
/** How long the RBAC storm lasts; the binding goes in its middle. */
const stormMs = 20_000;
/** How soon after its binding went the revocable Reconciler's deliveries must have stopped: the bridge reviews at most 5 s into a burst, plus a review's round trip and a delivery in flight. */
const revocationBoundMs = 15_000;
/** How long changes keep coming after the revocation: longer than the bound, so that deliveries that never stop show. */
const watchAfterRevocationMs = revocationBoundMs + 5000;
/** A change to one of the revocable Reconciler's ConfigMaps (each a value never used before). */
const editTick = () => {
  const n = ++revocation.edits;
  return withRetry(() => api.request('PATCH', `/api/v1/namespaces/${rbacNs}/configmaps/${ticks[n % ticks.length]}`, { body: { data: { n: String(n) } }, contentType: 'application/merge-patch+json' }));
};
async function revocationInStorm(): Promise<void> {
  await waitFor(`${revocableName} to deliver while its identity may read`, () => revocableDeliveries.length > 0 || undefined, { timeoutMs: 60_000 });
  const start = Date.now();
  // The binding goes in the storm's middle, once the Reconciler has delivered in the storm: the
  // other faults (a leader killed, the apiserver restarted) can hold every delivery for a while,
  // and a revocation with nothing delivered before it measures nothing.
  // Its storm and changes go on for a while after it, counted from the latest it can go should
  // the deletion fail.
  const waitForDeliveryMs = 60_000;
  const from = () => revocation.revokedAt || start + stormMs / 2 + waitForDeliveryMs;
  const stormEnds = () => Date.now() >= from() + stormMs / 2;
  const watchEnds = () => Date.now() >= from() + watchAfterRevocationMs;
  log(`an RBAC storm for ${stormMs / 1000} s (Role ${rbacNs}/storm rewritten every 500–900 ms); the RoleBinding of ${revocableName}'s identity goes in its middle`);
  const storm = (async () => {
    for (let i = 0; !stormEnds(); i++) {
      await withRetry(() => api.request('PATCH', `/apis/${rbacGroup}/v1/namespaces/${rbacNs}/roles/storm`, { body: { rules: [{ apiGroups: [''], resources: ['pods'], verbs: i % 2 ? ['get'] : ['get', 'list'] }] }, contentType: 'application/merge-patch+json' }));
      revocation.rbacChanges++;
      await sleep(500 + random() * 400);
    }
  })();
  // A change every 500 ms: what keeps deliveries coming, until they stop.
  const changes = (async () => {
    while (!watchEnds()) {
      await editTick();
      await sleep(500);
    }
  })();
  await sleep(stormMs / 2);
  await waitFor(`${revocableName} to deliver in the storm before its binding goes`, () => revocableDeliveries.some((d) => d.at >= start) || undefined, { timeoutMs: waitForDeliveryMs }).catch(() => undefined);
  const bindingPath = `/apis/${rbacGroup}/v1/namespaces/${rbacNs}/rolebindings/${revocableBinding.metadata.name}`;
  await withRetry(() => api.request('DELETE', bindingPath).catch((e: unknown) => (e instanceof ApiError && e.status === 404 ? undefined : Promise.reject(e))));
  revocation.revokedAt = Date.now();
  revocation.stormSeconds = (revocation.revokedAt + stormMs / 2 - start) / 1000;
  revocation.before = revocableDeliveries.filter((d) => d.at >= start && d.at <= revocation.revokedAt).length;
  log(`deleted the RoleBinding of ${revocableName}'s identity mid-storm (${revocation.before} deliveries in the storm before it)`);
  const said = (async () => {
    while (!revocation.forbiddenSaid && !watchEnds()) {
      const ready = await readyOf(revocableName).catch(() => undefined);
      if (ready?.status === 'False' && ready.reason === 'IdentityForbidden') revocation.forbiddenSaid = ready.message ?? '(no message)';
      await sleep(500);
    }
  })();
  await Promise.all([storm, changes, said]);
  const after = revocableDeliveries.filter((d) => d.at > revocation.revokedAt);
  revocation.stoppedAfterMs = after.length ? after[after.length - 1]!.at - revocation.revokedAt : 0;
  // Back: it delivers again, and every change it missed (checked as the soak converges).
  await withRetry(() => applyObject(api, revocableBinding as never, 'kfn-chaos'));
  revocation.restoredAt = Date.now();
  for (const _ of ticks) await editTick();
  const back = await waitFor(`${revocableName} to deliver again once its binding is back`, () => revocableDeliveries.find((d) => d.at > revocation.restoredAt), { timeoutMs: 30_000 });
  revocation.resumedAfterMs = back.at - revocation.restoredAt;
  log(`${revocableName}: deliveries stopped ${(revocation.stoppedAfterMs / 1000).toFixed(1)} s after its binding went, and came back ${(revocation.resumedAfterMs / 1000).toFixed(1)} s after it returned`);
}

/** How long the clock function's clock stays 2 minutes ahead. */
const clockJumpMs = 20_000;
/** Sets the clock function's skew as NTP sets a clock: at once (the file replaced whole, never read half-written). */
const setSkew = (ms: number) => {
  writeFileSync(`${skewFile}.next`, String(ms));
  renameSync(`${skewFile}.next`, skewFile);
};
/** A change of one clock MyApp's image: each MyApp gets another image than its last at every edit. */
const editClockApp = () => {
  const k = clockJump.edits++;
  const image = images[(Math.floor(k / clockAppNames.length) + 1) % images.length];
  return withRetry(() => api.request('PATCH', `${clockApps}/${clockAppNames[k % clockAppNames.length]}`, { body: { spec: { image } }, contentType: 'application/merge-patch+json' }));
};
async function clockJumpsAhead(): Promise<void> {
  await waitFor(`${clockFn.name} to be delivered to`, () => [...deliveriesPerKey.keys()].some((k) => k.startsWith(`${clockNs}/`)) || undefined, { timeoutMs: 60_000 });
  setSkew(120_000);
  const until = Date.now() + clockJumpMs;
  log(`function ${clockFn.name}'s clock jumps 120 s ahead for ${clockJumpMs / 1000} s`);
  const changes = (async () => {
    while (Date.now() < until) {
      await editClockApp();
      await sleep(1000);
    }
  })();
  const said = (async () => {
    while (!clockJump.skewSaid && Date.now() < until) {
      const ready = await readyOf(clockFn.name).catch(() => undefined);
      if (ready?.status === 'False' && ready.reason === 'ClockSkew') clockJump.skewSaid = ready.message ?? '(no message)';
      await sleep(500);
    }
  })();
  await Promise.all([changes, said]);
  setSkew(0);
  log(`function ${clockFn.name}'s clock set right (${clockJump.refusals} deliveries refused meanwhile)`);
  // Changes once the clock is right: each MyApp's backoff may hold its next delivery for about as long as the refusals went on.
  for (const _ of clockAppNames) await editClockApp();
}
// After the apiserver's restarts: a review that cannot reach the apiserver leaves the last verdict
// standing for up to 30 s, by design (docs/bridge.md), which is not the figure measured here.
const identityAndClock = (async () => {
  await faults.catch(() => undefined);
  await Promise.all([
    revocationInStorm().catch((err: unknown) => faultProblems.push(`the revocation in an RBAC storm did not run through: ${(err as Error).message}`)),
    clockJumpsAhead().catch((err: unknown) => faultProblems.push(`the clock's jump did not run through: ${(err as Error).message}`)),
  ]);
})();
let killsPaused = false;
/** Stops a bridge as a rollout does (SIGTERM: it hands over what it still holds) and starts its replacement. */
async function rollBridge(b: BridgeProc): Promise<void> {
  stoppedBySoak.add(b.child);
  b.child.kill('SIGTERM');
  figures.bridgeTerms++;
  bridges = [...bridges.filter((x) => x !== b), await spawnBridge()];
}
const leaderOf = async () => {
  for (const b of bridges) if (await isLeader(b)) return b;
  return undefined;
};
/** A new auth key for every function: `first` says which side has it first. */
async function rotateKeys(first: 'secret' | 'function'): Promise<void> {
  const fresh = functions.map(() => randomBytes(24).toString('base64url'));
  keys.push(...fresh);
  const toSecrets = () =>
    Promise.all(functions.map((f, i) => withRetry(() => api.request('PATCH', `/api/v1/namespaces/${ns}/secrets/kfn-fn-${f.name}`, { body: { data: { secret: Buffer.from(fresh[i]!).toString('base64') } }, contentType: 'application/merge-patch+json' }))));
  const toFunctions = () => functions.forEach((f, i) => writeFileSync(f.keyFile, fresh[i]!, { mode: 0o600 }));
  // No leader is killed meanwhile: a takeover's gap would leave nothing delivered to refuse.
  killsPaused = true;
  if (first === 'secret') {
    // The Secret changes; a new leader reads it and signs with the new key while the functions
    // still have the old one (their mounted file is refreshed up to a minute later): 401s.
    await toSecrets();
    let leader = await leaderOf();
    for (let waited = 0; !leader && waited < 30_000; waited += 500) {
      await sleep(500); // a takeover in progress: the next leader reads the new key anyway
      leader = await leaderOf();
    }
    if (leader) await rollBridge(leader);
    // The functions' files change later (a kubelet refreshes a mounted Secret within a minute):
    // here once the functions have refused the new key for a while, at most 60 s (the new
    // leader delivers every object once it leads, but a loaded machine can take a while to start it).
    const refused = figures.refused401;
    for (let waited = 0; figures.refused401 === refused && waited < 60_000; waited += 250) await sleep(250);
    await sleep(2000);
    toFunctions();
  } else {
    // The functions have the new key first and still accept the old one the bridge signs with.
    toFunctions();
    await sleep(3000);
    await toSecrets();
  }
  killsPaused = false;
  figures.keyRotations++;
  log(`rotated the auth keys (${first === 'secret' ? 'the Secret first, a new leader signing with it before the functions had it' : "the functions' key files first"})`);
}
const reconfigure = (async () => {
  // A Reconciler edit (here, its resync period) while deliveries run: the bridge replaces each
  // controller and must not deliver an object whose delivery under the old one still runs.
  await sleep(churnMs / 5);
  for (const r of reconcilers) (r.spec as { resyncPeriodSeconds: number }).resyncPeriodSeconds += 1;
  writeConfig();
  figures.reconcilerEdits++;
  log("edited the bridges' Reconcilers (their configuration file) while deliveries ran");
  await sleep(churnMs * (0.4 - 0.2));
  await rotateKeys('secret');
  // The bridges roll to two shards: the new replicas stand by until the old layout has gone.
  await sleep(Math.max(0, churnEnd - churnMs * 0.45 - Date.now()));
  shards = 2;
  const fresh = [await spawnBridge(), await spawnBridge()];
  for (const old of bridges.filter((b) => !fresh.includes(b))) {
    stoppedBySoak.add(old.child);
    old.child.kill('SIGTERM');
    figures.bridgeTerms++;
    bridges = bridges.filter((x) => x !== old);
  }
  figures.shardRollouts++;
  log('rolled the bridges from one leader-elected replica to two shards');
  await sleep(Math.max(0, churnEnd - churnMs * 0.2 - Date.now()));
  await rotateKeys('function');
})();
/** Every 2 s, a Deployment in the other namespace naming a live MyApp as its controller. */
const forging = (async () => {
  while (Date.now() + 2000 < churnEnd) {
    await sleep(2000);
    const apps = live.filter((l) => l.kind === 'MyApp');
    const target = apps[Math.floor(random() * apps.length)];
    if (!target) continue;
    const owner = await api.request<Obj>('GET', `${kinds.MyApp.path}/${target.name}`).catch(() => undefined);
    if (!owner) continue;
    const name = `forged-${++serial}`;
    await api
      .request('POST', `/apis/apps/v1/namespaces/${elsewhere}/deployments`, {
        body: {
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name: target.name, labels: { 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/owner-uid': owner.metadata.uid, forged: name }, ownerReferences: [{ apiVersion: 'app.example.com/v1', kind: 'MyApp', name: target.name, uid: owner.metadata.uid, controller: true }] },
          spec: { replicas: 0, selector: { matchLabels: { forged: name } }, template: { metadata: { labels: { forged: name } }, spec: { containers: [{ name: 'x', image: 'kfn.local/nginx:1.22' }] } } },
        },
      })
      .then(() => figures.forged++, () => undefined);
  }
})();
const notFoundWindow = (async () => {
  await sleep(churnMs / 2);
  notFoundArmed = true; // the window opens with the next delivery (not in a takeover's gap)
})();
const kills = (async () => {
  while (Date.now() + killEveryMs < churnEnd) {
    await sleep(killEveryMs);
    if (killsPaused) continue;
    for (const b of bridges) {
      if (!(await isLeader(b))) continue;
      // Killed, or stopped as a rollout stops it (SIGTERM: it hands over what it still holds).
      const graceful = (figures.bridgeKills + figures.bridgeTerms) % 2 === 1;
      stoppedBySoak.add(b.child);
      b.child.kill(graceful ? 'SIGTERM' : 'SIGKILL');
      if (graceful) figures.bridgeTerms++;
      else figures.bridgeKills++;
      log(`${graceful ? 'SIGTERMed' : 'SIGKILLed'} the leading bridge (${figures.bridgeKills} kills, ${figures.bridgeTerms} stops)`);
      bridges = [...bridges.filter((x) => x !== b), await spawnBridge()];
      break;
    }
  }
})();
while (Date.now() < churnEnd) {
  const roll = random();
  if (roll < 0.5 && live.length) await edit();
  else if (roll < 0.75 && live.length > total / 2) await remove();
  else if (live.length < total * 1.2) await create();
  await sleep(50);
}
await Promise.all([faults, kills, notFoundWindow, reconfigure, forging, sinkMoving, identityAndClock]);
faultsOn = false;
log(`churn over: ${figures.creates} creates, ${figures.edits} edits, ${figures.deletes} deletes; faults off, waiting to converge`);

// --- convergence and invariants ----------------------------------------------------------------
interface Obj {
  metadata: { name: string; uid: string; resourceVersion?: string; generation?: number; deletionTimestamp?: string; labels?: Record<string, string>; ownerReferences?: { uid: string }[] };
  spec?: { image?: string; template?: { spec?: { containers?: { image: string }[] } } };
  status?: { observedGeneration?: number; conditions?: { type: string; status: string }[] };
}
const list = async (path: string, query: Record<string, string> = {}) => (await api.request<{ items: Obj[] }>('GET', path, { query })).items;
async function problems(): Promise<string[]> {
  const out: string[] = [];
  const owners = new Map<string, { kind: string; obj: Obj }>();
  const primaries = [...Object.entries(kinds).map(([kind, k]) => [kind, k.path] as const), ['MyApp', clockApps] as const];
  for (const [kind, path] of primaries) {
    for (const o of await list(path)) {
      if (o.metadata.deletionTimestamp) {
        out.push(`${kind} ${o.metadata.name} is still being deleted`);
        continue;
      }
      owners.set(o.metadata.uid, { kind, obj: o });
      const ready = o.status?.conditions?.find((c) => c.type === 'Ready');
      if (ready?.status !== 'True' || o.status?.observedGeneration !== o.metadata.generation) out.push(`${kind} ${o.metadata.name} not Ready at generation ${o.metadata.generation}`);
    }
  }
  const byOwner = new Map<string, string[]>();
  for (const [kind, path] of [ns, clockNs].flatMap((n) => [['Deployment', `/apis/apps/v1/namespaces/${n}/deployments`], ['Service', `/api/v1/namespaces/${n}/services`]] as const)) {
    for (const child of await list(path, { labelSelector: 'kfn.dev/owner-uid' })) {
      const owner = child.metadata.labels!['kfn.dev/owner-uid']!;
      if (!owners.has(owner)) {
        out.push(`orphan ${kind} ${child.metadata.name}`);
        continue;
      }
      byOwner.set(owner, [...(byOwner.get(owner) ?? []), kind]);
      const o = owners.get(owner)!;
      if (kind === 'Deployment' && o.kind === 'MyApp' && child.spec?.template?.spec?.containers?.[0]?.image !== o.obj.spec?.image) out.push(`Deployment ${child.metadata.name} runs another image than MyApp ${o.obj.metadata.name} wants`);
    }
  }
  for (const [uid, { kind, obj }] of owners) {
    const got = (byOwner.get(uid) ?? []).sort().join(',');
    const want = kind === 'MyApp' ? 'Deployment' : 'Deployment,Service';
    if (got !== want) out.push(`${kind} ${obj.metadata.name} has children [${got}], wants [${want}]`);
  }
  // Every ReverseWordsApp finalizer ran: the cache it guards is gone with its app.
  const caches = new Map((await list(`/api/v1/namespaces/${ns}/configmaps`)).map((c) => [c.metadata.name, c as { metadata: { creationTimestamp?: string } }]));
  // The function's log, read once if a cache outlived its app.
  let fnLog: string[] | undefined;
  for (const d of deleted) {
    const cache = d.kind === 'ReverseWordsApp' ? caches.get(`reversewords-cache-${d.name}`) : undefined;
    if (cache) {
      const seen = deliveryLog.get(`${ns}/${d.name}`) ?? [];
      // What the SDK said on the object (FinalizeFailed, FinalizerGaveUp) tells a cleanup given up from one never run.
      const said = (await list(`/api/v1/namespaces/${ns}/events`, { fieldSelector: `involvedObject.name=${d.name},type=Warning` }).catch(() => [])) as unknown as { reason: string; message: string }[];
      // What the function did for it, and who made the cache when: the next run that fails here says why.
      if (!fnLog) {
        const file = functions.find((f) => f.name === kinds.ReverseWordsApp.name)?.log;
        fnLog = file && existsSync(file) ? readFileSync(file, 'utf8').split('\n') : [];
      }
      // Its key wherever a line names it (the object field, an error's message), not a longer name it starts.
      const itsKey = new RegExp(`${ns}/${d.name}(?![\\w-])`);
      const fnLines = fnLog.filter((l) => itsKey.test(l)).slice(-20);
      out.push(
        `the finalizer of ReverseWordsApp ${d.name} did not run (its cache is still there); ${(lifetimes.get(d.name) ?? []).join(', ')}; its cache created at ${cache.metadata.creationTimestamp ?? '?'}; its last deliveries: ${seen.length ? seen.slice(-8).join(' | ') : 'none'}; its Warning Events: ${said.length ? said.map((e) => `${e.reason}: ${e.message}`).join(' | ') : 'none'}; the function's log for it:\n      ${fnLines.join('\n      ') || 'nothing'}`,
      );
    }
  }
  // The cluster bridge's Reconcilers work again: the clock set right, the identity's binding back.
  for (const name of [clockFn.name, revocableName]) {
    const ready = await readyOf(name);
    if (ready?.status !== 'True') out.push(`Reconciler ${name} not Ready (${ready ? `${ready.reason}: ${ready.message}` : 'no condition'})`);
  }
  // No change lost while the identity could not read: each ConfigMap's last version reached the sink.
  for (const cm of await list(`/api/v1/namespaces/${rbacNs}/configmaps`)) {
    if (!ticks.includes(cm.metadata.name)) continue;
    if (!revocableDeliveries.some((d) => d.name === cm.metadata.name && d.resourceVersion === cm.metadata.resourceVersion)) out.push(`ConfigMap ${rbacNs}/${cm.metadata.name} at version ${cm.metadata.resourceVersion} never reached ${revocableName}'s sink`);
  }
  return out;
}
const convergeStart = Date.now();
let left: string[] = [];
for (;;) {
  left = await problems().catch((err) => [`cannot check: ${(err as Error).message}`]);
  if (left.length === 0) break;
  if (Date.now() - convergeStart > Number(values['converge-seconds']) * 1000) break;
  await sleep(2000);
}
const convergeMs = Date.now() - convergeStart;
if (left.length === 0) log(`converged in ${(convergeMs / 1000).toFixed(1)} s`);

// Idle: no hot loop. Over 20 s of no changes, each object is delivered at most about once
// (a resync every 30 s), never again and again.
const idleStart = figures.deliveries;
const idleKeys = new Map(deliveriesPerKey);
await sleep(20_000);
const idleDeliveries = figures.deliveries - idleStart;
const hottest = Math.max(0, ...[...deliveriesPerKey].map(([k, n]) => n - (idleKeys.get(k) ?? 0)));

// Where chaos-clock delivers, as the store holds it: an edit accepted without an answer (an apiserver
// restarting) would show here.
const storedClockSink = (await api.request<{ spec: { sink: { uri?: string } } }>('GET', `${reconcilersPath}/${clockFn.name}`).catch(() => undefined))?.spec.sink.uri;

soakOver = true;
for (const c of children) c.kill('SIGTERM');
await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
await api.request('DELETE', `/api/v1/namespaces/${elsewhere}`).catch(() => undefined);
// Cluster-scoped, these outlive the namespaces.
for (const path of [`${reconcilersPath}/${clockFn.name}`, `${reconcilersPath}/${revocableName}`, `/apis/${rbacGroup}/v1/clusterrolebindings/${authorRole}`, `/apis/${rbacGroup}/v1/clusterroles/${authorRole}`, `/api/v1/namespaces/${clockNs}`, `/api/v1/namespaces/${rbacNs}`]) {
  await api.request('DELETE', path).catch(() => undefined);
}

/** Lines of the bridges' logs (JSON, one a line) saying `message`, written at `since` or later. */
function bridgeLogLines(message: string, since: number): number {
  let n = 0;
  for (const name of readdirSync(dir).filter((f) => /^bridge-\d+\.log$/.test(f))) {
    for (const line of readFileSync(join(dir, name), 'utf8').split('\n')) {
      if (!line.includes(message)) continue;
      try {
        const entry = JSON.parse(line) as { msg?: string; time?: number };
        if (entry.msg === message && (entry.time ?? 0) >= since) n++;
      } catch {
        /* a line cut short by a SIGKILL */
      }
    }
  }
  return n;
}
if (gone.compactedAt) {
  gone.lines = bridgeLogLines('resourceVersion expired (410 Gone); relisting', gone.compactedAt);
  gone.relists = bridgeLogLines('relisted', gone.compactedAt);
}
const mostRefusals = Math.max(0, ...clockJump.refusalsPerKey.values());
/** Refusals of one object in the jump beyond which it was not backing off (about 12 retries fit in 20 s of doubling delays, and a few changes). */
const mostRefusalsBackingOff = 40;
const seconds = (ms: number | undefined) => (ms === undefined ? 'never' : `${(ms / 1000).toFixed(1)} s`);

// No auth key in any log, journal or record the soak's bridges and functions wrote.
const leaks = readdirSync(dir)
  .filter((name) => !name.endsWith('.key'))
  .filter((name) => {
    const text = readFileSync(join(dir, name), 'utf8');
    return keys.some((key) => text.includes(key));
  });

const failures: string[] = [];
if (leaks.length) failures.push(`an auth key is written in ${leaks.join(', ')}`);
if (left.length) failures.push(`did not converge within ${values['converge-seconds']} s: ${left.slice(0, 10).join('; ')}${left.length > 10 ? ` (+${left.length - 10} more)` : ''}`);
if (maxPerKey > 1) failures.push(`an object was delivered ${maxPerKey} times at once (across the bridges)`);
if (hottest > 3) failures.push(`a hot loop: one object was delivered ${hottest} times in 20 idle seconds`);
if (figures.replaysRun > 0) failures.push(`${figures.replaysRun} of ${figures.replays} replayed requests were run by the function`);
if (figures.forgedCarried > 0) failures.push(`${figures.forgedCarried} children forged in another namespace were carried in a primary's event`);
if (figures.noRightDeliveries > 0) failures.push(`${figures.noRightDeliveries} deliveries reached the sink of a Reconciler whose identity may not list its kind`);
failures.push(...faultProblems);
if (sinkMoves.accepted > 0) failures.push(`${sinkMoves.accepted} of the author's edits moving ${clockFn.name}'s sink were accepted, though the author may not impersonate its identity`);
if (storedClockSink !== clockSink) failures.push(`${clockFn.name}'s sink is ${storedClockSink ?? 'unreadable'} at the end, not ${clockSink}`);
if (sinkMoves.rogueDeliveries > 0) failures.push(`${sinkMoves.rogueDeliveries} deliveries reached the sink an author without the identity's right named`);
if (sinkMoves.refused === 0) failures.push(`none of the author's ${sinkMoves.tried} edits moving a sink was refused for the identity (403, impersonate)`);
if (revocation.revokedAt) {
  if (revocation.before === 0) failures.push(`${revocableName} delivered nothing in the storm before its identity's binding went: the revocation measured nothing`);
  if ((revocation.stoppedAfterMs ?? 0) > revocationBoundMs) failures.push(`${revocableName}'s deliveries went on ${seconds(revocation.stoppedAfterMs)} after its identity's RoleBinding was deleted (at most ${revocationBoundMs / 1000} s)`);
  if (!revocation.forbiddenSaid) failures.push(`${revocableName} never said Ready=False IdentityForbidden while its identity could not read`);
}
if (clockJump.edits) {
  if (clockJump.refusals === 0) failures.push(`the function 120 s ahead refused no delivery (400, ClockSkew)`);
  else if (clockJump.mostAttempt < 2) failures.push('the deliveries the function 120 s ahead refused were not retried');
  if (mostRefusals > mostRefusalsBackingOff) failures.push(`one object was refused ${mostRefusals} times in ${clockJumpMs / 1000} s: retried without backing off`);
  if (!clockJump.skewSaid) failures.push(`${clockFn.name} never said Ready=False ClockSkew while its function's clock was 120 s ahead`);
}
noRight.server.close();
rogue.server.close();
revocableSink.close();

console.log('');
console.log('chaos soak');
console.log(`  seed                         ${startSeed}`);
console.log(`  objects (start, at the end)  ${total}, ${live.length}`);
console.log(`  churn                        ${figures.creates} creates, ${figures.edits} edits, ${figures.deletes} deletes in ${churnMs / 1000} s`);
console.log(`  deliveries                   ${figures.deliveries} (retries ${figures.retries})`);
console.log(`  faults injected              ${figures.failed500} × 500, ${figures.heldPastTimeout} × past the deadline, ${figures.notFound} × 404 (a 5 s window), ${figures.bridgeKills} leader SIGKILLs, ${figures.bridgeTerms} leader SIGTERMs, ${figures.apiserverRestarts} apiserver restarts, ${figures.compactions} etcd compaction, ${figures.createdWithFinalizer} primaries created with their finalizer`);
console.log(`  more faults                  ${figures.reconcilerEdits} Reconciler edit, ${figures.keyRotations} key rotations (${figures.refused401} × 401 while they settled), ${figures.shardRollouts} rollout to 2 shards`);
console.log(`  answers checked, requests replayed   ${figures.malformed} malformed answers retried; ${figures.replays} requests replayed, ${figures.replaysRefused} refused, ${figures.replaysRun} run`);
console.log(`  Reconciler without the right ${figures.noRightDeliveries} deliveries`);
console.log(`  clocks, forgeries            ${figures.skewedFunctions} functions 50 s off (one ahead, one behind); ${figures.forged} children forged in another namespace, ${figures.forgedCarried} carried`);
console.log(`  an author moving a sink      ${sinkMoves.policyInForceMs === undefined ? 'identity policy not in force within 60 s' : `identity policy in force by ${seconds(sinkMoves.policyInForceMs)} after it was applied`}; ${sinkMoves.tried} edits: ${sinkMoves.refused} refused for the identity (403, impersonate), ${sinkMoves.refusedOtherwise} refused otherwise, ${sinkMoves.accepted} accepted, ${sinkMoves.unanswered} unanswered; ${sinkMoves.rogueDeliveries} deliveries to the rogue sink`);
console.log(`  revocation in an RBAC storm  ${revocation.revokedAt ? `${revocation.rbacChanges} Role changes in ${revocation.stormSeconds.toFixed(0)} s; binding deleted: deliveries stopped after ${seconds(revocation.stoppedAfterMs)} (at most ${revocationBoundMs / 1000} s), Ready=False IdentityForbidden ${revocation.forbiddenSaid ? 'said' : 'not said'}; binding back: delivering after ${seconds(revocation.resumedAfterMs)}` : 'did not happen'}`);
console.log(`  410 after the compaction     a watch resumed from before it was told ${gone.arrived}; the bridges logged ${gone.lines} × 410 Gone and ${gone.relists} relists after it`);
console.log(`  clock 120 s ahead for ${clockJumpMs / 1000} s   ${clockJump.edits ? `${clockJump.refusals} deliveries refused (400, ClockSkew), retried up to attempt ${clockJump.mostAttempt}, at most ${mostRefusals} for one object; Ready=False ClockSkew ${clockJump.skewSaid ? 'said' : 'not said'}; then ${left.length ? 'did not converge' : 'converged'}` : 'did not happen'}`);
console.log(`  files with an auth key       ${leaks.length} of ${readdirSync(dir).filter((n) => !n.endsWith('.key')).length}`);
console.log(`  bridges that exited by themselves (restarted)   ${figures.bridgeExits}`);
console.log(`  time to converge             ${left.length ? 'did not' : `${(convergeMs / 1000).toFixed(1)} s`}`);
console.log(`  most deliveries of one object at once   ${maxPerKey}`);
console.log(`  idle 20 s                    ${idleDeliveries} deliveries, at most ${hottest} for one object`);
console.log(failures.length ? `FAILED:\n  ${failures.join('\n  ')}` : 'every invariant holds');
process.exit(failures.length ? 1 : 0);
