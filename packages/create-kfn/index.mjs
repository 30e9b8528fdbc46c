#!/usr/bin/env node
// `npm create kfn@latest <dir>`: runs `kfn init <dir>` of the kfn this package depends on (the
// same version), so the new project depends on that kfn.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const kfnRoot = dirname(fileURLToPath(import.meta.resolve('kfn/package.json')));
const args = process.argv.slice(2);
if (args.length === 0 || args[0].startsWith('-') && !['-h', '--help'].includes(args[0])) {
  console.error('Usage: npm create kfn@latest <dir> [-- --function N --group G --kind K]');
  process.exit(2);
}
const run = spawnSync(process.execPath, [join(kfnRoot, 'bin', 'kfn.mjs'), 'init', ...args], { stdio: 'inherit' });
process.exit(run.status ?? 1);
