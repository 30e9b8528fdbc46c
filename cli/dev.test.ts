// kfn dev's reload on save, without a cluster: a save whose code does not type-check is reported
// as a build error is — where, in the UI and the log — and the version that runs stays.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { workRoot } from '../cluster/paths.ts';
import { DeliveryLog, type DevFunction } from './dev-app.ts';
import { reloadFunction } from './dev-function.ts';

// Under the checkout's .kfn/, so that the project finds the typescript package kfn is developed with.
mkdirSync(workRoot, { recursive: true });
const root = mkdtempSync(join(workRoot, 'dev-test-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** A project with one function folder whose index.ts loads but does not type-check. */
function brokenFunction(name: string): string {
  const dir = join(root, name, 'functions', 'web');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(root, name, 'tsconfig.json'), JSON.stringify({ compilerOptions: { strict: true, noEmit: true, target: 'esnext', module: 'nodenext', types: [] } }));
  writeFileSync(join(dir, 'index.ts'), 'const size = 3;\nconst spec: { replicas: number } = { replicas: String(size) };\nexport default spec;\n');
  return dir;
}

/** Reloads a function that runs as version 1 from `dir`; what it then holds, and what was said. */
async function reload(dir: string, typecheck: boolean): Promise<{ fn: DevFunction; said: string }> {
  const fn = { name: 'web', dir, version: 1, inputs: new Set<string>() } as DevFunction;
  const said: string[] = [];
  const say = (line: string) => said.push(line);
  await reloadFunction(fn, { cluster: {} as never, log: new DeliveryLog(undefined, say, () => 1), say, setReconcilers: async () => new Map(), typecheck });
  return { fn, said: said.join('\n') };
}

test('a save that does not type-check is not loaded: version 1 keeps running, and the error is said where', async () => {
  const { fn, said } = await reload(brokenFunction('types'), true);
  assert.equal(fn.version, 1);
  assert.match(fn.loadError ?? '', /functions\/web\/index\.ts:2:38: Type 'string' is not assignable to type 'number'/);
  assert.match(said, /reload of web failed; version 1 keeps running:\ntype errors in /);
});

test('with the type check off (--no-typecheck), the same save goes on to load the module', async () => {
  const { fn } = await reload(brokenFunction('unchecked'), false);
  // It loads past the types; what stops it now is that it exports no reconciler.
  assert.match(fn.loadError ?? '', /must export default defineReconciler/);
});
