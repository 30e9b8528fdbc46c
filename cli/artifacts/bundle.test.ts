// A function's bundle (its image's and its Lambda zip's): what every cold start parses is the
// function and the SDK; @kubernetes/client-node, which only exec credential plugins need, is in
// no bundle at all (kube/client-node.ts imports it by a name esbuild does not follow).
// A shared host's bundle runs several functions in one process, each on its path.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../../cluster/paths.ts';
import { authenticate } from '../../core/authentication.ts';
import { waitFor } from '../../core/clock.ts';
import { encodeReconcileEvent } from '../../core/event.ts';
import { freePort } from '../../test/support/bridge.ts';
import { bundleFunction, hostBundle } from './bundle.ts';

/** MyWeb's entry as its container runs it (cli/artifacts/bundle.ts functionBundle writes the same). */
const writeMyWebContainerEntry = (entry: string) =>
  writeFileSync(entry, `import reconciler from ${JSON.stringify(join(repoRoot, 'functions', 'myweb', 'index.ts'))};\nimport { runInContainer } from ${JSON.stringify(join(repoRoot, 'functions', 'sdk', 'node', 'index.ts'))};\nawait runInContainer(reconciler);\n`);

test('a function bundle carries no @kubernetes/client-node: in a cluster a function authenticates by its ServiceAccount, never by a plugin', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-bundle-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const entry = join(dir, 'fn.ts');
  writeMyWebContainerEntry(entry);
  const files = await bundleFunction(entry, join(dir, 'out'));
  assert.ok(files.includes('fn.mjs'), `the entry is fn.mjs (${files.join(', ')})`);
  const entrySize = statSync(join(dir, 'out', 'fn.mjs')).size;
  assert.ok(entrySize < 3 * 2 ** 20, `fn.mjs is ${(entrySize / 2 ** 20).toFixed(1)} MiB`);
  const holders = files.filter((f) => f.endsWith('.mjs') && readFileSync(join(dir, 'out', f), 'utf8').includes('var KubeConfig'));
  assert.deepEqual(holders, [], 'no file of the bundle holds the client library');
});

/** The bundle files `file` loads as it starts: itself and the chunks it imports statically, transitively. */
function loadedAtStart(dir: string, file: string, seen = new Set<string>()): Set<string> {
  if (seen.has(file)) return seen;
  seen.add(file);
  const text = readFileSync(join(dir, file), 'utf8');
  // Static imports only (a dynamic import( is loaded on demand), one after another on a line once minified.
  for (const [, from, bare] of text.matchAll(/(?:^|;)\s*(?:(?:import|export)\b[^;"]*?from\s*"\.\/([^"]+)"|import\s*"\.\/([^"]+)")/gm)) {
    const chunk = from ?? bare;
    if (chunk) loadedAtStart(dir, chunk, seen);
  }
  return seen;
}

/**
 * MyWeb's container bundle, in a folder removed after the test, checked to leave what `holds`
 * marks to chunks loaded on demand: nothing loaded at start holds it, a chunk beside them does.
 */
async function myWebBundleWithout(t: TestContext, what: string, holds: (text: string) => boolean): Promise<{ dir: string; out: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-bundle-lazy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const entry = join(dir, 'fn.ts');
  writeMyWebContainerEntry(entry);
  const out = join(dir, 'out');
  const files = await bundleFunction(entry, out);
  const has = (f: string) => holds(readFileSync(join(out, f), 'utf8'));
  const atStart = [...loadedAtStart(out, 'fn.mjs')];
  assert.ok(atStart.length > 1, `fn.mjs imports chunks at start (${atStart.join(', ')})`);
  assert.deepEqual(atStart.filter(has), [], `nothing loaded at start holds ${what}`);
  assert.ok(files.some((f) => f.endsWith('.mjs') && has(f)), `a chunk loaded on demand holds ${what}`);
  return { dir, out };
}

test('a function that declares no defaults starts without the CEL library: it is in a chunk loaded when a default is first evaluated', async (t) => {
  // One of its parser's messages: the bundle keeps no comment naming where its code came from.
  await myWebBundleWithout(t, 'the CEL library', (text) => text.includes('reserved keyword'));
});

test('a function bundle starts without the YAML parser (a chunk of its own), and reads a YAML kubeconfig all the same', async (t) => {
  const { dir, out } = await myWebBundleWithout(t, 'the YAML parser', (text) => text.includes('"MULTIPLE_DOCS"'));

  // An "apiserver" that records what it is asked, named in a kubeconfig in YAML.
  const asked: { path: string; authorization?: string }[] = [];
  const apiserver = createServer((req, res) => {
    asked.push({ path: req.url ?? '', authorization: req.headers.authorization });
    res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404, message: 'not found' }));
  });
  await new Promise<void>((resolve) => apiserver.listen(0, '127.0.0.1', resolve));
  t.after(() => apiserver.close());
  const kubeconfig = join(dir, 'kubeconfig.yaml');
  writeFileSync(kubeconfig, ['apiVersion: v1', 'kind: Config', 'current-context: here', 'contexts:', '- name: here', '  context: {cluster: here, user: me}', 'clusters:', '- name: here', `  cluster: {server: 'http://127.0.0.1:${(apiserver.address() as AddressInfo).port}'}`, 'users:', '- name: me', '  user: {token: yaml-token}', ''].join('\n'));
  const port = await freePort();
  const child = spawn(process.execPath, [join(out, 'fn.mjs')], { env: { ...process.env, PORT: String(port), KFN_AUTH_SECRET: 'key', KUBECONFIG: kubeconfig }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (c) => (output += c));
  child.stderr.on('data', (c) => (output += c));
  await waitFor('the function to listen', async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok || undefined, { timeoutMs: 20_000, context: () => output });
  // A contract-1 delivery: the function reads the MyWeb itself, through the YAML kubeconfig's cluster.
  const { message } = encodeReconcileEvent({ reconciler: 'myweb', primary: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', namespace: 'demo', name: 'site', uid: 'uid-site' }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000);
  const signed = authenticate(message, { kind: 'hmac', secret: 'key' });
  const res = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', headers: signed.headers, body: signed.body });
  assert.ok(res.ok, `the delivery answered ${res.status}: ${await res.text()}\n${output}`);
  assert.ok(asked.some((a) => a.path.startsWith('/apis/operator.k8s-summit.org/v1/namespaces/demo/mywebs/site') && a.authorization === 'Bearer yaml-token'), `the MyWeb read with the YAML kubeconfig's token: ${JSON.stringify(asked)}\n${output}`);
});

test("a deployed function's stack names the user's file and line: the bundle's source map, read when it throws", async (t) => {
  // Built in a project of its own (the cwd), as `kfn deploy` builds one.
  const project = mkdtempSync(join(tmpdir(), 'kfn-bundle-project-'));
  const cwd = process.cwd();
  process.chdir(project);
  t.after(() => {
    process.chdir(cwd);
    rmSync(project, { recursive: true, force: true });
  });
  mkdirSync(join(project, 'functions', 'site'), { recursive: true });
  writeFileSync(join(project, 'functions', 'site', 'index.ts'), ['// line 1', 'export function reconcile(): never {', "  throw new Error('the page is missing');", '}', ''].join('\n'));
  const entry = join(project, 'entry.ts');
  writeFileSync(entry, `import { reconcile } from './functions/site/index.ts';\nimport { userFirstStack } from ${JSON.stringify(join(repoRoot, 'functions', 'sdk', 'stack.ts'))};\nexport function run(): string {\n  try {\n    reconcile();\n    return 'no error';\n  } catch (err) {\n    return userFirstStack(err);\n  }\n}\n`);
  const out = join(project, '.kfn', 'build', 'fn-site', 'app');
  const files = await bundleFunction(entry, out, 'node24', { sourceMaps: true });
  assert.ok(files.includes('entry.mjs.map'), `a map beside the bundle (${files.join(', ')})`);
  const map = JSON.parse(readFileSync(join(out, 'entry.mjs.map'), 'utf8')) as { sources: string[]; sourcesContent?: unknown };
  assert.ok(map.sources.includes('functions/site/index.ts'), `sources relative to the project: ${map.sources.join(', ')}`);
  assert.equal(map.sourcesContent, undefined, 'no sources in it');
  const { run } = (await import(pathToFileURL(join(out, 'entry.mjs')).href)) as { run: () => string };
  const stack = run();
  assert.match(stack.split('\n')[1]!, /at reconcile \(functions\/site\/index\.ts:3:\d+\)/, stack);
});

test("a shared host's bundle serves each function on its path under its own key, and stops on SIGTERM", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-host-bundle-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const app = await hostBundle('pair', [join(repoRoot, 'functions', 'podset'), join(repoRoot, 'functions', 'project')], () => undefined, join(dir, 'work'));
  const keys = join(dir, 'keys');
  mkdirSync(keys);
  writeFileSync(join(keys, 'podset'), 'key-of-podset');
  writeFileSync(join(keys, 'project'), 'key-of-project');
  const port = await freePort();
  // No cluster: each delivery is answered before a reconcile would read it.
  const child = spawn(process.execPath, [join(app, 'fn.mjs')], { env: { ...process.env, PORT: String(port), KFN_AUTH_SECRET_DIR: keys, KUBECONFIG: join(dir, 'none') }, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (c) => (output += c));
  child.stderr.on('data', (c) => (output += c));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await waitFor('the host to listen', async () => output.includes('listening on') || undefined, { timeoutMs: 20_000, context: () => output });
  assert.match(output, new RegExp(`kfn host pair listening on :${port}, serving podset \\(PodSet\\) on /podset/, project \\(Project\\) on /project/`));
  assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);
  const event = (kind: 'PodSet' | 'Project', secret: string) => {
    const apiVersion = kind === 'PodSet' ? 'apps.jicki.cn/v1alpha1' : 'xyz.com/v1';
    const { message } = encodeReconcileEvent({ reconciler: kind.toLowerCase(), primary: { apiVersion, kind, namespace: 'demo', name: 'x', uid: `uid-${kind}` }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test', Date.now() + 30_000);
    return authenticate(message, { kind: 'hmac', secret });
  };
  const post = async (path: string, m: { headers: Record<string, string>; body: string }) => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: m.headers, body: m.body });
    return { status: res.status, error: ((await res.json()) as { error?: string }).error ?? '' };
  };
  const refused = await post('/project/', event('PodSet', 'key-of-podset'));
  assert.equal(refused.status, 401, "podset's delivery on project's path: project's key refuses it");
  assert.deepEqual(await post('/project/', event('PodSet', 'key-of-project')), { status: 400, error: 'this function reconciles xyz.com/v1 Project, not apps.jicki.cn/v1alpha1 PodSet' }, '/project/ is the project function, with its key');
  assert.deepEqual(await post('/podset/', event('Project', 'key-of-podset')), { status: 400, error: 'this function reconciles apps.jicki.cn/v1alpha1 PodSet, not xyz.com/v1 Project' }, '/podset/ is the podset function, with its key');
  const rss = readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m)?.[1];
  if (rss) t.diagnostic(`the host of two functions: ${(Number(rss) / 1024).toFixed(0)} MiB resident`);
  child.kill('SIGTERM');
  assert.equal(await exited, 0);
  assert.match(output, /kfn host pair: SIGTERM: taking no new requests[\s\S]*kfn host pair: stopped/);
});

