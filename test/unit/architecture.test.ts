// The rules docs/architecture.md states, checked against the tree: which room may import which,
// and the concepts that are defined once, in their home, and nowhere else.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { test } from 'node:test';

const root = join(import.meta.dirname, '..', '..');

function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (name === 'node_modules' || name.startsWith('.')) return [];
    if (statSync(join(root, path)).isDirectory()) return sources(path);
    return /\.(ts|mjs)$/.test(name) ? [path] : [];
  });
}

const rooms = ['core', 'kube', 'bridge', 'functions', 'cluster', 'cli', 'test'];
const all = rooms.flatMap(sources);
const isTest = (file: string) => file.startsWith('test/') || /\.test\.ts$/.test(file);

/** The room a file lives in: an example function's folder is a room of its own. */
function roomOf(file: string): string {
  const [top, second] = file.split('/');
  return top === 'functions' ? `functions/${second === 'sdk' ? 'sdk' : 'example'}` : top!;
}

/** What each room may import besides itself (node's modules and npm packages aside). */
const allowed: Record<string, string[]> = {
  core: [],
  kube: ['core'],
  bridge: ['core', 'kube'],
  'functions/sdk': ['core', 'kube'],
  'functions/example': ['functions/sdk'],
  cluster: ['core', 'kube'],
  cli: ['core', 'kube', 'bridge', 'functions/sdk', 'cluster'],
};

function importsOf(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const specs = [...text.matchAll(/^\s*(?:import|export)\b[^'"`;]*?\bfrom\s+'(\.[^']+)'/gm), ...text.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)].map((m) => m[1]!);
  return specs.map((spec) => normalize(join(dirname(file), spec)));
}

test('every room imports only the rooms below it (docs/architecture.md)', () => {
  const wrong: string[] = [];
  for (const file of all) {
    const from = roomOf(file);
    for (const target of importsOf(file)) {
      const to = roomOf(target);
      if (to === from) {
        // An example function imports only the SDK and its own folder, never another example.
        if (from === 'functions/example' && !isTest(file) && target.split('/')[1] !== file.split('/')[1]) wrong.push(`${file} → ${target} (an example imports only the SDK)`);
        continue;
      }
      // Tests and their support may use anything as a fixture (an example function, the cluster's PKI).
      if (isTest(file)) continue;
      if (!allowed[from]?.includes(to)) wrong.push(`${file} → ${target}`);
    }
  }
  assert.deepEqual(wrong, [], 'imports that break the room rules');
});

/**
 * Concepts with one home. Each name may be declared (function, class, interface, type, const)
 * only in the file given, in code and tests alike: a second definition is a second meaning.
 */
const homes: Record<string, string> = {
  objectKey: 'core/objects.ts',
  objectId: 'core/objects.ts',
  groupOf: 'core/objects.ts',
  sameKind: 'core/objects.ts',
  KindRef: 'core/objects.ts',
  ObjectRef: 'core/objects.ts',
  refOf: 'core/objects.ts',
  clusterScopedKinds: 'core/objects.ts',
  FieldPath: 'core/paths.ts',
  valueAt: 'core/paths.ts',
  valuesAt: 'core/paths.ts',
  mapValuesAt: 'core/paths.ts',
  setValueAt: 'core/paths.ts',
  pickFields: 'core/paths.ts',
  Condition: 'core/conditions.ts',
  settleCondition: 'core/conditions.ts',
  whyNotReady: 'core/conditions.ts',
  JournalEntry: 'core/journal.ts',
  maxTimerMs: 'core/clock.ts',
  waitFor: 'core/clock.ts',
  ownerUidLabel: 'core/names.ts',
  reconcilerLabel: 'core/names.ts',
  reconcilerApiVersion: 'core/names.ts',
  encodeReconcileEvent: 'core/event.ts',
  parseReconcileRequest: 'core/event.ts',
  classifyResponse: 'core/response.ts',
  Credentials: 'core/authentication.ts',
  openApi: 'kube/crd.ts',
  customResourceDefinition: 'kube/crd.ts',
  PrinterColumn: 'kube/crd.ts',
  reconcilerSpecSchema: 'core/reconciler-spec.ts',
  reconcilerLimits: 'core/reconciler-spec.ts',
  ReconcilerSpec: 'core/reconciler-spec.ts',
  WrittenReconcilerSpec: 'core/reconciler-spec.ts',
  ReconcilerObject: 'core/reconciler-spec.ts',
  reconcilerSpec: 'core/reconciler-spec.ts',
};

test('each shared concept is defined once, in its home', () => {
  const wrong: string[] = [];
  for (const file of all) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const [name, home] of Object.entries(homes)) {
      const declared = new RegExp(`^\\s*(?:export\\s+)?(?:async\\s+)?(?:function|class|interface|type|const|let|var)\\s+${name}\\b`, 'm').test(text);
      if (declared && file !== home) wrong.push(`${name} is declared in ${file} (its home is ${home})`);
    }
  }
  assert.deepEqual(wrong, []);
  for (const [name, home] of Object.entries(homes)) assert.match(readFileSync(join(root, home), 'utf8'), new RegExp(`export (?:async )?(?:function|class|interface|type|const) ${name}\\b`), `${home} exports ${name}`);
});

/** Spellings that mean a concept was written out again instead of imported from core/. */
const rewritten: [RegExp, string][] = [
  [/split\('\/'\)\[0\]/, "the API group (groupOf: split('/')[0] gives 'v1' for the core group)"],
  [/'app\.kubernetes\.io\/managed-by'/, 'the managed-by label (core/names.ts)'],
  [/2 \*\* 31 - 1/, "the platform timer's limit (core/clock.ts)"],
  [/kind: 'Reconciler'/, 'a Reconciler written out (reconcilerObject and reconcilerSpec, core/reconciler-spec.ts)'],
  [/\.namespace \? `\$\{[\w.]+\.namespace\}\/\$\{[\w.]+\.name\}` : [\w.]+\.name/, 'the object key (objectKey)'],
];

test('no file outside core/ spells a shared concept out again', () => {
  const wrong: string[] = [];
  for (const file of all) {
    if (file.startsWith('core/') || isTest(file)) continue;
    const text = readFileSync(join(root, file), 'utf8');
    for (const [pattern, what] of rewritten) if (pattern.test(text)) wrong.push(`${file}: ${what}`);
  }
  assert.deepEqual(wrong, []);
});

test('the rooms of docs/architecture.md are the rooms of the tree', () => {
  const doc = readFileSync(join(root, 'docs', 'architecture.md'), 'utf8');
  for (const room of rooms) assert.match(doc, new RegExp(`\`${room}/`), `docs/architecture.md describes ${room}/`);
  for (const room of ['core', 'bridge']) {
    for (const file of sources(room)) if (!isTest(file) && !file.endsWith('.md')) assert.match(doc, new RegExp(`\`${relative(room, file).replace('.', '\\.')}\``), `docs/architecture.md names ${file}`);
  }
});

test('names are imported from their home: no file but the SDK\'s face (functions/sdk/index.ts) passes names through', () => {
  const through = all.filter((file) => file !== 'functions/sdk/index.ts' && /^export (?:type )?(?:\{[^}]*\}|\*) from /m.test(readFileSync(join(root, file), 'utf8')));
  assert.deepEqual(through, []);
});
