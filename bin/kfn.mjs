#!/usr/bin/env node
// `kfn` (`npx kfn …`): the process a user, a supervisor or a test starts and signals, so the
// CLI runs in this process wherever it can — a SIGTERM sent here then reaches the CLI itself,
// which stops what it started.
//
// Installed from the package: the compiled CLI in lib/, run in this process by this Node, which
// must be 24 or later (it runs your functions' TypeScript as it is). In a checkout: the CLI's
// TypeScript, which needs the Node kfn pins (node_modules/.bin/node): run in this process when
// that is the Node running this shim; otherwise run by it as a child, which gets every stop
// signal this process gets, and whose end (its status, or the signal that ended it) is this
// process's end.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(realpathSync(fileURLToPath(import.meta.url))), '..');
const source = join(root, 'cli', 'kfn.ts');
const pinned = join(root, 'node_modules', '.bin', 'node');
/** The signals that ask a process to stop, which a supervisor, a terminal or a test sends. */
const stopSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'];

if (!existsSync(source)) {
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 24) {
    const missing = unscriptedNode();
    const what = missing
      ? `The project's own Node.js ${missing.major} (the devDependency "node") is not installed: its install script did not run (npm install --ignore-scripts?). Run \`npm rebuild node\` (or npm install with install scripts allowed) and run kfn again.`
      : 'Install Node.js 24 and run kfn again.';
    console.error(`kfn needs Node.js 24 or later (it runs your functions' TypeScript as it is); this is Node.js ${process.versions.node}. ${what}`);
    process.exit(1);
  }
  await import(pathToFileURL(join(root, 'lib', 'cli', 'kfn.js')).href);
} else if (!existsSync(pinned) || realpathSync(pinned) === realpathSync(process.execPath)) {
  // Without the pinned Node (no `npm ci` yet) this Node is the only one there is.
  await import(pathToFileURL(source).href);
} else {
  runChild(pinned, source);
}

/**
 * The project's pinned `node` package when its binary is missing, as npm install --ignore-scripts
 * leaves it (the package fetches the binary in an install script): then `npx kfn` falls through
 * to an older Node on the PATH, and what to do is to run that script, not to install Node.
 */
function unscriptedNode() {
  try {
    const manifest = createRequire(join(root, 'package.json')).resolve('node/package.json');
    const { version, bin } = JSON.parse(readFileSync(manifest, 'utf8'));
    const binary = typeof bin === 'string' ? bin : bin?.node;
    if (!binary || existsSync(join(dirname(manifest), binary))) return undefined;
    return { major: Number(String(version).split('.')[0]) || 24 };
  } catch {
    return undefined; // no pinned node package: the machine's Node is the one to upgrade
  }
}

function runChild(node, entry) {
  const child = spawn(node, [entry, ...process.argv.slice(2)], { stdio: 'inherit' });
  // A terminal's Ctrl-C reaches the child as well (one process group): the CLI takes a
  // repeated stop signal as the same request.
  const forward = (signal) => child.kill(signal);
  for (const signal of stopSignals) process.on(signal, forward);
  child.once('error', (err) => {
    console.error(`kfn: could not start the CLI with ${node}: ${err.message}. Run \`npm ci\` in ${root} and try again.`);
    process.exit(1);
  });
  child.once('exit', (code, signal) => {
    if (code !== null) process.exit(code);
    // Ended by a signal: end this process by the same one, so that a shell or a supervisor
    // sees what it would have seen without the shim.
    for (const s of stopSignals) process.off(s, forward);
    process.kill(process.pid, signal);
    // A signal whose default action is not to end a process: the shell's convention.
    process.exit(128 + (constants.signals[signal] ?? 0));
  });
}
