// A shared host's steps against an apiserver held in memory: its name, the functions its
// ServiceAccount serves, the host serving a function, and what a function that left it loses.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubeObject } from '../kube/api.ts';
import { ObjectsByPath } from '../test/support/objects-by-path.ts';
import { hostFunctions, hostName, releaseFromHost, servingHost } from './hosts.ts';

const ns = 'kfn-system';
const rbac = '/apis/rbac.authorization.k8s.io/v1';
const labels = (fn: string) => ({ 'app.kubernetes.io/managed-by': 'kfn', 'kfn.dev/function': fn });
const toHost = [{ kind: 'ServiceAccount', name: 'kfn-host-ops', namespace: ns }];

const account = (serves: string): KubeObject => ({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'kfn-host-ops', namespace: ns, annotations: { 'kfn.dev/identity-for': serves } } });

describe("a shared host's steps", () => {
  test('a host name makes valid object names, or is refused saying what it must be', () => {
    assert.equal(hostName('deploy', 'ops-2'), 'ops-2');
    for (const bad of ['Ops', '2ops', 'ops-', 'o_ps', 'x'.repeat(55)]) assert.throws(() => hostName('deploy', bad), /kfn deploy: --host must be a lowercase name .* at most 54 characters \(its objects are named kfn-host-<host>\)/);
  });

  test('the functions a host serves, and the host serving a function, from its ServiceAccount', async () => {
    const api = new ObjectsByPath({ [`/api/v1/namespaces/${ns}/serviceaccounts/kfn-host-ops`]: account('podset, project') });
    assert.deepEqual(await hostFunctions(api, ns, 'ops'), ['podset', 'project']);
    assert.deepEqual(await hostFunctions(api, ns, 'other'), [], 'no account: no functions');
    assert.equal(await servingHost(api, ns, 'kfn-host-ops', 'project'), 'ops');
    assert.equal(await servingHost(api, ns, 'kfn-host-ops', 'myweb'), undefined, 'an account that no longer lists it');
    assert.equal(await servingHost(api, ns, 'kfn-fn-project', 'project'), undefined, 'its own account');
  });

  test('a function that left the host loses the bindings kfn made for it to the host\'s account, and no other', async () => {
    const binding = (kind: string, name: string, namespace: string | undefined, subjects: object[]): KubeObject => ({ apiVersion: 'rbac.authorization.k8s.io/v1', kind, metadata: { name, ...(namespace ? { namespace } : {}), labels: labels('project') }, subjects } as KubeObject);
    const paths = {
      cluster: `${rbac}/clusterrolebindings/kfn-fn-project:${ns}`,
      teamA: `${rbac}/namespaces/team-a/rolebindings/kfn-fn-project:${ns}`,
      own: `${rbac}/namespaces/team-b/rolebindings/kfn-fn-project:other`,
      bridge: `${rbac}/clusterrolebindings/kfn-bridge-project:${ns}`,
    };
    const api = new ObjectsByPath({
      [paths.cluster]: binding('ClusterRoleBinding', `kfn-fn-project:${ns}`, undefined, toHost),
      [paths.teamA]: binding('RoleBinding', `kfn-fn-project:${ns}`, 'team-a', toHost),
      [paths.own]: binding('RoleBinding', 'kfn-fn-project:other', 'team-b', [{ kind: 'ServiceAccount', name: 'kfn-fn-project', namespace: 'other' }]),
      [paths.bridge]: binding('ClusterRoleBinding', `kfn-bridge-project:${ns}`, undefined, [{ kind: 'ServiceAccount', name: 'kfn-bridge', namespace: ns }]),
    });
    const said: string[] = [];
    await releaseFromHost(api, ns, 'ops', 'project', (l) => said.push(l));
    assert.deepEqual(api.deleted.sort(), [paths.cluster, paths.teamA].sort());
    assert.match(said.join('\n'), /project is no longer served by host ops: its rights were taken from the host's identity/);
  });
});
