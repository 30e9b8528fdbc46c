// A real Prometheus (built from its Go module, cluster/prometheus.ts) on 127.0.0.1, for the
// observability tests: it scrapes the given targets every second, evaluates the given rule files
// every second, and answers through its HTTP API. Stopped when the test ends.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { stringify } from 'yaml';
import { freePort } from './bridge.ts';
import { getJson, startService } from './service.ts';

export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

export interface RuleState {
  name: string;
  type: 'alerting' | 'recording';
  health: string;
  lastError?: string;
  state?: 'inactive' | 'pending' | 'firing';
  alerts?: { labels: Record<string, string>; state: string }[];
}

export interface LocalPrometheus {
  url: string;
  log: string;
  /** An instant query; throws with Prometheus' own error when it refuses the expression. */
  query(expr: string): Promise<Sample[]>;
  /** Every rule of every group, with its health and (alerts) state. */
  rules(): Promise<RuleState[]>;
  /** The scrape targets and their health. */
  targets(): Promise<{ job: string; url: string; health: string; lastError: string }[]>;
}

export async function startPrometheus(t: TestContext, binary: string, dir: string, options: { jobs: { job: string; targets: string[] }[]; ruleFiles?: string[] }): Promise<LocalPrometheus> {
  mkdirSync(dir, { recursive: true });
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    stringify({
      global: { scrape_interval: '1s', evaluation_interval: '1s', scrape_timeout: '900ms' },
      ...(options.ruleFiles?.length ? { rule_files: options.ruleFiles } : {}),
      scrape_configs: options.jobs.map((j) => ({ job_name: j.job, static_configs: [{ targets: j.targets }] })),
    }),
  );
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const log = join(dir, 'prometheus.log');
  await startService(t, 'Prometheus', binary, [`--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], log, () => fetch(`${url}/-/ready`).then((r) => r.ok));
  const api = async <T>(path: string): Promise<T> => (await getJson<{ data: T }>('Prometheus', `${url}${path}`)).data;
  return {
    url,
    log,
    query: async (expr) => (await api<{ result: Sample[] }>(`/api/v1/query?query=${encodeURIComponent(expr)}`)).result,
    rules: async () => (await api<{ groups: { rules: RuleState[] }[] }>('/api/v1/rules')).groups.flatMap((g) => g.rules),
    targets: async () =>
      (await api<{ activeTargets: { labels: { job: string }; scrapeUrl: string; health: string; lastError: string }[] }>('/api/v1/targets')).activeTargets.map((a) => ({ job: a.labels.job, url: a.scrapeUrl, health: a.health, lastError: a.lastError })),
  };
}
