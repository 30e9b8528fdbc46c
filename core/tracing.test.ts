import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as sdk from '@opentelemetry/sdk-trace';
import { samplerFromEnv, spanContextOf, traceparentOf, tracingWanted } from './tracing.ts';

test('tracing is wanted when an OTLP endpoint is set, unless the SDK or the traces exporter is turned off', () => {
  assert.equal(tracingWanted({}), false);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), true);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }), true);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }), false);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }), false);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'console,otlp' }), true);
});

test('OTEL_TRACES_SAMPLER and its argument choose the sampler, as the specification names them', () => {
  const s = (env: NodeJS.ProcessEnv) => samplerFromEnv(env, sdk).toString();
  assert.equal(s({}), 'ParentBased{root=AlwaysOnSampler, remoteParentSampled=AlwaysOnSampler, remoteParentNotSampled=AlwaysOffSampler, localParentSampled=AlwaysOnSampler, localParentNotSampled=AlwaysOffSampler}');
  assert.equal(s({ OTEL_TRACES_SAMPLER: 'always_off' }), 'AlwaysOffSampler');
  assert.equal(s({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' }), 'TraceIdRatioBased{0.25}');
  assert.match(s({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' }), /^ParentBased\{root=TraceIdRatioBased\{0\.1\},/);
  assert.match(s({ OTEL_TRACES_SAMPLER: 'sometimes' }), /^ParentBased\{root=AlwaysOnSampler,/, 'an unknown name: the default');
  assert.equal(s({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }), 'TraceIdRatioBased{1}', 'a ratio out of range: every trace');
});

test('a traceparent and a span context are each other\'s, and anything else is none', () => {
  const sc = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1 };
  assert.equal(traceparentOf(sc), '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
  assert.deepEqual(spanContextOf(traceparentOf(sc)), { ...sc, isRemote: true });
  for (const bad of [undefined, '', 'x', '00-00000000000000000000000000000000-00f067aa0ba902b7-01', '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01']) assert.equal(spanContextOf(bad), undefined, String(bad));
});
