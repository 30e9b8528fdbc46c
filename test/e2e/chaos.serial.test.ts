// The chaos soak (`npm run chaos`) in its short form: 30 objects of two example kinds churned for
// 45 s while the leading bridge is SIGKILLed or SIGTERMed every 10 s, deliveries fail (20 %) or
// outlive their deadline (5 %), the sinks answer 404 for 5 s, the Reconcilers are edited, the
// auth keys rotated both ways round, the bridges rolled to two shards, kube-apiserver restarts
// twice and etcd compaction forces 410s, some primaries are created with their finalizer, the
// functions' clocks run 50 s ahead and behind, and children are forged in another namespace;
// then every invariant is checked against the cluster. Serial: it restarts the apiserver.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../cluster/paths.ts';
import { testCluster } from '../support/cluster.ts';

test('chaos soak (short): every object converges, no duplicate or orphan children, finalizers ran, one delivery per object at a time, no hot loop', async (t) => {
  await testCluster();
  const child = spawn(process.execPath, [join(repoRoot, 'test', 'chaos', 'soak.ts'), '--objects', '30', '--seconds', '45', '--kill-every', '10', '--converge-seconds', '180'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c));
  child.stderr.on('data', (c: Buffer) => (output += c));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  for (const line of output.slice(output.indexOf('chaos soak\n')).split('\n').filter(Boolean)) t.diagnostic(line);
  assert.equal(code, 0, output);
  assert.match(output, /every invariant holds/);
  assert.match(output, /faults injected\s+\d+ × 500, \d+ × past the deadline, [1-9]\d* × 404 \(a 5 s window\), [1-9]\d* leader SIGKILLs, [1-9]\d* leader SIGTERMs, 2 apiserver restarts, 1 etcd compaction, \d+ primaries created with their finalizer/, 'the faults really happened');
  assert.match(output, /more faults\s+1 Reconciler edit, 2 key rotations \([1-9]\d* × 401 while they settled\), 1 rollout to 2 shards/, 'the edit, the rotations (with refusals) and the rollout really happened');
  assert.match(output, /files with an auth key\s+0 of [1-9]/);
  assert.match(output, /clocks, forgeries\s+2 functions 50 s off \(one ahead, one behind\); [1-9]\d* children forged in another namespace, 0 carried/, 'the clocks were skewed and children forged');
});
