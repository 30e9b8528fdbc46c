import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '../cluster/paths.ts';
import { bridgeHeapPercent, bridgeNodeOptions, bridgeNodeOptionsAt } from './main.ts';
import { contractAnnotation } from '../core/names.ts';
import { contractVersion } from '../core/event.ts';

test("the bridge's Deployment runs node with the V8 flags the benchmarks measure, and this Node accepts them", () => {
  const docs = parseAllDocuments(readFileSync(join(repoRoot, 'manifests', 'bridge', 'deployment.yaml'), 'utf8')).map((d) => d.toJS());
  const container = docs.find((d) => d?.kind === 'Deployment').spec.template.spec.containers[0];
  const flags = bridgeNodeOptions.split(' ');
  // The bridge image's entrypoint (cli/artifacts/images.ts) with the flags between node and the bundle.
  assert.deepEqual(container.command, ['/usr/local/bin/node', ...flags, '/app/kfn.mjs']);
  assert.equal(container.args[0], 'bridge');
  // A flag a Node release drops makes node refuse to start: the bridge's pod would crash-loop.
  const run = spawnSync(process.execPath, [...flags, '-e', 'process.exit(0)'], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
});

test("the bridge's Deployment, in manifests/ and in the Helm chart, says the event contract it speaks (what kfn deploy checks)", () => {
  const docs = parseAllDocuments(readFileSync(join(repoRoot, 'manifests', 'bridge', 'deployment.yaml'), 'utf8')).map((d) => d.toJS());
  assert.equal(docs.find((d) => d?.kind === 'Deployment').metadata.annotations[contractAnnotation], String(contractVersion));
  const template = readFileSync(join(repoRoot, 'charts', 'kfn', 'templates', 'deployment.yaml'), 'utf8');
  assert.ok(template.includes(`${contractAnnotation}: "${contractVersion}"`), 'the chart\'s Deployment too');
  // And the chart's flags are the benchmarked ones.
  const values = parseAllDocuments(readFileSync(join(repoRoot, 'charts', 'kfn', 'values.yaml'), 'utf8'))[0]!.toJS() as { nodeOptions: string[] };
  assert.deepEqual(values.nodeOptions, bridgeNodeOptions.split(' '));
});

test("the bridge's heap ceiling follows the memory it is given (a container's limit), not a fixed size", () => {
  // What V8 will let the old space grow to, and what Node takes as available (the cgroup's limit, else the host's).
  const probe = "const v8 = require('node:v8'); const os = require('node:os'); const c = process.constrainedMemory(); console.log(JSON.stringify({ limit: v8.getHeapStatistics().heap_size_limit, available: c > 0 && c < os.totalmem() ? c : os.totalmem() }))";
  const run = spawnSync(process.execPath, [...bridgeNodeOptions.split(' '), '-e', probe], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  const { limit, available } = JSON.parse(run.stdout) as { limit: number; available: number };
  const share = limit / available;
  assert.ok(share > (bridgeHeapPercent - 5) / 100 && share < (bridgeHeapPercent + 5) / 100, `heap ceiling ${(limit / 2 ** 20).toFixed(0)} MiB of ${(available / 2 ** 20).toFixed(0)} MiB available`);
  // Outside a container (a benchmark), the ceiling a 512 MiB limit gives.
  assert.match(bridgeNodeOptionsAt(512), /--max-old-space-size=358 /);
  assert.doesNotMatch(bridgeNodeOptionsAt(512), /percentage/);
});
