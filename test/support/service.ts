// A server the tests run beside the cluster (Prometheus, Jaeger): its binary started with its log
// in a file, ready once `ready` answers true, stopped (SIGTERM, then SIGKILL after 5 s) when the
// test ends.
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import type { TestContext } from 'node:test';
import { waitFor } from '../../core/clock.ts';

export async function startService(t: TestContext, what: string, binary: string, args: string[], log: string, ready: () => Promise<boolean>): Promise<void> {
  const fd = openSync(log, 'a');
  const child = spawn(binary, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.after(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(killer);
  });
  const tail = () => readFileSync(log, 'utf8').trimEnd().split('\n').slice(-10).join('\n');
  await waitFor(`${what} to be ready`, ready, {
    timeoutMs: 60_000,
    abandon: () => (child.exitCode !== null ? `${what} exited with ${child.exitCode}:\n${tail()}` : undefined),
    context: tail,
  });
}

/** GETs `url` from such a server as JSON; an error status throws with what the server said. */
export async function getJson<T>(what: string, url: string): Promise<T> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${what} ${new URL(url).pathname}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}
