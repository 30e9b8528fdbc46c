// Tracing, after OpenTelemetry: one trace follows a change from the bridge's watch event through
// the delivery to the function's steps and the writes they made. Off unless the standard
// variables say where to send spans (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it
// off), and then the SDK and the OTLP exporter (the official packages) are loaded; off, only
// @opentelemetry/api's no-op is in the path, and kfn's own code checks `tracing.on` before
// building any span's attributes.
import { context, propagation, ROOT_CONTEXT, trace, SpanKind, SpanStatusCode, type Attributes, type Context, type Span, type SpanContext } from '@opentelemetry/api';
import { systemClock, within, type Clock } from './clock.ts';

export { SpanKind };

/** Whether spans are being exported (startTracing turned it on). */
export const tracing = { on: false };

/** The tracer every span of kfn's is started with. */
export const tracer = () => trace.getTracer('kfn');

/** Whether `env` asks for traces over OTLP. */
export function tracingWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = env.OTEL_TRACES_EXPORTER?.split(',').map((e) => e.trim().toLowerCase());
  if (exporters && !exporters.includes('otlp')) return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

export interface Tracing {
  /** Sends what is buffered now (a Lambda, before its process is frozen). */
  flush(): Promise<void>;
  /** Sends what is buffered and stops: call before the process exits. */
  shutdown(): Promise<void>;
}

/**
 * Starts exporting spans over OTLP (http/protobuf) when the environment asks for it, as service
 * `serviceName` (OTEL_SERVICE_NAME wins); undefined when it does not. The exporter reads the
 * other OTEL_EXPORTER_OTLP_* variables itself (headers, timeout, compression).
 */
export async function startTracing(serviceName: string, env: NodeJS.ProcessEnv = process.env, clock: Clock = systemClock): Promise<Tracing | undefined> {
  if (!tracingWanted(env)) return undefined;
  const [sdk, { OTLPTraceExporter }, { AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/exporter-trace-otlp-proto'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
  ]);
  const { TracerProvider, BatchSpanProcessor } = sdk;
  const provider = new TracerProvider({
    sampler: samplerFromEnv(env, sdk),
    resource: defaultResource().merge(resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME || serviceName })),
    // A second between exports: a reconcile's trace is readable about a second after it ends.
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter(), scheduledDelayMillis: 1000 })],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  tracing.on = true;
  // Bounded: a collector that does not answer costs a delivery (a Lambda's flush) or a stopping
  // process at most this, never the exporter's whole timeout.
  return {
    flush: async () => void (await within(clock, provider.forceFlush(), 2000)),
    async shutdown() {
      tracing.on = false;
      await within(clock, provider.shutdown(), 5000);
    },
  };
}

/** The W3C traceparent of a span context: what a header carries, and a Change names its write's span by. */
export function traceparentOf(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-0${(sc.traceFlags & 1).toString(16)}`;
}

/** The span context a traceparent names, or undefined when it is not one. */
export function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  const m = traceparent?.match(/^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/);
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & 1, isRemote: true };
}

/** The traceparent of the span active now, when tracing is on and there is one. */
export function activeTraceparent(): string | undefined {
  if (!tracing.on) return undefined;
  const span = trace.getActiveSpan();
  return span ? traceparentOf(span.spanContext()) : undefined;
}

/**
 * Runs `fn` in a span named `name` (a child of the active one), ended when `fn` settles; a
 * thrown error marks it failed. With tracing off, `fn` alone runs.
 */
export async function inSpan<T>(name: string, attributes: Attributes | (() => Attributes), fn: (span: Span | undefined) => Promise<T>, options: { parent?: Context; kind?: SpanKind } = {}): Promise<T> {
  if (!tracing.on) return fn(undefined);
  const attrs = typeof attributes === 'function' ? attributes() : attributes;
  return tracer().startActiveSpan(name, { attributes: attrs, ...(options.kind !== undefined ? { kind: options.kind } : {}) }, options.parent ?? context.active(), async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** The context a request's W3C trace headers continue (a new trace when they carry none). */
export function contextFromHeaders(headers: Record<string, string | string[] | undefined>): Context {
  return propagation.extract(ROOT_CONTEXT, headers);
}

/** `headers` with the W3C trace headers of `ctx` added (traceparent, and tracestate when there is one). */
export function withTraceHeaders(headers: Record<string, string>, ctx: Context): Record<string, string> {
  const carrier: Record<string, string> = { ...headers };
  propagation.inject(ctx, carrier);
  return carrier;
}

type SamplerKit = Pick<typeof import('@opentelemetry/sdk-trace'), 'AlwaysOnSampler' | 'AlwaysOffSampler' | 'TraceIdRatioBasedSampler' | 'ParentBasedSampler'>;

/**
 * The sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name, as the OpenTelemetry
 * specification defines them (the SDK package no longer reads them itself): always_on,
 * always_off, traceidratio, and each parentbased_ one; the default, parentbased_always_on,
 * follows the bridge's decision in the function. An unknown name or ratio is said and the
 * default used.
 */
export function samplerFromEnv(env: NodeJS.ProcessEnv, kit: SamplerKit) {
  const name = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase() || 'parentbased_always_on';
  const arg = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = () => {
    const r = arg === undefined || arg === '' ? 1 : Number(arg);
    if (Number.isFinite(r) && r >= 0 && r <= 1) return new kit.TraceIdRatioBasedSampler(r);
    console.error(`kfn: OTEL_TRACES_SAMPLER_ARG=${arg} is not a ratio between 0 and 1: sampling every trace`);
    return new kit.TraceIdRatioBasedSampler(1);
  };
  const root = (base: string) => (base === 'always_on' ? new kit.AlwaysOnSampler() : base === 'always_off' ? new kit.AlwaysOffSampler() : base === 'traceidratio' ? ratio() : undefined);
  const parent = name.startsWith('parentbased_');
  const chosen = root(parent ? name.slice('parentbased_'.length) : name);
  if (!chosen) {
    console.error(`kfn: OTEL_TRACES_SAMPLER=${name} is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio: using parentbased_always_on`);
    return new kit.ParentBasedSampler({ root: new kit.AlwaysOnSampler() });
  }
  return parent ? new kit.ParentBasedSampler({ root: chosen }) : chosen;
}
