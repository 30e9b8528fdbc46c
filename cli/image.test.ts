// One story about images, as the code builds them (cli/artifacts/oci-image.ts's chooseBase, cli/artifacts/images.ts):
// an installed kfn always has a base, so its images are the base plus the bundle, with no Docker
// and no Go; only kfn's own checkout, given no base, builds on its own Node image with the local
// cluster's tools, which a Go toolchain builds the first time. The help and the docs say so.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../cluster/paths.ts';
import { imageCommand } from './image.ts';
import { chooseBase, defaultBase } from './artifacts/oci-image.ts';

const cwd = '/';

test('the code: an installed kfn builds on a base (the default without one); only the checkout, given none, builds on its own Node image', () => {
  assert.deepEqual(chooseBase(undefined, { cwd, checkout: false }), { ref: defaultBase, from: 'the default' });
  assert.equal(chooseBase(undefined, { cwd, checkout: true }), undefined);
});

test('kfn image --help: no Go on a base, a Go toolchain for the checkout\'s own Node image only', () => {
  const help = imageCommand.usage;
  assert.doesNotMatch(help, /no Docker, no Go:/, 'the checkout\'s own Node image is written by a tool built with Go: "no Go" holds for images on a base');
  assert.match(help, /on a base[^]*no Go/);
  assert.match(help, /In kfn's own checkout[^]*Go toolchain/);
});

test('docs/functions.md: deploying from a project needs no Go toolchain, and images on a base are not "in progress"', () => {
  const docs = readFileSync(join(repoRoot, 'docs', 'functions.md'), 'utf8');
  const section = docs.slice(docs.indexOf('## Running a function in the cluster'));
  assert.doesNotMatch(section, /in progress/);
  assert.doesNotMatch(section, /first `kfn deploy` or `kfn image push`\s+builds them from source/);
  assert.match(section, new RegExp(defaultBase.replaceAll('.', '\\.')));
});
