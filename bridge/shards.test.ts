// Sharding: which shard a key is in, which shard a replica goes for first, and a bridge that
// delivers only the keys of the shards it holds — and all of a shard's keys once it takes it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startReceiver } from '../test/support/receiver.ts';
import { Bridge } from './bridge.ts';
import { FakeClock } from '../core/clock.ts';
import { parseReconciler } from './config.ts';
import { FakeApiServer, until } from '../test/support/fake-apiserver.ts';
import { KeptShards, preferredShard, shardOf } from './shards.ts';

const quiet = { info() {}, warn() {}, error() {} };

test('a key is always in the same shard, and keys spread evenly over the shards', () => {
  assert.equal(shardOf('default/web', 3), shardOf('default/web', 3));
  const counts = [0, 0, 0];
  for (let i = 0; i < 3000; i++) counts[shardOf(`ns-${i % 7}/object-${i}`, 3)]!++;
  for (const n of counts) assert.ok(n > 900 && n < 1100, `evenly: ${counts.join(', ')}`);
  assert.equal(shardOf('anything', 1), 0);
});

test('a replica goes first for --shard, else its pod name\'s ordinal, else for none', () => {
  assert.equal(preferredShard(3, 2, 'kfn-bridge-0'), 2);
  assert.equal(preferredShard(3, undefined, 'kfn-bridge-1'), 1);
  assert.equal(preferredShard(3, undefined, 'kfn-bridge-4'), 1, 'more replicas than shards: by the ordinal modulo the shards');
  assert.equal(preferredShard(3, undefined, 'kfn-bridge-7d9f-abcde'), undefined, 'a Deployment pod name has no ordinal');
  assert.throws(() => preferredShard(3, 3, undefined), /--shard must be a whole number from 0 to 2, not 3/);
});

test('a sharded bridge delivers only its shards\' keys, and all of a shard\'s keys once it takes it', async (t) => {
  const server = new FakeApiServer();
  const receiver = await startReceiver(t, { kind: 'none' });
  const held = new Set<number>([0]);
  const bridge = new Bridge({ api: server.api(), log: quiet, clock: new FakeClock(Date.now()), watcher: { backoffMs: [1, 2] }, owns: (key) => held.has(shardOf(key, 2)) });
  t.after(() => bridge.stop(1000));
  const names = Array.from({ length: 20 }, (_, i) => `w${i}`);
  for (const name of names) server.put(name);
  const config = parseReconciler({ metadata: { name: 'widgets' }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: receiver.url } } });
  await bridge.setReconcilers([config]);
  const shard = (name: string) => shardOf(`ns/${name}`, 2); // the fake apiserver's namespace
  const mine = names.filter((n) => shard(n) === 0);
  const theirs = names.filter((n) => shard(n) === 1);
  assert.ok(mine.length > 0 && theirs.length > 0, 'both shards have keys');
  // The queue at rest — nothing ready, nothing in flight, nothing waiting — has nothing more to deliver.
  const atRest = () =>
    until('the queue at rest', () => {
      const q = bridge.runtime('widgets')!.queue;
      return q.length === 0 && q.inFlight === 0 && q.delayed === 0 ? true : undefined;
    });
  await until('shard 0 delivered', () => (mine.every((n) => receiver.of(n).length > 0) ? true : undefined));
  await atRest();
  assert.deepEqual(theirs.filter((n) => receiver.of(n).length > 0), [], 'nothing of shard 1 delivered');
  // A change in shard 1 is not delivered either while the shard is another replica's.
  server.put(theirs[0]!, { generation: 2 });
  const watch = bridge.watchOf({ apiVersion: 'example.com/v1', kind: 'Widget' })!;
  await until('the change seen', () => (watch.store.get(`ns/${theirs[0]}`)?.metadata.generation === 2 ? true : undefined));
  await atRest();
  assert.equal(receiver.of(theirs[0]!).length, 0);
  // Taking shard 1 over: every key in it is delivered, once.
  held.add(1);
  assert.equal(bridge.redeliver((key) => shardOf(key, 2) === 1), theirs.length);
  await until('shard 1 delivered', () => (theirs.every((n) => receiver.of(n).length > 0) ? true : undefined));
  await atRest();
  for (const n of theirs) assert.equal(receiver.of(n).length, 1, `${n} once`);
  for (const n of mine) assert.equal(receiver.of(n).length, 1, `${n} not again`);
});

test('a sharded bridge keeps the records of its shards alone; taking a shard over lists it in and delivers each of its keys once', async (t) => {
  const server = new FakeApiServer();
  const receiver = await startReceiver(t, { kind: 'none' });
  const held = new Set<number>([0]);
  const kept = new KeptShards(2, 0);
  const bridge = new Bridge({ api: server.api(), log: quiet, clock: new FakeClock(Date.now()), watcher: { backoffMs: [1, 2] }, owns: (key) => held.has(shardOf(key, 2)), keeps: (key) => kept.keeps(key) });
  t.after(() => bridge.stop(1000));
  const names = Array.from({ length: 20 }, (_, i) => `w${i}`);
  for (const name of names) server.put(name);
  const spec = (name: string) => parseReconciler({ metadata: { name }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: `${receiver.url}` } } });
  await bridge.setReconcilers([spec('widgets')]);
  const shard = (name: string) => shardOf(`ns/${name}`, 2);
  const mine = names.filter((n) => shard(n) === 0);
  const theirs = names.filter((n) => shard(n) === 1);
  await until('shard 0 delivered', () => (mine.every((n) => receiver.of(n).length > 0) ? true : undefined));
  const watch = bridge.watchOf({ apiVersion: 'example.com/v1', kind: 'Widget' })!;
  assert.deepEqual([...watch.store.keys()].sort(), mine.map((n) => `ns/${n}`).sort(), 'records of shard 0 alone');
  // Taking shard 1 over: its records are listed in, and each of its keys delivered once.
  held.add(1);
  assert.equal(kept.add(1), true, 'shard 1 was not kept');
  assert.equal(kept.add(1), false);
  bridge.relistWatches();
  bridge.redeliver((key) => shardOf(key, 2) === 1);
  await until('shard 1 delivered', () => (theirs.every((n) => receiver.of(n).length > 0) ? true : undefined));
  await until('every record', () => (watch.store.size === names.length ? true : undefined));
  await until('the queue at rest', () => {
    const q = bridge.runtime('widgets')!.queue;
    return q.length === 0 && q.inFlight === 0 && q.delayed === 0 ? true : undefined;
  });
  for (const n of theirs) assert.equal(receiver.of(n).length, 1, `${n} once`);
  for (const n of mine) assert.equal(receiver.of(n).length, 1, `${n} not again`);
});
