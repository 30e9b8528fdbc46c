// Delivery to a function behind a Lambda Function URL: AuthType AWS_IAM (the bridge signs with
// SigV4, credentials from the AWS default chain — here its environment), a wrong key refused
// with 403 and said clearly, and throttling (429 + Retry-After) and 5xx retried with backoff.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines, type FunctionStack } from '../support/functions.ts';
import { nodePorts } from '../support/ports.ts';
import type { LocalLambda } from '../support/lambda.ts';

const iam = { region: 'eu-west-1', accessKeyId: 'AKIDKFNE2ETEST', secretAccessKey: 'kfn-e2e-secret' };
/** Credentials from the environment only: no shared files, no instance metadata. */
const awsEnv = (secret: string) => ({ AWS_ACCESS_KEY_ID: iam.accessKeyId, AWS_SECRET_ACCESS_KEY: secret, AWS_REGION: iam.region, AWS_CONFIG_FILE: '/nonexistent', AWS_SHARED_CREDENTIALS_FILE: '/nonexistent', AWS_EC2_METADATA_DISABLED: 'true' });

const nextPort = nodePorts('e2e/lambda-delivery');
async function createMyWeb(stack: FunctionStack, name: string): Promise<void> {
  await stack.api.request('POST', stack.objects, { body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name }, spec: { nodePortNumber: await nextPort(stack.api), pageContentHtml: `<p>${name}</p>` } } });
}
async function waitReady(stack: FunctionStack, name: string, timeoutMs = 60_000): Promise<void> {
  await waitFor(`MyWeb ${name} to be Ready`, async () => {
    const o = await stack.api.request<{ status?: { conditions?: { type: string; status: string }[] } }>('GET', `${stack.objects}/${name}`);
    return o.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') || undefined;
  }, { timeoutMs });
}

describe('delivery to a Lambda Function URL', { concurrency: 3 }, () => {
  test('AuthType AWS_IAM: the bridge signs each delivery with SigV4 and the object becomes Ready', async (t) => {
    const cluster = await testCluster();
    const stack = await functionStack(t, cluster, 'myweb', { runtime: 'lambda', lambda: { iam }, bridgeEnv: awsEnv(iam.secretAccessKey) });
    await createMyWeb(stack, 'signed');
    await waitReady(stack, 'signed');
    const lambda = stack.lambda as LocalLambda;
    assert.equal(lambda.refused, 0, `no request refused (last: ${lambda.lastRefusal})`);
    assert.ok(lambda.invocations >= 1);
  });

  test('a wrong key: 403, a clear error, retried with backoff, the function never invoked', async (t) => {
    const cluster = await testCluster();
    const stack = await functionStack(t, cluster, 'myweb', { runtime: 'lambda', lambda: { iam }, bridgeEnv: awsEnv('not-the-secret') });
    await createMyWeb(stack, 'refused');
    const lambda = stack.lambda as LocalLambda;
    const lines = await waitFor('three refused attempts in the journal', async () => {
      const l = journalLines(stack.journal).filter((e) => e.key === `${stack.ns}/refused`);
      return l.length >= 3 ? l : undefined;
    }, { timeoutMs: 30_000 });
    const first = lines[0] as unknown as { status: number; outcome: string; why: string };
    assert.equal(first.status, 403);
    assert.equal(first.outcome, 'retry');
    assert.match(first.why, /^HTTP 403 from 127\.0\.0\.1:\d+: the AWS SigV4-signed request was refused \(\{"Message":"Forbidden"\}\); check that the bridge's AWS credentials belong to a principal allowed lambda:InvokeFunctionUrl/);
    assert.equal(lambda.lastRefusal, 'the signature does not match');
    assert.equal(lambda.invocations, 0, 'the function never ran');
    assert.deepEqual(lines.map((l) => l.attempt).slice(0, 3), [1, 2, 3]);
  });

  test('throttled (429 with Retry-After) and 5xx: retried, waiting as asked, until it answers', async (t) => {
    const cluster = await testCluster();
    const stack = await functionStack(t, cluster, 'myweb', { runtime: 'lambda', lambda: { failFirst: { count: 2, status: 429, retryAfterSeconds: 2 } } });
    await createMyWeb(stack, 'throttled');
    await waitReady(stack, 'throttled');
    const lines = journalLines(stack.journal).filter((e) => e.key === `${stack.ns}/throttled`) as unknown as { status?: number; outcome: string; time: string; attempt: number }[];
    assert.deepEqual(lines.slice(0, 3).map((l) => [l.status, l.outcome]), [[429, 'retry'], [429, 'retry'], [200, lines[2]!.outcome]]);
    const gap = Date.parse(lines[1]!.time) - Date.parse(lines[0]!.time);
    assert.ok(gap >= 1900, `the retry waited for Retry-After (2 s), not ${gap} ms`);

    // A 502 may come from a proxy whose function still has the event: each one holds the object
    // until that delivery's deadline (timeoutSeconds 3) plus the 2 s grace.
    const five = await functionStack(t, cluster, 'myweb', { runtime: 'lambda', timeoutSeconds: 3, lambda: { failFirst: { count: 2, status: 502 } } });
    await createMyWeb(five, 'five-oh-two');
    await waitReady(five, 'five-oh-two');
    const l5 = journalLines(five.journal).filter((e) => e.key === `${five.ns}/five-oh-two`) as unknown as { status?: number; outcome: string; time: string }[];
    assert.deepEqual(l5.slice(0, 2).map((l) => [l.status, l.outcome]), [[502, 'retry'], [502, 'retry']]);
    const held = Date.parse(l5[1]!.time) - Date.parse(l5[0]!.time);
    assert.ok(held >= 4000, `after a 502 the object waited for the deadline and the grace, not ${held} ms`);
    assert.equal(l5.at(-1)!.outcome === 'done' || l5.at(-1)!.outcome === 'requeue', true);
  });
});

test('a Function URL request cut off in the middle of its body, or the emulator stopped meanwhile, leaves no unhandled rejection', async (t) => {
  const { startLambda } = await import('../support/lambda.ts');
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { connect } = await import('node:net');
  const codeDir = mkdtempSync(join(tmpdir(), 'kfn-lambda-cut-'));
  writeFileSync(join(codeDir, 'index.mjs'), 'export const handler = async () => ({ statusCode: 200, body: "ok" });\n');
  const lambda = await startLambda({ codeDir, handler: 'index.handler' });
  const rejections: unknown[] = [];
  const onRejection = (reason: unknown) => rejections.push(reason);
  process.on('unhandledRejection', onRejection);
  t.after(() => process.off('unhandledRejection', onRejection));
  const { port } = new URL(lambda.url);
  // Half a body, then the connection goes: the server is still reading it.
  const cut = connect(Number(port), '127.0.0.1');
  await new Promise<void>((r) => cut.once('connect', () => r()));
  cut.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"half":');
  await new Promise((r) => setTimeout(r, 100)); // for the server to take the headers and start reading the body
  cut.destroy();
  // Another half body in flight while the emulator stops (what a test's teardown does).
  const open = connect(Number(port), '127.0.0.1');
  await new Promise<void>((r) => open.once('connect', () => r()));
  open.on('error', () => undefined);
  open.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{');
  await new Promise((r) => setTimeout(r, 100)); // likewise
  await lambda.stop(); // resolves once every connection is closed, both requests' handlers told
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r)); // an unhandled rejection is reported after the microtasks
  assert.deepEqual(rejections.map(String), []);
});
