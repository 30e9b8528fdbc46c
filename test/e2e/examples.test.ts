// Every example, from its samples.yaml, through the same life (test/support/examples.ts), its
// function run as a process under its ServiceAccount's token.
import { describe, test } from 'node:test';
import { functionDirs } from '../../cli/functions.ts';
import { exampleLifecycle, exampleNames } from '../support/examples.ts';

describe('every example: create → Ready, drift repaired, delete', { concurrency: 3 }, () => {
  for (const name of exampleNames(functionDirs())) test(name, (t) => exampleLifecycle(t, functionDirs().find((d) => d.endsWith(`/${name}`))!));
});
