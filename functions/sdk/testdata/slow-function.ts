// A function whose reconcile takes 2 s, run as a deployed container runs it (runInContainer)
// against an in-memory cluster holding one Slow object: for the SIGTERM test beside node/.
import { setTimeout as sleep } from 'node:timers/promises';
import { defineKind, defineReconciler, t } from '../index.ts';
import { runInContainer } from '../node/index.ts';
import { memoryApi } from '../testing.ts';

const Slow = defineKind({ group: 'slow.kfn.test', version: 'v1', kind: 'Slow', spec: t.Object({}), status: t.Object({}) });

const reconciler = defineReconciler({
  name: 'slow',
  for: Slow,
  async reconcile() {
    console.error('reconcile started');
    await sleep(2000);
    console.error('reconcile finished');
    return { children: [] };
  },
});

await runInContainer(reconciler, { api: memoryApi(reconciler, { object: { metadata: { name: 'a', namespace: 'demo' }, spec: {} } }), credentials: { kind: 'none' } });
