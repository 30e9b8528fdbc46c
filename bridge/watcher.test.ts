import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FakeApiServer, until } from '../test/support/fake-apiserver.ts';
import { FakeClock } from '../core/clock.ts';
import { ApiError } from '../kube/api.ts';
import { Watcher } from './watcher.ts';
import { WatchStore, type WatchEvent } from './store.ts';
import { StreamedList } from './lists.ts';

/** A watcher on a fake clock: its backoff waits and its watchdog move only when the test says. */
function watcherOn(server: FakeApiServer, options: Partial<ConstructorParameters<typeof Watcher>[2]> = {}, api = server.api()) {
  const events: WatchEvent[] = [];
  const problems: (string | undefined)[] = [];
  const clock = new FakeClock();
  const w = new Watcher(api, server.resource, { projection: 'metadata', backoffMs: [1000, 2000], clock, random: () => 0.5, onProblem: (p) => problems.push(p), ...options });
  w.subscribe((e) => events.push(e));
  w.start();
  return { w, events, problems, clock };
}

/** The fake's api with its lists held while `hold()` is in force: a relist the test stops half-way. */
function holdingLists(server: FakeApiServer) {
  const api = server.api();
  const request = api.request.bind(api);
  let holding = false;
  const held: (() => void)[] = [];
  api.request = (async (...args: Parameters<typeof request>) => {
    if (holding) await new Promise<void>((resolve) => held.push(resolve));
    return request(...args);
  }) as typeof api.request;
  return {
    api,
    hold: () => void (holding = true),
    release: () => {
      holding = false;
      for (const resolve of held.splice(0)) resolve();
    },
    get held() {
      return held.length;
    },
  };
}

const names = (events: WatchEvent[], type: WatchEvent['type']) => events.filter((e) => e.type === type).map((e) => ('object' in e ? e.object.metadata.name : ''));

describe('Watcher', () => {
  test('a list page larger than maxPageBytes is asked for again with fewer objects, and the smaller size is kept', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 40; i++) server.put(`big-${i}`, { annotations: { note: 'x'.repeat(10_000) } });
    const logs: string[] = [];
    const { w } = watcherOn(server, { lists: 'pages', maxPageBytes: 64 * 1024, log: (_level, msg) => logs.push(msg) });
    t.after(() => w.stop());
    await until('the list', () => (w.hasSynced ? true : undefined));
    assert.equal(w.store.size, 40, 'every object listed');
    const limits = server.requests.filter((r) => r.method === 'GET' && !r.query.watch).map((r) => Number(r.query.limit));
    assert.deepEqual(limits.slice(0, 4), [500, 250, 125, 62], 'halved until a page fits');
    assert.ok(limits.every((l, i) => i === 0 || l <= limits[i - 1]!), 'never larger again within the list');
    assert.ok(logs.some((m) => /a list page was larger than 65536 bytes: asking for \d+ objects a page/.test(m)));
  });

  test('a metadata watch keeps a compact record of each object; a full watch keeps the object', async (t) => {
    const server = new FakeApiServer();
    const meta = { labels: { app: 'web' }, annotations: { big: 'x'.repeat(2000) }, creationTimestamp: '2026-01-01T00:00:00Z', generation: 2 };
    server.put('a', meta);
    const compact = watcherOn(server);
    const full = watcherOn(server, { projection: 'full' });
    t.after(() => Promise.all([compact.w.stop(), full.w.stop()]));
    await until('both lists', () => (compact.w.hasSynced && full.w.hasSynced ? true : undefined));
    const record = compact.w.store.get('ns/a')!;
    assert.equal(record.metadata.annotations, undefined);
    assert.equal(record.metadata.creationTimestamp, undefined);
    assert.deepEqual([record.kind, record.metadata.uid, record.metadata.generation, record.metadata.labels], ['Widget', 'uid-a', 2, { app: 'web' }]);
    assert.equal(full.w.store.get('ns/a')!.metadata.annotations?.big?.length, 2000);
    // What the event hands on: the object as sent, and the record as the previous version.
    server.put('a', { ...meta, generation: 3 });
    const update = await until('the update', () => compact.events.find((e) => e.type === 'apply' && e.old));
    assert.ok(update.type === 'apply' && update.object.metadata.annotations?.big && update.old?.metadata.annotations === undefined);
    assert.equal(update.key, 'ns/a');
  });

  test('lists page by page (continue tokens), then watches from the list\'s resourceVersion', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 7; i++) server.put(`w${i}`);
    const { w, events } = watcherOn(server, { lists: 'pages', pageSize: 3 });
    t.after(() => w.stop());
    await until('the first list', () => (w.hasSynced ? true : undefined));
    const lists = server.requests.filter((r) => r.method === 'GET');
    assert.deepEqual(lists.map((r) => [r.query.limit, r.query.continue]), [[3, undefined], [3, '3'], [3, '6']], 'three pages of at most 3');
    assert.equal(w.store.size, 7);
    assert.deepEqual(names(events, 'apply').sort(), ['w0', 'w1', 'w2', 'w3', 'w4', 'w5', 'w6']);
    await until('the watch', () => (server.openWatches === 1 ? true : undefined));
    assert.equal(server.requests.at(-1)!.query.resourceVersion, '8', 'from the list\'s resourceVersion');
  });

  test('a list applies each page as it comes (no second copy of the objects): page 1 is in the store before page 2 is asked for', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 7; i++) server.put(`w${i}`);
    const pagesAsked: number[] = [];
    const w = new Watcher(server.api(), server.resource, { projection: 'metadata', lists: 'pages', backoffMs: [1, 2], pageSize: 3 });
    w.subscribe((e) => {
      if (e.type === 'apply') pagesAsked.push(server.requests.filter((r) => r.method === 'GET').length);
    });
    w.start();
    t.after(() => w.stop());
    await until('the first list', () => (w.hasSynced ? true : undefined));
    assert.deepEqual(pagesAsked, [1, 1, 1, 2, 2, 2, 3], 'each object applied when its own page had come, before the next was asked for');
  });

  for (const lists of ['stream', 'pages'] as const) {
    test(`a watch the apiserver ends resumes from the last bookmark, without listing again (${lists})`, async (t) => {
      const server = new FakeApiServer();
      server.put('a');
      const { w } = watcherOn(server, { lists });
      t.after(() => w.stop());
      await until('the watch', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
      server.put('b');
      const mark = server.bookmark();
      server.endWatches();
      await until('the watch to resume', () => (server.requests.filter((r) => r.method === 'WATCH').length === 2 && server.openWatches === 1 ? true : undefined));
      assert.equal(server.requests.at(-1)!.query.resourceVersion, mark, 'resumed at the bookmark');
      assert.equal(w.stats.lists, 1, 'no second list');
      assert.equal(w.store.size, 2);
    });

    test(`410 Gone relists: what changed meanwhile is applied, what vanished is a delete (${lists})`, async (t) => {
      const server = new FakeApiServer();
      for (const n of ['keep', 'change', 'vanish']) server.put(n);
      const { w, events } = watcherOn(server, { lists });
      t.after(() => w.stop());
      await until('the watch', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
      // While the watch is cut off: changes nobody streams, then a compaction.
      server.endWatches({ code: 410, message: 'too old resource version' });
      server.put('change', { labels: { v: '2' } });
      server.remove('vanish', 'ns', true);
      const before = events.length;
      await until('the relist', () => (events.slice(before).some((e) => e.type === 'synced' && e.relist) ? true : undefined));
      const fresh = events.slice(before);
      assert.deepEqual(names(fresh, 'apply'), ['change'], 'only the changed object is re-applied');
      assert.deepEqual(fresh.filter((e) => e.type === 'delete').map((e) => [(e as { object: { metadata: { name: string } } }).object.metadata.name, (e as { inferred: boolean }).inferred]), [['vanish', true]]);
      assert.equal(w.stats.gone, 1);
    });

    test(`a namespace and a label selector go to the apiserver; the kind going away is a problem until it is back (${lists})`, async (t) => {
      const server = new FakeApiServer();
      server.put('mine', { labels: { 'app.kubernetes.io/managed-by': 'kfn' } }, 'team-a');
      server.put('other-ns', { labels: { 'app.kubernetes.io/managed-by': 'kfn' } }, 'team-b');
      server.put('unlabelled', {}, 'team-a');
      const { w, problems, clock } = watcherOn(server, { lists, namespace: 'team-a', labelSelector: 'app.kubernetes.io/managed-by=kfn' });
      t.after(() => w.stop());
      await until('the watch', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
      assert.deepEqual([...w.store.keys()], ['team-a/mine']);
      assert.match(server.requests[0]!.path, /\/namespaces\/team-a\/widgets$/);
      assert.equal(server.requests[0]!.query.labelSelector, 'app.kubernetes.io/managed-by=kfn');
      // The CRD is deleted: the watch ends, and 404s come back until it is served again.
      server.served = false;
      server.endWatches();
      await until('the problem to be reported', () => (problems.at(-1) ? true : undefined));
      assert.match(problems.at(-1)!, /the API no longer serves example\.com\/v1 Widget in namespace team-a \(was its CRD deleted\?\)/);
      server.served = true;
      await until('the backoff wait', () => (clock.pendingTimers() > 0 ? true : undefined));
      assert.equal(problems.at(-1) === undefined, false, 'no retry before the backoff has passed');
      clock.advance(1000); // the first backoff: 1000 ms × (0.5 + 0.5 × 0.5), jittered
      await until('the problem to clear', () => (problems.length >= 2 && problems.at(-1) === undefined ? true : undefined));
    });

    test(`a watch that failed is failing until the apiserver accepts it again: its store is not vouched for meanwhile (${lists})`, async (t) => {
      const server = new FakeApiServer();
      server.put('a');
      const { w, clock } = watcherOn(server, { lists });
      t.after(() => w.stop());
      await until('the watch', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
      assert.equal(w.failing, false);
      server.endWatches({ code: 500, message: 'etcd leader changed' });
      await until('the failure', () => (w.failing ? true : undefined));
      await until('the backoff wait', () => (clock.pendingTimers() > 0 ? true : undefined));
      clock.advance(1000);
      await until('the watch again', () => (server.openWatches === 1 ? true : undefined));
      assert.equal(w.failing, false, 'accepted again: as current as a watch that never broke');
    });
  }

  for (const via of ['a watch ERROR line', 'the answer to a watch request'] as const) {
    test(`a 410 Gone as ${via}: the store is not vouched for until the relist has completed`, async (t) => {
      const server = new FakeApiServer();
      server.put('a');
      const lists = holdingLists(server);
      const { w, events } = watcherOn(server, { lists: 'pages' }, lists.api);
      t.after(() => {
        lists.release();
        return w.stop();
      });
      await until('the watch', () => (server.openWatches === 1 ? true : undefined));
      assert.equal(w.failing, false);
      lists.hold();
      if (via === 'a watch ERROR line') server.endWatches({ code: 410, message: 'too old resource version' });
      else {
        // The watch ends; resuming it is refused: its version was compacted meanwhile.
        server.compactedBelow = Number(server.currentVersion) + 1;
        server.endWatches();
      }
      await until('the relist to be under way', () => (lists.held > 0 ? true : undefined));
      assert.equal(w.stats.gone, 1);
      assert.equal(w.failing, true, 'during the relist the store may hold what no longer exists');
      server.put('b'); // past the compaction: the watch after the relist is accepted
      lists.release();
      await until('the relist', () => (events.some((e) => e.type === 'synced' && e.relist) ? true : undefined));
      await until('the watch again', () => (server.openWatches === 1 ? true : undefined));
      assert.equal(w.failing, false, 'relisted: current again');
      assert.ok(w.store.has('ns/b'));
    });
  }

  test('a store that keeps some objects tells every event, and a relist brings in what it keeps once it keeps more', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 6; i++) server.put(`w${i}`, { labels: { shard: String(i % 2) } });
    const kept = new Set(['0']);
    const { w, events } = watcherOn(server, { keeps: (object) => kept.has(object.metadata.labels?.shard ?? '') });
    t.after(() => w.stop());
    await until('the list', () => (w.hasSynced ? true : undefined));
    assert.deepEqual([...w.store.keys()].sort(), ['ns/w0', 'ns/w2', 'ns/w4'], 'only shard 0 kept');
    assert.equal(names(events, 'apply').length, 6, 'every object told');
    assert.deepEqual(events.filter((e) => e.type === 'apply' && e.kept === false).map((e) => 'object' in e && e.object.metadata.name).sort(), ['w1', 'w3', 'w5']);
    // A kept object that no longer is kept is let go; the event still carries what was held.
    server.put('w0', { labels: { shard: '1' } });
    const moved = await until('w0 moved', () => events.find((e) => e.type === 'apply' && e.object.metadata.name === 'w0' && e.old));
    assert.ok(moved.type === 'apply' && moved.kept === false);
    assert.equal(w.store.has('ns/w0'), false);
    // Keeping shard 1 too: a relist brings its objects in, told as what was there (listingWhatIs).
    const lists = w.stats.lists;
    const seenWhileListing: boolean[] = [];
    w.subscribe((e) => e.type === 'apply' && seenWhileListing.push(w.listingWhatIs));
    kept.add('1');
    events.length = 0;
    w.relist();
    await until('the relist', () => (events.some((e) => e.type === 'synced' && e.relist) ? true : undefined));
    assert.ok(w.stats.lists > lists && w.store.size === 6);
    assert.deepEqual(names(events, 'apply').sort(), ['w0', 'w1', 'w3', 'w5'], 'the objects not kept before, as new');
    assert.ok(seenWhileListing.length === 4 && seenWhileListing.every(Boolean), 'told while listing what is');
    assert.equal(w.listingWhatIs, false, 'and not after');
    // The watch goes on: a change after the relist is a change.
    server.put('w7', { labels: { shard: '1' } });
    await until('w7', () => (w.store.has('ns/w7') ? true : undefined));
    assert.equal(names(events, 'delete').length, 0, 'nothing taken for deleted');
  });

  test('relist() lists only when the store has left something out since its last list', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 3; i++) server.put(`w${i}`);
    const kept = new Set(['w0', 'w1', 'w2']);
    const { w } = watcherOn(server, { keeps: (object) => kept.has(object.metadata.name) });
    t.after(() => w.stop());
    await until('the list', () => (w.hasSynced ? true : undefined));
    const lists = w.stats.lists;
    w.relist();
    server.put('w0', { generation: 2 });
    await until('the change', () => (w.store.get('ns/w0')?.metadata.generation === 2 ? true : undefined));
    assert.equal(w.stats.lists, lists, 'everything kept: nothing to list again');
    // One left out (w3 not kept yet): now a relist lists, and brings it in.
    server.put('w3');
    await until('w3 seen', () => (w.stats.events >= 2 ? true : undefined));
    kept.add('w3');
    w.relist();
    await until('the relist', () => (w.store.has('ns/w3') ? true : undefined));
    assert.equal(w.stats.lists, lists + 1);
  });
  test('a streaming list: one request and no LIST, each object applied as it comes, synced at the bookmark, whose version the watch goes on from', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 5; i++) server.put(`w${i}`);
    const { w, events } = watcherOn(server);
    t.after(() => w.stop());
    await until('the first object', () => (w.store.size > 0 ? true : undefined));
    assert.equal(w.hasSynced, false, 'not synced before the bookmark');
    server.put('late'); // made during the initial events: the apiserver sends it after the bookmark
    await until('the list', () => (w.hasSynced ? true : undefined));
    assert.deepEqual(server.requests.map((r) => [r.method, r.query.sendInitialEvents, r.query.resourceVersionMatch, r.query.resourceVersion]), [['WATCH', 'true', 'NotOlderThan', undefined]], 'one request: a watch with initial events');
    assert.equal(server.requests[0]!.query.timeoutSeconds, 450, 'bounded as any watch (300–600 s): the wait for the bookmark too');
    assert.deepEqual([w.stats.lists, w.stats.streamed, w.stats.watches], [1, 1, 1]);
    assert.deepEqual(events.filter((e) => e.type === 'synced'), [{ type: 'synced', relist: false, streamed: true }]);
    await until('the change after it', () => (w.store.has('ns/late') ? true : undefined));
    assert.deepEqual(events.map((e) => ('object' in e ? e.object.metadata.name : e.type)), ['w0', 'w1', 'w2', 'w3', 'w4', 'synced', 'late'], 'the change made meanwhile told after the list, as a change');
    assert.equal(w.resourceVersion, '7');
  });

  test('an apiserver that refuses a streaming list (422): by pages at once, and from then on, said once', async (t) => {
    const server = new FakeApiServer();
    server.streamingLists = false;
    server.put('a');
    const logs: string[] = [];
    const { w, clock } = watcherOn(server, { log: (_level, msg) => logs.push(msg) });
    t.after(() => w.stop());
    await until('the watch', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
    assert.deepEqual(server.requests.map((r) => `${r.method}${r.query.sendInitialEvents ? ' streaming' : ''}`), ['WATCH streaming', 'GET', 'WATCH']);
    assert.equal(clock.pendingTimers(), 1, 'no backoff: only the watchdog waits');
    assert.deepEqual([w.stats.errors, w.stats.streamed, w.failing], [0, 0, false]);
    // A relist (410) lists by pages straight away.
    server.endWatches({ code: 410, message: 'too old resource version' });
    await until('the relist', () => (w.stats.relists === 1 && server.openWatches === 1 ? true : undefined));
    assert.deepEqual(server.requests.slice(3).map((r) => `${r.method}${r.query.sendInitialEvents ? ' streaming' : ''}`), ['GET', 'WATCH']);
    assert.equal(logs.filter((m) => /does not serve a streaming list/.test(m)).length, 1);
  });

  test("a 429 to a streaming list (the apiserver's watch cache of the kind not ready yet): that list by pages at once, the next streams", async (t) => {
    const server = new FakeApiServer();
    server.put('a');
    const api = server.api();
    const stream = api.stream.bind(api);
    let refuse = 1;
    api.stream = ((...args: Parameters<typeof stream>) => (refuse-- > 0 ? Promise.reject(new ApiError(429, 'storage is (re)initializing', 'TooManyRequests')) : stream(...args))) as typeof api.stream;
    const { w, clock } = watcherOn(server, {}, api);
    t.after(() => w.stop());
    await until('the list', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
    assert.deepEqual([w.stats.streamed, w.stats.errors, w.failing, clock.pendingTimers()], [0, 0, false, 1], 'by pages, no backoff (only the watchdog waits)');
    server.endWatches({ code: 410, message: 'too old resource version' });
    await until('the relist, streamed', () => (w.stats.streamed === 1 ? true : undefined));
    assert.equal(server.requests.filter((r) => r.method === 'GET').length, 1, 'one list by pages in all');
  });

  test('a streaming list that ends before its bookmark is a failed list: streamed again after backoff; after three in a row one list goes by pages, and the next streams again', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 20; i++) server.put(`w${i}`);
    const { w, clock } = watcherOn(server);
    t.after(() => w.stop());
    const streamingRequests = () => server.requests.filter((r) => r.query.sendInitialEvents).length;
    for (let cut = 1; cut <= 3; cut++) {
      await until(`streaming list ${cut} under way`, () => (streamingRequests() === cut && w.store.size >= 3 ? true : undefined));
      server.endWatches(); // as the apiserver closing a watcher that fell behind, or restarting
      await until(`the backoff after cut ${cut}`, () => (w.stats.errors === cut && clock.pendingTimers() > 0 ? true : undefined));
      assert.equal(w.hasSynced, false);
      clock.advance(30_000);
    }
    await until('the list by pages', () => (w.hasSynced ? true : undefined));
    assert.deepEqual([w.stats.lists, w.stats.streamed, w.store.size], [4, 0, 20]);
    assert.equal(server.requests.filter((r) => r.method === 'GET').length, 1, 'one attempt by pages');
    // The next list (a 410) streams again.
    await until('the watch', () => (server.openWatches === 1 ? true : undefined));
    server.endWatches({ code: 410, message: 'too old resource version' });
    await until('the streaming relist', () => (w.stats.streamed === 1 ? true : undefined));
    assert.equal(server.requests.filter((r) => r.method === 'GET').length, 1);
  });

  test('after a streaming list the watch resumes from its bookmark, with no initial events', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 3; i++) server.put(`w${i}`);
    const { w } = watcherOn(server);
    t.after(() => w.stop());
    await until('the list', () => (w.hasSynced && server.openWatches === 1 ? true : undefined));
    const listedAt = w.resourceVersion;
    assert.equal(listedAt, server.currentVersion);
    server.endWatches();
    await until('the watch to resume', () => (server.requests.length === 2 && server.openWatches === 1 ? true : undefined));
    const resumed = server.requests[1]!;
    assert.deepEqual([resumed.method, resumed.query.resourceVersion, resumed.query.sendInitialEvents], ['WATCH', listedAt, undefined]);
  });

  test('relist() during a streaming list lets it complete, then lists again', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 10; i++) server.put(`w${i}`, { labels: { keep: i < 5 ? 'yes' : 'no' } });
    const kept = new Set(['yes']);
    const { w, events } = watcherOn(server, { keeps: (o) => kept.has(o.metadata.labels?.keep ?? '') });
    t.after(() => w.stop());
    await until('the list under way, something left out', () => (w.store.size >= 1 && events.some((e) => e.type === 'apply' && e.kept === false) ? true : undefined));
    kept.add('no');
    w.relist();
    await until('the relist', () => (events.some((e) => e.type === 'synced' && e.relist) ? true : undefined));
    assert.deepEqual(events.filter((e) => e.type === 'synced').map((e) => e.type === 'synced' && e.relist), [false, true], 'the first list completed as the first, then the relist');
    assert.equal(server.requests.filter((r) => r.query.sendInitialEvents).length, 2);
    assert.equal(w.store.size, 10);
    await until('the relist\'s watch', () => (w.hasSynced && server.requests.length === 2 ? true : undefined));
    assert.equal(server.openWatches, 1, 'the first request ended when it was left, not at its timeout');
  });

  test('a streaming list cut after relist() was asked for is still a failed list: backoff, then the relist', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 20; i++) server.put(`w${i}`, { labels: { keep: i < 10 ? 'yes' : 'no' } });
    const kept = new Set(['yes']);
    const { w, events, clock } = watcherOn(server, { keeps: (o) => kept.has(o.metadata.labels?.keep ?? '') });
    t.after(() => w.stop());
    await until('the list under way, something left out', () => (events.some((e) => e.type === 'apply' && e.kept === false) ? true : undefined));
    kept.add('no');
    w.relist();
    server.endWatches({ code: 500, message: 'etcd leader changed' });
    await until('the backoff', () => (w.stats.errors === 1 && clock.pendingTimers() > 0 ? true : undefined));
    assert.deepEqual([w.stats.lists, server.openWatches, w.hasSynced], [1, 0, false], 'no list at once');
    clock.advance(1000);
    await until('the list', () => (w.hasSynced ? true : undefined));
    assert.equal(w.store.size, 20, 'listed with what it keeps now');
  });

  for (const [what, error] of [['a 410 ERROR line', { code: 410, message: 'too old resource version' }], ['a 500 ERROR line', { code: 500, message: 'etcd leader changed' }]] as const) {
    test(`${what} before the bookmark fails the streaming list: tried again after backoff, not at once`, async (t) => {
      const server = new FakeApiServer();
      for (let i = 0; i < 20; i++) server.put(`w${i}`);
      const { w, clock } = watcherOn(server);
      t.after(() => w.stop());
      await until('the list under way', () => (w.store.size >= 3 ? true : undefined));
      server.endWatches(error);
      await until('the backoff', () => (w.stats.errors === 1 && clock.pendingTimers() > 0 ? true : undefined));
      assert.deepEqual([w.stats.gone, w.stats.lists, server.openWatches], [0, 1, 0], 'no list started without backoff');
      clock.advance(1000);
      await until('the list', () => (w.hasSynced ? true : undefined));
      assert.equal(w.stats.streamed, 1);
    });
  }

  test('a streaming list refused as forbidden or not served is a problem, not a reason for pages: streamed again after backoff', async (t) => {
    const server = new FakeApiServer();
    server.put('a');
    server.served = false;
    const { w, problems, clock } = watcherOn(server);
    t.after(() => w.stop());
    await until('the problem', () => (problems.at(-1) ? true : undefined));
    server.served = true;
    await until('the backoff', () => (clock.pendingTimers() > 0 ? true : undefined));
    clock.advance(1000);
    await until('the list', () => (w.hasSynced ? true : undefined));
    assert.equal(problems.at(-1), undefined);
    assert.deepEqual([w.stats.streamed, server.requests.filter((r) => r.method === 'GET').length], [1, 0]);
  });

  test('a DELETED event among the initial events lets go of what an ADDED one brought in', () => {
    const store = new WatchStore(new FakeApiServer().resource, 'metadata', undefined, undefined);
    const told: WatchEvent[] = [];
    const list = new StreamedList(store.beginList(), false, (e) => told.push(e));
    const object = (name: string, rv: string) => ({ metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: rv } });
    for (const line of [{ type: 'ADDED', object: object('a', '2') }, { type: 'ADDED', object: object('b', '3') }, { type: 'DELETED', object: object('a', '4') }, { type: 'BOOKMARK', object: { metadata: { name: '', resourceVersion: '4', annotations: { 'k8s.io/initial-events-end': 'true' } } } }]) assert.equal(list.take(line), true);
    assert.deepEqual([...store.byKey.keys()], ['ns/b']);
    assert.deepEqual(told.map((e) => `${e.type} ${'object' in e ? e.object.metadata.name : ''}`), ['apply a', 'apply b', 'delete a']);
    assert.deepEqual([list.open, list.resourceVersion, list.objects], [false, '4', 1]);
  });

  test('a streaming relist cut before its bookmark is no list: the store is not vouched for until one completes, after backoff', async (t) => {
    const server = new FakeApiServer();
    for (let i = 0; i < 20; i++) server.put(`w${i}`);
    const { w, events, clock } = watcherOn(server);
    t.after(() => w.stop());
    await until('the watch', () => (w.hasSynced ? true : undefined));
    server.endWatches({ code: 410, message: 'too old resource version' });
    // While no watch is open: five changed, one deleted, none of it streamed.
    for (let i = 0; i < 5; i++) server.put(`w${i}`, { generation: 2 });
    server.remove('w19', 'ns', true);
    await until('the relist under way', () => (w.stats.lists === 2 && server.openWatches === 1 ? true : undefined));
    assert.equal(w.failing, true, 'during the relist the store may hold what no longer exists');
    await until('some of its initial events', () => (events.filter((e) => e.type === 'apply').length > 22 ? true : undefined));
    server.endWatches({ code: 500, message: 'etcd leader changed' });
    await until('the backoff wait', () => (w.stats.errors === 1 && clock.pendingTimers() > 0 ? true : undefined));
    assert.equal(w.failing, true);
    assert.equal(events.filter((e) => e.type === 'synced').length, 1, 'the cut list was not told as synced');
    assert.equal(w.store.has('ns/w19'), true, 'nothing swept from a list that did not end');
    clock.advance(1000);
    await until('the relist', () => (events.some((e) => e.type === 'synced' && e.relist) ? true : undefined));
    assert.equal(w.failing, false);
    assert.equal(w.store.has('ns/w19'), false, 'swept at the bookmark of the list that ended');
    assert.deepEqual([w.stats.relists, w.stats.streamed], [2, 2]);
  });
});
