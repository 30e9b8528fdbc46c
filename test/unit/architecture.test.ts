// The rules docs/architecture.md states, checked against the tree: which room may import which,
// and the concepts that are defined once, in their home, and nowhere else.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { test } from 'node:test';
import { SyntaxKind, type Node, type SourceFile } from 'typescript/unstable/ast';
import { API } from 'typescript/unstable/sync';

const root = join(import.meta.dirname, '..', '..');

function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (name === 'node_modules' || name.startsWith('.')) return [];
    if (statSync(join(root, path)).isDirectory()) return sources(path);
    return /\.(ts|mjs)$/.test(name) ? [path] : [];
  });
}

const rooms = ['core', 'kube', 'bridge', 'functions', 'cluster', 'cli', 'bin', 'test'];
const all = rooms.flatMap(sources);
const isTest = (file: string) => file.startsWith('test/') || /\.test\.ts$/.test(file);

/** The room a file lives in: an example function's folder is a room of its own, and so is cli/artifacts/. */
function roomOf(file: string): string {
  const [top, second] = file.split('/');
  if (top === 'cli' && second === 'artifacts') return 'cli/artifacts';
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
  // Building artifacts (bundles, images, pushes, zips) uses cli/'s modules of steps, never a command (commandFiles).
  'cli/artifacts': ['core', 'kube', 'bridge', 'functions/sdk', 'cluster', 'cli'],
  cli: ['core', 'kube', 'bridge', 'functions/sdk', 'cluster', 'cli/artifacts'],
  bin: ['cli'],
};

function importsOf(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  // Static imports and re-exports (`import type` too), side-effect imports, and dynamic import().
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'"`;]*?\bfrom\s+'(\.[^']+)'/gm),
    ...text.matchAll(/^\s*import\s+'(\.[^']+)'/gm),
    ...text.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g),
  ].map((m) => m[1]!);
  return specs.map((spec) => normalize(join(dirname(file), spec)));
}

/**
 * cli/'s commands: the entry (`kfn.ts`), the table of commands and each file it loads, and the
 * scripts run by path (`import.meta.main`: `npm run generate`, `npm run build:lib`). A command
 * stands over the modules it puts together; nothing below it imports one.
 */
const commandFiles = new Set([
  'cli/kfn.ts',
  'cli/commands.ts',
  ...[...readFileSync(join(root, 'cli', 'commands.ts'), 'utf8').matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)].map((m) => normalize(join('cli', m[1]!))),
  ...sources('cli').filter((file) => !isTest(file) && /\bimport\.meta\.main\b/.test(readFileSync(join(root, file), 'utf8'))),
]);

test('every room imports only the rooms below it (docs/architecture.md)', () => {
  const wrong: string[] = [];
  for (const file of all) {
    const from = roomOf(file);
    for (const target of importsOf(file)) {
      const to = roomOf(target);
      if (from === 'cli/artifacts' && !isTest(file) && commandFiles.has(target)) wrong.push(`${file} → ${target} (cli/artifacts/ imports no command)`);
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

test('the commands are what commands.ts loads, the entry and the scripts, and no module of steps', () => {
  for (const file of ['cli/kfn.ts', 'cli/commands.ts', 'cli/deploy.ts', 'cli/image.ts', 'cli/build.ts', 'cli/generate.ts', 'cli/build-package.ts']) assert.ok(commandFiles.has(file), `${file} is a command`);
  for (const file of ['cli/command.ts', 'cli/functions.ts', 'cli/invocation.ts', 'cli/artifacts/images.ts']) assert.ok(!commandFiles.has(file), `${file} is not a command`);
  assert.equal(roomOf('cli/artifacts/images.ts'), 'cli/artifacts');
  assert.equal(roomOf('cli/images.ts'), 'cli');
});

/**
 * Imports run one way inside a room too: no file imports, through others, a file that imports it
 * — counting `import type` and a lazy `import()`, which tsc and Node accept in a circle but which
 * still tie the two files into one unit that cannot be read, tested or loaded apart. What both
 * files of a circle need goes to where both can import it one way.
 */
function circles(graph: Map<string, string[]>): string[][] {
  // Tarjan's strongly connected components: each of more than one file (or a file importing itself) is a circle.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file)!, low.get(next)!));
      } else if (stack.includes(next)) low.set(file, Math.min(low.get(file)!, index.get(next)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component = stack.splice(stack.indexOf(file));
    if (component.length > 1 || graph.get(file)!.includes(file)) found.push(component.sort());
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return found;
}

/** One way round a circle, from its first file back to it: `a.ts → b.ts → a.ts`. */
function wayRound(graph: Map<string, string[]>, circle: string[]): string {
  const start = circle[0]!;
  const from = new Map<string, string>();
  const queue = [start];
  while (queue.length) {
    const file = queue.shift()!;
    for (const next of graph.get(file)!.filter((f) => circle.includes(f))) {
      if (next === start) {
        const path = [file];
        while (path[0] !== start) path.unshift(from.get(path[0]!)!);
        return [...path, start].join(' → ');
      }
      if (from.has(next)) continue;
      from.set(next, file);
      queue.push(next);
    }
  }
  return circle.join(', ');
}

test('no import circle, within a room or across rooms (import type and import() count)', () => {
  const graph = new Map(all.map((file) => [file, importsOf(file).filter((target) => all.includes(target))]));
  assert.deepEqual(circles(graph).map((circle) => wayRound(graph, circle)), [], 'import circles: move what the files share to where each imports it one way');
});

test('the circle check finds a circle and its way round', () => {
  const graph = new Map([['a.ts', ['b.ts']], ['b.ts', ['c.ts', 'd.ts']], ['c.ts', ['a.ts']], ['d.ts', []], ['e.ts', ['e.ts']]]);
  assert.deepEqual(circles(graph).map((circle) => wayRound(graph, circle)), ['a.ts → b.ts → c.ts → a.ts', 'e.ts → e.ts']);
});

/**
 * A class that grows with every feature becomes a story no reader can hold: the bridge's
 * Controller once took intake, the pending set, identity reviews, deliveries, answers, requeues
 * and traces in one. Its parts are cut by job (as controller-runtime keeps source, handler and
 * reconcile loop apart), and no class in bridge/ runs over maxClassLines.
 */
const maxClassLines = 300;

/** Each class of a source text and its length: from the line of `class Name` to the closing brace at that line's indentation. */
function classesOf(text: string): { name: string; lines: number }[] {
  const lines = text.split('\n');
  return lines.flatMap((line, i) => {
    const m = /^(\s*)(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+(\w+)/.exec(line);
    if (!m) return [];
    if (line.trimEnd().endsWith('}')) return [{ name: m[2]!, lines: 1 }];
    const end = lines.findIndex((l, j) => j > i && l.trimEnd() === `${m[1]}}`);
    return [{ name: m[2]!, lines: (end < 0 ? lines.length : end + 1) - i }];
  });
}

test(`no class in bridge/ runs over ${maxClassLines} lines`, () => {
  const long = sources('bridge').flatMap((file) => classesOf(readFileSync(join(root, file), 'utf8')).filter((c) => c.lines > maxClassLines).map((c) => `${c.name} in ${file}: ${c.lines} lines`));
  assert.deepEqual(long, [], `classes over ${maxClassLines} lines: cut each by job into parts of their own (a module each), not by size`);
});

test('the class scan measures from `class Name` to its closing brace, and a class on one line as one', () => {
  const text = 'export class A extends Error {}\n\nclass B {\n  m(): void {\n  }\n}\n  class C {\n  }\nfunction f() {\n}';
  assert.deepEqual(classesOf(text), [{ name: 'A', lines: 1 }, { name: 'B', lines: 4 }, { name: 'C', lines: 2 }]);
});

/**
 * A function that holds a whole story cannot be held by a reader (`invoke`, `startBridge` and
 * `startDevServer` once ran 200+ lines): its steps are named as functions of their own, and the
 * top one reads like the docs' numbered list. No function of the source (tests aside) runs over
 * maxFunctionLines, measured by TypeScript's own parser from its first line (its doc comment
 * aside) to its last; those that still do are named here, each with why.
 */
const maxFunctionLines = 80;
const longFunctions: Record<string, string> = {
  'bridge/leader.ts: LeaderElector.tryAcquireOrRenew': "one attempt at the Lease, renewing, creating or taking it over, as client-go's tryAcquireOrRenew; to be cut into those three",
};

const functionKinds = new Set([SyntaxKind.FunctionDeclaration, SyntaxKind.FunctionExpression, SyntaxKind.ArrowFunction, SyntaxKind.MethodDeclaration, SyntaxKind.Constructor, SyntaxKind.GetAccessor, SyntaxKind.SetAccessor]);
const classKinds = new Set([SyntaxKind.ClassDeclaration, SyntaxKind.ClassExpression]);
const assignedKinds = new Set([SyntaxKind.VariableDeclaration, SyntaxKind.PropertyAssignment, SyntaxKind.PropertyDeclaration]);

/** Each function of a source file, named as a reader finds it (`Class.method`, the name an arrow is given, or what it is a callback of), and its length in lines. */
function functionsIn(source: SourceFile): { name: string; lines: number }[] {
  const found: { name: string; lines: number }[] = [];
  const nameOf = (node: Node) => (node as Node & { name?: Node }).name?.getText(source);
  const lineOf = (position: number) => source.getLineAndCharacterOfPosition(position).line;
  const visit = (node: Node, inClass: string | undefined): void => {
    if (functionKinds.has(node.kind)) {
      const { parent } = node;
      const own = node.kind === SyntaxKind.Constructor ? 'constructor' : (nameOf(node) ?? (assignedKinds.has(parent.kind) ? nameOf(parent) : parent.kind === SyntaxKind.CallExpression ? `(callback of ${(parent as Node & { expression: Node }).expression.getText(source).slice(0, 40)})` : '(anonymous)'));
      const member = inClass && (classKinds.has(parent.kind) || parent.kind === SyntaxKind.PropertyDeclaration);
      found.push({ name: member ? `${inClass}.${own}` : own!, lines: lineOf(node.end) - lineOf(node.getStart(source)) + 1 });
    }
    node.forEachChild((child) => visit(child, classKinds.has(node.kind) ? (nameOf(node) ?? '(class)') : inClass));
  };
  visit(source, undefined);
  return found;
}

test(`no function outside the tests runs over ${maxFunctionLines} lines, but those named with a reason`, () => {
  const api = new API({ cwd: root });
  try {
    const program = api.updateSnapshot({ openProjects: [join(root, 'tsconfig.json')] }).getProjects()[0]!.program;
    // The .mjs files are not in the program (tsconfig.json compiles TypeScript only): bin/kfn.mjs is 79 lines whole.
    const measured = all.filter((file) => !isTest(file) && file.endsWith('.ts') && !file.split('/').includes('testdata')).flatMap((file) => {
      const source = program.getSourceFile(join(root, file));
      assert.ok(source, `${file} is in tsconfig.json's program`);
      return functionsIn(source).map((f) => ({ ...f, where: `${file}: ${f.name}` }));
    });
    const long = measured.filter((f) => f.lines > maxFunctionLines);
    assert.deepEqual(long.filter((f) => !longFunctions[f.where]).map((f) => `${f.where} (${f.lines} lines)`), [], `functions over ${maxFunctionLines} lines: name their steps as functions of their own (templates as tables or files), so that the top one reads as a list of steps`);
    const within = Object.keys(longFunctions).filter((where) => !long.some((f) => f.where === where));
    assert.deepEqual(within, [], 'named as long but now within the limit, or gone: take them off longFunctions');
  } finally {
    api.close();
  }
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
  isObject: 'core/json.ts',
  escapePointerToken: 'core/json.ts',
  unescapePointerToken: 'core/json.ts',
  pointerTokens: 'core/json.ts',
  pointerAsField: 'core/json.ts',
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
  [/replace(?:All)?\((?:\/~1\/g|'~1')/, 'JSON-pointer unescaping (unescapePointerToken, core/json.ts)'],
  [/replaceAll\('~', '~0'\)/, 'JSON-pointer escaping (escapePointerToken, core/json.ts)'],
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
});

/**
 * The map, docs/architecture.md, names every source file a newcomer meets, so that it cannot
 * drift from the tree. Each room has a section (a `### room/` heading) whose tables name each of
 * its files in the first cell of a row, by its path within the room (`objects.ts`,
 * `node/index.ts`); a row for a file that is gone fails too. Tests, and the fixtures of tests in a
 * `testdata/` folder, are not on the map. The example functions and test/ are mapped by folder
 * (`myweb/`, `support/`, and test/'s own files), not file by file: every example folder holds the
 * same few files, and a test folder's files are what its row says.
 */
const mapped: { section: string; dir: string; by: 'file' | 'folder' }[] = [
  ...['core', 'kube', 'bridge', 'functions/sdk', 'cli', 'cluster', 'knative', 'bin'].map((dir) => ({ section: `${dir}/`, dir, by: 'file' as const })),
  { section: 'functions/<example>/', dir: 'functions', by: 'folder' },
  { section: 'test/', dir: 'test', by: 'folder' },
];

/** What a section of the map must name: a room's source files, or a mapped-by-folder room's folders and source files. */
function onTheMap({ dir, by }: (typeof mapped)[number]): string[] {
  if (by === 'file') return sources(dir).filter((file) => !isTest(file) && !file.split('/').includes('testdata')).map((file) => relative(dir, file));
  return readdirSync(join(root, dir))
    .filter((name) => !name.startsWith('.') && !(dir === 'functions' && name === 'sdk'))
    .flatMap((name) => (statSync(join(root, dir, name)).isDirectory() ? [`${name}/`] : /\.(ts|mjs)$/.test(name) ? [name] : []));
}

/** Each `### room/` section of the map, with the names in the first cell of its tables' rows. */
function sectionsOf(doc: string): Map<string, Set<string>> {
  const sections = new Map<string, Set<string>>();
  let current: Set<string> | undefined;
  for (const line of doc.split('\n')) {
    if (/^#+\s/.test(line)) {
      const room = /^###\s+`?([^\s:`]+\/)/.exec(line)?.[1];
      current = room ? new Set() : undefined;
      if (room) sections.set(room, current!);
    } else if (current && line.startsWith('|')) {
      for (const m of (line.split('|')[1] ?? '').matchAll(/`([^`]+)`/g)) current.add(m[1]!);
    }
  }
  return sections;
}

test('docs/architecture.md names every source file, each in its room\'s table, and no file that is gone', () => {
  const sections = sectionsOf(readFileSync(join(root, 'docs', 'architecture.md'), 'utf8'));
  const missing: string[] = [];
  const gone: string[] = [];
  for (const room of mapped) {
    const expected = onTheMap(room);
    const named = sections.get(room.section) ?? new Set<string>();
    missing.push(...expected.filter((name) => !named.has(name)).map((name) => `${room.dir}/${name}`));
    gone.push(...[...named].filter((name) => !expected.includes(name)).map((name) => `${room.dir}/${name}`));
  }
  assert.deepEqual(missing, [], `docs/architecture.md does not name ${missing.join(', ')}: give each a row, with one line of what it is for, in its room's table (a "### room/" section)`);
  assert.deepEqual(gone, [], `docs/architecture.md names ${gone.join(', ')}, which the tree does not have: remove or rename the row`);
});

test('the map is read from the first cell of each row, within its room\'s section', () => {
  const sections = sectionsOf('### core/: x\n\n| file | what |\n|---|---|\n| `a.ts`, `b.ts` | `c.ts` in prose |\n\n### `functions/<example>/`: y\n| `myweb/` | z |\n## next\n| `d.ts` | after the section |');
  assert.deepEqual([...sections.get('core/')!], ['a.ts', 'b.ts']);
  assert.deepEqual([...sections.get('functions/<example>/')!], ['myweb/']);
  assert.equal(sections.size, 2);
});

test('names are imported from their home: no file but the SDK\'s face (functions/sdk/index.ts) passes names through', () => {
  const through = all.filter((file) => file !== 'functions/sdk/index.ts' && /^export (?:type )?(?:\{[^}]*\}|\*) from /m.test(readFileSync(join(root, file), 'utf8')));
  assert.deepEqual(through, []);
});
