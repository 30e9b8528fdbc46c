// Leaving the host as found: `cluster down` removes everything the real node put on this
// machine (containers, mounts, the bridge, iptables chains, nft tables, cgroups, fixed paths)
// and restores the sysctls it changed; `cluster up` after a crash cleans up the leftovers and
// starts. The cluster is started again at the end, for the tests that follow.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { clusterDown, clusterHealthy, clusterUp, readState } from '../../cluster/controlplane.ts';
import { hostDifferences, nodePaths, readHostSnapshot, takeHostSnapshot } from '../../cluster/node.ts';
import { testCluster, testClusterOptions } from '../support/cluster.ts';

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
  await clusterDown({ paths: cluster.paths, log });
  assert.deepEqual(hostDifferences(before, takeHostSnapshot()), [], 'down restored the host');
  assert.equal(existsSync(cluster.paths.dir), false);

  await clusterUp({ paths: cluster.paths, ...testClusterOptions, log });
});
