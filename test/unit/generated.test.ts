// Files written from code (cli/generate.ts) are what the code gives today: a change to the
// schema or the policy that was not followed by `npm run generate` fails here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { generated } from '../../cli/generate.ts';
import { repoRoot } from '../../cluster/paths.ts';

for (const [path, text] of Object.entries(generated)) {
  test(`${path} is what npm run generate writes`, () => {
    assert.equal(readFileSync(join(repoRoot, path), 'utf8'), text(), `${path} is out of date: run npm run generate`);
  });
}
