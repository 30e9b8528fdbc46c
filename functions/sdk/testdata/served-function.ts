// A function served as its container serves it (serve), against an in-memory cluster holding
// one Box, that says on SIGUSR2 whether Node's fetch (undici) has been loaded: for the test beside
// node/ that a function serving deliveries never loads it.
import { defineKind, defineReconciler, t } from '../index.ts';
import { serve } from '../node/index.ts';
import { memoryApi } from '../testing.ts';

const Box = defineKind({ group: 'served.kfn.test', version: 'v1', kind: 'Box', spec: t.Object({}), status: t.Object({}) });
const reconciler = defineReconciler({ name: 'served', for: Box, reconcile: () => ({ children: [] }) });

process.on('SIGUSR2', () => console.error(`fetch loaded: ${(process as unknown as { moduleLoadList: string[] }).moduleLoadList.some((m) => m.includes('undici'))}`));
await serve(reconciler, { hostname: '127.0.0.1', api: memoryApi(reconciler, { object: { metadata: { name: 'a', namespace: 'demo' }, spec: {} } }), credentials: { kind: 'none' }, record: false });
console.error('listening');
