// The Helm chart (charts/kfn) against the kustomize base (manifests/): with its defaults it
// renders the same objects (Helm's labels aside, and the release namespace instead of a
// Namespace object), so the two cannot drift; `helm lint --strict` is clean; its values change
// what they say; and the real apiserver admits what it renders (server-side dry run).
// Installing and upgrading it: test/e2e/helm.serial.test.ts.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { ensureHelm } from '../../cluster/helm.ts';
import { kfnVersion, repoRoot } from '../../cluster/paths.ts';
import { objectPath } from '../../kube/api.ts';
import { kubeApi, testCluster, testNamespace } from '../support/cluster.ts';

const exec = promisify(execFile);
type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; spec?: Record<string, unknown> & { template?: { metadata?: { labels?: Record<string, string> } } } };
const parse = (text: string) => parseAllDocuments(text).map((d) => d.toJS() as Obj).filter(Boolean);
const chart = join(repoRoot, 'charts', 'kfn');

/** What the chart adds and the base does not: Helm's labels. */
function normalized(o: Obj): Obj {
  const keep = (labels?: Record<string, string>) => Object.fromEntries(Object.entries(labels ?? {}).filter(([k]) => k === 'kfn.dev/aggregate-to-bridge' || (k === 'app.kubernetes.io/name' && o.kind === 'Deployment')));
  const copy = structuredClone(o);
  copy.metadata.labels = keep(copy.metadata.labels);
  if (copy.spec?.template?.metadata) copy.spec.template.metadata.labels = keep(copy.spec.template.metadata.labels);
  return copy;
}

test('the Helm chart renders what manifests/ holds, lints clean, and its values do what they say', async () => {
  const cluster = await testCluster();
  const helm = await ensureHelm();
  const chartYaml = parse(await (await import('node:fs/promises')).readFile(join(chart, 'Chart.yaml'), 'utf8'))[0] as unknown as { version: string; appVersion: string };
  assert.deepEqual([chartYaml.version, chartYaml.appVersion], [kfnVersion, kfnVersion], 'the chart, its app and kfn have one version');
  const lint = await exec(helm, ['lint', '--strict', chart]);
  assert.match(lint.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);

  const render = async (...set: string[]) => parse((await exec(helm, ['template', 'kfn', chart, '--namespace', 'kfn-system', '--include-crds', ...set.flatMap((s) => ['--set', s])])).stdout);
  const base = parse((await exec(join(cluster.state.binDir, 'kubectl'), ['kustomize', join(repoRoot, 'manifests')])).stdout).filter((o) => o.kind !== 'Namespace');
  const rendered = await render();
  const key = (o: Obj) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
  assert.deepEqual(rendered.map(key).sort(), base.map(key).sort(), 'the same objects');
  for (const o of base) assert.deepEqual(normalized(rendered.find((r) => key(r) === key(o))!), normalized(o), `${key(o)} as in manifests/`);

  const deployment = (objs: Obj[]) => objs.find((o) => o.kind === 'Deployment') as unknown as { spec: { replicas: number; template: { spec: { containers: { image: string; args: string[] }[]; volumes?: unknown[] } } } };
  assert.equal(deployment(rendered).spec.replicas, 1, 'one replica by default, leader-elected');
  assert.ok(deployment(rendered).spec.template.spec.containers[0]!.args.includes('--leader-elect'));
  assert.equal(deployment(await render('replicas=2')).spec.replicas, 2, 'a standby a value away');
  const sharded = deployment(await render('replicas=3', 'shards=3'));
  assert.equal(sharded.spec.replicas, 3);
  assert.ok(sharded.spec.template.spec.containers[0]!.args.includes('--shards=3'));
  assert.ok(deployment(await render('replicas=2', 'warmStandby=true')).spec.template.spec.containers[0]!.args.includes('--warm-standby'));
  assert.equal(deployment(rendered).spec.template.spec.containers[0]!.args.includes('--warm-standby'), false, 'a standby watches nothing by default');
  const digest = `sha256:${'a'.repeat(64)}`;
  assert.equal(deployment(await render('image.repository=10.244.0.1:15000/kfn/bridge', `image.digest=${digest}`)).spec.template.spec.containers[0]!.image, `10.244.0.1:15000/kfn/bridge@${digest}`);
  const fromFile = await render('reconcilers[0].apiVersion=kfn.dev/v1alpha1', 'reconcilers[0].kind=Reconciler', 'reconcilers[0].metadata.name=web', 'reconcilers[0].spec.sink.uri=http://fn/');
  assert.ok(deployment(fromFile).spec.template.spec.containers[0]!.args.includes('--config=/etc/kfn/reconcilers.yaml'));
  assert.match(String((fromFile.find((o) => o.kind === 'ConfigMap') as unknown as { data: Record<string, string> }).data['reconcilers.yaml']), /kind: Reconciler\n\s*metadata:\n\s*name: web/);
  // The dashboard and alerts: the same files the chart's monitoring/ folder holds, and monitors for the bridge and functions.
  const monitored = await render('monitoring.dashboard.enabled=true', 'monitoring.prometheusRule.enabled=true', 'monitoring.serviceMonitor.enabled=true');
  const files = join(chart, 'monitoring');
  const { readFile } = await import('node:fs/promises');
  const dashboard = monitored.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'kfn-dashboard') as unknown as { metadata: { labels: Record<string, string> }; data: Record<string, string> };
  assert.deepEqual(JSON.parse(dashboard.data['kfn-dashboard.json']!), JSON.parse(await readFile(join(files, 'kfn-dashboard.json'), 'utf8')));
  assert.equal(dashboard.metadata.labels.grafana_dashboard, '1', "labelled for Grafana's dashboard sidecar");
  const rule = monitored.find((o) => o.kind === 'PrometheusRule')!;
  assert.deepEqual(rule.spec, parse(await readFile(join(files, 'kfn-alerts.yaml'), 'utf8'))[0], 'the PrometheusRule holds the plain rule file');
  assert.deepEqual(monitored.filter((o) => o.kind === 'ServiceMonitor' || o.kind === 'PodMonitor').map(key).sort(), ['PodMonitor/kfn-system/kfn-functions', 'ServiceMonitor/kfn-system/kfn-bridge']);
  assert.ok(monitored.some((o) => o.kind === 'Service' && o.metadata.name === 'kfn-bridge-metrics'), 'the ServiceMonitor has a Service to select');
  assert.equal(rendered.filter((o) => o.apiVersion.startsWith('monitoring.coreos.com/')).length, 0, 'nothing of the Prometheus Operator by default');
  const env = (objs: Obj[]) => (deployment(objs).spec.template.spec.containers[0] as unknown as { env: { name: string; value?: string }[] }).env;
  assert.deepEqual(env(await render('tracing.otlpEndpoint=http://collector.observability:4318')).find((e) => e.name === 'OTEL_EXPORTER_OTLP_ENDPOINT'), { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://collector.observability:4318' });
  assert.equal(env(rendered).some((e) => e.name.startsWith('OTEL_')), false, 'no tracing by default');
  await assert.rejects(render('replicas=2', 'leaderElection=false'), /replicas > 1 needs leaderElection: true/);
  await assert.rejects(render('replicas=1', 'leaderElection=false', 'shards=2'), /shards > 1 needs leaderElection: true/);
  await assert.rejects(render('replicas=2', 'shards=2', 'warmStandby=true'), /warmStandby needs leaderElection: true and shards: 1/);

  // The journal: on by default, in a bounded emptyDir; a claim of the chart's own or the user's; off.
  type PodSpec = { securityContext: { fsGroup?: number }; containers: { args: string[]; volumeMounts?: { name: string; mountPath: string }[] }[]; volumes?: { name: string; emptyDir?: { sizeLimit: string }; persistentVolumeClaim?: { claimName: string } }[] };
  const pod = (objs: Obj[]) => (deployment(objs) as unknown as { spec: { strategy?: { type: string }; template: { spec: PodSpec } } }).spec;
  const journalVolume = (objs: Obj[]) => pod(objs).template.spec.volumes?.find((v) => v.name === 'journal');
  assert.ok(pod(rendered).template.spec.containers[0]!.args.includes('--journal=/var/lib/kfn/journal/journal.jsonl'), 'the bridge journals by default');
  assert.deepEqual(pod(rendered).template.spec.containers[0]!.volumeMounts, [{ name: 'journal', mountPath: '/var/lib/kfn/journal' }]);
  assert.deepEqual(journalVolume(rendered), { name: 'journal', emptyDir: { sizeLimit: '256Mi' } }, 'on a bounded emptyDir');
  assert.equal(pod(rendered).strategy, undefined, 'rolled as a Deployment is, the new pod beside the old');
  const claimed = await render('journal.persistence.enabled=true', 'journal.persistence.storageClassName=fast');
  assert.deepEqual(journalVolume(claimed), { name: 'journal', persistentVolumeClaim: { claimName: 'kfn-bridge-journal' } });
  const claim = claimed.find((o) => o.kind === 'PersistentVolumeClaim') as unknown as { metadata: { name: string }; spec: { accessModes: string[]; storageClassName: string; resources: { requests: { storage: string } } } };
  assert.deepEqual([claim.metadata.name, claim.spec.accessModes, claim.spec.storageClassName, claim.spec.resources.requests.storage], ['kfn-bridge-journal', ['ReadWriteOnce'], 'fast', '256Mi']);
  assert.deepEqual(pod(claimed).strategy, { type: 'Recreate' }, 'a ReadWriteOnce claim: the old pod stops before the new one mounts it');
  assert.equal(pod(claimed).template.spec.securityContext.fsGroup, 65532, 'the volume is given to a group the bridge has');
  const own = await render('journal.persistence.enabled=true', 'journal.persistence.existingClaim=mine');
  assert.deepEqual(journalVolume(own), { name: 'journal', persistentVolumeClaim: { claimName: 'mine' } });
  assert.equal(own.some((o) => o.kind === 'PersistentVolumeClaim'), false, 'a claim of the user\'s own is not made');
  await assert.rejects(render('journal.persistence.enabled=true', 'replicas=2'), /journal\.persistence needs replicas: 1/);
  const off = await render('journal.enabled=false');
  assert.equal(pod(off).template.spec.containers[0]!.args.some((a) => a.startsWith('--journal')), false);
  assert.equal(pod(off).template.spec.volumes, undefined);
});

test('the apiserver admits everything the chart renders (server-side dry run)', async (t) => {
  const cluster = await testCluster();
  const api = kubeApi(cluster.kc);
  const helm = await ensureHelm();
  const ns = await testNamespace(t, cluster, 'helm-dry-run');
  const objs = parse((await exec(helm, ['template', 'kfn', chart, '--namespace', ns, '--include-crds', '--set', 'metrics.service=true'])).stdout);
  for (const obj of objs) {
    const resource = await api.resource(obj.apiVersion, obj.kind);
    await api
      .request('PATCH', objectPath(resource, obj.metadata.name, resource.namespaced ? ns : undefined), { body: obj, contentType: 'application/apply-patch+yaml', query: { fieldManager: 'kfn-test', force: true, dryRun: 'All' } })
      .catch((err: Error) => assert.fail(`${obj.kind} ${obj.metadata.name}: ${err.message}`));
  }
});
