// The bridge on the real cluster: what it delivers, when, and what it does with each answer.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { parseReconciler } from '../../bridge/config.ts';
import { startBridge } from '../../bridge/main.ts';
import { bridgeFixture, widgetSetup } from '../support/bridge.ts';
import { applyYaml, installCrd, installReconcilerCrd, kubeApi, testCluster, testNamespace, uniqueName } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { answerDone, startReceiver } from '../support/receiver.ts';

describe('bridge', { concurrency: true }, () => {
  test('delivers created, updated and deleted; status-only writes deliver nothing', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    await f.createWidget('w1');
    const created = await waitFor('a created delivery', async () => f.receiver.of('w1').find((d) => d.reason === 'created'));
    assert.equal(created.namespace, f.ns);
    assert.equal(created.generation, 1);
    assert.equal(created.attempt, 1);
    assert.equal(created.received.event.subject, `${f.ns}/w1`);

    // A status-only write: the bridge sees its watch event and queues nothing for it.
    const counter = async (pattern: RegExp) => Number((await fetch(`http://${f.running.address}/metrics`).then((r) => r.text())).match(pattern)?.[1] ?? 0);
    const events = /kfn_bridge_watch_events_total\{kind="Widget",type="apply"\} (\d+)/;
    const adds = /workqueue_adds_total\{name="widgets"\} (\d+)/;
    const [eventsBefore, addsBefore] = [await counter(events), await counter(adds)];
    await f.patchWidget('w1', { status: { phase: 'Running' } }, 'status');
    await waitFor('the bridge to see the status write', async () => ((await counter(events)) > eventsBefore ? true : undefined));
    assert.equal(await counter(adds), addsBefore, 'the status-only write queued nothing');
    await f.patchWidget('w1', { spec: { size: 2 } });
    const updated = await waitFor('an updated delivery', async () => f.receiver.of('w1').find((d) => d.reason === 'updated'));
    assert.equal(updated.generation, 2);
    assert.equal(f.receiver.of('w1').length, 2, 'the status-only write caused no delivery');

    await f.deleteWidget('w1');
    await waitFor('a deleted delivery', async () => f.receiver.of('w1').find((d) => d.reason === 'deleted'));
    await sleep(500);
    assert.equal(f.receiver.of('w1').filter((d) => d.reason === 'deleted').length, 1, 'deleted is delivered once');
    assert.deepEqual(f.receiver.refused, []);
  });

  test('owned children enqueue their controller owner; watched objects map by label and by selector', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, {
      spec: {
        owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }],
        watches: [
          { apiVersion: 'v1', kind: 'Secret', mapping: { label: 'widget' } },
          { apiVersion: 'v1', kind: 'Pod', mapping: { selectorField: 'spec.selector' } },
        ],
      },
    });
    const owner = await f.createWidget('parent', { selector: { matchLabels: { app: 'picked' } } });
    await waitFor('the created delivery', async () => f.receiver.of('parent').find((d) => d.reason === 'created'));
    // Owned kinds are watched by the label the SDK sets on children: one without it is not seen.
    const ownerRef = { apiVersion: f.apiVersion, kind: 'Widget', name: 'parent', uid: owner.metadata.uid, controller: true };
    await cluster.core.createNamespacedConfigMap({ namespace: f.ns, body: { metadata: { name: 'unlabelled', ownerReferences: [ownerRef] } } });
    await cluster.core.createNamespacedConfigMap({ namespace: f.ns, body: { metadata: { name: 'child', labels: { 'app.kubernetes.io/managed-by': 'kfn' }, ownerReferences: [ownerRef] } } });
    const child = await waitFor('a child delivery', async () => f.receiver.of('parent').find((d) => d.reason === 'child'));
    assert.equal(child.trigger, 'ConfigMap/child');
    assert.equal(f.receiver.of('parent').filter((d) => d.trigger === 'ConfigMap/unlabelled').length, 0, 'a child without the SDK\'s label is outside the owned watch');
    const cmWatch = f.running.bridge.watchList().find((w) => w.kind === 'v1/ConfigMap')!;
    assert.deepEqual([cmWatch.namespace, cmWatch.labelSelector, cmWatch.objects], [f.ns, 'app.kubernetes.io/managed-by=kfn', 1], 'one namespace, the label selector, only the labelled child held');
    assert.equal(child.received.data.trigger?.namespace, f.ns);

    await cluster.core.createNamespacedSecret({ namespace: f.ns, body: { metadata: { name: 'creds', labels: { widget: 'parent' } } } });
    await waitFor('a mapped delivery for the labelled Secret', async () => f.receiver.of('parent').find((d) => d.reason === 'mapped' && d.trigger === 'Secret/creds'));

    await cluster.core.createNamespacedPod({ namespace: f.ns, body: { metadata: { name: 'p1', labels: { app: 'picked' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } } });
    await waitFor('a mapped delivery for the selected Pod', async () => f.receiver.of('parent').find((d) => d.reason === 'mapped' && d.trigger === 'Pod/p1'));
    await cluster.core.createNamespacedPod({ namespace: f.ns, body: { metadata: { name: 'p2', labels: { app: 'other' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } } });
    await sleep(1000);
    assert.equal(f.receiver.deliveries.filter((d) => d.trigger === 'Pod/p2').length, 0, 'a pod the selector does not match maps to nothing');
  });

  test('a cluster-scoped primary receives its namespaced children\'s events (one key for both)', async (t) => {
    const cluster = await testCluster();
    // A Reconciler for Namespaces owning ConfigMaps: the child lives in the namespace that owns it.
    const f = await bridgeFixture(t, cluster, { spec: { for: { apiVersion: 'v1', kind: 'Namespace' }, owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }] } });
    const owner = await cluster.core.readNamespace({ name: f.ns });
    await waitFor('the namespace\'s created delivery', async () => f.receiver.of(f.ns).find((d) => d.reason === 'created'));
    await cluster.core.createNamespacedConfigMap({
      namespace: f.ns,
      body: { metadata: { name: 'owned-by-ns', labels: { 'app.kubernetes.io/managed-by': 'kfn' }, ownerReferences: [{ apiVersion: 'v1', kind: 'Namespace', name: f.ns, uid: owner.metadata!.uid!, controller: true }] } },
    });
    const child = await waitFor('a child delivery for the Namespace', async () => f.receiver.of(f.ns).find((d) => d.reason === 'child'));
    assert.equal(child.received.event.subject, f.ns, 'the cluster-scoped primary\'s key has no namespace');
    assert.equal(child.namespace, undefined);
    assert.equal(child.trigger, 'ConfigMap/owned-by-ns');
  });

  test('requeueAfterSeconds from the function is honoured', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    let answered = 0;
    f.receiver.answer = (_d, res) => {
      answered++;
      res.writeHead(200).end(JSON.stringify({ result: 'done', requeueAfterSeconds: answered === 1 ? 1 : 0, changes: [] }));
    };
    await f.createWidget('later');
    const requeued = await waitFor('a requeue delivery', async () => f.receiver.of('later').find((d) => d.reason === 'requeue'), { timeoutMs: 10_000 });
    const first = f.receiver.of('later')[0]!;
    assert.notEqual(requeued.id, first.id, 'a requeue is a new event');
    const waited = requeued.receivedAt - first.receivedAt;
    assert.ok(waited >= 950 && waited < 5000, `requeued after ${waited} ms (asked 1 s)`);
  });

  test('500 retries with backoff and the same event id; 429 honours Retry-After', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    let calls = 0;
    f.receiver.answer = (d, res) => {
      calls++;
      if (d.name === 'flaky') return void (calls <= 3 ? res.writeHead(500).end('boom') : answerDone(d, res));
      if (d.attempt === 1) return void res.writeHead(429, { 'retry-after': '2' }).end('slow down');
      answerDone(d, res);
    };
    await f.createWidget('flaky');
    await waitFor('the fourth attempt to succeed', async () => f.receiver.of('flaky').length >= 4 || undefined, { timeoutMs: 20_000 });
    const flaky = f.receiver.of('flaky');
    assert.deepEqual(flaky.map((d) => d.attempt), [1, 2, 3, 4]);
    assert.equal(new Set(flaky.map((d) => d.id)).size, 1, 'a retry keeps its id');
    await sleep(300);
    assert.equal(f.receiver.of('flaky').length, 4, 'no more deliveries after success');
    // kfnattempt counts per object: a change while deliveries fail continues the count with a
    // new id; a success resets it.
    // Generation 2 always fails, so its retries go on until generation 3 replaces them (no race
    // between the watch event of the change and a retry that would succeed and reset the count).
    const answer = f.receiver.answer;
    f.receiver.answer = (d, res) => (d.name === 'flaky' && d.generation === 2 ? void res.writeHead(500).end('boom') : answer(d, res));
    await f.patchWidget('flaky', { spec: { size: 7 } });
    await waitFor('the change to fail twice', async () => f.receiver.of('flaky')[5]);
    await f.patchWidget('flaky', { spec: { size: 8 } });
    const after = await waitFor('the newer change to be delivered', async () => f.receiver.of('flaky').find((d) => d.generation === 3 && d.reason === 'updated'));
    assert.ok(after.attempt >= 3, `a newer observation continues the failing object's count (attempt ${after.attempt})`);
    assert.notEqual(after.id, f.receiver.of('flaky')[4]!.id, 'and is a new event');
    await f.patchWidget('flaky', { spec: { size: 9 } });
    const fresh = await waitFor('the next change', async () => f.receiver.of('flaky').find((d) => d.generation === 4));
    assert.equal(fresh.attempt, 1, 'a success reset the count');

    await f.createWidget('busy');
    const retried = await waitFor('the retry after 429', async () => f.receiver.of('busy')[1]);
    const gap = retried.receivedAt - f.receiver.of('busy')[0]!.receivedAt;
    assert.ok(gap >= 1900, `waited ${gap} ms for Retry-After: 2`);
    const metrics = await fetch(`http://${f.running.address}/metrics`).then((r) => r.text());
    // At least the three 500s of 'flaky', two of generation 2 and the 429; generation 2 fails
    // until generation 3 replaces it, as many times as a loaded machine takes to write it.
    const count = (pattern: RegExp) => Number(metrics.match(pattern)?.[1] ?? -1);
    assert.ok(count(/controller_runtime_reconcile_errors_total\{controller="widgets"\} (\d+)\n/) >= 6, metrics);
    assert.ok(count(/workqueue_retries_total\{name="widgets"\} (\d+)\n/) >= 6, metrics);
  });

  test('the overall rate limit spaces the retries of many failing objects', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { rateLimit: { qps: 2, burst: 1 }, maxConcurrentReconciles: 4 } });
    f.receiver.answer = (_d, res) => void res.writeHead(500).end('down');
    for (const n of ['a', 'b', 'c', 'd']) await f.createWidget(n);
    await waitFor('six retries', async () => (f.receiver.deliveries.filter((d) => d.attempt > 1).length >= 6 ? true : undefined), { timeoutMs: 20_000 });
    const retries = f.receiver.deliveries.filter((d) => d.attempt > 1).map((d) => d.receivedAt).sort((x, y) => x - y);
    // Per-key backoff alone would retry all four within ~20 ms; at 2 per second, six take about
    // 2.5 s (the bound leaves room for when each key's failure arrived, on a busy machine).
    const span = retries[5]! - retries[0]!;
    assert.ok(span >= 1500, `six retries spread over ${span} ms at 2 qps`);
    const metrics = await fetch(`http://${f.running.address}/metrics`).then((r) => r.text());
    assert.match(metrics, /kfn_bridge_rate_limited_retries_total\{name="widgets"\} [1-9]/);
  });

  test('400 is terminal: no retry, a Warning Event on the object, a metric', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    f.receiver.answer = (_d, res) => void res.writeHead(400).end('spec.size must be even');
    await f.createWidget('odd');
    await waitFor('the delivery', async () => f.receiver.of('odd')[0]);
    const event = await waitFor('a Warning Event on the Widget', async () => {
      const events = await cluster.core.listNamespacedEvent({ namespace: f.ns, fieldSelector: 'involvedObject.name=odd' });
      return events.items.find((e) => e.type === 'Warning');
    });
    assert.equal(event.reason, 'ReconcileRejected');
    assert.match(event.message ?? '', /HTTP 400: spec\.size must be even/);
    await sleep(1000);
    assert.equal(f.receiver.of('odd').length, 1, 'not retried');
    const metrics = await fetch(`http://${f.running.address}/metrics`).then((r) => r.text());
    assert.match(metrics, /controller_runtime_terminal_reconcile_errors_total\{controller="widgets"\} 1/);
    // The same refusal again: one Event counted twice, as client-go aggregates, not a second one.
    await f.patchWidget('odd', { spec: { size: 3 } });
    await waitFor('the first refused update', async () => f.receiver.of('odd').find((d) => d.reason === 'updated'));
    await waitFor('its Warning Event', async () => (await cluster.core.listNamespacedEvent({ namespace: f.ns, fieldSelector: 'involvedObject.name=odd' })).items.find((e) => /refused the updated event/.test(e.message ?? '')));
    await f.patchWidget('odd', { spec: { size: 5 } });
    await waitFor('the second refused update', async () => f.receiver.of('odd').filter((d) => d.reason === 'updated')[1]);
    await waitFor('one Warning Event per message, the repeated one counted twice', async () => {
      const warnings = (await cluster.core.listNamespacedEvent({ namespace: f.ns, fieldSelector: 'involvedObject.name=odd' })).items.filter((e) => e.type === 'Warning');
      return warnings.length === 2 && warnings.find((e) => e.metadata!.name === event.metadata!.name)?.count === 1 && warnings.find((e) => e.metadata!.name !== event.metadata!.name)?.count === 2 ? true : undefined;
    });
    // The next change is delivered again.
    f.receiver.answer = answerDone;
    await f.patchWidget('odd', { spec: { size: 2 } });
    await waitFor('the next change to be delivered', async () => f.receiver.of('odd').filter((d) => d.reason === 'updated')[2]);
  });

  test('a rotated auth Secret: the 401 it causes makes the bridge read the Secret again, and the delivery goes through', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    await f.createWidget('before');
    await waitFor('a delivery signed with the first key', async () => f.receiver.of('before')[0]);
    // Rotation: the Secret and the function change keys together; the bridge has the old one cached.
    const next = uniqueName('rotated');
    await kubeApi(cluster.kc).request('PATCH', `/api/v1/namespaces/${f.ns}/secrets/widget-fn`, { body: { stringData: { secret: next } }, contentType: 'application/merge-patch+json' });
    f.receiver.credentials = { kind: 'hmac', secret: next };
    await f.createWidget('after');
    const d = await waitFor('a delivery signed with the new key', async () => f.receiver.of('after')[0], { timeoutMs: 20_000 });
    assert.equal(d.reason, 'created');
    assert.equal(d.attempt, 2, 'the first attempt, with the old key, was refused and retried');
    assert.deepEqual(f.receiver.refused.map((r) => r.status), [401]);
    const events = await cluster.core.listNamespacedEvent({ namespace: f.ns, fieldSelector: 'involvedObject.name=after' });
    assert.equal(events.items.filter((e) => e.reason === 'ReconcileRejected').length, 0, 'no rejection recorded for a rotation');
  });

  test('a function still on the previous key (its mounted Secret not refreshed yet): the 401 is retried, not terminal, until it has the new one', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    const previous = f.receiver.credentials;
    // Rotated before the bridge has read the Secret: it signs with the new key at once.
    const next = uniqueName('rotated');
    await kubeApi(cluster.kc).request('PATCH', `/api/v1/namespaces/${f.ns}/secrets/widget-fn`, { body: { stringData: { secret: next } }, contentType: 'application/merge-patch+json' });
    assert.deepEqual(f.receiver.credentials, previous);
    await f.createWidget('waiting');
    await waitFor('the function to refuse the new key', async () => f.receiver.refused.length >= 2 || undefined, { timeoutMs: 20_000 });
    f.receiver.credentials = { kind: 'hmac', secret: next }; // the function reads the refreshed key
    const d = await waitFor('the delivery once the function has the new key', async () => f.receiver.of('waiting')[0], { timeoutMs: 20_000 });
    assert.equal(d.reason, 'created');
    const events = await cluster.core.listNamespacedEvent({ namespace: f.ns, fieldSelector: 'involvedObject.name=waiting' });
    assert.equal(events.items.filter((e) => e.reason === 'ReconcileRejected').length, 0, 'not refused as the function\'s verdict');
  });

  test('a function that hangs past timeoutSeconds is retried', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { timeoutSeconds: 1 } });
    f.receiver.answer = (d, res) => {
      if (d.attempt === 1) return; // never answers
      answerDone(d, res);
    };
    await f.createWidget('slow');
    const retry = await waitFor('the retry after the timeout', async () => f.receiver.of('slow').find((d) => d.attempt === 2), { timeoutMs: 10_000 });
    assert.equal(retry.id, f.receiver.of('slow')[0]!.id);
  });

  test('after a timeout the object is not delivered again before the deadline plus a grace, even on a new change', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { timeoutSeconds: 1 } });
    // The function honours the deadline it is given, but its last write lands 500 ms after it.
    f.receiver.answer = async (d, res) => {
      if (d.attempt > 1) return answerDone(d, res);
      const deadline = d.received.deadline!.getTime();
      await sleep(Math.max(0, deadline - Date.now()) + 500);
      res.destroy();
    };
    await f.createWidget('busy');
    const first = await waitFor('the first delivery', async () => f.receiver.of('busy')[0]);
    assert.ok(first.received.deadline, 'the event carries its deadline (kfndeadline)');
    // Sent + timeoutSeconds: not before the observation + 1 s, not after the receipt + 1 s (the
    // delivery's own latency, long on a loaded machine, cannot move either bound).
    const deadline = first.received.deadline!.getTime();
    const observed = Date.parse(first.received.event.time!);
    assert.ok(deadline - observed >= 1000, `deadline ${deadline - observed} ms after the observation (timeoutSeconds 1)`);
    assert.ok(deadline - first.receivedAt <= 1100, `deadline ${deadline - first.receivedAt} ms after receipt (timeoutSeconds 1)`);
    await sleep(1100);
    await f.patchWidget('busy', { spec: { size: 2 } }); // a change right after the timeout
    const retry = await waitFor('the next delivery', async () => f.receiver.of('busy')[1], { timeoutMs: 10_000 });
    assert.ok(retry.receivedAt >= first.received.deadline!.getTime() + 1900, `held until the deadline + 2 s grace (${retry.receivedAt - first.received.deadline!.getTime()} ms after it)`);
    assert.equal(f.receiver.maxConcurrentPerKey(), 1, 'never two deliveries of the object at once');
  });

  test('a connection broken while the function still works holds the object until the deadline: never two reconciles at once', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { timeoutSeconds: 2 } });
    // The first delivery's connection breaks after 200 ms (a proxy restarting, a reset); the
    // function keeps working on it for 1.5 s.
    f.receiver.answer = async (d, res) => {
      if (d.attempt > 1 || d.generation !== 1) return answerDone(d, res);
      setTimeout(() => res.socket?.destroy(), 200);
      await sleep(1500);
    };
    await f.createWidget('cut');
    const first = await waitFor('the first delivery', async () => f.receiver.of('cut')[0]);
    await sleep(400);
    await f.patchWidget('cut', { spec: { size: 2 } }); // a change while the function still works
    const next = await waitFor('the next delivery', async () => f.receiver.of('cut')[1], { timeoutMs: 15_000 });
    assert.equal(f.receiver.maxConcurrentPerKey(), 1, 'never two deliveries of the object at once');
    assert.ok(next.receivedAt >= first.received.deadline!.getTime() + 1900, `held until the deadline + 2 s grace (${next.receivedAt - first.received.deadline!.getTime()} ms after it)`);
    await waitFor('the change delivered', async () => f.receiver.of('cut').find((d) => d.generation === 2), { timeoutMs: 15_000 });
  });

  test('a Reconciler edited while a delivery runs: the new spec serves every other object at once, and that object only after the delivery ends', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { timeoutSeconds: 20 } });
    // The slow delivery runs 15 s of its 20: what the new spec does meanwhile is seen by order,
    // not by a time limit that a loaded machine could miss.
    let slowEnded = 0;
    f.receiver.answer = async (d, res) => {
      if (d.name === 'slow' && d.generation === 1) {
        await sleep(15_000);
        slowEnded = Date.now();
      }
      answerDone(d, res);
    };
    await f.createWidget('slow');
    const slow = await waitFor('the slow delivery to start', async () => f.receiver.of('slow')[0]);
    const edited = Date.now();
    const [config] = f.running.bridge.reconcilers();
    await f.running.setReconcilers([{ ...config!, resyncPeriodSeconds: 3600 }]);
    await f.patchWidget('slow', { spec: { size: 2 } });
    await f.createWidget('other');
    const other = await waitFor('the other object, under the new spec', async () => f.receiver.of('other')[0], { timeoutMs: 15_000 });
    assert.ok(slowEnded === 0 || other.receivedAt < slowEnded, `delivered ${other.receivedAt - edited} ms after the edit, while the slow delivery still ran (it ended ${slowEnded - edited} ms after the edit)`);
    const next = await waitFor('the change to the slow object', async () => f.receiver.of('slow').find((d) => d.generation === 2), { timeoutMs: 30_000 });
    assert.equal(f.receiver.maxConcurrentPerKey(), 1, 'never two deliveries of one object at once');
    assert.ok(next.receivedAt >= slowEnded, 'after the first delivery ended');
    assert.ok(next.receivedAt < slow.received.deadline!.getTime(), `${next.receivedAt - slowEnded} ms after it ended: released then, not held to its deadline`);
  });

  test('a --config file edited while the bridge runs: the change applies without a restart, and a broken edit keeps the Reconcilers in use', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { bridge: { configCheckMs: 200 } });
    const original = readFileSync(f.configFile, 'utf8');
    await f.createWidget('before');
    await waitFor('a delivery to the first sink', async () => f.receiver.of('before')[0]);
    // A half-written file: reported, and the Reconciler in use goes on delivering.
    writeFileSync(f.configFile, 'apiVersion: kfn.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: widgets}\nspec: {for: [');
    await sleep(1000);
    await f.createWidget('during');
    await waitFor('the broken edit kept the Reconciler in use', async () => f.receiver.of('during')[0]);
    // The sink moves: later changes go to the new one, with no restart.
    const moved = await startReceiver(t, f.receiver.credentials);
    writeFileSync(f.configFile, original.replace(f.receiver.url, moved.url));
    await waitFor('the bridge to take the edited file', async () => (f.running.bridge.reconcilers()[0]?.sink.uri === moved.url ? true : undefined));
    await f.createWidget('after');
    await waitFor('a delivery to the new sink', async () => moved.of('after')[0]);
    assert.equal(f.receiver.of('after').length, 0, 'nothing went to the old sink');
  });

  test('a sink answering 404 for a while (a route being programmed) loses no change: the objects are delivered once it answers', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    let openedAt = 0;
    f.receiver.answer = (d, res) => (openedAt ? answerDone(d, res) : void res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found'));
    await f.createWidget('early');
    await f.createWidget('other');
    await waitFor('404s for both', async () => (f.receiver.of('early').length && f.receiver.of('other').length) || undefined);
    await f.patchWidget('early', { spec: { size: 2 } });
    await sleep(2000);
    openedAt = Date.now();
    const after = (name: string) => f.receiver.of(name).filter((d) => d.receivedAt >= openedAt);
    await waitFor('early, at its last generation, once the sink answers', async () => after('early').find((d) => d.generation === 2), { timeoutMs: 20_000 });
    await waitFor('other, once the sink answers', async () => after('other')[0], { timeoutMs: 20_000 });
  });

  test('never two deliveries of one object at once; the last delivery sees the last change', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { maxConcurrentReconciles: 4 } });
    // The first delivery lasts until all nine changes have been made (and a moment for the
    // watch to see the last), however long the patches take on a busy machine.
    let patched: () => void = () => {};
    const allPatched = new Promise<void>((resolve) => (patched = resolve));
    f.receiver.answer = async (d, res) => {
      if (d.generation === 1) await allPatched.then(() => sleep(500));
      else await sleep(100);
      answerDone(d, res);
    };
    await f.createWidget('hot');
    await waitFor('the first delivery to start', async () => f.receiver.of('hot')[0]);
    for (let i = 2; i <= 10; i++) await f.patchWidget('hot', { spec: { size: i } });
    patched();
    await waitFor('a delivery of generation 10', async () => f.receiver.of('hot').find((d) => d.generation === 10), { timeoutMs: 20_000 });
    await sleep(300);
    assert.equal(f.receiver.maxConcurrentPerKey(), 1);
    assert.deepEqual(f.receiver.of('hot').map((d) => d.generation), [1, 10], 'nine changes during one delivery make exactly one more, of the last state');
  });

  test('readiness, metrics and the journal', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster);
    await f.createWidget('observed');
    await waitFor('the delivery', async () => f.receiver.of('observed')[0]);
    await waitFor('/readyz to be ok', async () => (await fetch(`http://${f.running.address}/readyz`)).status === 200 || undefined);
    assert.equal((await fetch(`http://${f.running.address}/healthz`)).status, 200);
    const metrics = await fetch(`http://${f.running.address}/metrics`).then((r) => r.text());
    for (const name of ['controller_runtime_reconcile_total{controller="widgets",result="success"}', 'workqueue_adds_total{name="widgets"}', 'workqueue_depth{name="widgets"}', 'controller_runtime_reconcile_time_seconds_bucket', 'workqueue_queue_duration_seconds_bucket', 'workqueue_work_duration_seconds_bucket']) {
      assert.ok(metrics.includes(name), `metrics include ${name}`);
    }
    const lines = await waitFor('a journal line', async () => {
      const text = readFileSync(join(f.dir, 'journal.jsonl'), 'utf8').trim();
      return text ? text.split('\n').map((l) => JSON.parse(l) as Record<string, unknown>) : undefined;
    });
    const entry = lines.find((l) => (l.primary as { name: string }).name === 'observed')!;
    assert.equal(entry.outcome, 'done');
    assert.equal(entry.status, 200);
    assert.equal(entry.reason, 'created');
    assert.equal(entry.id, f.receiver.of('observed')[0]!.id);
  });
});

describe('bridge lifecycle', { concurrency: true }, () => {
  test('Reconciler resources: changes apply without a restart, deletion stops the watch', async (t) => {
    const cluster = await testCluster();
    await installReconcilerCrd(cluster);
    const api = kubeApi(cluster.kc);
    const f = await widgetSetup(t, cluster, { auth: 'none' });
    const second = await startReceiver(t, { kind: 'none' });
    // Reconcilers without an identity (test/integration/identity.test.ts is about that): the single-tenant mode.
    const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, metricsAddr: '0', logLevel: 'error', shutdownTimeoutMs: 5000, requireIdentity: false });
    t.after(() => running.stop());
    const name = uniqueName('lifecycle');
    const reconciler = (sink: string) =>
      stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec: { for: { apiVersion: f.apiVersion, kind: 'Widget' }, sink: { uri: sink }, namespaces: [f.ns] } });
    await applyYaml(cluster.kc, reconciler(f.receiver.url));
    t.after(() => api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined));
    await f.createWidget('one');
    await waitFor('delivery to the first sink', async () => f.receiver.of('one')[0]);

    const watch = running.bridge.watchOf({ apiVersion: f.apiVersion, kind: 'Widget' });
    assert.ok(watch);
    await applyYaml(cluster.kc, reconciler(second.url));
    await waitFor('the changed Reconciler to deliver to the second sink', async () => second.of('one')[0]);
    assert.equal(running.bridge.watchOf({ apiVersion: f.apiVersion, kind: 'Widget' }), watch, 'an edit keeps the watch it still needs: no restart, no relist');
    await f.createWidget('two');
    await waitFor('new objects to go to the second sink', async () => second.of('two')[0]);
    assert.equal(f.receiver.of('two').length, 0);

    await api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`);
    await waitFor('the Widget watch to stop', async () => running.bridge.watchOf({ apiVersion: f.apiVersion, kind: 'Widget' }) === undefined || undefined);
    const before = second.deliveries.length;
    await f.createWidget('three');
    await sleep(1000);
    assert.equal(second.deliveries.length, before, 'a deleted Reconciler delivers nothing');
  });

  test('deliveries in flight adapt to the function: a prompt one is given several at once, up to maxConcurrentReconciles, one that pushes back (503) one at a time; the Reconciler\'s status says which', async (t) => {
    const cluster = await testCluster();
    await installReconcilerCrd(cluster);
    const api = kubeApi(cluster.kc);
    const f = await widgetSetup(t, cluster, { auth: 'none' });
    let inFlight = 0;
    let most = 0;
    let status = 200;
    // Other tests' bridges that take every Reconciler of the cluster may deliver this one too:
    // what is counted is this bridge's (its own CloudEvent source).
    const source = `kfn://${uniqueName('adaptive')}/bridge`;
    // A function that takes 40 ms per reconcile, or refuses at once with 503 when told to.
    const perKey = new Map<string, number>();
    let mostPerKey = 0;
    f.receiver.answer = async (d, res) => {
      if (status === 503) return void res.writeHead(503).end();
      const ours = d.received.event.source === source;
      if (ours) {
        most = Math.max(most, ++inFlight);
        perKey.set(d.name, (perKey.get(d.name) ?? 0) + 1);
        mostPerKey = Math.max(mostPerKey, perKey.get(d.name)!);
      }
      await sleep(40);
      if (ours) (inFlight--, perKey.set(d.name, perKey.get(d.name)! - 1));
      answerDone(d, res);
    };
    const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, metricsAddr: '0', logLevel: 'error', shutdownTimeoutMs: 5000, requireIdentity: false, source });
    t.after(() => running.stop());
    const name = uniqueName('adaptive');
    await applyYaml(cluster.kc, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec: { for: { apiVersion: f.apiVersion, kind: 'Widget' }, sink: { uri: f.receiver.url }, namespaces: [f.ns], maxConcurrentReconciles: 4 } }));
    t.after(() => api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined));
    const concurrency = async () => (await api.request<{ status?: { concurrency?: number } }>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`)).status?.concurrency;
    const widgets = Array.from({ length: 60 }, (_, i) => `w${i}`);
    await Promise.all(widgets.map((w) => f.createWidget(w)));
    await waitFor('every Widget delivered', async () => widgets.every((w) => f.receiver.of(w).length) || undefined, { timeoutMs: 60_000 });
    assert.ok(most > 1 && most <= 4, `several deliveries at once, never more than the ceiling: at most ${most} were`);
    assert.equal(mostPerKey, 1, 'each object still one at a time');
    await waitFor('the Reconciler\'s status to say more than one at once', async () => ((await concurrency()) ?? 0) > 1 || undefined, { timeoutMs: 30_000 });

    status = 503;
    for (const w of widgets.slice(0, 20)) await api.request('PATCH', `/apis/${f.apiVersion}/namespaces/${f.ns}/widgets/${w}`, { body: { spec: { n: 1 } }, contentType: 'application/merge-patch+json' });
    await waitFor('the Reconciler\'s status to say one at a time', async () => (await concurrency()) === 1 || undefined, { timeoutMs: 30_000 });
  });

  test('the Reconciler CRD takes each watch mapping alone and refuses two at once, saying which', async () => {
    const cluster = await testCluster();
    await installReconcilerCrd(cluster);
    const api = kubeApi(cluster.kc);
    const create = (mapping: object) =>
      api.request('POST', '/apis/kfn.dev/v1alpha1/reconcilers', {
        query: { dryRun: 'All' },
        body: { apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: uniqueName('mapping') }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, watches: [{ apiVersion: 'v1', kind: 'Secret', mapping }], sink: { uri: 'http://127.0.0.1:1/' } } },
      });
    for (const mapping of [{ label: 'example.com/widget' }, { selectorField: 'spec.selector' }, { referenceField: 'spec.secretRef.name' }]) await create(mapping);
    await assert.rejects(create({ label: 'a', referenceField: 'spec.x' }), /mapping needs exactly one of label, selectorField or referenceField/);
    await assert.rejects(create({}), /mapping needs exactly one of label, selectorField or referenceField/);
  });

  test('the apiserver and the bridge refuse the same Reconcilers and fill in the same defaults (one schema)', async () => {
    const cluster = await testCluster();
    await installReconcilerCrd(cluster);
    const api = kubeApi(cluster.kc);
    const reconciler = (spec: object) => ({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: uniqueName('schema') }, spec: { for: { apiVersion: 'example.com/v1', kind: 'Widget' }, sink: { uri: 'http://127.0.0.1:1/' }, ...spec } });
    const create = (obj: object) => api.request<{ spec: Record<string, unknown> }>('POST', '/apis/kfn.dev/v1alpha1/reconcilers', { query: { dryRun: 'All' }, body: obj });
    const refused: [object, RegExp][] = [
      [{ timeoutSeconds: 2_147_484 }, /timeoutSeconds/],
      [{ resyncPeriodSeconds: 1e10 }, /resyncPeriodSeconds/],
      [{ backoff: { maxDelayMs: 1e13 } }, /maxDelayMs/],
      [{ backoff: { baseDelayMs: 2_000_000 } }, /backoff\.baseDelayMs must not exceed backoff\.maxDelayMs/],
      [{ rateLimit: { qps: 0 } }, /qps/],
      [{ maxConcurrentReconciles: 5000 }, /maxConcurrentReconciles/],
      [{ for: { apiVersion: 'not a version', kind: 'Widget' } }, /for\.apiVersion/],
      [{ sink: { uri: 'ftp://x' } }, /sink\.uri/],
      [{ sink: { uri: 'http://a/', ref: { apiVersion: 'v1', kind: 'Service', name: 'x' } } }, /sink needs exactly one of uri or ref/],
    ];
    for (const [spec, field] of refused) {
      const obj = reconciler(spec);
      await assert.rejects(create(obj), field, `the apiserver refuses ${JSON.stringify(spec)}`);
      assert.throws(() => parseReconciler(obj), field, `the bridge refuses ${JSON.stringify(spec)}`);
    }
    const stored = await create(reconciler({ owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }], auth: { secretRef: { name: 's', namespace: 'kfn-system' } } }));
    const parsed = parseReconciler(reconciler({ owns: [{ apiVersion: 'v1', kind: 'ConfigMap' }], auth: { secretRef: { name: 's', namespace: 'kfn-system' } } }));
    for (const field of ['resyncPeriodSeconds', 'maxConcurrentReconciles', 'timeoutSeconds', 'backoff', 'rateLimit', 'auth', 'owns'] as const) {
      assert.deepEqual(stored.spec[field], parsed[field], `the default of spec.${field}`);
    }
  });

  test('a Reconciler whose kind is not served yet starts once its CRD is installed', async (t) => {
    const cluster = await testCluster();
    const ns = await testNamespace(t, cluster, 'late-crd');
    const receiver = await startReceiver(t, { kind: 'none' });
    const group = `${uniqueName('late')}.kfn.test`;
    const dir = mkdtempSync(join(tmpdir(), 'kfn-late-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'bridge.yaml'), stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: 'late' }, spec: { for: { apiVersion: `${group}/v1`, kind: 'Widget' }, sink: { uri: receiver.url }, namespaces: [ns] } }));
    const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, configFile: join(dir, 'bridge.yaml'), metricsAddr: '0', logLevel: 'fatal', shutdownTimeoutMs: 5000 });
    t.after(() => running.stop());
    assert.equal(running.bridge.reconcilers().length, 0, 'not started: the kind is not served');
    await installCrd(t, cluster, group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    await kubeApi(cluster.kc).request('POST', `/apis/${group}/v1/namespaces/${ns}/widgets`, { body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: 'late' }, spec: {} } });
    await waitFor('the delivery once the Reconciler has started', async () => receiver.of('late')[0], { timeoutMs: 30_000 });
  });

  test('a CRD deleted while watched turns the Reconciler Ready=False, and it recovers once the kind is served again', async (t) => {
    const cluster = await testCluster();
    await installReconcilerCrd(cluster);
    const api = kubeApi(cluster.kc);
    const f = await widgetSetup(t, cluster, { auth: 'none' });
    const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, metricsAddr: '0', logLevel: 'fatal', shutdownTimeoutMs: 5000, watcher: { backoffMs: [200, 1000] }, requireIdentity: false });
    t.after(() => running.stop());
    const name = uniqueName('crd-gone');
    await applyYaml(cluster.kc, stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name }, spec: { for: { apiVersion: f.apiVersion, kind: 'Widget' }, sink: { uri: f.receiver.url }, namespaces: [f.ns] } }));
    t.after(() => api.request('DELETE', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`).catch(() => undefined));
    const ready = (status: string, reason?: string) =>
      waitFor(`Reconciler ${name} Ready=${status}${reason ? ` (${reason})` : ''}`, async () => {
        const r = await api.request<{ status?: { conditions?: { type: string; status: string; reason: string; message: string }[] } }>('GET', `/apis/kfn.dev/v1alpha1/reconcilers/${name}`);
        const c = r.status?.conditions?.find((x) => x.type === 'Ready');
        return c && c.status === status && (!reason || c.reason === reason) ? c : undefined;
      }, { timeoutMs: 60_000 });
    await f.createWidget('before');
    await waitFor('the first delivery', async () => f.receiver.of('before')[0]);
    await ready('True');

    await api.request('DELETE', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.${f.group}`);
    const down = await ready('False', 'WatchFailed');
    assert.match(down.message, new RegExp(`the API no longer serves ${f.group.replace(/\./g, '\\.')}/v1 Widget in namespace ${f.ns}`));

    await installCrd(t, cluster, f.group, 'Widget', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    await ready('True', 'Running');
    await f.createWidget('after');
    await waitFor('deliveries again once the kind is back', async () => f.receiver.of('after')[0], { timeoutMs: 30_000 });
  });

  test('resync re-delivers every object once per period', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { resyncPeriodSeconds: 3 } });
    for (const n of ['r1', 'r2', 'r3']) await f.createWidget(n);
    await waitFor('two resyncs of each object', async () => ['r1', 'r2', 'r3'].every((n) => f.receiver.of(n).filter((d) => d.reason === 'resync').length >= 2) || undefined, { timeoutMs: 15_000 });
    for (const n of ['r1', 'r2', 'r3']) {
      // When the bridge observed each resync (the event's time), not when it arrived: a delivery
      // held up on a loaded machine arrives late (one CI run: 1998 ms between two arrivals).
      const times = f.receiver.of(n).filter((d) => d.reason === 'resync').map((d) => Date.parse(d.received.event.time!));
      const gap = times[1]! - times[0]!;
      assert.ok(gap > 2500 && gap < 4500, `${n}: resyncs observed ${gap} ms apart (period 3 s)`);
      const ids = f.receiver.of(n).map((d) => d.id);
      assert.equal(new Set(ids).size, ids.length, `${n}: every resync of the unchanged object is a new event (new id)`);
    }
  });

  test('graceful shutdown: in-flight deliveries finish, nothing new starts', async (t) => {
    const cluster = await testCluster();
    const f = await bridgeFixture(t, cluster, { spec: { maxConcurrentReconciles: 1 } });
    let finished = 0;
    f.receiver.answer = async (d, res) => {
      await sleep(1500);
      answerDone(d, res);
      finished++;
    };
    await f.createWidget('inflight');
    await f.createWidget('waiting');
    await waitFor('the first delivery to be in flight', async () => f.receiver.deliveries[0]);
    await f.running.stop();
    assert.equal(finished, 1, 'stop() returned after the in-flight delivery was answered');
    await sleep(300);
    assert.equal(f.receiver.deliveries.length, 1, 'the waiting object was not started');
    const journal = readFileSync(join(f.dir, 'journal.jsonl'), 'utf8');
    assert.match(journal, /"outcome":"done"/, 'the in-flight delivery was recorded as done');
  });
});

describe('bridge sharing and sinks', { concurrency: true }, () => {
  test('two Reconcilers of one kind share one watch; a sink ref resolves to the object\'s status.url', async (t) => {
    const cluster = await testCluster();
    const f = await widgetSetup(t, cluster, { auth: 'none' });
    // An addressable object (as a Knative Service is) whose status.url is the second receiver.
    const second = await startReceiver(t, { kind: 'none' });
    const group = `${uniqueName('sink')}.kfn.test`;
    await installCrd(t, cluster, group, 'Endpoint', { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    const api = kubeApi(cluster.kc);
    await api.request('POST', `/apis/${group}/v1/namespaces/${f.ns}/endpoints`, { body: { apiVersion: `${group}/v1`, kind: 'Endpoint', metadata: { name: 'fn' }, spec: {} } });
    await api.request('PATCH', `/apis/${group}/v1/namespaces/${f.ns}/endpoints/fn/status`, { body: { status: { url: second.url } }, contentType: 'application/merge-patch+json' });
    const config = join(f.dir, 'two.yaml');
    const spec = (sink: object) => ({ for: { apiVersion: f.apiVersion, kind: 'Widget' }, sink, namespaces: [f.ns] });
    writeFileSync(
      config,
      [
        stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: 'by-uri' }, spec: spec({ uri: f.receiver.url }) }),
        stringify({ apiVersion: 'kfn.dev/v1alpha1', kind: 'Reconciler', metadata: { name: 'by-ref' }, spec: spec({ ref: { apiVersion: `${group}/v1`, kind: 'Endpoint', name: 'fn', namespace: f.ns } }) }),
      ].join('---\n'),
    );
    const running = await startBridge({ kubeconfig: cluster.paths.kubeconfig, configFile: config, metricsAddr: '127.0.0.1:0', logLevel: 'error', shutdownTimeoutMs: 5000 });
    t.after(() => running.stop());
    await f.createWidget('shared');
    await waitFor('both Reconcilers to deliver', async () => (f.receiver.of('shared')[0] && second.of('shared')[0]) || undefined);
    assert.equal(second.of('shared')[0]!.received.data.reconciler, 'by-ref');
    const metrics = await fetch(`http://${running.address}/metrics`).then((r) => r.text());
    const widgetEvents = metrics.split('\n').filter((l) => l.startsWith('kfn_bridge_watch_events_total{kind="Widget"'));
    assert.equal(widgetEvents.length, 1, 'one watch of the kind');
    assert.match(widgetEvents[0]!, / 1$/, 'which saw the object once, for both Reconcilers');
  });
});
