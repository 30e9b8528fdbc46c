// Every ```ts block of the docs (docs/*.md and README.md) type-checks against the SDK, as a user's
// project sees it: `kfn/sdk` and `kfn/sdk/testing`, under the compiler options `kfn init` writes
// into a new project. So an example cannot drift from the API it shows.
//
// Each block is a module of its own. A block whose first line is a comment naming a file
// (`// functions/greeter/index.ts`) is compiled at that path, beside the repository's files: other
// blocks of the docs naming files in the same folder, then the repository's own, are what its
// relative imports find (`./index.ts`, `../sdk/replay.ts`). A block that is deliberately a fragment
// is preceded by `<!-- not compiled: <reason> -->`. One tsc run checks every block.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { writeProject } from '../../cli/init.ts';

const root = resolve(import.meta.dirname, '..', '..');
const tsc = join(root, 'node_modules', '.bin', 'tsc');

interface Block {
  /** The doc, relative to the repository (docs/functions.md). */
  doc: string;
  /** The line of the block's first line of code in the doc (1-based). */
  line: number;
  code: string;
  /** The file it claims with its first line (functions/greeter/index.ts), if any. */
  path?: string;
  /** Why it is not compiled, when it says so. */
  exempt?: string;
}

const notCompiled = /^<!--\s*not compiled:\s*(.*?)\s*-->$/;
const fileComment = /^\/\/\s*((?:[\w.-]+\/)*[\w.-]+\.ts)\b/;

/** The ```ts blocks of one markdown text (indented ones too, as in a list item). */
export function tsBlocks(doc: string, text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,})(\S*)/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    let end = i + 1;
    while (end < lines.length && !lines[end]!.trim().startsWith(fence!)) end++;
    if (lang === 'ts' || lang === 'typescript') {
      const code = lines.slice(i + 1, end).map((l) => (l.startsWith(indent!) ? l.slice(indent!.length) : l)).join('\n');
      const before = lines.slice(0, i).reverse().find((l) => l.trim() !== '')?.trim() ?? '';
      const exempt = notCompiled.exec(before)?.[1];
      const path = fileComment.exec(code.split('\n')[0] ?? '')?.[1];
      blocks.push({ doc, line: i + 2, code, ...(path ? { path } : {}), ...(exempt !== undefined ? { exempt } : {}) });
    }
    i = end;
  }
  return blocks;
}

function docBlocks(): Block[] {
  const docs = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
  return docs.flatMap((doc) => tsBlocks(doc, readFileSync(join(root, doc), 'utf8')));
}

/** The compiler options of a project `kfn init` writes. */
function projectCompilerOptions(work: string): Record<string, unknown> {
  const { dir } = writeProject({ dir: join(work, 'project') });
  return (JSON.parse(readFileSync(join(dir, 'tsconfig.json'), 'utf8')) as { compilerOptions: Record<string, unknown> }).compilerOptions;
}

interface Problem {
  where: string;
  message: string;
}

/** Type-checks the blocks in one tsc run; each error placed at its doc and line. */
function check(blocks: Block[]): Problem[] {
  // Inside the repository (in .kfn/, ignored by git and by the repository's tsconfig), so that
  // the SDK's packages and @types/node resolve from its node_modules.
  mkdirSync(join(root, '.kfn'), { recursive: true });
  const work = mkdtempSync(join(root, '.kfn', 'docs-code-'));
  try {
    const tree = join(work, 'tree');
    const files = new Map<string, Block>();
    for (const [i, b] of blocks.entries()) {
      const file = join(tree, b.path ?? join('blocks', `${b.doc.replace(/[^\w]+/g, '-')}-${b.line}-${i}.ts`));
      const taken = files.get(file);
      assert.ok(!taken, `${b.doc}:${b.line} and ${taken?.doc}:${taken?.line} both claim ${b.path}: name another file`);
      files.set(file, b);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, `${b.code}\n`);
    }
    const tsconfig = {
      compilerOptions: {
        ...projectCompilerOptions(work),
        noEmit: true,
        rootDirs: [tree, root],
        paths: { 'kfn/sdk': [join(root, 'functions', 'sdk', 'index.ts')], 'kfn/sdk/testing': [join(root, 'functions', 'sdk', 'testing.ts')] },
      },
      files: [...files.keys()],
    };
    writeFileSync(join(work, 'tsconfig.json'), JSON.stringify(tsconfig, null, 2));
    const run = spawnSync(tsc, ['--pretty', 'false', '-p', 'tsconfig.json'], { cwd: work, encoding: 'utf8' });
    assert.ok(run.status !== null, `tsc did not run: ${run.error?.message ?? run.stderr}`);
    const problems: Problem[] = [];
    for (const line of `${run.stdout}${run.stderr}`.split('\n')) {
      const m = /^(.+?)\((\d+),(\d+)\): (error TS\d+: .*)$/.exec(line);
      if (m) {
        const file = resolve(work, m[1]!);
        const b = files.get(file);
        problems.push(b ? { where: `${b.doc}:${b.line + Number(m[2]) - 1}:${m[3]}`, message: m[4]! } : { where: `${relative(root, file)}:${m[2]}:${m[3]}`, message: m[4]! });
      } else if (line.startsWith(' ') && problems.length) problems.at(-1)!.message += `\n    ${line.trim()}`;
      else if (line.trim()) problems.push({ where: 'tsc', message: line });
    }
    assert.ok(run.status === 0 || problems.length, `tsc failed without saying where (exit ${run.status})`);
    return problems;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** A block that must fail, checked in the same run: the test sees an error found and placed. */
const probe: Block = { doc: 'docs/probe.md', line: 3, code: ["import { ConfigMap } from 'kfn/sdk';", '', 'export const kind: number = ConfigMap.kind;'].join('\n') };

test('every ```ts block of the docs type-checks against kfn/sdk, as a project of its own', () => {
  const blocks = docBlocks();
  const compiled = blocks.filter((b) => b.exempt === undefined);
  assert.ok(compiled.length >= 10, `found only ${compiled.length} blocks: is the extraction right?`);
  for (const b of blocks) if (b.exempt !== undefined) assert.ok(b.exempt.length >= 10, `${b.doc}:${b.line}: <!-- not compiled: … --> says why`);
  const problems = check([...compiled, probe]);
  const probed = problems.filter((p) => p.where.startsWith(`${probe.doc}:`));
  assert.deepEqual(problems.filter((p) => !probed.includes(p)).map((p) => `${p.where}: ${p.message}`), [], 'the docs show code that does not compile');
  assert.deepEqual(probed.map((p) => `${p.where} ${p.message.split(':')[0]}`), ['docs/probe.md:5:14 error TS2322'], 'a block that does not compile is reported at its doc and line');
});

test('blocks are found with their lines, files and exemptions', () => {
  const text = ['# A doc', '<!-- not compiled: shows a shape, not a module -->', '```ts', 'reconcile(x) { … }', '```', '', '- a list item:', '', '  ```ts', '  // functions/a/index.ts', '  export {};', '  ```', '```sh', 'echo', '```'].join('\n');
  const [fragment, file, ...rest] = tsBlocks('docs/x.md', text);
  assert.equal(rest.length, 0);
  assert.equal(fragment!.exempt, 'shows a shape, not a module');
  assert.equal(fragment!.line, 4);
  assert.equal(file!.exempt, undefined);
  assert.equal(file!.path, 'functions/a/index.ts');
  assert.equal(file!.line, 10);
  assert.equal(file!.code, '// functions/a/index.ts\nexport {};');
});
