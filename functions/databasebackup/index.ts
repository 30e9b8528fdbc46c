// DatabaseBackup (backup.example.com/v1): the seed's long-running task as a state machine.
// Pending → InProgress (starts a Job, records startTime) → Completed or Failed (from the Job,
// records completionTime). The function never waits: it starts the Job and returns, is called
// again when the Job changes (it owns it) or when its requeue comes due, and does nothing in
// a terminal phase.
import { Job, defineKind, defineReconciler, t, type Desired, type ObjectOf } from '../sdk/index.ts';

export const DatabaseBackup = defineKind({
  group: 'backup.example.com',
  version: 'v1',
  kind: 'DatabaseBackup',
  spec: t.Object({
    databaseName: t.String({ minLength: 1 }),
    backupPath: t.String({ minLength: 1 }),
  }),
  status: t.Object({
    phase: t.Optional(t.Union([t.Literal('Pending'), t.Literal('InProgress'), t.Literal('Completed'), t.Literal('Failed')])),
    startTime: t.Optional(t.String()),
    completionTime: t.Optional(t.String()),
    message: t.Optional(t.String()),
  }),
  printerColumns: [
    { name: 'Database', type: 'string', jsonPath: '.spec.databaseName' },
    { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
    { name: 'Started', type: 'date', jsonPath: '.status.startTime' },
    { name: 'Completed', type: 'date', jsonPath: '.status.completionTime' },
  ],
});
type Backup = ObjectOf<typeof DatabaseBackup>;

/** The image the local node builds (`kfn cluster up`); any image with a POSIX shell works. */
const backupImage = 'kfn.local/busybox:1.35';

/**
 * The backup the Job really runs: dump (a stand-in for pg_dump: no database server runs in the
 * local cluster), then upload to a destination it knows, or fail — a real non-zero exit, which
 * fails the Job and so the backup.
 */
const backupScript = [
  'set -e',
  'echo "-- dump of $DATABASE taken $(date -u +%FT%TZ)" > /backup/dump.sql',
  'case "$BACKUP_PATH" in',
  '  s3://*|file://*) echo "uploaded $(wc -c < /backup/dump.sql) bytes to $BACKUP_PATH" ;;',
  '  *) echo "cannot upload to $BACKUP_PATH: unsupported destination (use s3:// or file://)" >&2; exit 1 ;;',
  'esac',
].join('\n');

/** How often an in-progress backup is checked even without a Job event. */
const checkEverySeconds = 30;

function backupJob(b: Backup): Desired<typeof Job> {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name: `${b.metadata.name}-backup` },
    spec: {
      backoffLimit: 0,
      template: {
        metadata: { labels: { 'backup.example.com/backup': b.metadata.name } },
        spec: {
          restartPolicy: 'Never',
          containers: [
            {
              name: 'backup',
              image: backupImage,
              command: ['sh', '-c', backupScript],
              env: [{ name: 'DATABASE', value: b.spec.databaseName }, { name: 'BACKUP_PATH', value: b.spec.backupPath }],
              volumeMounts: [{ name: 'backup', mountPath: '/backup' }],
            },
          ],
          volumes: [{ name: 'backup', emptyDir: {} }],
        },
      },
    },
  };
}

export default defineReconciler({
  name: 'databasebackup',
  for: DatabaseBackup,
  owns: [Job],
  reconcile(backup, ctx) {
    // The status returned is the whole status this function owns (server-side apply): carry
    // the recorded fields forward, change only what the transition changes.
    const { phase = 'Pending', startTime, completionTime, message } = backup.status ?? {};
    const recorded = { phase, startTime, completionTime, message };
    const job = backupJob(backup);
    const now = ctx.now().toISOString();
    const inProgress = { ready: false, reason: 'InProgress', message: 'backup running' };
    switch (phase) {
      case 'Pending':
        // Start the work and return at once.
        return { children: [job], status: { phase: 'InProgress' as const, startTime: now }, ready: inProgress, requeueAfterSeconds: checkEverySeconds };
      case 'InProgress': {
        const live = ctx.owned(Job, job.metadata.name);
        const condition = (type: string) => live?.status?.conditions?.find((c) => c.type === type && c.status === 'True');
        if (condition('Complete')) return { children: [job], status: { ...recorded, phase: 'Completed' as const, completionTime: now }, ready: true };
        const failed = condition('Failed');
        const why = failed?.message || 'the backup Job failed';
        if (failed) return { children: [job], status: { ...recorded, phase: 'Failed' as const, completionTime: now, message: why }, ready: { ready: false, reason: 'BackupFailed', message: why } };
        return { children: [job], status: recorded, ready: inProgress, requeueAfterSeconds: checkEverySeconds };
      }
      case 'Completed':
        return { children: [job], status: recorded, ready: true };
      case 'Failed':
        return { children: [job], status: recorded, ready: { ready: false, reason: 'BackupFailed', message: message ?? 'the backup failed' } };
    }
  },
});
