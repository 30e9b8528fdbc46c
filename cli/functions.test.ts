// Which folders under functions/ are functions: a folder whose module exports no default — a
// module of kinds that other functions import, as docs/functions.md's functions/shop — is passed
// over by every command that takes "every function" (kfn manifests, dev, build with no folder
// named; deploy and image with --all), with a note on stderr, rather than failing them.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { functionDirs } from './functions.ts';

function tree(t: { after: (fn: () => void) => void }, files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'kfn-function-dirs-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

test('a module of kinds only is no function: every function passes it over, saying so once', (t) => {
  const root = tree(t, {
    'shop/index.ts': "import { defineKind, t } from 'kfn/sdk';\nexport const Shop = defineKind({ group: 'example.com', version: 'v1', kind: 'Shop', spec: t.Object({}), status: t.Object({}) });\n",
    'guarded/index.ts': "import { defineReconciler } from 'kfn/sdk';\nimport { Shop } from '../shop/index.ts';\nexport default defineReconciler({ name: 'guarded', for: Shop, reconcile: () => ({}) });\n",
    'renamed/index.ts': "import reconciler from './reconciler.ts';\nexport { reconciler as default };\n",
    'compiled/index.js': 'export default { name: "compiled" };\n',
    'notes/README.md': 'no module here\n',
    'sdk/index.ts': 'export default 1;\n',
  });
  const notes: string[] = [];
  assert.deepEqual(functionDirs(root, (line) => notes.push(line)), ['compiled', 'guarded', 'renamed'].map((d) => join(root, d)));
  assert.equal(notes.length, 1, notes.join('\n'));
  assert.match(notes[0]!, /shop\/index\.ts exports no Reconciler \(no export default\): passed over, as a module other functions import/);
  assert.match(notes[0]!, /export default defineReconciler/, 'and how to make it a function');
});

test('a module that does not parse is kept: loading it then says where it is wrong', (t) => {
  const root = tree(t, { 'broken/index.ts': 'export const x = ;\n' });
  const notes: string[] = [];
  assert.deepEqual(functionDirs(root, (line) => notes.push(line)), [join(root, 'broken')]);
  assert.deepEqual(notes, []);
});
