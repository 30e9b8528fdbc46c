// Tracing on, into memory, for a test: the same global setup core/tracing.ts's startTracing
// makes (the SDK's provider, the AsyncLocalStorage context manager, W3C propagation), with an
// in-memory exporter that hands each span over as it ends. Turned off again when the test ends.
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { TestContext } from 'node:test';
import { tracing } from '../../core/tracing.ts';

export function traceInMemory(t: TestContext): InMemorySpanExporter {
  const exporter = new InMemorySpanExporter();
  const manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }));
  tracing.on = true;
  t.after(() => {
    tracing.on = false;
    trace.disable();
    propagation.disable();
    context.disable();
  });
  return exporter;
}
