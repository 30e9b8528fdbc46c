// What the benchmarks share: percentiles, bounded parallel requests, a process's resident set,
// and waiting for a new kind to be served.
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeApi } from '../../kube/api.ts';

/** The p-th percentile (nearest rank) of `xs`, which need not be sorted; NaN when empty. */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? NaN;
}

/** Runs `fn` for 0..n-1 with `parallel` calls in flight. */
export async function inParallel(n: number, parallel: number, fn: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < n) await fn(next++);
  }));
}

/** A process's resident set (VmRSS) in MiB. */
export function rssMiB(pid: number): number {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Waits (up to 10 s) until the apiserver serves `kind` of `apiVersion`, e.g. after its CRD was created. */
export async function untilServed(api: KubeApi, apiVersion: string, kind: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      await api.resource(apiVersion, kind);
      return;
    } catch (err) {
      if (i >= 100) throw err;
      await sleep(100);
    }
  }
}
