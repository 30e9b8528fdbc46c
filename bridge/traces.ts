// The bridge's part of a trace (core/tracing.ts): a span when a watch event makes an object
// need a delivery ("receive <Kind>", after OpenTelemetry's messaging conventions), one for the
// time it waits in the queue, and one per delivery attempt ("send <reconciler>"), whose W3C
// traceparent travels with the event so the function's spans continue the trace. A function
// that traces names each write's span in its answer (Change.traceparent); when the watch then
// shows that write, the receive span it causes links to it, or — when the event came first, as
// it often does while the reconcile is still writing — the queued span of the observation it
// joined: "why did this run" is one click.
// The traces watch the path, they do not run it: they see observations come and go as
// bridge/pending.ts's ObservationObserver, and wrap a delivery's send. Nothing here runs with
// tracing off: the callers ask `tracing.on` first.
import { context, trace, ROOT_CONTEXT, SpanKind, SpanStatusCode, type Context, type Link, type Span, type SpanContext } from '@opentelemetry/api';
import type { DeliveryResult } from './delivery.ts';
import type { HttpMessage } from '../core/authentication.ts';
import type { ReconcileCloudEvent } from '../core/event.ts';
import type { KindRef } from '../core/objects.ts';
import type { Change } from '../core/response.ts';
import { inSpan, spanContextOf, tracer, withTraceHeaders } from '../core/tracing.ts';
import type { KubeObject } from '../kube/api.ts';

/** What a pending observation carries of its trace: the receive span's context, and its time in the queue. */
export interface ObservationTrace {
  context: Context;
  queued?: Span;
  /** The object versions whose events it holds (for links to the writes that made them). */
  versions: string[];
}

/** The most writes remembered for linking (the oldest go first): a few minutes of a busy function's writes. */
const maxRememberedWrites = 10_000;

/** How many later events a queued observation links to, at most (events for one object while it waits). */
const maxLinks = 16;

const writeKey = (apiVersion: string, kind: string, namespace: string | undefined, name: string, resourceVersion: string) => `${apiVersion}/${kind}/${namespace ?? ''}/${name}@${resourceVersion}`;

/** The watch event an observation came from: its object's version may be a write of this bridge's. */
export interface TraceCause {
  type: string;
  object: KubeObject;
  kind: KindRef;
}

export class DeliveryTraces {
  private readonly writes = new Map<string, SpanContext>();
  /** Object versions seen in events → the queued span of the observation waiting with them. */
  private readonly seen = new Map<string, Span>();
  private readonly linked = new WeakMap<Span, number>();
  private readonly reconciler: string;

  constructor(reconciler: string) {
    this.reconciler = reconciler;
  }

  /**
   * A watch event (or a resync, without one) makes `key` need a delivery: its receive span,
   * ended at once, linked to the write of kfn's that caused it when there was one; and its
   * queued span, running until the delivery starts.
   */
  received(key: string, cause: TraceCause | undefined, reason: string): ObservationTrace {
    const links: Link[] = [];
    const obj = cause?.object;
    const rv = obj?.metadata.resourceVersion;
    // The watch's kind: a listed item (or a compact record) need not carry its own.
    const version = cause && obj && rv ? writeKey(cause.kind.apiVersion, cause.kind.kind, obj.metadata.namespace, obj.metadata.name, rv) : undefined;
    const written = version && this.writes.get(version);
    if (written) links.push({ context: written, attributes: { 'kfn.link': writeLink } });
    const kind = cause?.kind.kind;
    const span = tracer().startSpan(`receive ${kind ?? this.reconciler}`, {
      kind: SpanKind.CONSUMER,
      root: true,
      links,
      attributes: {
        'messaging.system': 'kubernetes',
        'messaging.operation.type': 'receive',
        'messaging.destination.name': kind ?? 'resync',
        'kfn.reconciler': this.reconciler,
        'kfn.key': key,
        'kfn.reason': reason,
        ...(cause ? { 'kfn.watch.event_type': cause.type } : {}),
        ...(obj
          ? {
              'kfn.object.kind': kind ?? '',
              'kfn.object.name': obj.metadata.name,
              ...(obj.metadata.namespace ? { 'k8s.namespace.name': obj.metadata.namespace } : {}),
              ...(rv ? { 'kfn.object.resource_version': rv } : {}),
            }
          : {}),
      },
    });
    span.end();
    const ctx = trace.setSpan(context.active(), span);
    const queued = tracer().startSpan(`queued ${this.reconciler}`, { attributes: { 'kfn.reconciler': this.reconciler, 'kfn.key': key } }, ctx);
    // The event may come before the answer naming its write (the watch is quick, the reconcile
    // still writing): the answer then links the queued span.
    if (version && !written) remember(this.seen, version, queued);
    return { context: ctx, queued, versions: version && !written ? [version] : [] };
  }

  /** A later event for an object already waiting: the waiting observation's queued span links to it. */
  alsoReceived(waiting: ObservationTrace, later: ObservationTrace): void {
    later.queued?.end();
    const queued = waiting.queued;
    if (!queued) return;
    for (const version of later.versions) {
      if (waiting.versions.length >= maxLinks) break;
      remember(this.seen, version, queued);
      waiting.versions.push(version);
    }
    const count = (this.linked.get(queued) ?? 0) + 1;
    if (count > maxLinks) return;
    this.linked.set(queued, count);
    queued.addLink({ context: trace.getSpanContext(later.context)!, attributes: { 'kfn.link': 'a later event for the same object' } });
  }

  /** The delivery starts: the queued span ends (a retry has none left). */
  dequeued(t: ObservationTrace): void {
    if (!t.queued) return;
    t.queued.end();
    // Its versions' writes can no longer be linked to it: the next events of them start afresh.
    for (const version of t.versions) if (this.seen.get(version) === t.queued) this.seen.delete(version);
    t.queued = undefined;
    t.versions = [];
  }

  /**
   * One delivery attempt of an observation, in a span whose traceparent travels with the event
   * (`send` is given the message with it): the function's spans continue its trace. The
   * observation's time queued ends as the attempt starts.
   */
  sending<T extends { result: DeliveryResult; sink: string }>(message: HttpMessage, event: ReconcileCloudEvent, reason: string, attempt: number, t: ObservationTrace | undefined, send: (message: HttpMessage) => Promise<T>): Promise<T> {
    if (t) this.dequeued(t);
    const attributes = {
      'messaging.system': 'cloudevents',
      'messaging.operation.type': 'send',
      'messaging.destination.name': this.reconciler,
      'cloudevents.event_id': event.id,
      'cloudevents.event_type': event.type,
      'cloudevents.event_source': event.source,
      ...(event.subject ? { 'cloudevents.event_subject': event.subject } : {}),
      'kfn.reason': reason,
      'kfn.attempt': attempt,
    };
    return inSpan(`send ${this.reconciler}`, attributes, async (span) => {
      const sent = await send({ ...message, headers: withTraceHeaders(message.headers, context.active()) });
      const { result } = sent;
      span?.setAttributes({ 'kfn.outcome': result.outcome.kind, ...(result.status !== undefined ? { 'http.response.status_code': result.status } : {}), 'server.address': sent.sink });
      if (result.outcome.kind === 'retry' || result.outcome.kind === 'terminal') span?.setStatus({ code: SpanStatusCode.ERROR, message: result.outcome.why });
      return sent;
    }, { parent: t?.context ?? ROOT_CONTEXT, kind: SpanKind.PRODUCER });
  }

  /** The writes a function's answer names with their spans: the events that show them will link to them. */
  answered(changes: readonly Change[]): void {
    for (const change of changes) {
      const sc = spanContextOf(change.traceparent);
      const { ref } = change;
      if (!sc || !ref.resourceVersion) continue;
      const version = writeKey(ref.apiVersion, ref.kind, ref.namespace, ref.name, ref.resourceVersion);
      // Its event seen already, and the observation still waiting: linked now.
      const waiting = this.seen.get(version);
      this.seen.delete(version);
      if (waiting?.isRecording()) waiting.addLink({ context: sc, attributes: { 'kfn.link': writeLink } });
      else remember(this.writes, version, sc);
    }
  }
}

const writeLink = "the function's write this event shows";

/** Sets `key` in a map that keeps the newest maxRememberedWrites entries. */
function remember<T>(map: Map<string, T>, key: string, value: T): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > maxRememberedWrites) map.delete(map.keys().next().value!);
}
