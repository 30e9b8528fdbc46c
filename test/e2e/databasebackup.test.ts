// DatabaseBackup end to end: the state machine to both terminal phases, without blocking.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { testCluster } from '../support/cluster.ts';
import { waitFor } from '../../core/clock.ts';
import { functionStack, journalLines } from '../support/functions.ts';

interface Backup {
  status?: { phase?: string; startTime?: string; completionTime?: string; message?: string; conditions?: { type: string; status: string; reason: string }[] };
}

test('DatabaseBackup: Pending → InProgress → Completed, and → Failed when the Job fails; terminal phases do nothing', async (t) => {
  const cluster = await testCluster();
  const s = await functionStack(t, cluster, 'databasebackup', { resyncPeriodSeconds: 3 });
  const body = (name: string, backupPath = 's3://my-bucket/backup.sql') => ({ apiVersion: 'backup.example.com/v1', kind: 'DatabaseBackup', metadata: { name }, spec: { databaseName: 'production-db', backupPath } });
  await assert.rejects(s.api.request('POST', s.objects, { body: { ...body('bad'), spec: { databaseName: 'x' } } }), /spec\.backupPath: Required value/);
  const get = (name: string) => s.api.request<Backup>('GET', `${s.objects}/${name}`);

  await s.api.request('POST', s.objects, { body: body('good') });
  // The backup container really runs and exits 1 for a destination it cannot upload to.
  await s.api.request('POST', s.objects, { body: body('bad-disk', 'ftp://nowhere/backup.sql') });

  const done = await waitFor('good to complete', async () => {
    const b = await get('good');
    return b.status?.phase === 'Completed' ? b : undefined;
  }, { timeoutMs: 60_000 });
  assert.ok(done.status!.startTime && done.status!.completionTime, 'startTime and completionTime are recorded');
  assert.ok(Date.parse(done.status!.completionTime!) >= Date.parse(done.status!.startTime!));
  assert.ok(done.status!.conditions!.some((c) => c.type === 'Ready' && c.status === 'True'));
  // The backup really ran: its container's output, read through the kubelet.
  const log = async (backup: string) => {
    const pods = await s.api.request<{ items: { metadata: { name: string } }[] }>('GET', `/api/v1/namespaces/${s.ns}/pods?labelSelector=backup.example.com/backup=${backup}`);
    assert.equal(pods.items.length, 1, `one pod for ${backup}`);
    return s.api.text('GET', `/api/v1/namespaces/${s.ns}/pods/${pods.items[0]!.metadata.name}/log`);
  };
  assert.match(await log('good'), /uploaded \d+ bytes to s3:\/\/my-bucket\/backup\.sql/);

  const failed = await waitFor('bad-disk to fail', async () => {
    const b = await get('bad-disk');
    return b.status?.phase === 'Failed' ? b : undefined;
  }, { timeoutMs: 60_000 });
  assert.ok(failed.status!.completionTime);
  assert.match(await log('bad-disk'), /cannot upload to ftp:\/\/nowhere\/backup\.sql/);
  assert.ok(failed.status!.conditions!.some((c) => c.type === 'Ready' && c.status === 'False' && c.reason === 'BackupFailed'));

  // Terminal phases: deliveries (a Job event, a resync) change nothing.
  const jobs = await s.api.request<{ items: unknown[] }>('GET', `/apis/batch/v1/namespaces/${s.ns}/jobs`);
  assert.equal(jobs.items.length, 2, 'one Job per backup, never restarted');
  const before = JSON.stringify([(await get('good')).status, (await get('bad-disk')).status]);
  const seen = journalLines(s.journal).length;
  // A Job event (its label changed) and resyncs of both backups, each delivered and answered.
  await s.api.request('PATCH', `/apis/batch/v1/namespaces/${s.ns}/jobs/${(jobs.items[0] as { metadata: { name: string } }).metadata.name}`, { body: { metadata: { labels: { touched: 'yes' } } }, contentType: 'application/merge-patch+json' });
  const later = await waitFor('a Job event and a resync of each backup to be delivered', async () => {
    const fresh = journalLines(s.journal).slice(seen);
    const resynced = ['good', 'bad-disk'].every((n) => fresh.some((l) => l.reason === 'resync' && l.key.endsWith(`/${n}`) && l.outcome === 'done'));
    return resynced && fresh.some((l) => l.reason === 'child' && l.trigger?.kind === 'Job') ? fresh : undefined;
  }, { timeoutMs: 30_000 });
  assert.deepEqual(later.flatMap((l) => l.response?.changes ?? []), [], 'they wrote nothing');
  assert.equal(JSON.stringify([(await get('good')).status, (await get('bad-disk')).status]), before);
  assert.equal((await s.api.request<{ items: unknown[] }>('GET', `/apis/batch/v1/namespaces/${s.ns}/jobs`)).items.length, 2, 'and started no Job');
  const lines = journalLines(s.journal);
  assert.ok(lines.length >= 4, 'the function was called as the Jobs progressed');
  assert.ok(lines.every((l) => l.durationMs < 3000), `it never waited for a Job (slowest answer ${Math.max(...lines.map((l) => l.durationMs))} ms)`);
});
