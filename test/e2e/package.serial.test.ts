// kfn outside this repository, the whole way, as docs/getting-started.md tells a new user: its
// marked steps run as written, in an empty folder with a fresh HOME and the machine's own Node
// first on the PATH (the checkout's pinned one removed): the repository cloned (the clone
// answered with this checkout), `npm ci` and `npm pack` there make the kfn and create-kfn
// packages, `npm exec` of create-kfn (as `npm create` runs it) writes a project that depends on
// the packed kfn; the project installs (with its own Node 24) and passes its unit tests (the
// reconcile, and its samples against the schema; then the doc's test of the schema's defaults
// through testReconcile, then a second function's as well). A type error makes `npx kfn build`
// refuse, naming the file and line; without it, kfn build makes every function's zip. The
// project type-checks against the package's declarations and runs the installed CLI (compiled
// JavaScript: Node runs no TypeScript under node_modules). Then, on
// a cluster of the user's own (a fresh HOME, ~/.kube/config with two contexts, the current one
// refusing, no $KUBECONFIG), with nothing but the installed package: `kfn dev --context` reconciles its sample;
// a base image (kfn's Node image) is pushed to the local registry; the bridge image is built on
// it (`--base`), pushed and installed with the package's Helm chart; `kfn deploy --context
// --registry <host>` builds the function on the base the project's package.json names (`kfn.base`) and
// pushes it, with no Go toolchain and no cluster tools; the node pulls it by digest, and the
// sample becomes Ready. Serial: an in-cluster bridge takes every Reconciler in the cluster.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { parse, stringify } from 'yaml';
import { kfnVersion, repoRoot } from '../../cluster/paths.ts';
import { ensureHelm } from '../../cluster/helm.ts';
import { ensureBinaries } from '../../cluster/build.ts';
import { buildImage, nodeRecipe } from '../../cluster/images.ts';
import { startRegistry } from '../../cluster/registry.ts';
import { RegistryClient, pushImage } from '../../cli/artifacts/push.ts';
import { contractVersion } from '../../core/event.ts';
import { waitFor } from '../../core/clock.ts';
import { freePort } from '../support/bridge.ts';
import { copyCheckout, docScript, fakeGitClone, markedBlocks, userPath } from '../support/getting-started.ts';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

test('a project from the packed packages, by docs/getting-started.md: npm create kfn, npm install, npm test, kfn build, kfn dev, the bridge by Helm, kfn deploy --registry local', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'kfn-package-'));
  t.after(() => rmSync(work, { recursive: true, force: true }));
  // npm and the scripts it runs use this Node (24), not an older one first on the PATH.
  // (and without NODE_TEST_CONTEXT, which would make the project's `node --test` report to this run)
  const { NODE_TEST_CONTEXT: _context, ...inherited } = process.env;
  const env = { ...inherited, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };
  const run = (cmd: string, args: string[], cwd: string, withEnv: NodeJS.ProcessEnv = env) => {
    const started = Date.now();
    const out = spawnSync(cmd, args, { cwd, env: withEnv, encoding: 'utf8', timeout: 240_000 });
    assert.equal(out.status, 0, `${cmd} ${args.join(' ')} in ${cwd} failed:\n${out.stdout}\n${out.stderr}`);
    t.diagnostic(`${cmd} ${args.slice(0, 2).join(' ')}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return out.stdout;
  };
  // A new user, by docs/getting-started.md: a fresh HOME (npm's cache is this machine's, only to
  // spare the downloads), the machine's Node first on the PATH, an empty folder, the doc's steps.
  const home = join(work, 'home');
  const folder = join(work, 'new-user');
  mkdirSync(home);
  mkdirSync(folder);
  const steps = markedBlocks(readFileSync(join(repoRoot, 'docs', 'getting-started.md'), 'utf8'));
  const clone = /^git clone (\S+)/m.exec(steps.run.map((b) => b.code).join('\n'))?.[1];
  assert.ok(clone, 'the doc clones kfn\'s repository');
  copyCheckout(repoRoot, join(work, 'checkout'));
  fakeGitClone(join(work, 'bin'), clone, join(work, 'checkout'));
  const newUser: NodeJS.ProcessEnv = { ...inherited, HOME: home, PATH: `${join(work, 'bin')}:${userPath()}`, npm_config_cache: process.env.npm_config_cache ?? join(homedir(), '.npm'), npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };
  t.diagnostic(`the doc's steps on ${spawnSync('node', ['--version'], { env: newUser, encoding: 'utf8' }).stdout.trim() || 'no Node'} first on the PATH`);
  const stepsStarted = Date.now();
  const followed = spawnSync('bash', ['-c', docScript(steps.run)], { cwd: folder, env: newUser, encoding: 'utf8', timeout: 900_000, maxBuffer: 64 * 2 ** 20 });
  assert.equal(followed.status, 0, `docs/getting-started.md's steps failed:\n${followed.stdout.slice(-4000)}\n${followed.stderr.slice(-4000)}`);
  t.diagnostic(`docs/getting-started.md's steps: ${((Date.now() - stepsStarted) / 1000).toFixed(1)} s`);
  const kfnTarball = join(folder, `kfn-${kfnVersion}.tgz`);
  t.diagnostic(`kfn-${kfnVersion}.tgz: ${(statSync(kfnTarball).size / 1024).toFixed(0)} KiB`);
  assert.match(followed.stdout, /Wrote my-operator\/: package\.json, tsconfig\.json, README\.md, functions\/greetings\//);
  assert.match(followed.stdout, /pass 3/, 'npm test: the Node check, the reconcile test and the samples test');
  const project = join(folder, 'my-operator');
  const pkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string>; scripts: Record<string, string> };
  assert.equal(pkg.dependencies.kfn, kfnTarball);
  assert.match(pkg.devDependencies.node ?? '', /^\^24\./, 'the project brings its own Node 24');
  assert.equal(pkg.scripts.test, 'node scripts/check-node.test.mjs && tsc -p tsconfig.json && node --test', 'npm test checks the Node, then the types, then runs the tests');
  assert.match(readFileSync(join(project, 'functions', 'greetings', 'index.ts'), 'utf8'), /from 'kfn\/sdk'/);
  assert.match(readFileSync(join(project, 'README.md'), 'utf8'), /npm install && npm test/);

  t.diagnostic(`node_modules: ${spawnSync('du', ['-sm', join(project, 'node_modules')], { encoding: 'utf8' }).stdout.split('\t')[0]} MB`);
  assert.match(spawnSync(join(project, 'node_modules', '.bin', 'node'), ['--version'], { encoding: 'utf8' }).stdout, /^v24\./, 'its own Node, installed');
  const installed = join(project, 'node_modules', 'kfn');
  assert.ok(existsSync(join(installed, 'lib', 'functions', 'sdk', 'index.js')), 'the SDK is installed as JavaScript');
  assert.ok(!existsSync(join(installed, 'cli')), 'with no TypeScript sources');
  // The doc's test of the schema's defaults, written where it says: testReconcile applies them.
  for (const block of steps.write) writeFileSync(join(project, block.path!), `${block.code}\n`);
  assert.match(run('npm', ['test'], project, newUser), /pass 4/, 'and the doc\'s defaults test');
  // A type error: kfn build (every function, as with no arguments) refuses it at its file and
  // line, and builds nothing; fixed, it builds.
  const index = join(project, 'functions', 'greetings', 'index.ts');
  const source = readFileSync(index, 'utf8');
  const broken = source.replace('data: { message: greeting.spec.message }', 'data: { message: greeting.spec.message.length }');
  assert.notEqual(broken, source, 'the template\'s ConfigMap data, made a number');
  const line = broken.split('\n').findIndex((l) => l.includes('greeting.spec.message.length')) + 1;
  writeFileSync(index, broken);
  const typeError = spawnSync('npx', ['kfn', 'build'], { cwd: project, env: newUser, encoding: 'utf8', timeout: 240_000 });
  assert.notEqual(typeError.status, 0, `kfn build built a type error:\n${typeError.stderr}`);
  assert.match(typeError.stderr, new RegExp(`^functions/greetings/index\\.ts:${line}:\\d+: .*'number' is not assignable to type 'string'`, 'm'), typeError.stderr);
  assert.match(typeError.stderr, /Fix the type errors, or pass --no-typecheck/);
  const lambdaZip = join(project, '.kfn', 'build', 'lambda', 'greetings.zip');
  assert.ok(!existsSync(lambdaZip), 'nothing was built');
  writeFileSync(index, source);
  const built = spawnSync('npx', ['kfn', 'build'], { cwd: project, env: newUser, encoding: 'utf8', timeout: 240_000 });
  assert.equal(built.status, 0, built.stderr);
  assert.ok(existsSync(lambdaZip), `kfn build with no arguments builds every function:\n${built.stderr}`);
  run('npm', ['run', 'typecheck'], project);
  const version = run(join(project, 'node_modules', '.bin', 'kfn'), ['--version'], project);
  assert.equal(version.trim(), `kfn ${kfnVersion} (event contract v${contractVersion}; bridge image kfn.local/bridge:${kfnVersion})`);
  const manifests = run(join(project, 'node_modules', '.bin', 'kfn'), ['manifests', 'functions/greetings'], project);
  assert.match(manifests, /name: greetings\.my-operator\.example\.com/);
  // A second function, as the README says: the installed CLI writes it beside the first.
  run(join(project, 'node_modules', '.bin', 'kfn'), ['new', 'notes', '--group', 'my-operator.example.com', '--kind', 'Note'], project);
  assert.match(run('npm', ['test'], project), /pass 6/, 'npm test runs the new function\'s tests too');

  // On a cluster of the user's own, as kubectl finds it: a fresh HOME whose ~/.kube/config has
  // two contexts — the current one a server that refuses connections, the other the test's
  // cluster — and no $KUBECONFIG. kfn must never build or start its own cluster (~/.kfn).
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const kfn = join(project, 'node_modules', '.bin', 'kfn');
  const ns = await testNamespace(t, cluster, 'package');
  mkdirSync(join(home, '.kube'), { recursive: true });
  const admin = parse(readFileSync(cluster.paths.kubeconfig, 'utf8')) as { clusters: { cluster: object }[]; users: { user: object }[] };
  writeFileSync(
    join(home, '.kube', 'config'),
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'broken',
      clusters: [
        { name: 'broken', cluster: { server: 'https://127.0.0.1:1' } },
        { name: 'test', cluster: admin.clusters[0]!.cluster },
      ],
      users: [{ name: 'admin', user: admin.users[0]!.user }],
      contexts: [
        { name: 'broken', context: { cluster: 'broken', user: 'admin' } },
        { name: 'test', context: { cluster: 'test', user: 'admin', namespace: ns } },
      ],
    }),
    { mode: 0o600 },
  );
  const { KUBECONFIG: _kubeconfig, KFN_CLUSTER_DIR: _clusterDir, ...noCluster } = env as NodeJS.ProcessEnv;
  const userEnv: NodeJS.ProcessEnv = { ...noCluster, HOME: home };
  // The current context refuses: one line that names it and the two ways on, at once.
  const refused = spawnSync(kfn, ['dev', 'functions/greetings', '--port', String(await freePort())], { cwd: project, env: userEnv, encoding: 'utf8', timeout: 60_000 });
  assert.notEqual(refused.status, 0);
  assert.match(refused.stderr, /refused the connection \(context "broken" in .*\.kube\/config, server https:\/\/127\.0\.0\.1:1\)/, refused.stderr);
  assert.match(refused.stderr, /npx kfn cluster up/, 'and how to get a cluster of kfn\'s own instead');
  // Helm is no kfn: it is given the test's kubeconfig as it is.
  const clusterEnv = { ...env, KUBECONFIG: cluster.paths.kubeconfig };
  const greetings = `/apis/my-operator.example.com/v1alpha1/namespaces/${ns}/greetings`;
  const sample = { apiVersion: 'my-operator.example.com/v1alpha1', kind: 'Greeting', metadata: { name: 'first' }, spec: { message: 'hello from the package' } };
  const readyAt = async (name: string) => {
    const g = await api.request<{ metadata: { generation: number }; status?: { observedGeneration?: number; conditions?: { type: string; status: string }[] } }>('GET', `${greetings}/${name}`).catch(() => undefined);
    return g?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') && g.status.observedGeneration === g.metadata.generation ? g : undefined;
  };

  // kfn dev: the function on the dev server, a bridge in process, the sample reconciled.
  const devPort = await freePort();
  // Its output to a file, not a pipe: a process it leaves behind (esbuild's service) would hold a pipe, and this test's process, open.
  const devLog = join(work, 'dev.log');
  const devFd = openSync(devLog, 'a');
  const dev = spawn(kfn, ['dev', 'functions/greetings', '--context', 'test', '--port', String(devPort)], { cwd: project, env: userEnv, stdio: ['ignore', devFd, devFd] });
  closeSync(devFd);
  const devOut = () => readFileSync(devLog, 'utf8').slice(-3000);
  t.after(() => dev.kill('SIGKILL'));
  await waitFor('the Greeting CRD from kfn dev', () => api.request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/greetings.my-operator.example.com'), { timeoutMs: 120_000, context: devOut });
  await waitFor('the Greetings to be served', () => api.request('GET', greetings), { timeoutMs: 30_000 });
  await api.request('POST', greetings, { body: sample });
  await waitFor('kfn dev to reconcile the sample (Ready)', () => readyAt('first'), { timeoutMs: 60_000, context: devOut });
  const page = await api.request<{ data: Record<string, string> }>('GET', `/api/v1/namespaces/${ns}/configmaps/first-message`);
  assert.equal(page.data.message, 'hello from the package');
  assert.match(readFileSync(devLog, 'utf8'), /Using context "test" \(server https:\/\/127\.0\.0\.1:\d+\)/, 'it said which cluster it uses');
  dev.kill('SIGTERM');
  await new Promise((r) => dev.once('exit', r));

  // The bridge from the package: its image pushed to the local registry, the package's chart.
  const registry = await startRegistry({ paths: cluster.paths, log: (line) => t.diagnostic(line) });
  // The base, as a user's registry would hold one (nothing outside is reachable here): kfn's
  // own Node image (Node 24 on Debian's libc), pushed there by this test, not by the package.
  const nodeImage = buildImage(nodeRecipe(), await ensureBinaries());
  const base = `${registry.host}/base/node:24`;
  const basePushed = await pushImage(nodeImage.tarball, base, { credentials: registry.auth });
  const baseLayers = (JSON.parse((await new RegistryClient(registry.host, 'base/node', registry.auth).manifest(basePushed.digest, base)).bytes.toString()) as { layers: { digest: string }[] }).layers.map((l) => l.digest);
  // No Go toolchain for the package's image path: a `go` that fails is first on its PATH.
  const noGo = join(work, 'no-go');
  mkdirSync(noGo);
  const goRan = join(work, 'go-ran');
  writeFileSync(join(noGo, 'go'), `#!/bin/sh\necho "$@" >> ${goRan}\nexit 97\n`, { mode: 0o755 });
  // The registry by its address, its credentials in the user's Docker config, as for any registry.
  mkdirSync(join(home, '.docker'), { recursive: true });
  const registryAuth = registry.auth ? { auths: { [registry.host]: { auth: Buffer.from(`${registry.auth.username}:${registry.auth.password}`).toString('base64') } } } : { auths: {} };
  writeFileSync(join(home, '.docker', 'config.json'), JSON.stringify(registryAuth), { mode: 0o600 });
  const imageEnv = { ...userEnv, PATH: `${noGo}:${userEnv.PATH}`, GO: join(noGo, 'go') };
  const bridgeStarted = Date.now();
  const bridgeRef = run(kfn, ['image', 'push', 'bridge', '--registry', registry.host, '--base', base], project, imageEnv).trim();
  t.diagnostic(`kfn image push bridge --base: ${((Date.now() - bridgeStarted) / 1000).toFixed(1)} s`);
  const [bridgeRepo, bridgeDigest] = bridgeRef.split('@');
  assert.match(bridgeDigest ?? '', /^sha256:[0-9a-f]{64}$/, bridgeRef);
  const helm = await ensureHelm();
  const helmEnv = { ...clusterEnv, HELM_CACHE_HOME: join(work, 'helm', 'cache'), HELM_CONFIG_HOME: join(work, 'helm', 'config'), HELM_DATA_HOME: join(work, 'helm', 'data') };
  const helmRun = (...args: string[]) => {
    const out = spawnSync(helm, args, { cwd: project, env: helmEnv, encoding: 'utf8', timeout: 240_000 });
    assert.equal(out.status, 0, `helm ${args.join(' ')}:\n${out.stdout}\n${out.stderr}`);
  };
  t.after(async () => {
    spawnSync(helm, ['uninstall', 'kfn', '-n', 'kfn-system', '--wait'], { env: helmEnv });
    await api.request('DELETE', '/apis/kfn.dev/v1alpha1/reconcilers/greetings').catch(() => undefined);
    await api.request('DELETE', '/api/v1/namespaces/kfn-system').catch(() => undefined);
    await waitFor('namespace kfn-system to be gone', () => api.request('GET', '/api/v1/namespaces/kfn-system').then(() => undefined, () => true), { timeoutMs: 120_000 });
  });
  helmRun('install', 'kfn', join(installed, 'lib', 'charts', 'kfn'), '-n', 'kfn-system', '--create-namespace', '--wait', '--timeout', '3m', '--take-ownership', '--force-conflicts', '--set', `image.repository=${bridgeRepo}`, '--set', `image.digest=${bridgeDigest}`);

  // kfn deploy --registry local: pushed, pulled by the node by digest, the sample reconciled by
  // the function's pod through the bridge's.
  // The base from the project's own config this time: "kfn": {"base": …} in its package.json.
  const projectPkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(project, 'package.json'), `${JSON.stringify({ ...projectPkg, kfn: { base } }, null, 2)}\n`);
  const deployed = spawnSync(kfn, ['deploy', 'functions/greetings', '--context', 'test', '--registry', registry.host, '--watch-namespace', ns], { cwd: project, env: imageEnv, encoding: 'utf8', timeout: 240_000 });
  assert.equal(deployed.status, 0, deployed.stderr);
  assert.match(deployed.stderr, /^Using context "test" \(server https:\/\/127\.0\.0\.1:\d+\) from \S*\.kube\/config, in namespace kfn-system$/m, 'the line names the namespace it deploys in');
  assert.ok(!existsSync(goRan), `kfn ran go: ${existsSync(goRan) ? readFileSync(goRan, 'utf8') : ''}`);
  assert.match(deployed.stderr, new RegExp(`Building on ${base.replace(/\./g, '\\.')} \\("kfn": \\{"base"\\} of .*package\\.json, linux/amd64\\)`));
  const pushLine = deployed.stderr.split('\n').find((l) => l.startsWith('Pushed ')) ?? '';
  t.diagnostic(pushLine);
  assert.match(pushLine, new RegExp(`^Pushed ${registry.host.replace(/\./g, '\\.')}/fn-greetings:\\S+ \\(sha256:[0-9a-f]{12}…\\) on ${base.replace(/\./g, '\\.')} `), 'built on the base');
  const fnPod = await waitFor('the function\'s pod, running', async () => {
    const pods = await api.request<{ items: { metadata: { name: string }; spec: { containers: { image: string }[] }; status?: { phase?: string } }[] }>('GET', '/api/v1/namespaces/kfn-system/pods', { query: { labelSelector: 'kfn.dev/function=greetings' } });
    return pods.items.find((p) => p.status?.phase === 'Running');
  }, { timeoutMs: 60_000 });
  assert.match(fnPod.spec.containers[0]!.image, new RegExp(`^${registry.host.replace(/\./g, '\\.')}/fn-greetings@sha256:[0-9a-f]{64}$`));
  const pulled = await waitFor('the kubelet\'s Pulled event', async () => {
    const events = await api.request<{ items: { reason: string; message: string }[] }>('GET', '/api/v1/namespaces/kfn-system/events', { query: { fieldSelector: `involvedObject.name=${fnPod.metadata.name}` } });
    return events.items.find((e) => e.reason === 'Pulled');
  }, { timeoutMs: 30_000 });
  t.diagnostic(`kubelet: ${pulled.message}`);
  // The image the node pulled: the base's layers by digest, then the bundle's.
  const [fnRepo, fnDigest] = fnPod.spec.containers[0]!.image.split('@');
  const fnManifest = JSON.parse((await new RegistryClient(registry.host, fnRepo!.slice(registry.host.length + 1), registry.auth).manifest(fnDigest!, fnPod.spec.containers[0]!.image)).bytes.toString()) as { layers: { digest: string }[] };
  assert.deepEqual(fnManifest.layers.slice(0, -1).map((l) => l.digest), baseLayers);
  assert.equal(fnManifest.layers.length, baseLayers.length + 1, 'one layer more: the bundle');
  await api.request('POST', greetings, { body: { ...sample, metadata: { name: 'second' }, spec: { message: 'from the pods' } } });
  await waitFor('the deployed function to reconcile the sample (Ready)', () => readyAt('second'), { timeoutMs: 90_000 });
  const bundle = statSync(join(project, '.kfn', 'build', 'fn-greetings')).isDirectory();
  assert.ok(bundle, 'the function was bundled in the project\'s .kfn/');
  assert.ok(!existsSync(join(home, '.kfn')), 'nothing was built or started under ~/.kfn');
});
