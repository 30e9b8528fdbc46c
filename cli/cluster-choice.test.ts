// The CLI's choice of cluster as a user meets it, through `kfn diff` and `kfn manifests --apply`
// run as processes: the one line that says which cluster before anything is done, --context
// picking another context of the same kubeconfig, and one message when no cluster can be used
// (what was tried, and the two ways on) — never a start of kfn's own cluster. Each server is a
// loopback one the test starts; HOME and kfn's cluster directory are scratch directories.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { repoRoot } from '../cluster/paths.ts';

function scratch(t: TestContext) {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-choice-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `kfn <args>` with HOME and kfn's cluster directory in `dir`, and no $KUBECONFIG. */
async function kfn(dir: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: join(dir, 'home'), KFN_CLUSTER_DIR: join(dir, 'cluster') };
  delete env.KUBECONFIG;
  delete env.KUBERNETES_SERVICE_HOST;
  delete env.KFN_DEBUG;
  return promisify(execFile)(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { cwd: repoRoot, env, timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, stdout: err.stdout, stderr: err.stderr }),
  );
}

/** An apiserver stand-in that answers /version, and 404 for everything else. */
async function answering(t: TestContext): Promise<string> {
  const server: Server = createServer((req, res) => {
    res.writeHead(req.url === '/version' ? 200 : 404, { 'Content-Type': 'application/json' });
    res.end(req.url === '/version' ? '{"gitVersion":"v1.34.0"}' : JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404, message: 'not found' }));
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A port nothing listens on. */
async function refusing(): Promise<string> {
  const server = createServer();
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((done) => server.close(() => done()));
  return `https://127.0.0.1:${port}`;
}

/** A kubeconfig of two contexts: "broken" (current) and "good". */
function twoContexts(path: string, broken: string, good: string): string {
  writeFileSync(
    path,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'broken',
      contexts: [
        { name: 'broken', context: { cluster: 'broken', user: 'me' } },
        { name: 'good', context: { cluster: 'good', user: 'me', namespace: 'team' } },
      ],
      clusters: [
        { name: 'broken', cluster: { server: broken } },
        { name: 'good', cluster: { server: good } },
      ],
      users: [{ name: 'me', user: { token: 't' } }],
    }),
  );
  return path;
}

test('with no kubeconfig anywhere, a command says so, names what it tried and the two ways on, and starts nothing', async (t) => {
  const dir = scratch(t);
  const out = await kfn(dir, 'diff', 'functions/myweb', 'default/hello');
  assert.equal(out.code, 1);
  assert.equal(out.stderr.trim().split('\n').length, 1, `one line: ${out.stderr}`);
  assert.match(out.stderr, /^kfn: no cluster to use: no kubeconfig found: ~\/\.kube\/config does not exist; not running in a cluster \(KUBERNETES_SERVICE_HOST is not set\); kfn's local cluster is not running\. To go on, point kfn at your cluster \(--kubeconfig, --context or \$KUBECONFIG\), or use kfn's own local cluster: `(npx kfn|npm run kfn --) cluster up`, then --local-cluster\n$/);
});

test("~/.kube/config is read; its current context refusing is one line after the line that names it; --context picks the other", async (t) => {
  const dir = scratch(t);
  const good = await answering(t);
  const broken = await refusing();
  mkdirSync(join(dir, 'home', '.kube'), { recursive: true });
  twoContexts(join(dir, 'home', '.kube', 'config'), broken, good);
  const refused = await kfn(dir, 'diff', 'functions/myweb', 'hello');
  assert.equal(refused.code, 1);
  const lines = refused.stderr.trim().split('\n');
  assert.equal(lines[0], `Using context "broken" (server ${broken}) from ~/.kube/config, in namespace default`);
  assert.match(lines[1]!, new RegExp(`^kfn: the server refused the connection \\(context "broken" in ~/\\.kube/config, server ${broken.replace(/\./g, '\\.')}\\): check that the cluster is running and that the server address is right\\. Or point kfn at your cluster`));
  assert.equal(lines.length, 2);

  const other = await kfn(dir, 'diff', 'functions/myweb', 'hello', '--context', 'good');
  // The object's namespace is the context's (team) when the object names none; the line says it.
  assert.equal(other.stderr.split('\n')[0], `Using context "good" (server ${good}) from ~/.kube/config, in namespace team`);
  assert.match(other.stderr, /there is no MyWeb team\/hello/);
  // -n, as kubectl's: the namespace the command acts in; an object's own namespace wins.
  assert.equal((await kfn(dir, 'diff', 'functions/myweb', 'hello', '--context', 'good', '-n', 'ops')).stderr.split('\n')[0], `Using context "good" (server ${good}) from ~/.kube/config, in namespace ops`);
  assert.equal((await kfn(dir, 'diff', 'functions/myweb', 'shop/hello', '--context', 'good', '-n', 'ops')).stderr.split('\n')[0], `Using context "good" (server ${good}) from ~/.kube/config, in namespace shop`);
});

test('the commands that act in kfn\'s namespace say it on the line: -n, else kfn-system, not the context\'s', async (t) => {
  const dir = scratch(t);
  const good = await answering(t);
  const file = twoContexts(join(dir, 'kubeconfig'), await refusing(), good);
  for (const args of [['manifests', 'functions/myweb', '--apply'], ['undeploy', 'functions/myweb'], ['deploy', 'functions/myweb', '--no-typecheck'], ['dev', 'functions/myweb', '--no-typecheck', '--port', '0'], ['replay', 'cluster:myweb', '--object', 'shop/hello']]) {
    const out = await kfn(dir, ...args, '--kubeconfig', file, '--context', 'good');
    assert.equal(out.stderr.split('\n').find((l) => l.startsWith('Using ')), `Using context "good" (server ${good}) from ${file}, in namespace kfn-system`, `kfn ${args.join(' ')}:\n${out.stderr}`);
    const elsewhere = await kfn(dir, ...args, '--kubeconfig', file, '--context', 'good', '-n', 'ops');
    assert.equal(elsewhere.stderr.split('\n').find((l) => l.startsWith('Using ')), `Using context "good" (server ${good}) from ${file}, in namespace ops`, `kfn ${args.join(' ')} -n ops:\n${elsewhere.stderr}`);
  }
});

test('kfn manifests --apply takes --kubeconfig and --context the same way; a bad --context names the contexts there are', async (t) => {
  const dir = scratch(t);
  const file = twoContexts(join(dir, 'kubeconfig'), await refusing(), await answering(t));
  const out = await kfn(dir, 'manifests', 'functions/myweb', '--apply', '--kubeconfig', file, '--context', 'nope');
  assert.equal(out.code, 1);
  assert.match(out.stderr, /^kfn: context "nope" is not in .*kubeconfig \(its contexts: broken, good\)\n$/);
});
