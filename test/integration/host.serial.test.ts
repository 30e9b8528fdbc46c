// Leaving the host as found: `cluster down` removes everything the real node put on this
// machine (containers, mounts, the bridge, iptables chains, nft tables, cgroups, fixed paths)
// and restores the sysctls it changed; `cluster up` after a crash — from the same directory or
// from another checkout — cleans up the leftovers and starts. The cluster is started again at
// the end, for the tests that follow.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { clusterDown, clusterHealthy, clusterUp } from '../../cluster/controlplane.ts';
import { clusterPaths } from '../../cluster/paths.ts';
import { readState } from '../../cluster/state.ts';
import { hostDifferences, readHostSnapshot, takeHostSnapshot } from '../../cluster/host.ts';
import { nodePaths } from '../../cluster/node.ts';
import { isRunning } from '../../cluster/processes.ts';
import { testCluster, testClusterOptions } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

test('cluster down leaves the host as found; up after a crash cleans up and starts', async () => {
  const cluster = await testCluster();
  const log = (line: string) => console.error(`[cluster] ${line}`);
  const before = readHostSnapshot(nodePaths(cluster.paths.dir));
  assert.ok(before, 'cluster up recorded the host state before changing it');
  assert.notDeepEqual(hostDifferences(before, takeHostSnapshot()), [], 'a running node has changed the host (bridge, chains, cgroups…)');

  // A crash: every process killed at once, nothing cleaned up.
  for (const p of readState(cluster.paths)!.processes) process.kill(p.pid, 'SIGKILL');
  assert.equal(await clusterHealthy(cluster.paths), false);
  const restarted = await clusterUp({ paths: cluster.paths, ...testClusterOptions, log });
  assert.equal(restarted.reused, false);
  assert.equal(await clusterHealthy(cluster.paths), true, 'up after the crash started a healthy cluster');

  const recorded = readHostSnapshot(nodePaths(cluster.paths.dir))!;
  assert.deepEqual(hostDifferences(before, recorded), [], 'the crash left nothing behind that the next up recorded as the host\'s own');

  // Another crash, then an up from another checkout (as CI's fresh clone would run it): it
  // finds the bridge's owner, stopped, and cleans up after it first.
  const killed = readState(cluster.paths)!.processes;
  for (const p of killed) process.kill(p.pid, 'SIGKILL');
  await waitFor('the killed processes to be gone', async () => !killed.some(isRunning) || undefined);
  const elsewhere = clusterPaths(mkdtempSync(join(tmpdir(), 'kfn-other-checkout-')));
  const other = await clusterUp({ paths: elsewhere, log });
  assert.equal(await clusterHealthy(elsewhere), true, 'up from another directory after a crash started a healthy cluster');
  assert.deepEqual(hostDifferences(before, readHostSnapshot(nodePaths(elsewhere.dir))!), [], 'it recorded the host as it was before the first cluster');
  await clusterDown({ paths: elsewhere, log });
  assert.equal(other.reused, false);
  assert.deepEqual(hostDifferences(before, takeHostSnapshot()), [], 'down restored the host');
  assert.equal(existsSync(elsewhere.dir), false);

  await clusterUp({ paths: cluster.paths, ...testClusterOptions, log });
});
