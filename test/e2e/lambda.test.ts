// Every example with its function run as Lambda runs it: `kfn build --target lambda`'s zip,
// unpacked and run by AWS's own Node runtime interface client (npm aws-lambda-ric, compiled on
// first use) against the Runtime API and Function URL of test/support/lambda.ts; the bridge
// delivers to the Function URL. Same life as test/e2e/examples.test.ts.
import { describe, test } from 'node:test';
import { functionDirs } from '../../cli/functions.ts';
import { exampleLifecycle, exampleNames } from '../support/examples.ts';
import { ensureRuntimeClient } from '../support/lambda.ts';

describe('every example, its function a Lambda: create → Ready, drift repaired, delete', { concurrency: 3 }, () => {
  ensureRuntimeClient((line) => console.error(`[lambda] ${line}`));
  for (const name of exampleNames(functionDirs())) test(name, (t) => exampleLifecycle(t, functionDirs().find((d) => d.endsWith(`/${name}`))!, { runtime: 'lambda' }));
});
