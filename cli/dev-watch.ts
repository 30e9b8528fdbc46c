// kfn dev's watch on the functions' sources: a save (or a new module beside a function's
// index.ts) calls for that function's reload, once the editor is done writing.
import { watch, type FSWatcher } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { DevFunction } from './dev-app.ts';

/**
 * Calls `changed(fn)` when an input of a function's bundle changes, or a new module appears
 * beside its index.ts (not its samples or notes), 150 ms after the last such change. One watch
 * per directory holding an input: a directory's watch outlives editors that save by writing a
 * new file and renaming it over the old one; a file's watch does not.
 */
export function watchSources(fns: Map<string, DevFunction>, changed: (name: string) => Promise<void>, say: (line: string) => void): { rewatch(): void; close(): void } {
  const watchers = new Map<string, FSWatcher>();
  const pending = new Map<string, NodeJS.Timeout>();
  const onChange = (dir: string, file: string) => {
    const path = resolve(dir, file);
    for (const fn of fns.values()) {
      if (!fn.inputs.has(path) && !(dirname(path) === fn.dir && /\.(ts|mts|js|mjs|json)$/.test(path))) continue;
      clearTimeout(pending.get(fn.name));
      pending.set(
        fn.name,
        setTimeout(() => void changed(fn.name).then(rewatch).catch((err) => say(`reload of ${fn.name} failed: ${(err as Error).message}`)), 150),
      );
    }
  };
  function rewatch(): void {
    const dirs = new Set<string>();
    for (const fn of fns.values()) {
      dirs.add(fn.dir);
      for (const input of fn.inputs) if (!input.includes('/node_modules/')) dirs.add(dirname(input));
    }
    for (const dir of dirs) {
      if (watchers.has(dir)) continue;
      try {
        watchers.set(dir, watch(dir, (_event, file) => file && onChange(dir, file.toString())));
      } catch (err) {
        say(`cannot watch ${dir}: ${(err as Error).message}`);
      }
    }
  }
  rewatch();
  return {
    rewatch,
    close() {
      for (const w of watchers.values()) w.close();
      for (const t of pending.values()) clearTimeout(t);
    },
  };
}
