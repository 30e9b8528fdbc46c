// `npm test`: unit tests, then integration tests against the real local control plane.
//
// The cluster is started once for the whole run (built first if the cache has none) and
// stopped at the end if this run started it; a cluster that was already running is reused and
// left running. Test files run in parallel, except `*.serial.test.ts` files (they restart the
// apiserver or compact etcd), which run afterwards, one at a time.
//
//   npm test                         everything
//   npm test -- --unit               unit tests only (no cluster)
//   npm test -- test/integration/x.test.ts …   the given files
//   KFN_KEEP_CLUSTER=1 npm test      leave a cluster this run started running
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { clusterDown, clusterHealthy, clusterUp } from '../cluster/controlplane.ts';
import { clusterPaths, repoRoot } from '../cluster/paths.ts';
import { ensureKnativeBinaries } from '../cluster/knative.ts';
import { ensureRegistryBinaries } from '../cluster/registry.ts';
import { ensureHelm } from '../cluster/helm.ts';
import { ensurePrometheus } from '../cluster/prometheus.ts';
import { ensureJaeger } from '../cluster/jaeger.ts';
import { testClusterOptions } from './support/cluster.ts';
import { ensureChromium } from './support/browser.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BuildOptions } from '../cluster/build.ts';
import { ensureRuntimeClient } from './support/lambda.ts';
import type { Failure } from './support/count-reporter.ts';
import { nodeTestArgs } from './support/node-test.ts';

const { values, positionals } = parseArgs({
  options: { unit: { type: 'boolean', default: false }, concurrency: { type: 'string' } },
  allowPositionals: true,
});

function testFiles(dir: string): string[] {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return [];
  }
  return entries.flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return testFiles(path);
    return name.endsWith('.test.ts') ? [path] : [];
  });
}

const testRoot = join(repoRoot, 'test');
const unitRoots = [join(testRoot, 'unit'), join(testRoot, 'bench'), join(repoRoot, 'core'), join(repoRoot, 'bridge'), join(repoRoot, 'kube'), join(repoRoot, 'functions'), join(repoRoot, 'cli'), join(repoRoot, 'cluster')];
const clusterRoots = [join(testRoot, 'integration'), join(testRoot, 'e2e')];

const selected = positionals.length ? positionals.map((p) => resolve(p)) : [...unitRoots.flatMap(testFiles), ...(values.unit ? [] : clusterRoots.flatMap(testFiles))];
if (selected.length === 0) {
  console.error('npm test: no test files found' + (positionals.length ? ` for ${positionals.join(' ')}` : ''));
  process.exit(1);
}
const needsCluster = selected.some((f) => clusterRoots.some((root) => f.startsWith(root + '/')));
// End-to-end serial files first, on the cluster as the parallel run left it; then the ones that
// restart the apiserver or the whole cluster. restartApiserver restarts or rolls what watches
// through client-go on the node (whose backoff otherwise left new pods unstarted and new
// Services unresolved for minutes), but not the pods a test installs (Knative's controllers).

const e2eFirst = (a: string, b: string) => Number(!a.includes('/e2e/')) - Number(!b.includes('/e2e/'));
const serial = selected.filter((f) => f.endsWith('.serial.test.ts')).sort(e2eFirst);
// The longest files first (end-to-end, then integration, then unit tests), so that the short
// ones fill the slots at the end instead of one long file running alone there.
const rank = (f: string) => (f.includes('/e2e/') ? 0 : f.includes('/integration/') ? 1 : 2);
const parallel = selected.filter((f) => !f.endsWith('.serial.test.ts')).sort((a, b) => rank(a) - rank(b));

/**
 * What test files need beyond the cluster, built from Go modules on first use and cached, in
 * this order: the local registry (CNCF Distribution, ~2 min cold), Helm (~3 min), Knative and
 * Traefik (~10 min), Jaeger (~6 min), Prometheus (~4 min) — what the serial files need first.
 */
const goBuilds: { tag: string; needed: (file: string) => boolean; ensure: (options: BuildOptions) => Promise<unknown> }[] = [
  { tag: 'registry', needed: (f) => /incluster\.serial|package\.serial|knative\.serial|\/registry\.|\/oci-image\./.test(f), ensure: ensureRegistryBinaries },
  { tag: 'helm', needed: (f) => /\/helm\.|package\.serial/.test(f), ensure: ensureHelm },
  { tag: 'knative', needed: (f) => f.includes('/e2e/') && /knative/.test(f), ensure: ensureKnativeBinaries },
  { tag: 'jaeger', needed: (f) => /\/tracing\./.test(f), ensure: ensureJaeger },
  { tag: 'prometheus', needed: (f) => /observability\./.test(f), ensure: ensurePrometheus },
];

interface Totals {
  passed: number;
  failed: number;
  skipped: number;
  failures: Failure[];
}
const totals: Totals = { passed: 0, failed: 0, skipped: 0, failures: [] };
const countsDir = mkdtempSync(join(tmpdir(), 'kfn-test-'));

/** One `node --test` run: spec output to the terminal, totals added to `totals`. */
function runNodeTest(files: string[], concurrency: number, env: NodeJS.ProcessEnv): Promise<number> {
  if (files.length === 0) return Promise.resolve(0);
  const counts = join(countsDir, `${Date.now()}.json`);
  const args = nodeTestArgs(files.map((f) => relative(repoRoot, f)), concurrency, counts);
  return new Promise((done) => {
    const child = spawn(process.execPath, args, { cwd: repoRoot, stdio: 'inherit', env });
    child.on('close', (code, signal) => {
      try {
        const run = JSON.parse(readFileSync(counts, 'utf8')) as Totals;
        totals.passed += run.passed;
        totals.failed += run.failed;
        totals.skipped += run.skipped;
        totals.failures.push(...(run.failures ?? []));
      } catch {
        // No totals: the run died before reporting. The exit status below says it failed.
      }
      done(code ?? (signal ? 1 : 0));
    });
  });
}

const started = Date.now();
const env: NodeJS.ProcessEnv = { ...process.env };
let startedCluster = false;
const paths = clusterPaths();
let exitCode = 1;
try {
  if (needsCluster) {
    const wasHealthy = await clusterHealthy(paths);
    const up = await clusterUp({ paths, ...testClusterOptions, log: (line) => console.error(`[cluster] ${line}`) });
    startedCluster = !wasHealthy && !up.reused;
    console.error(`[cluster] ${up.reused ? 'reusing the running' : 'started a'} local cluster at ${up.state.server}`);
    env.KUBECONFIG = paths.kubeconfig;
  }
  // What some tests need beyond the cluster. Lambda's runtime interface client (compiled on
  // install, ~3 min cold) and Debian's Chromium first; the Go builds below, on a machine without
  // them, beside the tests that need none of them.
  if (selected.some((f) => f.includes('/e2e/') && /lambda/.test(f))) ensureRuntimeClient((line) => console.error(`[lambda] ${line}`));
  if (selected.some((f) => f.includes('/e2e/dev'))) ensureChromium((line) => console.error(`[chromium] ${line}`));
  const wanted = goBuilds.filter((b) => selected.some(b.needed));
  // One after another (each go build takes both cores), at the lowest priority: the tests running
  // meanwhile keep the machine, and the builds take what they leave. A file waits only for its own.
  const builds = new Map<string, Promise<unknown>>();
  const finished = new Set<string>();
  let chain: Promise<unknown> = Promise.resolve();
  for (const b of wanted) {
    chain = chain.then(() => b.ensure({ log: (line) => console.error(`[${b.tag}] ${line}`), lowPriority: true }));
    builds.set(b.tag, chain);
    chain.then(() => finished.add(b.tag), () => undefined); // a failure ends the run where a file awaits it
  }
  await Promise.race([chain, sleep(3000)]);
  const needs = (file: string) => wanted.filter((b) => b.needed(file));
  const waiting = (file: string) => needs(file).some((b) => !finished.has(b.tag));
  const builtFor = (files: string[]) => Promise.all(files.flatMap(needs).map((b) => builds.get(b.tag)));
  const concurrency = Number(values.concurrency ?? 3);
  // The files that need nothing still building run as on a warm machine: the parallel ones,
  // then the serial ones (the end-to-end ones first) in one `node --test`. The parallel part
  // keeps both cores busy; the serial part, waiting on the cluster, leaves about half for the
  // builds. Then the files that waited: each serial one once its builds are there (in the order
  // they are built), then the parallel ones.
  const deferred = selected.filter(waiting);
  if (deferred.length) {
    const building = wanted.filter((b) => !finished.has(b.tag)).map((b) => b.tag);
    console.error(`[tests] ${selected.length - deferred.length} test files run while ${building.join(', ')} ${building.length > 1 ? 'build' : 'builds'} beside them at low priority; the ${deferred.length} that need ${building.length > 1 ? 'them' : 'it'} after`);
  }
  let first = await runNodeTest(parallel.filter((f) => !deferred.includes(f)), concurrency, env);
  let second = await runNodeTest(serial.filter((f) => !deferred.includes(f)), 1, env);
  const lastBuild = (f: string) => Math.max(...needs(f).map((b) => wanted.indexOf(b)));
  for (const file of serial.filter((f) => deferred.includes(f)).sort((a, b) => lastBuild(a) - lastBuild(b) || e2eFirst(a, b))) {
    await builtFor([file]);
    second = (await runNodeTest([file], 1, env)) || second;
  }
  const late = parallel.filter((f) => deferred.includes(f));
  if (late.length) {
    await builtFor(late);
    first = (await runNodeTest(late, concurrency, env)) || first;
  }
  exitCode = first || second;
} catch (err) {
  console.error(`npm test: ${(err as Error).message}`);
  exitCode = 1;
} finally {
  if (startedCluster && !process.env.KFN_KEEP_CLUSTER) {
    const down = await clusterDown({ paths, log: (line) => console.error(`[cluster] ${line}`) });
    console.error(`[cluster] stopped ${down.stopped.length} processes`);
  }
}
rmSync(countsDir, { recursive: true, force: true });
if (exitCode !== 0 && totals.failed === 0) totals.failed = 1; // a run that died counts as a failure
// Each failure once more at the very end, with the start of its error: a long log's tail then
// says which test failed and why.
for (const failure of totals.failures) {
  console.log(`\n✖ ${relative(repoRoot, failure.file)}: ${failure.name}\n${failure.error.replace(/^/gm, '    ')}`);
}
console.log(`\nnpm test finished in ${((Date.now() - started) / 1000).toFixed(1)}s`);
console.log(`tests: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
process.exit(exitCode);
