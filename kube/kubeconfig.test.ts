// kubectl's choice of cluster, checked on kubeconfig files in a temporary directory: which
// source wins, how several files of $KUBECONFIG merge, and what --context and -n change.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { parse, stringify } from 'yaml';
import { connectionFor, connectionFromKubeconfigText, loadConnection, NoClusterConfigured, resolveKubeconfig, type KubeconfigEnvironment } from './kubeconfig.ts';

interface Entries {
  current?: string;
  contexts?: Record<string, { cluster: string; user?: string; namespace?: string }>;
  clusters?: Record<string, Record<string, unknown>>;
  users?: Record<string, Record<string, unknown>>;
}

/** A scratch home with no kubeconfig, no $KUBECONFIG and no ServiceAccount: each test adds what it needs. */
function scratch(t: TestContext) {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-kubeconfig-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const env: KubeconfigEnvironment = { env: {}, home: join(dir, 'home'), serviceAccountDir: join(dir, 'serviceaccount') };
  const write = (path: string, e: Entries) => {
    mkdirSync(join(path, '..'), { recursive: true });
    const doc: Record<string, unknown> = {
      apiVersion: 'v1',
      kind: 'Config',
      contexts: Object.entries(e.contexts ?? {}).map(([name, context]) => ({ name, context })),
      clusters: Object.entries(e.clusters ?? {}).map(([name, cluster]) => ({ name, cluster })),
      users: Object.entries(e.users ?? {}).map(([name, user]) => ({ name, user })),
    };
    if (e.current) doc['current-context'] = e.current;
    writeFileSync(path, stringify(doc));
    return path;
  };
  return { dir, env, write, homeConfig: join(dir, 'home', '.kube', 'config') };
}

const one = (server: string, name = 'dev'): Entries => ({ current: name, contexts: { [name]: { cluster: name, user: name } }, clusters: { [name]: { server } }, users: { [name]: { token: `${name}-token` } } });

test('--kubeconfig wins over $KUBECONFIG and ~/.kube/config; a missing one is an error, not a fallback', (t) => {
  const s = scratch(t);
  const flag = s.write(join(s.dir, 'flag.yaml'), one('https://flag.example:6443'));
  s.env.env.KUBECONFIG = s.write(join(s.dir, 'env.yaml'), one('https://env.example:6443'));
  s.write(s.homeConfig, one('https://home.example:6443'));
  const chosen = resolveKubeconfig({ kubeconfig: flag }, s.env);
  assert.equal(chosen.server, 'https://flag.example:6443');
  assert.deepEqual(chosen.files, [flag]);
  assert.equal(chosen.via, '--kubeconfig');
  assert.throws(() => resolveKubeconfig({ kubeconfig: join(s.dir, 'nope.yaml') }, s.env), /kubeconfig .*nope\.yaml \(--kubeconfig\) does not exist/);
});

test('$KUBECONFIG wins over ~/.kube/config, which is read only when $KUBECONFIG is unset or empty', (t) => {
  const s = scratch(t);
  s.write(s.homeConfig, one('https://home.example:6443'));
  assert.equal(resolveKubeconfig({}, s.env).server, 'https://home.example:6443');
  assert.equal(resolveKubeconfig({}, s.env).via, '~/.kube/config');
  s.env.env.KUBECONFIG = '';
  assert.equal(resolveKubeconfig({}, s.env).server, 'https://home.example:6443');
  s.env.env.KUBECONFIG = s.write(join(s.dir, 'env.yaml'), one('https://env.example:6443'));
  assert.equal(resolveKubeconfig({}, s.env).server, 'https://env.example:6443');
  assert.equal(resolveKubeconfig({}, s.env).via, '$KUBECONFIG');
});

test('the files of $KUBECONFIG merge as kubectl merges them: the first to set a name wins, current-context from the first that sets it, missing files skipped', (t) => {
  const s = scratch(t);
  const a = s.write(join(s.dir, 'a.yaml'), {
    contexts: { shared: { cluster: 'c-a', user: 'u' } },
    clusters: { 'c-a': { server: 'https://a.example:6443' }, both: { server: 'https://first.example:6443' } },
    users: { u: { token: 'from-a' } },
  });
  const b = s.write(join(s.dir, 'b.yaml'), {
    current: 'from-b',
    contexts: { shared: { cluster: 'both', user: 'u' }, 'from-b': { cluster: 'both', user: 'u2', namespace: 'team-b' } },
    clusters: { both: { server: 'https://second.example:6443' } },
    users: { u: { token: 'from-b' }, u2: { token: 'u2-token' } },
  });
  const c = s.write(join(s.dir, 'c.yaml'), { current: 'shared' });
  s.env.env.KUBECONFIG = [a, join(s.dir, 'missing.yaml'), '', b, c].join(':');
  const chosen = resolveKubeconfig({}, s.env);
  assert.equal(chosen.context, 'from-b', "b's current-context: a sets none, and b comes before c");
  assert.equal(chosen.server, 'https://first.example:6443', "cluster 'both' as a.yaml names it");
  assert.equal(chosen.namespace, 'team-b');
  assert.deepEqual(chosen.files, [a, b, c]);
  const shared = resolveKubeconfig({ context: 'shared' }, s.env);
  assert.equal(shared.server, 'https://a.example:6443', "context 'shared' as a.yaml has it");
  assert.equal(tokenOf(shared.kubeconfig), 'from-a');
});

test('--context picks a context; the namespace comes from -n, else the context, else default', (t) => {
  const s = scratch(t);
  s.write(s.homeConfig, {
    current: 'prod',
    contexts: { prod: { cluster: 'prod', user: 'me', namespace: 'shop' }, dev: { cluster: 'dev', user: 'me' } },
    clusters: { prod: { server: 'https://prod.example:6443' }, dev: { server: 'https://dev.example:6443' } },
    users: { me: { token: 't' } },
  });
  assert.equal(resolveKubeconfig({}, s.env).namespace, 'shop');
  assert.equal(resolveKubeconfig({ namespace: 'other' }, s.env).namespace, 'other');
  const dev = resolveKubeconfig({ context: 'dev' }, s.env);
  assert.equal(dev.context, 'dev');
  assert.equal(dev.server, 'https://dev.example:6443');
  assert.equal(dev.namespace, 'default');
  assert.throws(() => resolveKubeconfig({ context: 'staging' }, s.env), /context "staging" is not in ~\/\.kube\/config \(its contexts: dev, prod\)/);
});

test('the chosen context alone, with every file it names made absolute, so that it works from anywhere; as JSON, which reads without the YAML parser', (t) => {
  const s = scratch(t);
  writeFileSync(join(s.dir, 'ca.crt'), 'CA');
  const path = s.write(join(s.dir, 'config'), { current: 'k', contexts: { k: { cluster: 'k', user: 'u' }, other: { cluster: 'k' } }, clusters: { k: { server: 'https://k.example:6443', 'certificate-authority': 'ca.crt' } }, users: { u: { tokenFile: 'token', exec: { command: './bin/plugin', args: [] } } } });
  const doc = JSON.parse(resolveKubeconfig({ kubeconfig: path }, s.env).kubeconfig) as { contexts: unknown[]; clusters: { cluster: Record<string, string> }[]; users: { user: { tokenFile: string; exec: { command: string } } }[]; 'current-context': string };
  assert.equal(doc.contexts.length, 1);
  assert.equal(doc['current-context'], 'k');
  assert.equal(doc.clusters[0]!.cluster['certificate-authority'], join(s.dir, 'ca.crt'));
  assert.equal(doc.users[0]!.user.tokenFile, join(s.dir, 'token'));
  assert.equal(doc.users[0]!.user.exec.command, join(s.dir, 'bin', 'plugin'));
});

test('with no kubeconfig anywhere: in-cluster when a ServiceAccount is mounted, else an error naming what was tried', (t) => {
  const s = scratch(t);
  s.env.env.KUBECONFIG = join(s.dir, 'gone.yaml');
  const err = (() => {
    try {
      resolveKubeconfig({}, s.env);
    } catch (e) {
      return e;
    }
  })();
  assert.ok(err instanceof NoClusterConfigured);
  assert.match(err.message, /no kubeconfig found: \$KUBECONFIG names .*gone\.yaml, which does not exist; not running in a cluster/);
  delete s.env.env.KUBECONFIG;
  assert.throws(() => resolveKubeconfig({}, s.env), /no kubeconfig found: ~\/\.kube\/config does not exist; not running in a cluster/);

  mkdirSync(s.env.serviceAccountDir, { recursive: true });
  writeFileSync(join(s.env.serviceAccountDir, 'token'), 'sa-token');
  writeFileSync(join(s.env.serviceAccountDir, 'ca.crt'), 'CA');
  writeFileSync(join(s.env.serviceAccountDir, 'namespace'), 'kfn-system');
  Object.assign(s.env.env, { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' });
  const inCluster = resolveKubeconfig({}, s.env);
  assert.equal(inCluster.via, 'in-cluster');
  assert.equal(inCluster.server, 'https://10.96.0.1:443');
  assert.equal(inCluster.namespace, 'kfn-system');
  assert.equal(inCluster.context, undefined);
  assert.deepEqual(inCluster.files, []);
  assert.equal((JSON.parse(inCluster.kubeconfig) as { users: { user: { tokenFile: string } }[] }).users[0]!.user.tokenFile, join(s.env.serviceAccountDir, 'token'), 'the in-cluster kubeconfig is JSON too: a function cold start reads no YAML');
  // A kubeconfig, when there is one, still comes first.
  s.write(s.homeConfig, one('https://home.example:6443'));
  assert.equal(resolveKubeconfig({}, s.env).via, '~/.kube/config');
});

test('a kubeconfig without a current context asks for --context, naming the contexts it has', (t) => {
  const s = scratch(t);
  s.write(s.homeConfig, { contexts: { a: { cluster: 'a' }, b: { cluster: 'a' } }, clusters: { a: { server: 'https://a.example' } } });
  assert.throws(() => resolveKubeconfig({}, s.env), /~\/\.kube\/config sets no current-context: pass --context \(one of: a, b\)/);
  s.write(s.homeConfig, { current: 'a', contexts: { a: { cluster: 'missing' } } });
  assert.throws(() => resolveKubeconfig({}, s.env), /context "a" in ~\/\.kube\/config names cluster "missing", which is not there/);
});

function tokenOf(kubeconfig: string): string | undefined {
  return (parse(kubeconfig) as { users: { user: { token?: string } }[] }).users[0]?.user.token;
}

// The connection of the chosen context: its cluster's server and CA, its user's credentials.

/** A kubeconfig file whose current context "c" has cluster "k" and user "u", with a CA and a token file beside it. */
function withUser(t: TestContext, user: Record<string, unknown>, cluster: Record<string, unknown> = { server: 'https://127.0.0.1:6443/', 'certificate-authority': 'ca.crt' }) {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-kc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'ca.crt'), 'CA PEM');
  writeFileSync(join(dir, 'token'), 'from-file\n');
  const path = join(dir, 'config');
  writeFileSync(
    path,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'c',
      contexts: [{ name: 'other', context: { cluster: 'x', user: 'x' } }, { name: 'c', context: { cluster: 'k', user: 'u' } }],
      clusters: [{ name: 'k', cluster }],
      users: [{ name: 'u', user }],
    }),
  );
  return path;
}

test('a token user of the current context, CA read relative to the kubeconfig', (t) => {
  const c = loadConnection(withUser(t, { token: 'abc' }));
  assert.equal(c.server, 'https://127.0.0.1:6443');
  assert.deepEqual(c.headers(), { Authorization: 'Bearer abc' });
});

test('a tokenFile is read (and trimmed); basic auth works too', (t) => {
  assert.deepEqual(loadConnection(withUser(t, { tokenFile: 'token' })).headers(), { Authorization: 'Bearer from-file' });
  assert.deepEqual(loadConnection(withUser(t, { username: 'u', password: 'p' })).headers(), { Authorization: `Basic ${Buffer.from('u:p').toString('base64')}` });
});

test('an exec credential plugin (as EKS, GKE and AKS use) gives the token; a failing plugin is a clear error', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-exec-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const plugin = join(dir, 'plugin.sh');
  // Counts its runs: the credential is cached until it expires, not fetched per request.
  writeFileSync(plugin, `#!/bin/sh\necho run >> ${join(dir, 'runs')}\necho '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"from-plugin","expirationTimestamp":"2999-01-01T00:00:00Z"}}'\n`, { mode: 0o755 });
  const c = loadConnection(withUser(t, { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, interactiveMode: 'Never' } }));
  assert.deepEqual(await c.headers(), { Authorization: 'Bearer from-plugin' });
  assert.deepEqual(await c.headers(), { Authorization: 'Bearer from-plugin' });
  assert.equal(readFileSync(join(dir, 'runs'), 'utf8').trim().split('\n').length, 1, 'one run while the credential is valid');
  const broken = loadConnection(withUser(t, { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: join(dir, 'missing-plugin'), interactiveMode: 'Never' } }));
  await assert.rejects(async () => broken.headers(), /kubeconfig .*config: the credential plugin of user u failed: /);
});

test('a kubeconfig in JSON reads as one in YAML, and so does one in YAML flow style, which also starts with a brace', (t) => {
  const path = withUser(t, { token: 'abc' });
  const doc = { apiVersion: 'v1', kind: 'Config', 'current-context': 'c', contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }], clusters: [{ name: 'k', cluster: { server: 'https://127.0.0.1:6443' } }], users: [{ name: 'u', user: { token: 'abc' } }] };
  writeFileSync(path, JSON.stringify(doc));
  assert.deepEqual(loadConnection(path).headers(), { Authorization: 'Bearer abc' });
  writeFileSync(path, stringify(doc, { collectionStyle: 'flow' }));
  assert.match(readFileSync(path, 'utf8'), /^\{\s*apiVersion: v1,/);
  assert.deepEqual(loadConnection(path).headers(), { Authorization: 'Bearer abc' });
  assert.deepEqual(connectionFromKubeconfigText(readFileSync(path, 'utf8'), 'flow').headers(), { Authorization: 'Bearer abc' });
});

test('missing files and contexts are clear errors, from a file and from a kubeconfig\'s text', (t) => {
  assert.throws(() => loadConnection('/nonexistent/kubeconfig'), /kubeconfig \/nonexistent\/kubeconfig \(--kubeconfig\) does not exist/);
  const path = withUser(t, { token: 'x' }, { 'certificate-authority-data': Buffer.from('CA').toString('base64') });
  assert.throws(() => loadConnection(path), /context "c" in .*config: cluster "k" in .*config has no server/);
  assert.throws(() => connectionFromKubeconfigText(readFileSync(path, 'utf8'), 'sa'), /kubeconfig sa: cluster k has no server/);
  assert.throws(() => connectionFromKubeconfigText('just words', 'sa'), /cannot read kubeconfig sa: not a YAML mapping/);
  assert.throws(() => connectionFromKubeconfigText(stringify({ 'current-context': 'gone', contexts: [] }), 'sa'), /kubeconfig sa has no current context named gone/);
});

test('in a pod, the chosen cluster connects with its ServiceAccount: the token file (re-read as it rotates) and the cluster CA', (t) => {
  const s = scratch(t);
  mkdirSync(s.env.serviceAccountDir, { recursive: true });
  writeFileSync(join(s.env.serviceAccountDir, 'token'), 'sa-token\n');
  writeFileSync(join(s.env.serviceAccountDir, 'ca.crt'), 'CA');
  Object.assign(s.env.env, { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' });
  const c = connectionFor(resolveKubeconfig({}, s.env));
  assert.equal(c.server, 'https://[fd00::1]:443');
  assert.equal(c.source, 'the in-cluster ServiceAccount');
  assert.deepEqual(c.headers(), { Authorization: 'Bearer sa-token' });
  rmSync(join(s.env.serviceAccountDir, 'ca.crt'));
  assert.throws(() => connectionFor(resolveKubeconfig({}, s.env)), /ca\.crt/, 'a CA that cannot be read fails the connection, not a request');
});

test('loadConnection prefers the given path, then $KUBECONFIG (the tests above have every rule)', (t) => {
  const path = withUser(t, { token: 'env' });
  const saved = process.env.KUBECONFIG;
  process.env.KUBECONFIG = `${path}:/other`;
  try {
    assert.deepEqual(loadConnection().headers(), { Authorization: 'Bearer env' });
    assert.equal(loadConnection(path).source, `context "c" in ${path}`);
  } finally {
    if (saved === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = saved;
  }
});
