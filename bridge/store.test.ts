import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WatchStore, type WatchEvent } from './store.ts';
import type { KubeObject } from '../kube/api.ts';

const configMap = (name: string, resourceVersion = '1'): KubeObject => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion } });

test("a list's intake lets go of its marks once the list ends (a streaming list's intake lives on with its watch)", () => {
  const store = new WatchStore({ apiVersion: 'v1', kind: 'ConfigMap' }, 'metadata', undefined, undefined);
  const told: WatchEvent[] = [];
  const tell = (e: WatchEvent) => told.push(e);
  const first = store.beginList();
  for (let i = 0; i < 100; i++) first.take(configMap(`c${i}`), tell);
  assert.equal(first.marked, 100);
  assert.equal(first.end(tell), 100, 'the objects it named');
  assert.equal(first.marked, 0, 'no mark kept once it ended');
  // The next list still sweeps what it did not name, and keeps what it did.
  const second = store.beginList();
  for (let i = 0; i < 50; i++) second.take(configMap(`c${i}`), tell);
  told.length = 0;
  assert.equal(second.end(tell), 50);
  assert.equal(told.filter((e) => e.type === 'delete').length, 50, 'the other 50 told as deleted');
  assert.equal(store.byKey.size, 50);
});
