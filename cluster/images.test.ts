import assert from 'node:assert/strict';
import { test } from 'node:test';
import { libraryClosure } from './images.ts';

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
