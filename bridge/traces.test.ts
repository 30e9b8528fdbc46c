import assert from 'node:assert/strict';
import { test } from 'node:test';
import { trace } from '@opentelemetry/api';
import { traceparentOf } from '../core/tracing.ts';
import { traceInMemory } from '../test/support/tracing.ts';
import { DeliveryTraces } from './traces.ts';

const kind = { apiVersion: 'apps/v1', kind: 'Deployment' };
// As a metadata watch's store holds it: no apiVersion or kind of its own.
const deployment = (rv: string) => ({ metadata: { name: 'site', namespace: 'demo', resourceVersion: rv } }) as never;

test("a watch event starts a trace: its receive span (ended at once, with the object's kind, name and version) and a queued span under it until the delivery starts", (t) => {
  const exported = traceInMemory(t);
  const traces = new DeliveryTraces('myweb');
  const observed = traces.received('demo/site', { type: 'apply', object: deployment('41'), kind }, 'child');
  assert.deepEqual(exported.getFinishedSpans().map((s) => s.name), ['receive Deployment'], 'the queued span runs on');
  traces.dequeued(observed);
  traces.dequeued(observed);
  const [receive, queued] = exported.getFinishedSpans();
  assert.equal(queued!.name, 'queued myweb');
  assert.equal(queued!.parentSpanContext?.spanId, receive!.spanContext().spanId);
  assert.equal(queued!.spanContext().traceId, receive!.spanContext().traceId);
  assert.equal(receive!.parentSpanContext, undefined, 'a root: a watch event starts the trace');
  assert.deepEqual(
    { kind: receive!.attributes['kfn.object.kind'], name: receive!.attributes['kfn.object.name'], ns: receive!.attributes['k8s.namespace.name'], rv: receive!.attributes['kfn.object.resource_version'], type: receive!.attributes['kfn.watch.event_type'], reason: receive!.attributes['kfn.reason'] },
    { kind: 'Deployment', name: 'site', ns: 'demo', rv: '41', type: 'apply', reason: 'child' },
  );
  assert.equal(exported.getFinishedSpans().length, 2, 'dequeued twice (a retry) ends the queued span once');
});

test("the event that shows a function's own write links to that write's span: why this delivery happened is one click away", (t) => {
  const exported = traceInMemory(t);
  const traces = new DeliveryTraces('myweb');
  const write = trace.getTracer('test').startSpan('applying Deployment demo/site');
  write.end();
  traces.answered([{ action: 'applied', ref: { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'demo', name: 'site', resourceVersion: '42' }, traceparent: traceparentOf(write.spanContext()) }]);
  traces.received('demo/site', { type: 'apply', object: deployment('41'), kind }, 'child');
  traces.received('demo/site', { type: 'apply', object: deployment('42'), kind }, 'child');
  const receives = exported.getFinishedSpans().filter((s) => s.name === 'receive Deployment');
  assert.deepEqual(receives.map((s) => s.links.length), [0, 1], 'only the event of the version written links to it');
  assert.equal(receives[1]!.links[0]!.context.spanId, write.spanContext().spanId);
  assert.equal(receives[1]!.links[0]!.context.traceId, write.spanContext().traceId);
});

test('a later event for an object already waiting joins its trace: the waiting one links to it and the later queued span ends', (t) => {
  const exported = traceInMemory(t);
  const traces = new DeliveryTraces('myweb');
  const first = traces.received('demo/site', { type: 'apply', object: deployment('1'), kind }, 'child');
  const later = traces.received('demo/site', { type: 'apply', object: deployment('2'), kind }, 'child');
  traces.alsoReceived(first, later);
  traces.dequeued(first);
  const queued = exported.getFinishedSpans().filter((s) => s.name === 'queued myweb');
  assert.equal(queued.length, 2);
  const waiting = queued.find((s) => s.spanContext().traceId === trace.getSpanContext(first.context)!.traceId)!;
  assert.deepEqual(waiting.links.map((l) => l.context.spanId), [trace.getSpanContext(later.context)!.spanId]);
});

test("an event that comes before the answer naming its write (the watch is quicker than the reconcile's end): the waiting observation's queued span links to the write", (t) => {
  const exported = traceInMemory(t);
  const traces = new DeliveryTraces('myweb');
  const write = trace.getTracer('test').startSpan('applying Deployment demo/site');
  write.end();
  const observed = traces.received('demo/site', { type: 'apply', object: deployment('42'), kind }, 'child');
  traces.answered([{ action: 'applied', ref: { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'demo', name: 'site', resourceVersion: '42' }, traceparent: traceparentOf(write.spanContext()) }]);
  traces.dequeued(observed);
  const queued = exported.getFinishedSpans().find((s) => s.name === 'queued myweb')!;
  assert.deepEqual(queued.links.map((l) => l.context.spanId), [write.spanContext().spanId]);
  // Linked once: the same version seen again later starts no second link.
  traces.received('demo/site', { type: 'apply', object: deployment('42'), kind }, 'child');
  assert.deepEqual(exported.getFinishedSpans().filter((s) => s.name === 'receive Deployment').map((s) => s.links.length), [0, 0]);
});
