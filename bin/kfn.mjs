#!/usr/bin/env node
// `npx kfn …` in a project that depends on kfn: runs the CLI with the Node kfn pins (24, which
// runs TypeScript as it is), whatever Node started this shim.
import { spawnSync } from 'node:child_process';
import { existsSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(realpathSync(fileURLToPath(import.meta.url))), '..');
const pinned = join(root, 'node_modules', '.bin', 'node');
const node = existsSync(pinned) ? pinned : process.execPath;
const run = spawnSync(node, [join(root, 'cli', 'kfn.ts'), ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(run.status ?? 1);
