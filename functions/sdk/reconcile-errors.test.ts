// A reconcile that throws is logged with its stack, the frames in the user's code first: what
// kfn serve, kfn dev and a deployed function write (they all run createApp).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import pino from 'pino';
import { authenticate } from '../../core/authentication.ts';
import { encodeReconcileEvent } from '../../core/event.ts';
import { createApp } from './app.ts';
import type { Reconciler } from './reconciler.ts';
import { memoryApi } from './testing.ts';

test("a reconcile that throws is logged with its stack, the user's frames first", async (t) => {
  // The function lives outside kfn's tree, as a user's does.
  const dir = mkdtempSync(join(tmpdir(), 'kfn-throws-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const sdk = pathToFileURL(join(import.meta.dirname, 'index.ts')).href;
  writeFileSync(
    join(dir, 'index.ts'),
    `import { defineKind, defineReconciler, t } from '${sdk}';\nconst Gadget = defineKind({ group: 'demo.example.com', version: 'v1', kind: 'Gadget', spec: t.Object({}), status: t.Object({}) });\nfunction port(): number {\n  throw new Error('no port left');\n}\nexport default defineReconciler({ name: 'gadget', for: Gadget, reconcile: () => ({ status: { port: port() } }) });\n`,
  );
  const reconciler = ((await import(pathToFileURL(join(dir, 'index.ts')).href)) as { default: Reconciler }).default;
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) });
  const object = { apiVersion: 'demo.example.com/v1', kind: 'Gadget', metadata: { name: 'g', namespace: 'demo', uid: 'u1', resourceVersion: '1', generation: 1 }, spec: {} };
  const credentials = { kind: 'hmac', secret: 'k' } as const;
  const app = createApp(reconciler, { credentials, log, api: memoryApi(reconciler, { object }) });
  const { headers, body } = authenticate(encodeReconcileEvent({ reconciler: 'gadget', primary: { apiVersion: 'demo.example.com/v1', kind: 'Gadget', namespace: 'demo', name: 'g', uid: 'u1', resourceVersion: '1', generation: 1 }, reason: 'created', observedAt: Date.now() }, 1, 'kfn://test').message, credentials);
  const res = await app.request('/', { method: 'POST', headers, body });
  assert.equal(res.status, 500);
  const logged = lines.find((l) => typeof l.stack === 'string');
  assert.ok(logged, `a log line with the stack, among ${JSON.stringify(lines)}`);
  const stack = (logged.stack as string).split('\n');
  assert.equal(stack[0], 'reconcile for Gadget demo/g failed: no port left');
  assert.equal(stack[1], 'caused by Error: no port left');
  assert.match(stack[2]!, new RegExp(`at port \\((file://)?${dir}/index\\.ts:4:9\\)$`));
  assert.match(stack[3]!, new RegExp(`${dir}/index\\.ts:6:`));
});
