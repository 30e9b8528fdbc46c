// DatabaseBackup's state machine without a cluster: Pending → InProgress (Job, requeue) →
// Completed or Failed from the Job's conditions; the end states stay.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Job } from '../sdk/index.ts';
import { testReconcile } from '../sdk/testing.ts';
import DatabaseBackupFunction from './index.ts';

const backup = (status?: object) => ({ metadata: { name: 'nightly', namespace: 'demo' }, spec: { databaseName: 'shop', backupPath: 's3://backups/shop' }, ...(status ? { status } : {}) });
const job = (conditions: object[]) => ({ apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'nightly-backup' }, status: { conditions } });
const started = '2026-01-01T00:00:00.000Z';

test('Pending: starts the backup Job, InProgress with a start time, checks again in 30 s', async () => {
  const out = await testReconcile(DatabaseBackupFunction, { object: backup(), reason: 'created' });
  const env = out.child<{ spec: { template: { spec: { containers: { env: { name: string; value: string }[] }[] } } } }>(Job, 'nightly-backup')!.spec.template.spec.containers[0]!.env;
  assert.deepEqual(env, [{ name: 'DATABASE', value: 'shop' }, { name: 'BACKUP_PATH', value: 's3://backups/shop' }]);
  assert.equal(out.status?.phase, 'InProgress');
  assert.ok(!Number.isNaN(Date.parse(out.status?.startTime as string)));
  assert.equal(out.result?.requeueAfterSeconds, 30);
  assert.equal(out.ready?.reason, 'InProgress');
});

test('InProgress: waits while the Job runs, Completed when it completes, Failed with its message when it fails', async () => {
  const inProgress = backup({ phase: 'InProgress', startTime: started });
  const running = await testReconcile(DatabaseBackupFunction, { object: inProgress, children: [job([])] });
  assert.deepEqual([running.status?.phase, running.result?.requeueAfterSeconds], ['InProgress', 30]);
  const done = await testReconcile(DatabaseBackupFunction, { object: inProgress, children: [job([{ type: 'Complete', status: 'True' }])] });
  assert.deepEqual([done.status?.phase, done.status?.startTime, done.ready?.status], ['Completed', started, 'True']);
  assert.ok(done.status?.completionTime);
  const failed = await testReconcile(DatabaseBackupFunction, { object: inProgress, children: [job([{ type: 'Failed', status: 'True', message: 'BackoffLimitExceeded' }])] });
  assert.deepEqual([failed.status?.phase, failed.status?.message, failed.ready?.reason], ['Failed', 'BackoffLimitExceeded', 'BackupFailed']);
});

test('Completed and Failed are final: nothing is started again', async () => {
  const completed = await testReconcile(DatabaseBackupFunction, { object: backup({ phase: 'Completed', startTime: started, completionTime: started }) });
  assert.deepEqual([completed.status?.phase, completed.result?.requeueAfterSeconds], ['Completed', undefined]);
  const failed = await testReconcile(DatabaseBackupFunction, { object: backup({ phase: 'Failed', message: 'disk full' }) });
  assert.deepEqual([failed.status?.phase, failed.ready?.message], ['Failed', 'disk full']);
});
