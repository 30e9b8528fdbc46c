import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { applyNeeded, covers, type FieldSet } from './fields.ts';

// A Deployment as the apiserver returns it after kfn applied it as manager "kfn-web".
const owned: FieldSet = {
  'f:metadata': { 'f:labels': { '.': {}, 'f:app': {}, 'f:tier': {} } },
  'f:spec': {
    'f:template': {
      'f:spec': {
        'f:containers': {
          'k:{"name":"main"}': {
            '.': {},
            'f:name': {},
            'f:env': { 'k:{"name":"KEEP"}': { '.': {}, 'f:name': {}, 'f:value': {} } },
            'f:ports': { 'k:{"containerPort":80,"protocol":"TCP"}': { '.': {}, 'f:containerPort': {} } },
            'f:resources': { 'f:limits': { 'f:cpu': {} } },
          },
        },
      },
    },
  },
  'f:data': { 'f:finalizers': { 'v:"a"': {} } },
};
const desired = (over: { labels?: Record<string, string>; env?: unknown[]; ports?: unknown[]; limits?: unknown; finals?: string[] } = {}) => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'd', labels: over.labels ?? { app: 'x', tier: 't' } },
  spec: { template: { spec: { containers: [{ name: 'main', env: over.env ?? [{ name: 'KEEP', value: '1' }], ports: over.ports ?? [{ containerPort: 80 }], resources: { limits: over.limits ?? { cpu: '0.5' } } }] } } },
  data: { finalizers: over.finals ?? ['a'] },
});

describe('fields', () => {
  test('covers: every owned field is still desired', () => {
    assert.equal(covers(desired(), owned), true);
    assert.equal(covers(desired({ ports: [{ containerPort: 80, protocol: 'TCP' }] }), owned), true, 'a key field set explicitly matches too');
    assert.equal(covers(desired({ labels: { app: 'x' } }), owned), false, 'a dropped label');
    assert.equal(covers(desired({ env: [] }), owned), false, 'a dropped env var');
    assert.equal(covers(desired({ ports: [{ containerPort: 8080 }] }), owned), false, 'a list item with another key');
    assert.equal(covers(desired({ limits: { memory: '1Gi' } }), owned), false, 'a dropped limit');
    assert.equal(covers(desired({ finals: ['b'] }), owned), false, 'a dropped set value');
    assert.equal(covers({ spec: { template: { spec: { containers: 'nope' } } } }, { 'f:spec': { 'f:template': { 'f:spec': { 'f:containers': { 'k:{"name":"main"}': {} } } } } }), false);
    assert.equal(covers({ a: [1, 2] }, { 'f:a': { 'i:1': {} } }), true);
    assert.equal(covers({ a: [1] }, { 'f:a': { 'i:1': {} } }), false);
    assert.equal(covers({ a: 1 }, { 'x:odd': {} }), false, 'an unknown path form means apply');
  });

  test('applyNeeded: live fields, ownership, version, subresource', () => {
    const live = (fieldsV1: FieldSet, extra: Record<string, unknown> = {}) => ({
      metadata: { name: 'd', labels: { app: 'x', tier: 't' }, managedFields: [{ manager: 'kfn-web', operation: 'Apply', apiVersion: 'apps/v1', fieldsV1 }, { manager: 'kube-controller-manager', operation: 'Update', apiVersion: 'apps/v1', fieldsV1: { 'f:status': {} } }] },
      spec: { template: { spec: { containers: [{ name: 'main', env: [{ name: 'KEEP', value: '1' }], ports: [{ containerPort: 80, protocol: 'TCP' }], resources: { limits: { cpu: '500m' } } }] } } },
      data: { finalizers: ['a'] },
      ...extra,
    });
    assert.equal(applyNeeded(live(owned), desired(), 'kfn-web'), false, 'idle: nothing to write (0.5 = 500m)');
    assert.equal(applyNeeded(live(owned), desired({ labels: { app: 'x' } }), 'kfn-web'), true, 'a dropped field means apply');
    assert.equal(applyNeeded(live(owned), desired({ limits: { cpu: '1' } }), 'kfn-web'), true, 'a changed value means apply');
    assert.equal(applyNeeded(live(owned), desired(), 'someone-else'), true, 'never applied by this manager: apply once');
    assert.equal(applyNeeded(live(owned), { ...desired(), apiVersion: 'apps/v1beta1' }, 'kfn-web'), true, 'applied at another version: apply once');
    assert.equal(applyNeeded(undefined, desired(), 'kfn-web'), true, 'missing');
    const withStatus = { metadata: { name: 'p', managedFields: [{ manager: 'kfn-web', operation: 'Apply', apiVersion: 'g/v1', subresource: 'status', fieldsV1: { 'f:status': { 'f:note': {}, 'f:ready': {} } } }] }, status: { note: 'n', ready: true } };
    assert.equal(applyNeeded(withStatus, { apiVersion: 'g/v1', status: { note: 'n', ready: true } }, 'kfn-web', 'status'), false);
    assert.equal(applyNeeded(withStatus, { apiVersion: 'g/v1', status: { ready: true } }, 'kfn-web', 'status'), true, 'a dropped status field');
    assert.equal(applyNeeded(withStatus, { apiVersion: 'g/v1', status: { note: 'n', ready: true } }, 'kfn-web'), true, 'the main resource has no Apply entry');
  });
});
