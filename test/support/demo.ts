// Runs `kfn demo` (npm start) against the test cluster until its samples are Ready.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../cluster/paths.ts';
import type { TestCluster } from './cluster.ts';

/** The demo's exit status and everything it printed. */
export async function runDemo(cluster: TestCluster, ...args: string[]): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), 'demo', '--exit-when-ready', ...args], {
    env: { ...process.env, KUBECONFIG: cluster.paths.kubeconfig },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c));
  child.stderr.on('data', (c: Buffer) => (output += c));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  return { code, output };
}
