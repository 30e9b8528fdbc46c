import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { libraryClosure, pruneBuilds } from './images.ts';

// What `apt-cache depends --no-recommends …` prints, for a fake archive.
const archive: Record<string, string> = {
  nginx: 'nginx\n  Depends: nginx-common\n  Depends: libc6\n  Depends: libssl3\n |Depends: libpcre2-8-0\n  Depends: libpcre3\n  Depends: zlib1g\n  Depends: <awk>\n  PreDepends: libcrypt1\n',
  libssl3: 'libssl3\n  Depends: libc6\n',
  libc6: 'libc6\n  Depends: libgcc-s1\n',
  'libgcc-s1': 'libgcc-s1\n  Depends: gcc-12-base\n  Depends: libc6\n',
  zlib1g: 'zlib1g\n  Depends: libc6\n',
  libcrypt1: 'libcrypt1\n  Depends: libc6\n',
  libpcre3: 'libpcre3\n',
  'libpcre2-8-0': 'libpcre2-8-0\n  Depends: libc6\n',
};

test('libraryClosure takes the roots and, transitively, the library packages they depend on', () => {
  const asked: string[][] = [];
  const closure = libraryClosure(['nginx'], (packages) => {
    asked.push(packages);
    return packages.map((p) => archive[p] ?? `${p}\n`).join('');
  });
  // Maintainer-script and tool dependencies (nginx-common, gcc-12-base, the virtual <awk>) stay
  // out; of two alternatives (libpcre2-8-0 | libpcre3) the first is taken.
  assert.deepEqual(closure, ['libc6', 'libcrypt1', 'libgcc-s1', 'libpcre2-8-0', 'libssl3', 'nginx', 'zlib1g']);
  assert.ok(asked.length <= 4, `one apt-cache call per level of the graph (${asked.length})`);
  assert.ok(asked.flat().filter((p) => p === 'libc6').length === 1, 'each package asked about once');
});

test("the image cache keeps the three most recent builds of each image and layer, none younger than an hour, and nothing of another name", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-prune-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const now = Date.UTC(2026, 10, 28, 12);
  const hours = (h: number) => new Date(now - h * 3_600_000);
  const make = (name: string, ageHours: number) => {
    writeFileSync(join(dir, name), '');
    utimesSync(join(dir, name), hours(ageHours), hours(ageHours));
  };
  // fn-myweb: six builds, the newest 0.5 h old; fn-mywebs (another function) and fn-myweb's
  // build in progress are not fn-myweb's builds.
  for (const [i, age] of [0.5, 2, 3, 4, 5, 6].entries()) make(`fn-myweb-${'abcdef'[i]}${i}.tar`, age);
  make('fn-mywebs-0a.tar', 50);
  make('fn-myweb-ff.tar.building-12', 50);
  const removed = pruneBuilds(dir, 'fn-myweb-', 3, 3_600_000, now).map((p) => p.slice(dir.length + 1)).sort();
  assert.deepEqual(removed, ['fn-myweb-d3.tar', 'fn-myweb-e4.tar', 'fn-myweb-f5.tar']);
  assert.deepEqual(readdirSync(dir).sort(), ['fn-myweb-a0.tar', 'fn-myweb-b1.tar', 'fn-myweb-c2.tar', 'fn-myweb-ff.tar.building-12', 'fn-mywebs-0a.tar']);
  // Past the three, a build younger than an hour stays (another process may be importing it).
  for (const [i, age] of [0.1, 0.2, 0.3, 0.4].entries()) make(`bridge-0.1.0-${i}${i}.tar`, age);
  assert.deepEqual(pruneBuilds(dir, 'bridge-0.1.0-', 3, 3_600_000, now), []);
});
