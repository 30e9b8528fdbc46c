// When what a Reconciler's identity may do changes: its rights are reviewed again then, not polled.
//
//   Roles, RoleBindings, ClusterRoles, ClusterRoleBindings, ServiceAccounts (metadata-only watches)
//     ─▶ any change after their first lists ─▶ (1 s quiet, 5 s at most) ─▶ onChange: every Controller reviews
//
// An idle bridge then reviews its Reconcilers' identities (one SubjectAccessReview per kind,
// verb and namespace) once in a long while instead of every 30 s: twelve Reconcilers asked
// about 100 questions a minute of the apiserver, most of an idle leader's CPU. A grant or a
// revocation takes effect within about a second; a ServiceAccount that withdraws its consent
// (its kfn.dev/identity-for annotation) is a change too. A burst that never quiets down (a Role
// rewritten every second by some controller) is reviewed at most rbacCeilingMs after its first
// change, and again as often while it lasts: no stream of changes can hold a revocation back.
// Without the right to watch them (a bridge installed with an older ClusterRole), `watching`
// stays false and the Controllers poll as before.
import type { Clock } from '../core/clock.ts';
import type { KubeApi, ResourceInfo } from '../kube/api.ts';
import type { Logger } from './log.ts';
import { Watcher, type WatcherOptions } from './watcher.ts';

/** The kinds whose changes can change what a ServiceAccount may do, or whom it serves. */
export const accessKinds = [
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role' },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding' },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole' },
  { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding' },
  { apiVersion: 'v1', kind: 'ServiceAccount' },
] as const;

/** How long RBAC must be quiet after a change before the rights are reviewed (a deploy applies several objects at once). */
export const rbacQuietMs = 1000;

/** The longest a change waits for its review, however long the burst it is part of goes on. */
export const rbacCeilingMs = 5000;

export class RbacChanges {
  private readonly watchers: Watcher[] = [];
  private readonly unsubscribes: (() => void)[] = [];
  private cancelPending: (() => void) | undefined;
  /** When the first change not yet reviewed was seen (undefined: none waiting). */
  private burstSince: number | undefined;
  private stopped = false;
  /** Changes seen since the watches listed (each restarts the quiet second). */
  changesSeen = 0;

  private readonly api: KubeApi;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly onChange: () => void;
  private readonly watcherOptions: Partial<WatcherOptions>;

  constructor(api: KubeApi, clock: Clock, log: Logger, onChange: () => void, watcherOptions: Partial<WatcherOptions> = {}) {
    this.api = api;
    this.clock = clock;
    this.log = log;
    this.onChange = onChange;
    this.watcherOptions = watcherOptions;
  }

  /** Starts the watches (their first lists are not changes). */
  async start(): Promise<void> {
    for (const { apiVersion, kind } of accessKinds) {
      let resource: ResourceInfo;
      try {
        resource = await this.api.resource(apiVersion, kind);
      } catch (err) {
        this.log.warn({ kind, error: (err as Error).message }, 'cannot watch RBAC: the identities of Reconcilers are reviewed every 30 s instead');
        // Without every kind a change could go unseen: the watches already started serve nothing.
        for (const u of this.unsubscribes.splice(0)) u();
        await Promise.all(this.watchers.splice(0).map((w) => w.stop()));
        return;
      }
      if (this.stopped) return;
      const watcher = new Watcher(this.api, resource, {
        clock: this.clock,
        projection: 'metadata',
        onProblem: (problem) => {
          if (problem) this.log.warn({ kind, problem }, 'cannot watch RBAC: the identities of Reconcilers are reviewed every 30 s meanwhile');
        },
        ...this.watcherOptions,
      });
      this.unsubscribes.push(
        watcher.subscribe((event) => {
          if (event.type === 'synced' || !watcher.hasSynced) return;
          this.changed();
        }),
      );
      this.watchers.push(watcher);
      watcher.start();
    }
  }

  /** True while every RBAC watch has listed and none is failing: a change would be seen. */
  get watching(): boolean {
    return !this.stopped && this.watchers.length === accessKinds.length && this.watchers.every((w) => w.hasSynced && !w.failing);
  }

  private changed(): void {
    this.changesSeen++;
    const now = this.clock.now();
    this.burstSince ??= now;
    this.cancelPending?.();
    // A quiet second after the last change, but never later than the ceiling after the first.
    const delay = Math.min(rbacQuietMs, Math.max(0, this.burstSince + rbacCeilingMs - now));
    this.cancelPending = this.clock.setTimer(() => {
      this.cancelPending = undefined;
      this.burstSince = undefined;
      if (!this.stopped) this.onChange();
    }, delay);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.cancelPending?.();
    for (const u of this.unsubscribes) u();
    await Promise.all(this.watchers.map((w) => w.stop()));
  }
}
