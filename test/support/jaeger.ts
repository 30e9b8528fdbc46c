// A real Jaeger v2 (built from its Go module, cluster/jaeger.ts) on 127.0.0.1, for the tracing
// tests: OTLP over HTTP in, in-memory storage, its query API out. Stopped when the test ends.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { stringify } from 'yaml';
import { freePort } from './bridge.ts';
import { getJson, startService } from './service.ts';

/** A span as Jaeger's query API (/api/traces) gives it. */
export interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references: { refType: 'CHILD_OF' | 'FOLLOWS_FROM'; traceID: string; spanID: string }[];
  startTime: number;
  duration: number;
  tags: { key: string; value: unknown }[];
  processID: string;
}

export interface JaegerTrace {
  traceID: string;
  spans: JaegerSpan[];
  processes: Record<string, { serviceName: string }>;
}

export interface LocalJaeger {
  /** What OTEL_EXPORTER_OTLP_ENDPOINT is set to (OTLP over HTTP). */
  otlpEndpoint: string;
  log: string;
  /** The traces that have spans of `service`, newest first. */
  traces(service: string, limit?: number): Promise<JaegerTrace[]>;
  trace(id: string): Promise<JaegerTrace | undefined>;
}

export async function startJaeger(t: TestContext, binary: string, dir: string): Promise<LocalJaeger> {
  mkdirSync(dir, { recursive: true });
  const [otlp, query, grpc] = [await freePort(), await freePort(), await freePort()];
  const config = join(dir, 'jaeger.yaml');
  writeFileSync(
    config,
    stringify({
      service: {
        extensions: ['jaeger_storage', 'jaeger_query'],
        pipelines: { traces: { receivers: ['otlp'], processors: ['batch'], exporters: ['jaeger_storage_exporter'] } },
        telemetry: { metrics: { level: 'none' }, logs: { level: 'warn' } },
      },
      extensions: {
        jaeger_storage: { backends: { memstore: { memory: { max_traces: 100_000 } } } },
        jaeger_query: { storage: { traces: 'memstore' }, http: { endpoint: `127.0.0.1:${query}` }, grpc: { endpoint: `127.0.0.1:${grpc}` } },
      },
      receivers: { otlp: { protocols: { http: { endpoint: `127.0.0.1:${otlp}` } } } },
      processors: { batch: { timeout: '200ms' } },
      exporters: { jaeger_storage_exporter: { trace_storage: 'memstore' } },
    }),
  );
  const log = join(dir, 'jaeger.log');
  const url = `http://127.0.0.1:${query}`;
  await startService(t, 'Jaeger', binary, [`--config=${config}`], log, () => fetch(`${url}/api/services`).then((r) => r.ok));
  const get = async <T>(path: string): Promise<T> => (await getJson<{ data: T }>('Jaeger', `${url}${path}`)).data;
  return {
    otlpEndpoint: `http://127.0.0.1:${otlp}`,
    log,
    traces: (service, limit = 100) => get<JaegerTrace[]>(`/api/traces?service=${encodeURIComponent(service)}&limit=${limit}&lookback=1h`),
    trace: async (id) => (await get<JaegerTrace[]>(`/api/traces/${id}`))[0],
  };
}

/** A trace as indented text: each span under its parent, with its service and duration. */
export function traceText(tr: JaegerTrace): string {
  const byParent = new Map<string, JaegerSpan[]>();
  const ids = new Set(tr.spans.map((s) => s.spanID));
  for (const s of tr.spans) {
    const parent = s.references.find((r) => r.refType === 'CHILD_OF' && ids.has(r.spanID))?.spanID ?? '';
    byParent.set(parent, [...(byParent.get(parent) ?? []), s]);
  }
  const lines: string[] = [];
  const walk = (parent: string, depth: number) => {
    for (const s of (byParent.get(parent) ?? []).sort((a, b) => a.startTime - b.startTime)) {
      const links = s.references.filter((r) => r.refType === 'FOLLOWS_FROM' || !ids.has(r.spanID)).length;
      lines.push(`${'  '.repeat(depth)}${s.operationName} [${tr.processes[s.processID]?.serviceName}] ${(s.duration / 1000).toFixed(1)} ms${links ? ` (${links} link${links > 1 ? 's' : ''})` : ''}`);
      walk(s.spanID, depth + 1);
    }
  };
  walk('', 0);
  return lines.join('\n');
}
