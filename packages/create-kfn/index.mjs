#!/usr/bin/env node
// `npm create kfn@latest <dir>`: runs `kfn init <dir>` of the kfn this package depends on (the
// same version), so the new project depends on that kfn.
//
// The project runs on Node.js 24 and brings its own (the devDependency `node`), so writing it
// needs no Node 24: init only writes files, and runs here on any Node from 20 (kfn's compiled
// CLI, started directly: its `kfn` shim refuses a Node older than 24, which running functions
// needs). Older than 20.11 (whose import.meta.dirname kfn's code reads) is refused in one line
// before anything is written.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 20 || (major === 20 && minor < 11)) {
  console.error(`npm create kfn needs Node.js 20.11 or later to write a project; this is Node.js ${process.versions.node}. Install Node.js 24 and run it again.`);
  process.exit(1);
}
const args = process.argv.slice(2);
if (args.length === 0 || args[0].startsWith('-') && !['-h', '--help'].includes(args[0])) {
  console.error('Usage: npm create kfn@latest <dir> [-- --function N --group G --kind K]');
  process.exit(2);
}
const kfnRoot = dirname(fileURLToPath(import.meta.resolve('kfn/package.json')));
const run = spawnSync(process.execPath, [join(kfnRoot, 'lib', 'cli', 'kfn.js'), 'init', ...args], { stdio: 'inherit' });
if (run.status === 0 && major < 24 && !['-h', '--help'].includes(args[0])) {
  console.error(`Node.js ${process.versions.node} here: the project brings its own Node.js 24 (the devDependency "node", which npm install fetches), and npm test and npx kfn run on it.`);
}
process.exit(run.status ?? 1);
