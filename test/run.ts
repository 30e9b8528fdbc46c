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
import { ensureRuntimeClient } from './support/lambda.ts';
import type { Failure } from './support/count-reporter.ts';

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

const serial = selected.filter((f) => f.endsWith('.serial.test.ts')).sort((a, b) => Number(!a.includes('/e2e/')) - Number(!b.includes('/e2e/')));
const parallel = selected.filter((f) => !f.endsWith('.serial.test.ts'));

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
  const args = [
    '--test',
    `--test-concurrency=${concurrency}`,
    '--test-timeout=300000',
    // A file's process ends once its tests (and their after hooks) have: a child process a test
    // leaves holding a pipe or socket must not keep the whole run waiting.
    '--test-force-exit',
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    `--test-reporter=${join(testRoot, 'support', 'count-reporter.ts')}`,
    `--test-reporter-destination=${counts}`,
    ...files.map((f) => relative(repoRoot, f)),
  ];
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
  // What some tests need beyond the cluster, prepared here with progress rather than inside a
  // test's time limit: Knative and Traefik (built from Go modules, ~10 min cold), the local
  // registry (CNCF Distribution, ~2 min cold), Helm (~3 min cold), and AWS's
  // Lambda runtime interface client (compiled on install, ~3 min cold), and Debian's Chromium.
  if (selected.some((f) => f.includes('/e2e/') && /knative/.test(f))) await ensureKnativeBinaries({ log: (line) => console.error(`[knative] ${line}`) });
  if (selected.some((f) => /incluster\.serial|package\.serial|knative\.serial|\/registry\./.test(f))) await ensureRegistryBinaries({ log: (line) => console.error(`[registry] ${line}`) });
  if (selected.some((f) => /\/helm\.|package\.serial/.test(f))) await ensureHelm({ log: (line) => console.error(`[helm] ${line}`) });
  if (selected.some((f) => /\/tracing\./.test(f))) await ensureJaeger({ log: (line) => console.error(`[jaeger] ${line}`) });
  if (selected.some((f) => /observability\./.test(f))) await ensurePrometheus({ log: (line) => console.error(`[prometheus] ${line}`) });
  if (selected.some((f) => f.includes('/e2e/') && /lambda/.test(f))) ensureRuntimeClient((line) => console.error(`[lambda] ${line}`));
  if (selected.some((f) => f.includes('/e2e/dev'))) ensureChromium((line) => console.error(`[chromium] ${line}`));
  const concurrency = Number(values.concurrency ?? 3);
  const first = await runNodeTest(parallel, concurrency, env);
  const second = await runNodeTest(serial, 1, env);
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
