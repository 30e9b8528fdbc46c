// One trace from watch event to write, read back from a real Jaeger v2 (built from its Go
// module): a bridge and the MyWeb function run as in production with the standard OTLP variables
// pointing at Jaeger; a MyWeb is created; its trace holds the bridge's receive, queued and send
// spans, the function's reconcile span under the send span, a span per step, and each child's
// write with the apiserver request under it; and the event that shows one of those writes starts
// a trace that links back to the write.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ensureJaeger } from '../../cluster/jaeger.ts';
import { nodePorts } from '../support/ports.ts';
import { waitFor } from '../../core/clock.ts';
import { testCluster } from '../support/cluster.ts';
import { functionStack, stackReport } from '../support/functions.ts';
import { startJaeger, traceText, type JaegerSpan, type JaegerTrace } from '../support/jaeger.ts';

test("a MyWeb's creation is one trace from the bridge's watch event through the function's steps to each child's write, and the events of those writes link back to them", async (t) => {
  const cluster = await testCluster();
  const dir = mkdtempSync(join(tmpdir(), 'kfn-jaeger-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const jaeger = await startJaeger(t, await ensureJaeger({ log: (line) => t.diagnostic(line) }), dir);
  // The bridge and the function are this test's children: they take the standard variables from its environment.
  const before = { ...process.env };
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = jaeger.otlpEndpoint;
  t.after(() => {
    if (before.OTEL_EXPORTER_OTLP_ENDPOINT === undefined) delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    else process.env.OTEL_EXPORTER_OTLP_ENDPOINT = before.OTEL_EXPORTER_OTLP_ENDPOINT;
  });
  const s = await functionStack(t, cluster, 'myweb');
  const port = await nodePorts('e2e/tracing')(s.api);
  await s.api.request('POST', s.objects, { body: { apiVersion: 'operator.k8s-summit.org/v1', kind: 'MyWeb', metadata: { name: 'traced' }, spec: { image: 'kfn.local/nginx:1.22', nodePortNumber: port, pageContentHtml: '<p>traced</p>' } } });
  await promisify(execFile)(join(cluster.state.binDir, 'kubectl'), ['--kubeconfig', cluster.paths.kubeconfig, '-n', s.ns, 'wait', '--for=condition=Ready', 'myweb/traced', '--timeout=120s']).catch((err) => assert.fail(`${err}\n${stackReport(s)}`));

  const tag = (span: JaegerSpan, key: string) => span.tags.find((x) => x.key === key)?.value;
  const service = (tr: JaegerTrace, span: JaegerSpan) => tr.processes[span.processID]?.serviceName;
  const parentOf = (tr: JaegerTrace, span: JaegerSpan) => tr.spans.find((p) => span.references.some((r) => r.refType === 'CHILD_OF' && r.spanID === p.spanID));
  // The trace of the creation: its receive span is the MyWeb's first event.
  const created = await waitFor('the trace of the MyWeb created, with the function\'s spans and its writes', async () => {
    const traces = await jaeger.traces('kfn-bridge');
    return traces.find((tr) => tr.spans.some((sp) => sp.operationName === 'receive MyWeb' && tag(sp, 'kfn.reason') === 'created' && tag(sp, 'kfn.object.name') === 'traced') && tr.spans.some((sp) => sp.operationName === 'writing the status'));
  }, { timeoutMs: 60_000, intervalMs: 1000, context: () => stackReport(s) });
  t.diagnostic(`the trace of the MyWeb's creation:\n${traceText(created)}`);
  const named = (name: string | RegExp) => created.spans.filter((sp) => (typeof name === 'string' ? sp.operationName === name : name.test(sp.operationName)));
  const receive = named('receive MyWeb')[0]!;
  const queued = named(/^queued /)[0];
  // The delivery that created the children: the send above the reconcile that wrote the status.
  const reconcile = parentOf(created, named('writing the status')[0]!);
  const send = reconcile && parentOf(created, reconcile);
  assert.ok(queued && send && reconcile, traceText(created));
  assert.equal(reconcile.operationName, 'reconcile MyWeb');
  assert.equal(named(/^send /).length, 1, `one delivery in the creation's trace; a later event starts its own:\n${traceText(created)}`);
  assert.equal(service(created, receive), 'kfn-bridge');
  assert.equal(service(created, reconcile), 'kfn-fn-myweb', "the function's span, in the bridge's trace");
  assert.equal(parentOf(created, queued), receive, 'queued under the receive span');
  assert.equal(parentOf(created, send), receive, 'the delivery under the receive span');
  assert.equal(parentOf(created, reconcile), send, 'the reconcile under the delivery (its traceparent)');
  assert.deepEqual([tag(receive, 'kfn.object.kind'), tag(receive, 'k8s.namespace.name'), tag(send, 'cloudevents.event_type'), tag(send, 'http.response.status_code')], ['MyWeb', s.ns, 'dev.kfn.reconcile.v1', 200]);
  assert.equal(tag(send, 'cloudevents.event_id'), tag(reconcile, 'cloudevents.event_id'), 'one CloudEvent, seen on both sides');
  // Each child's write: a step span under the reconcile, with the apiserver's PATCH under it.
  const writes = [...named(/^applying (ConfigMap|Deployment|Service) /), ...named('writing the status')];
  assert.deepEqual(named(/^applying /).map((sp) => sp.operationName.split(' ')[1]).sort(), ['ConfigMap', 'Deployment', 'Service']);
  for (const w of writes) {
    assert.equal(parentOf(created, w), reconcile, `${w.operationName} under the reconcile`);
    const requests = created.spans.filter((sp) => parentOf(created, sp) === w && /^PATCH /.test(sp.operationName));
    assert.equal(requests.length, 1, `${w.operationName}: its apiserver request (${created.spans.filter((sp) => parentOf(created, sp) === w).map((sp) => sp.operationName).join(', ')})`);
    assert.equal(tag(requests[0]!, 'http.request.method'), 'PATCH');
  }

  // The events those writes cause start traces of their own that link back to the write.
  const writeIds = new Set(writes.map((w) => w.spanID));
  const linked = await waitFor('a later trace linking to one of the writes', async () => {
    const traces = await jaeger.traces('kfn-bridge');
    for (const tr of traces) {
      // On the receive span of the event showing the write, or the queued span it joined (when it came before the answer).
      const sp = tr.spans.find((x) => /^(receive|queued) /.test(x.operationName) && x.references.some((r) => writeIds.has(r.spanID) && r.traceID === created.traceID));
      if (sp) return { tr, sp };
    }
    return undefined;
  }, { timeoutMs: 30_000, intervalMs: 1000 });
  const cause = writes.find((w) => linked.sp.references.some((r) => r.spanID === w.spanID))!;
  t.diagnostic(`"${linked.sp.operationName}" (trace ${linked.tr.traceID}) links to "${cause.operationName}" of the creation's trace:\n${traceText(linked.tr)}`);
  assert.notEqual(linked.tr.traceID, created.traceID);
});
