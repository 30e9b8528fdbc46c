#!/usr/bin/env node
// `kfn` (`npx kfn …`). In a checkout: the CLI's TypeScript, run by the Node kfn pins (24, which
// runs TypeScript as it is), whatever Node started this shim. Installed from the package: the
// compiled CLI in lib/, run by this Node, which must be 24 or later (it runs your functions'
// TypeScript as it is).
import { spawnSync } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(realpathSync(fileURLToPath(import.meta.url))), '..');
const source = join(root, 'cli', 'kfn.ts');
let node = process.execPath;
let entry = source;
if (existsSync(source)) {
  const pinned = join(root, 'node_modules', '.bin', 'node');
  if (existsSync(pinned)) node = pinned;
} else {
  entry = join(root, 'lib', 'cli', 'kfn.js');
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 24) {
    console.error(`kfn needs Node.js 24 or later (it runs your functions' TypeScript as it is); this is Node.js ${process.versions.node}. Install Node.js 24 and run kfn again.`);
    process.exit(1);
  }
}
const run = spawnSync(node, [entry, ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(run.status ?? 1);
