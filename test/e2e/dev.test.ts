// `kfn dev` and `kfn replay` against the real cluster, and the dev UI in a real Chromium:
// deliveries recorded; a save reloads the function and the next delivery runs the new code
// (the bridge is not restarted); a broken save keeps the old code; replay offline, as a dry
// run (nothing changes in the cluster) and live (the function receives reason `replay`).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { nodePorts } from '../support/ports.ts';
import { repoRoot } from '../../cluster/paths.ts';
import { startDevServer, type DevServer } from '../../cli/dev-server.ts';
import type { InvocationRecord } from '../../functions/sdk/record.ts';
import { launchChromium } from '../support/browser.ts';
import { kubeApi, testCluster, testNamespace, type TestCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';

const freePort = () =>
  new Promise<number>((done) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => done(port));
    });
  });

/** A copy of MyWeb in a folder of its own, so that the test can edit it as a user would. */
function myWebCopy(): { dir: string; edit(from: string, to: string): void } {
  const dir = mkdtempSync(join(tmpdir(), 'kfn-dev-myweb-'));
  const source = readFileSync(join(repoRoot, 'functions', 'myweb', 'index.ts'), 'utf8').replace("'../sdk/index.ts'", JSON.stringify(join(repoRoot, 'functions', 'sdk', 'index.ts')));
  writeFileSync(join(dir, 'index.ts'), source);
  return {
    dir,
    edit(from, to) {
      const text = readFileSync(join(dir, 'index.ts'), 'utf8');
      assert.ok(text.includes(from), `the function has no ${from}`);
      writeFileSync(join(dir, 'index.ts'), text.replace(from, to));
    },
  };
}

async function devStack(t: TestContext, cluster: TestCluster) {
  const ns = await testNamespace(t, cluster, 'dev');
  const fn = myWebCopy();
  const records = join(mkdtempSync(join(tmpdir(), 'kfn-dev-records-')), 'records.jsonl');
  const lines: string[] = [];
  const dev = await startDevServer({ dirs: [fn.dir], kubeconfig: cluster.paths.kubeconfig, port: await freePort(), namespaces: [ns], systemNamespace: ns, recordFile: records, log: (l) => lines.push(l) });
  t.after(() => dev.stop());
  t.after(() => t.diagnostic(`kfn dev said:\n${lines.join('\n')}`));
  const api = kubeApi(cluster.kc);
  const mywebs = `/apis/operator.k8s-summit.org/v1/namespaces/${ns}/mywebs`;
  return { ns, fn, dev, records, lines, api, mywebs };
}

const web = (name: string, port: number, html: string) => ({ apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name }, spec: { nodePortNumber: port, pageContentHtml: html } });
const nextPort = nodePorts('e2e/dev');

const recordFor = (dev: DevServer, object: string, match: (r: InvocationRecord) => boolean) => async () => dev.records().find((r) => `${r.event.data.primary.namespace}/${r.event.data.primary.name}` === object && match(r));

const kfn = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  promisify(execFile)(process.execPath, [join(repoRoot, 'cli', 'kfn.ts'), ...args], { cwd: repoRoot, env: { ...process.env, ...env } }).then(
    (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
  );

describe('kfn dev', { concurrency: true }, () => {
  test('records each delivery; a save reloads the function for the next delivery; replay offline, dry-run and live', async (t) => {
    const cluster = await testCluster();
    const s = await devStack(t, cluster);
    const object = `${s.ns}/site`;
    await s.api.request('POST', s.mywebs, { body: web('site', await nextPort(s.api), '<h1>one</h1>') });
    const created = await waitFor('the created delivery, recorded with its writes', recordFor(s.dev, object, (r) => r.event.reason === 'created' && r.writes.length >= 3));
    assert.deepEqual(created.children.map((c) => [c.ref.kind, c.written]), [['ConfigMap', true], ['Deployment', true], ['Service', true]]);
    // Contract 2: the object came in the event; the function did not read it.
    assert.equal(created.event.data.observed?.primary.metadata.name, 'site');
    assert.ok(!created.reads.some((r) => r.method === 'GET' && r.path === `${s.mywebs}/site`));
    const deployment = `/apis/apps/v1/namespaces/${s.ns}/deployments/site`;
    assert.equal((await s.api.request<{ spec: { replicas: number } }>('GET', deployment)).spec.replicas, 1);

    // A save: the next delivery runs the new code.
    s.fn.edit('    replicas: 1,', '    replicas: 2,');
    await waitFor('version 2 of the function', async () => s.dev.functions()[0]!.version === 2);
    await s.api.request('PATCH', `${s.mywebs}/site`, { body: { spec: { pageContentHtml: '<h1>two</h1>' } }, contentType: 'application/merge-patch+json' });
    await waitFor('the Deployment at 2 replicas (the new code ran)', async () => (await s.api.request<{ spec: { replicas: number } }>('GET', deployment)).spec.replicas === 2);

    // A broken save: said, and the running version stays.
    s.fn.edit('    replicas: 2,', '    replicas: 2,,');
    const broken = await waitFor('the load error', async () => s.dev.functions()[0]!.loadError);
    assert.match(broken, /index\.ts:\d+:\d+: /);
    assert.equal(s.dev.functions()[0]!.version, 2);
    s.fn.edit('    replicas: 2,,', '    replicas: 2,');
    await waitFor('version 3 after the fix', async () => s.dev.functions()[0]!.version === 3 && !s.dev.functions()[0]!.loadError);
    // A declared default that is not CEL: refused on reload as kfn deploy refuses it, and version 3 stays.
    s.fn.edit("  name: 'myweb',", "  name: 'myweb',\n  defaults: [{ set: { '/spec/pageContentHtml': \"'<h1>' +\" } }],");
    const notCel = await waitFor('the declared default refused', async () => s.dev.functions()[0]!.loadError);
    assert.match(notCel, /myweb's declared defaults are not CEL:\n {2}defaults\[0\]\.set\["\/spec\/pageContentHtml"\]: `'<h1>' \+` is not CEL/);
    assert.equal(s.dev.functions()[0]!.version, 3);
    s.fn.edit("\n  defaults: [{ set: { '/spec/pageContentHtml': \"'<h1>' +\" } }],", '');
    await waitFor('version 4 after the fix', async () => s.dev.functions()[0]!.version === 4 && !s.dev.functions()[0]!.loadError);
    await waitFor('the records file', async () => readFileSync(s.records, 'utf8').includes(created.id));

    // Offline: the created record, replayed with today's code (2 replicas), differs in that field only.
    const offline = await kfn(['replay', s.records, '--id', created.id, '--function', s.fn.dir], { KUBECONFIG: '/nonexistent' });
    assert.equal(offline.code, 1, offline.out + offline.err);
    assert.match(offline.out, /~ PATCH \/apis\/apps\/v1\/namespaces\/.*\/deployments\/site {2}\(changed\)\n {4}~ spec\.replicas: 1 → 2\n/);
    assert.match(offline.out, /✗ the writes differ from the recorded ones \(1 changed\)/);

    // Dry-run against the cluster with code that wants 3 replicas: shown, not done.
    const three = join(s.fn.dir, 'three');
    mkdirSync(three);
    writeFileSync(join(three, 'index.ts'), readFileSync(join(s.fn.dir, 'index.ts'), 'utf8').replace('    replicas: 2,', '    replicas: 3,'));
    const dry = await kfn(['replay', s.records, '--dry-run', '--object', object, '--last', '--function', three], { KUBECONFIG: cluster.paths.kubeconfig });
    assert.match(dry.out, /would change \/apis\/apps\/v1\/namespaces\/.*\/deployments\/site:\n(.*\n)*? {4}~ spec\.replicas: 2 → 3/, dry.out + dry.err);
    assert.equal((await s.api.request<{ spec: { replicas: number } }>('GET', deployment)).spec.replicas, 2, 'a dry run changed the cluster');

    // Live: the event again, signed with the function's secret, reason replay.
    const secret = await s.api.request<{ data: { secret: string } }>('GET', `/api/v1/namespaces/${s.ns}/secrets/kfn-fn-myweb`);
    const live = await kfn(['replay', s.records, '--live', '--id', created.id, '--to', `${s.dev.url}/fn/myweb`], { KFN_AUTH_SECRET: Buffer.from(secret.data.secret, 'base64').toString('utf8') });
    assert.match(live.out, /live: event .* \(reason replay\) → .*: HTTP 200/, live.out + live.err);
    const replayed = await waitFor('the replayed delivery', recordFor(s.dev, object, (r) => r.event.reason === 'replay'));
    assert.equal(replayed.event.data.primary.uid, created.event.data.primary.uid);
    // Unsigned, it is refused: replay goes through the contract's auth.
    const unsigned = await kfn(['replay', s.records, '--live', '--id', created.id, '--to', `${s.dev.url}/fn/myweb`], { KFN_AUTH_SECRET: 'wrong' });
    assert.equal(unsigned.code, 1);
    assert.match(unsigned.out, /the function answered 401: bad signature/);
  });

  test('the UI in Chromium: deliveries appear live, one opens with its diff, replay adds a delivery', async (t) => {
    const cluster = await testCluster();
    const s = await devStack(t, cluster);
    const browser = await launchChromium();
    t.after(() => browser.close());
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(err.message));
    await page.goto(`${s.dev.url}/`);
    await page.locator('#conn', { hasText: 'live' }).waitFor({ timeout: 15_000 });
    await page.locator('[data-function="myweb"]').waitFor();

    await s.api.request('POST', s.mywebs, { body: web('ui-site', await nextPort(s.api), '<h1>from the browser test</h1>') });
    await s.api.request('POST', s.mywebs, { body: web('other', await nextPort(s.api), '<h1>other</h1>') });
    const createdRow = page.locator(`#rows tr[data-object="${s.ns}/ui-site"][data-reason="created"]`);
    await createdRow.waitFor({ timeout: 30_000 });
    await page.locator(`#rows tr[data-object="${s.ns}/other"]`).first().waitFor({ timeout: 30_000 });
    const shots = process.env.KFN_SCREENSHOTS ? join(repoRoot, 'docs', 'images') : mkdtempSync(join(tmpdir(), 'kfn-ui-'));
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: join(shots, 'dev-ui-deliveries.png') });

    // The filter keeps one object's deliveries.
    await page.fill('#filter', 'ui-site');
    assert.equal(await page.locator(`#rows tr[data-object="${s.ns}/other"]:visible`).count(), 0);
    assert.ok((await page.locator(`#rows tr[data-object="${s.ns}/ui-site"]:visible`).count()) >= 1);

    await createdRow.click();
    const children = page.locator('#children');
    await children.waitFor();
    const text = await children.innerText();
    assert.match(text, /ConfigMap ui-site-page — applied \(new\)/);
    assert.match(text, /Deployment ui-site — applied \(new\)/);
    assert.match(text, /\+ spec\.replicas: 1/);
    const detail = await page.locator('#detail').innerText();
    assert.match(detail, /Ready/);
    assert.doesNotMatch(detail, /\[object |^null$/m, 'every part of the detail renders as text, none as a placeholder');
    // Contract 2: the event carried the MyWeb and its (not yet made) children; the function read nothing of them.
    const observed = await page.locator('#observed').innerText();
    assert.match(observed, /MyWeb ui-site at resourceVersion \d+/);
    assert.match(observed, /Deployment up to resourceVersion \d+ \(metadata, status, spec\.selector\)/);
    assert.doesNotMatch(await page.locator('#reads').innerText(), /mywebs\/ui-site/);
    assert.match(await page.locator('#writes').innerText(), /PATCH \/apis\/apps\/v1\/.*deployments\/ui-site/);
    // The outcome column fits beside the object, not under the detail pane.
    const outcome = await createdRow.locator('td').last().boundingBox();
    const pane = await page.locator('#left').boundingBox();
    assert.ok(outcome && pane && outcome.x + outcome.width <= pane.x + pane.width + 1, `outcome cell ends at ${outcome && outcome.x + outcome.width}, the list at ${pane && pane.x + pane.width}`);
    await page.screenshot({ path: join(shots, 'dev-ui-delivery.png'), fullPage: false });

    await page.click('#replay-live');
    const replayRow = page.locator(`#rows tr[data-object="${s.ns}/ui-site"][data-reason="replay"]`);
    await replayRow.waitFor({ timeout: 15_000 });
    await page.locator('#detail h2 + div', { hasText: 'reason replay' }).waitFor();
    await page.click('#replay-dry');
    await page.locator(`#rows tr[data-object="${s.ns}/ui-site"] td`, { hasText: 'dry-run' }).first().waitFor({ timeout: 15_000 });
    await page.screenshot({ path: join(shots, 'dev-ui-replay.png') });
    assert.deepEqual(errors, []);
    t.diagnostic(`screenshots in ${shots}`);
  });
});
