// kubectl's choice of cluster, checked on kubeconfig files in a temporary directory: which
// source wins, how several files of $KUBECONFIG merge, and what --context and -n change.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { parse, stringify } from 'yaml';
import { NoClusterConfigured, resolveKubeconfig, type KubeconfigEnvironment } from './kubeconfig.ts';

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
