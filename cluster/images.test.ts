import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BinarySet } from './build.ts';
import { buildImage, libraryClosure, pruneBuilds } from './images.ts';

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
  // fn-myweb-ab's build (a recipe whose name goes on in hex) and a key of another length are not
  // fn-myweb's builds either: a build's key is 16 hex digits.
  const key = (c: string) => c.repeat(16);
  for (const [i, age] of [0.5, 2, 3, 4, 5, 6].entries()) make(`fn-myweb-${key('abcdef'[i]!)}.tar`, age);
  make(`fn-mywebs-${key('0')}.tar`, 50);
  make(`fn-myweb-ab-${key('1')}.tar`, 50);
  make('fn-myweb-0a.tar', 50);
  make(`fn-myweb-${key('f')}.tar.building-12`, 50);
  const removed = pruneBuilds(dir, 'fn-myweb-', 3, 3_600_000, now).map((p) => p.slice(dir.length + 1)).sort();
  assert.deepEqual(removed, [`fn-myweb-${key('d')}.tar`, `fn-myweb-${key('e')}.tar`, `fn-myweb-${key('f')}.tar`]);
  assert.deepEqual(readdirSync(dir).sort(), [`fn-myweb-0a.tar`, `fn-myweb-${key('a')}.tar`, `fn-myweb-ab-${key('1')}.tar`, `fn-myweb-${key('b')}.tar`, `fn-myweb-${key('c')}.tar`, `fn-myweb-${key('f')}.tar.building-12`, `fn-mywebs-${key('0')}.tar`]);
  // Past the three, a build younger than an hour stays (another process may be importing it).
  for (const [i, age] of [0.1, 0.2, 0.3, 0.4].entries()) make(`bridge-0.1.0-${key(String(i))}.tar`, age);
  assert.deepEqual(pruneBuilds(dir, 'bridge-0.1.0-', 3, 3_600_000, now), []);
});

test('an image or layer found in the cache is touched, so that pruning keeps what is in use', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-images-'));
  const previous = process.env.KFN_CACHE_DIR;
  process.env.KFN_CACHE_DIR = dir;
  t.after(() => {
    if (previous === undefined) delete process.env.KFN_CACHE_DIR;
    else process.env.KFN_CACHE_DIR = previous;
    rmSync(dir, { recursive: true, force: true });
  });
  // The image writer: an empty tarball where the spec says.
  const writer = join(dir, 'kfn-image');
  writeFileSync(writer, '#!/bin/sh\nout=$(sed -n \'s/.*"out":"\\([^"]*\\)".*/\\1/p\' "$1")\n: > "$out"\n');
  chmodSync(writer, 0o755);
  const binaries = { dir, path: () => writer } as unknown as BinarySet;
  const source = join(dir, 'hello.txt');
  writeFileSync(source, 'hello');
  const recipe = { name: 'fn-hello', tag: '0.1.0', files: [[source, '/app/hello.txt']] as [string, string][], config: { Cmd: ['/bin/true'] } };
  const built = buildImage(recipe, binaries);
  const layers = join(dir, 'images', 'layers');
  const [layer] = readdirSync(layers).filter((f) => f.endsWith('.tar'));
  assert.ok(layer, 'a layer in the cache');
  const weekAgo = new Date(Date.now() - 7 * 86_400_000);
  utimesSync(built.tarball, weekAgo, weekAgo);
  utimesSync(join(layers, layer!), weekAgo, weekAgo);
  const again = buildImage(recipe, binaries);
  assert.equal(again.tarball, built.tarball);
  assert.equal(again.seconds, 0, 'found in the cache');
  for (const path of [built.tarball, join(layers, layer!)]) assert.ok(Date.now() - statSync(path).mtimeMs < 60_000, `${path.slice(dir.length + 1)} touched when found`);
});
