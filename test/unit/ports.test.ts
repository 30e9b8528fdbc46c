// The tests' NodePorts (test/support/ports.ts): disjoint blocks, handed out without repeats, and
// every test file that sets a NodePort takes it from there.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { nodePortRange, nodePorts, nodePortsInUse, portBlocks, samplePorts, type PortOwner } from '../support/ports.ts';

const testRoot = join(import.meta.dirname, '..');

test('the blocks lie in the NodePort range and overlap neither each other nor the samples', () => {
  const spans = [{ name: 'samples', first: samplePorts.first, last: samplePorts.last }, ...Object.entries(portBlocks).map(([name, b]) => ({ name, first: b.first, last: b.first + b.size - 1 }))].sort((a, b) => a.first - b.first);
  for (const s of spans) {
    assert.ok(s.first >= nodePortRange.first && s.last <= nodePortRange.last, `${s.name}: ${s.first}–${s.last} is outside ${nodePortRange.first}–${nodePortRange.last}`);
    assert.ok(s.last >= s.first, `${s.name} is empty`);
  }
  for (let i = 1; i < spans.length; i++) assert.ok(spans[i]!.first > spans[i - 1]!.last, `${spans[i - 1]!.name} (${spans[i - 1]!.first}–${spans[i - 1]!.last}) overlaps ${spans[i]!.name} (${spans[i]!.first}–${spans[i]!.last})`);
});

test('a block is handed out in order from its start, passing over the numbers Services hold at the time; past its end it fails', async () => {
  const owner: PortOwner = 'e2e/tracing';
  const { first, size } = portBlocks[owner];
  // The cluster's Services, as the apiserver lists them: a fake of the one request the allocator makes.
  const held = new Set([first + 1, first + 2, 31000]);
  const api = {
    request: async <T>(method: string, path: string) => {
      assert.equal(`${method} ${path}`, 'GET /api/v1/services');
      return { items: [...held].map((nodePort) => ({ spec: { ports: [{ port: 80, nodePort }, { port: 81 }] } })), ...{} } as T;
    },
  };
  assert.deepEqual(await nodePortsInUse(api), held);
  const next = nodePorts(owner);
  assert.equal(await next(api), first);
  assert.equal(await next(api), first + 3, 'the two held by Services are passed over');
  held.add(first + 4); // a Service (a port the apiserver chose itself) takes the next one meanwhile
  assert.equal(await next(api), first + 5);
  held.delete(first + 1); // freed, but behind: the source does not go back
  const rest = [];
  for (let i = 6; i < size; i++) rest.push(await next(api));
  assert.deepEqual(rest, Array.from({ length: size - 6 }, (_, i) => first + 6 + i));
  await assert.rejects(next(api), /e2e\/tracing needs more than the 10 ports of its block \(30440–30449\)/);
});

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : name.endsWith('.ts') ? [path] : [];
  });
}

test('every test file that sets a NodePort takes it from test/support/ports.ts', () => {
  // `nodePort: 30123`, `nodePortNumber: port`, `.nodePortNumber = …`, `'nodePort': …`, but not a type (`nodePort: number`).
  const sets = /nodePort(?:Number)?['"]?\s*(?::|=(?!=))\s*(?!number\b)[\w$]/;
  const setters = [join(testRoot, 'e2e'), join(testRoot, 'integration'), join(testRoot, 'support')].flatMap(files).filter((f) => sets.test(readFileSync(f, 'utf8')));
  assert.ok(setters.length >= 8, `found only ${setters.length} files that set a NodePort: the pattern no longer matches the tests`);
  const strays = setters.filter((f) => !f.endsWith('/ports.ts') && !/from '(?:\.\.\/support|\.)\/ports\.ts'/.test(readFileSync(f, 'utf8')));
  assert.deepEqual(strays.map((f) => relative(testRoot, f)), [], 'these files set NodePorts of their own choosing, which can clash with another file running in parallel');
  // Nor a number of the range written out (a helper called with 31500): only refusals outside it.
  const literal = /(?<![\w.])(3[0-2][0-9]{3}|3_?0[0-9]{3})(?![\w.])/g;
  const literals = setters.filter((f) => !f.endsWith('/ports.ts')).flatMap((f) => [...readFileSync(f, 'utf8').matchAll(literal)].map((m) => Number(m[1]!.replace('_', ''))).filter((n) => n >= nodePortRange.first && n <= nodePortRange.last).map((n) => `${relative(testRoot, f)}: ${n}`));
  assert.deepEqual(literals, [], 'NodePort numbers written in a test file');
});
