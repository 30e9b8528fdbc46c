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
//     MyApp as its controller (no event may carry one as that MyApp's child).
// Then the churn and the faults stop and the soak waits for the cluster to converge, and checks:
// every live object Ready at its generation with exactly the children it wants, no orphans,
// every finalizer ran, no object delivered twice at once (across all bridges), no hot loop once
// idle, and no auth key in any log or journal. It prints the figures and exits 1 when an invariant fails.
//
//   npm run chaos -- [--objects 300] [--seconds 240] [--kill-every 20] [--seed N]
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { applyObject } from '../../kube/api.ts';
import { applyFunction, loadFunction, startFunction } from '../../cli/functions.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { functionManifests } from '../../functions/sdk/manifests.ts';
import { freePort } from '../support/bridge.ts';
import { compactEtcd } from '../../cluster/etcd.ts';
import { kubeApi, restartApiserver, testCluster, uniqueName } from '../support/cluster.ts';
import { identityForAnnotation } from '../../core/names.ts';

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
for (const doc of parseAllDocuments(readFileSync(join(repoRoot, 'manifests', 'crds', 'reconciler.yaml'), 'utf8'))) await applyObject(api, doc.toJS(), 'kfn-chaos');

// --- the functions, each behind a fault-injecting proxy -------------------------------------
const figures = { skewedFunctions: 0, forged: 0, forgedCarried: 0, malformed: 0, replays: 0, replaysRefused: 0, replaysRun: 0, noRightDeliveries: 0, deliveries: 0, failed500: 0, heldPastTimeout: 0, notFound: 0, refused401: 0, retries: 0, bridgeKills: 0, bridgeTerms: 0, bridgeExits: 0, reconcilerEdits: 0, keyRotations: 0, shardRollouts: 0, apiserverRestarts: 0, compactions: 0, creates: 0, createdWithFinalizer: 0, edits: 0, deletes: 0 };
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
            if (answer.statusCode === 409 || answer.statusCode === 401) figures.replaysRefused++;
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
            seen(`${answer.statusCode}${reply ? '' : ' (after the deadline, unseen by the bridge)'}${malformed ? ' (answered as not the contract\'s)' : ''} ${Buffer.concat(parts).toString().slice(0, 120)}`);
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

const reconcilers: Record<string, unknown>[] = [];
/** Each function's name, auth Secret and key file, and every key it has had (none may be logged). */
const functions: { name: string; keyFile: string }[] = [];
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
    'const skew = Number(process.env.KFN_CHAOS_CLOCK_SKEW_MS ?? 0);',
    'const Real = Date;',
    'class Skewed extends Real { constructor(...args) { if (args.length === 0) super(Real.now() + skew); else super(...args); } static now() { return Real.now() + skew; } }',
    'globalThis.Date = Skewed;',
    '',
  ].join('\n'),
);
for (const kind of Object.values(kinds)) {
  const fnDir = join(repoRoot, 'functions', kind.name);
  const reconciler = await loadFunction(fnDir);
  if (kind.name === 'reversewordsapp') rwFinalizer = reconciler.finalizer!;
  kind.path = `/apis/${reconciler.for.apiVersion}/namespaces/${ns}/${reconciler.for.plural}`;
  const port = await freePort();
  const proxyPort = await faultProxy(port);
  const namespaces = kind.name === 'myapp' ? [ns, elsewhere] : [ns];
  const objects = functionManifests(reconciler, { namespace: ns, sinkUri: `http://127.0.0.1:${proxyPort}/`, namespaces, resyncPeriodSeconds: 30 });
  for (const o of objects) if (o.kind === 'Reconciler') (o.spec as Record<string, unknown>).timeoutSeconds = timeoutSeconds;
  await applyFunction(api, reconciler.name, objects, ns);
  const skew = skews[reconciler.name] ?? 0;
  process.env.KFN_CHAOS_CLOCK_SKEW_MS = String(skew);
  const fn = await startFunction({ dir: fnDir, name: reconciler.name, port, adminKubeconfig: cluster.paths.kubeconfig, namespace: ns, workDir: dir, nodeOptions: skew ? [`--import=${skewPreload}`] : [] });
  delete process.env.KFN_CHAOS_CLOCK_SKEW_MS;
  if (skew) {
    figures.skewedFunctions++;
    log(`function ${reconciler.name} runs with its clock ${Math.abs(skew) / 1000} s ${skew > 0 ? 'ahead' : 'behind'}`);
  }
  children.push(fn.process);
  reconcilers.push(objects.find((o) => o.kind === 'Reconciler')!);
  functions.push({ name: reconciler.name, keyFile: fn.keyFile });
  keys.push(readFileSync(fn.keyFile, 'utf8'));
}
// A Reconciler whose identity agrees to serve it but may not list its kind: nothing may reach its
// sink. Its timeout is the others': a new leader holds every key for the longest timeout it serves.
const noRight = createServer((_req, res) => {
  figures.noRightDeliveries++;
  res.writeHead(500).end('this sink must never be called');
});
await new Promise<void>((resolve) => noRight.listen(0, '127.0.0.1', resolve));
await applyObject(api, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'no-rights', namespace: ns, annotations: { [identityForAnnotation]: 'no-rights' } } } as never, 'kfn-chaos');
reconcilers.push({
  apiVersion: 'kfn.dev/v1alpha1',
  kind: 'Reconciler',
  metadata: { name: 'no-rights' },
  spec: { for: { apiVersion: 'app.example.com/v1', kind: 'MyApp' }, contract: 2, namespaces: [ns], sink: { uri: `http://127.0.0.1:${(noRight.address() as AddressInfo).port}/` }, serviceAccount: { name: 'no-rights', namespace: ns }, resyncPeriodSeconds: 30, timeoutSeconds },
});
const config = join(dir, 'bridge.yaml');
const writeConfig = () => writeFileSync(config, reconcilers.map((r) => stringify(r)).join('---\n'));
writeConfig();

// --- two bridges with leader election; the leader dies again and again -----------------------
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
async function spawnBridge(): Promise<BridgeProc> {
  const port = await freePort();
  const n = ++generation;
  const out = openSync(join(dir, `bridge-${n}.log`), 'a');
  const layout = shards > 1 ? [`--shards=${shards}`, `--shard=${n % shards}`] : [];
  const child = spawn(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'bridge', `--kubeconfig=${cluster.paths.kubeconfig}`, `--config=${config}`, '--leader-elect', ...layout, `--lease-namespace=${ns}`, '--lease-name=chaos', `--metrics-addr=127.0.0.1:${port}`, `--journal=${join(dir, `journal-${n}.jsonl`)}`], { stdio: ['ignore', out, out] });
  closeSync(out);
  children.push(child);
  const proc = { child, metrics: `http://127.0.0.1:${port}/metrics` };
  child.on('exit', (code, signal) => {
    if (stoppedBySoak.has(child) || soakOver) return;
    figures.bridgeExits++;
    log(`bridge ${n} exited by itself (${signal ?? `status ${code}`}; see bridge-${n}.log): restarted, as its Deployment would`);
    void spawnBridge().then((next) => (bridges = [...bridges.filter((x) => x !== proc), next]));
  });
  return proc;
}
/** True while the bridge holds a Lease (the leader's, or a shard's). */
const isLeader = async (b: BridgeProc) => {
  const text = await fetch(b.metrics, { signal: AbortSignal.timeout(1000) }).then((r) => r.text()).catch(() => '');
  return /^leader_election_master_status\{[^}]*\} 1/m.test(text);
};
let bridges = [await spawnBridge(), await spawnBridge()];

// --- the churn ---------------------------------------------------------------------------------
interface Live {
  kind: keyof typeof kinds;
  name: string;
}
const live: Live[] = [];
const deleted: Live[] = [];
let serial = 0;
const images = ['kfn.local/nginx:1.22', 'kfn.local/nginx:1.22-a', 'kfn.local/nginx:1.22-b'];
const withRetry = async (what: () => Promise<unknown>) => {
  for (let i = 0; i < 40; i++) {
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
  await compactEtcd();
  figures.compactions++;
  await restartApiserver({ downtimeMs: 2000 });
  figures.apiserverRestarts++;
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
await Promise.all([faults, kills, notFoundWindow, reconfigure, forging]);
faultsOn = false;
log(`churn over: ${figures.creates} creates, ${figures.edits} edits, ${figures.deletes} deletes; faults off, waiting to converge`);

// --- convergence and invariants ----------------------------------------------------------------
interface Obj {
  metadata: { name: string; uid: string; generation?: number; deletionTimestamp?: string; labels?: Record<string, string>; ownerReferences?: { uid: string }[] };
  spec?: { image?: string; template?: { spec?: { containers?: { image: string }[] } } };
  status?: { observedGeneration?: number; conditions?: { type: string; status: string }[] };
}
const list = async (path: string, query: Record<string, string> = {}) => (await api.request<{ items: Obj[] }>('GET', path, { query })).items;
async function problems(): Promise<string[]> {
  const out: string[] = [];
  const owners = new Map<string, { kind: string; obj: Obj }>();
  for (const [kind, k] of Object.entries(kinds)) {
    for (const o of await list(k.path)) {
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
  for (const [kind, path] of [['Deployment', `/apis/apps/v1/namespaces/${ns}/deployments`], ['Service', `/api/v1/namespaces/${ns}/services`]] as const) {
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
  const caches = new Set((await list(`/api/v1/namespaces/${ns}/configmaps`)).map((c) => c.metadata.name));
  for (const d of deleted) {
    if (d.kind === 'ReverseWordsApp' && caches.has(`reversewords-cache-${d.name}`)) {
      const seen = deliveryLog.get(`${ns}/${d.name}`) ?? [];
      // What the SDK said on the object (FinalizeFailed, FinalizerGaveUp) tells a cleanup given up from one never run.
      const said = (await list(`/api/v1/namespaces/${ns}/events`, { fieldSelector: `involvedObject.name=${d.name},type=Warning` }).catch(() => [])) as unknown as { reason: string; message: string }[];
      out.push(`the finalizer of ReverseWordsApp ${d.name} did not run (its cache is still there); its last deliveries: ${seen.length ? seen.slice(-8).join(' | ') : 'none'}; its Warning Events: ${said.length ? said.map((e) => `${e.reason}: ${e.message}`).join(' | ') : 'none'}`);
    }
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

soakOver = true;
for (const c of children) c.kill('SIGTERM');
await api.request('DELETE', `/api/v1/namespaces/${ns}`).catch(() => undefined);
await api.request('DELETE', `/api/v1/namespaces/${elsewhere}`).catch(() => undefined);

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
noRight.close();

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
console.log(`  files with an auth key       ${leaks.length} of ${readdirSync(dir).filter((n) => !n.endsWith('.key')).length}`);
console.log(`  bridges that exited by themselves (restarted)   ${figures.bridgeExits}`);
console.log(`  time to converge             ${left.length ? 'did not' : `${(convergeMs / 1000).toFixed(1)} s`}`);
console.log(`  most deliveries of one object at once   ${maxPerKey}`);
console.log(`  idle 20 s                    ${idleDeliveries} deliveries, at most ${hottest} for one object`);
console.log(failures.length ? `FAILED:\n  ${failures.join('\n  ')}` : 'every invariant holds');
process.exit(failures.length ? 1 : 0);
