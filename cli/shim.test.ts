// The `kfn` command (bin/kfn.mjs) is the process a user, a supervisor or a test starts and
// signals: SIGTERM to it must end every process it started. Each case starts the shim running
// `kfn serve` (one function as an HTTP server; no cluster needed), signals the shim's PID only,
// and checks through /proc that nothing it started is left.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';

const shim = join(repoRoot, 'bin', 'kfn.mjs');
const onLinux = existsSync('/proc/self/stat');

/** Every process whose parent chain leads to `pid`, from /proc. */
function descendants(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The command name (field 2) is in parentheses and may hold spaces: the parent PID is the
      // second field after its closing one.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      parent.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const found: number[] = [];
  const walk = (p: number) => {
    for (const [child, ppid] of parent) if (ppid === p) (found.push(child), walk(child));
  };
  walk(pid);
  return found;
}

/** True while `pid` is a process that has not ended (a zombie has ended: only its entry is left). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address() as { port: number };
  await new Promise((ok) => server.close(ok));
  return port;
}

async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const answers = (port: number) => fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false);

/** A kubeconfig naming a server nobody listens on: `kfn serve` reads it, and talks to it only when an event comes. */
function scratch(t: TestContext): { dir: string; kubeconfig: string } {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-shim-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    'apiVersion: v1\nkind: Config\nclusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: none, user: {token: none}}]\ncontexts: [{name: none, context: {cluster: none, user: none}}]\ncurrent-context: none\n',
  );
  return { dir, kubeconfig };
}

/** Starts `node shim serve functions/myweb` and waits until the function answers. */
async function startServe(t: TestContext, node: string, shimPath: string, kubeconfig: string): Promise<{ shim: ChildProcess; port: number; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>; output: () => string }> {
  const port = await freePort();
  const child = spawn(node, [shimPath, 'serve', join(repoRoot, 'functions', 'myweb'), '--port', String(port), '--kubeconfig', kubeconfig], {
    env: { ...process.env, KFN_AUTH_SECRET: 'shim-test' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (b) => (output += b));
  child.stderr!.on('data', (b) => (output += b));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((ok) => child.once('exit', (code, signal) => ok({ code, signal })));
  // Whatever the outcome, nothing of this test outlives it: what the shim started is known
  // while it runs (once it has gone, its children belong to init).
  const started = new Set<number>();
  t.after(() => {
    for (const pid of [...started, ...descendants(child.pid!), child.pid!]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
  await until(`kfn serve to answer on port ${port}`, async () => {
    if (child.exitCode !== null) throw new Error(`the shim exited (${child.exitCode}) before serving:\n${output}`);
    return answers(port);
  }, 30_000);
  for (const pid of descendants(child.pid!)) started.add(pid);
  return { shim: child, port, exited, output: () => output };
}

/** SIGTERM to the shim alone; then it, and every process it had started, must be gone within 10 s. */
async function stopsEverything(run: Awaited<ReturnType<typeof startServe>>): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const started = descendants(run.shim.pid!);
  run.shim.kill('SIGTERM');
  const end = await Promise.race([run.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000).unref())]);
  assert.ok(end, `the shim did not exit within 10 s of SIGTERM\n${run.output()}`);
  await until('the processes the shim started to end', () => started.every((pid) => !alive(pid)), 10_000).catch(() => {
    assert.fail(`SIGTERM to the shim left running: ${started.filter(alive).map((pid) => `${pid} (${readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim()})`).join(', ')}`);
  });
  assert.equal(await answers(run.port), false, 'the function still answers after the shim ended');
  return end;
}

test('in a checkout, run by the pinned Node: the CLI runs in the shim\'s own process, and SIGTERM to it ends everything', { skip: !onLinux && 'needs /proc' }, async (t) => {
  const { kubeconfig } = scratch(t);
  const run = await startServe(t, process.execPath, shim, kubeconfig);
  const nodes = descendants(run.shim.pid!).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('kfn'));
  assert.deepEqual(nodes, [], 'the shim started the CLI as a child process instead of running it itself');
  const end = await stopsEverything(run);
  assert.equal(end.code, 0, run.output());
});

/**
 * Another Node than the pinned one (a hard link to it: the same program under another path)
 * makes the shim run the CLI as a child, to which it must pass the signal.
 */
function otherNode(dir: string): string {
  const node = join(dir, 'node');
  try {
    linkSync(process.execPath, node);
  } catch {
    copyFileSync(process.execPath, node); // another file system: a copy, at a copy's cost
  }
  return node;
}

test('in a checkout, run by another Node: the shim passes SIGTERM to the CLI it spawned and ends with it', { skip: !onLinux && 'needs /proc' }, async (t) => {
  const { dir, kubeconfig } = scratch(t);
  const run = await startServe(t, otherNode(dir), shim, kubeconfig);
  assert.equal(descendants(run.shim.pid!).length >= 1, true, 'expected the CLI as a child of the shim');
  const end = await stopsEverything(run);
  assert.deepEqual(end, { code: 0, signal: null }, `the shim should end with the CLI's status\n${run.output()}`);
});

test('in a checkout, run by another Node: a CLI killed by a signal ends the shim by the same signal', { skip: !onLinux && 'needs /proc' }, async (t) => {
  const { dir, kubeconfig } = scratch(t);
  const run = await startServe(t, otherNode(dir), shim, kubeconfig);
  for (const pid of descendants(run.shim.pid!)) process.kill(pid, 'SIGKILL');
  assert.deepEqual(await run.exited, { code: null, signal: 'SIGKILL' });
});

test('installed from the package: the compiled CLI in lib/ runs in the shim\'s own process', { skip: !onLinux && 'needs /proc' }, async (t) => {
  // The packed layout (bin/kfn.mjs, lib/cli/kfn.js, no cli/kfn.ts) with a stand-in for the
  // compiled CLI: compiling all of kfn (npm run build:lib) is the package e2e test's job; what
  // is checked here is how the shim runs what it finds there.
  const { dir } = scratch(t);
  const pkg = join(dir, 'kfn');
  mkdirSync(join(pkg, 'bin'), { recursive: true });
  mkdirSync(join(pkg, 'lib', 'cli'), { recursive: true });
  cpSync(shim, join(pkg, 'bin', 'kfn.mjs'));
  writeFileSync(
    join(pkg, 'lib', 'cli', 'kfn.js'),
    [
      "import { createServer } from 'node:http';",
      "const [command, , flag, port] = process.argv.slice(2);",
      "if (command !== 'serve' || flag !== '--port') throw new Error(`unexpected arguments: ${process.argv.slice(2).join(' ')}`);",
      "const server = createServer((req, res) => res.end('ok')).listen(Number(port), '127.0.0.1');",
      "process.once('SIGTERM', () => server.close());",
    ].join('\n'),
  );
  const run = await startServe(t, process.execPath, join(pkg, 'bin', 'kfn.mjs'), 'unused');
  assert.deepEqual(descendants(run.shim.pid!), [], 'the shim started the compiled CLI as a child process instead of running it itself');
  const end = await stopsEverything(run);
  assert.equal(end.code, 0, run.output());
});

test('installed from the package, on a Node older than 24: one line saying what to do, which names the install scripts when the project\'s own Node is missing', (t) => {
  // A project as npm installs it: kfn packed, and the pinned `node` package without its binary,
  // as `npm install --ignore-scripts` leaves it (the binary comes from its install script).
  const { dir } = scratch(t);
  const project = join(dir, 'my-operator');
  const kfn = join(project, 'node_modules', 'kfn');
  mkdirSync(join(kfn, 'bin'), { recursive: true });
  mkdirSync(join(kfn, 'lib', 'cli'), { recursive: true });
  cpSync(shim, join(kfn, 'bin', 'kfn.mjs'));
  writeFileSync(join(kfn, 'lib', 'cli', 'kfn.js'), "console.log('the CLI ran');\n");
  const on20 = () => spawnSync(process.execPath, ['--import', `data:text/javascript,Object.defineProperty(process.versions, 'node', { value: '20.20.2' })`, join(kfn, 'bin', 'kfn.mjs'), 'dev'], { cwd: project, encoding: 'utf8' });

  const noPin = on20();
  assert.equal(noPin.status, 1);
  assert.equal(noPin.stdout, '');
  assert.match(noPin.stderr.trim(), /^kfn needs Node\.js 24 or later .*; this is Node\.js 20\.20\.2\. Install Node\.js 24 and run kfn again\.$/);

  const node = join(project, 'node_modules', 'node');
  mkdirSync(node);
  writeFileSync(join(node, 'package.json'), JSON.stringify({ name: 'node', version: '24.21.0', bin: { node: 'bin/node' }, scripts: { preinstall: 'node installArchSpecificPackage' } }));
  const unscripted = on20();
  assert.equal(unscripted.status, 1);
  assert.equal(unscripted.stdout, '');
  const lines = unscripted.stderr.trim().split('\n');
  assert.equal(lines.length, 1, unscripted.stderr);
  assert.match(lines[0]!, /^kfn needs Node\.js 24 or later .*; this is Node\.js 20\.20\.2\. The project's own Node\.js 24 \(the devDependency "node"\) is not installed: its install script did not run \(npm install --ignore-scripts\?\)\. Run `npm rebuild node` \(or npm install with install scripts allowed\) and run kfn again\.$/);
});
