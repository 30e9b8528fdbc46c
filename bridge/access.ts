// Whether a Reconciler's identity may see everything its deliveries carry (bridge/identity.ts):
// one verdict, reviewed again and again, and what a change of it does (the Controller's callbacks).
//
//   unknown ──review──▶ allowed ◀──review──▶ refused
//                        │    ▲
//   reviews failing for  │    │ a review reaches a verdict (allowed or refused)
//   undecidedGraceMs ────▶ undecided
//
// Nothing is delivered unless allowed; the watches run while allowed or undecided. A review
// comes after the recheck period once allowed, sooner while not (1 s, 2 s, 4 s … up to the
// period), and at once when RBAC changes (reviewSoon).
import type { ReconcilerConfig } from './config.ts';
import { identityProblem, identityRecheckMs, identityRecheckWatchedMs, undecidedGraceMs } from './identity.ts';
import type { Logger } from './log.ts';
import type { Clock } from '../core/clock.ts';
import type { KubeApi } from '../kube/api.ts';

/** What the review uses of the bridge it runs in. */
export interface AccessContext {
  api: KubeApi;
  log: Logger;
  clock: Clock;
  onProblem?: (reconciler: string, source: string, problem: string | undefined) => void;
  /** A Reconciler without an identity is not delivered for (bridge/identity.ts). */
  requireIdentity?: boolean;
  /** How often rights are reviewed again: fixed (tests); else long while RBAC changes are watched, identityRecheckMs while not. */
  identityRecheckMs?: number;
  /** True while the bridge sees every RBAC change (bridge/rbac-changes.ts): rights are reviewed on a change, not polled. */
  rbacWatched?: () => boolean;
}

/** What a new verdict does to the Reconciler. */
export interface VerdictEffects {
  /** Refused, after any other verdict: nothing is kept of what it may not see (its objects, then its watches). */
  refused(): Promise<void>;
  /** Allowed after unknown or refused: its watches start (none runs before). */
  allowed(): Promise<void>;
  /** Allowed after any other verdict, and still running: every object is delivered again. */
  redeliver(): void;
}

export class AccessReview {
  /**
   * Unknown until first reviewed; `undecided` once reviews have failed for undecidedGraceMs
   * (the apiserver cannot answer, so a revocation could not be seen). Nothing is delivered unless allowed.
   */
  verdict: 'unknown' | 'allowed' | 'refused' | 'undecided' = 'unknown';
  /** When the reviews started failing to reach a verdict (undefined while they reach one). */
  private undecidedSince: number | undefined;
  private cancelReview: (() => void) | undefined;
  private stopped = false;
  /** A review in flight, and whether another was asked for meanwhile (RBAC changed again). */
  private reviewing = false;
  private reviewAgain = false;
  /** Failed reviews in a row: while not allowed, the next review comes sooner (1 s, 2 s, 4 s … up to the period). */
  private reviewsFailed = 0;
  private readonly bridge: AccessContext;
  private readonly config: ReconcilerConfig;
  private readonly effects: VerdictEffects;

  constructor(bridge: AccessContext, config: ReconcilerConfig, effects: VerdictEffects) {
    this.bridge = bridge;
    this.config = config;
    this.effects = effects;
  }

  /** True once the identity may see what it is sent (or none is needed): the watches may run. */
  get allowed(): boolean {
    return this.verdict === 'allowed' || this.verdict === 'undecided';
  }

  /** The first review, for a Reconciler with an identity to review; one without is allowed at once. */
  start(): void {
    if (this.config.serviceAccount || this.bridge.requireIdentity) void this.reviewAccess();
    else this.verdict = 'allowed';
  }

  stop(): void {
    this.stopped = true;
    this.cancelReview?.();
  }

  /** RBAC changed: the identity's rights are reviewed now, not at the next period. */
  reviewSoon(): void {
    if (this.stopped || !(this.config.serviceAccount || this.bridge.requireIdentity)) return;
    if (this.reviewing) {
      this.reviewAgain = true;
      return;
    }
    this.cancelReview?.();
    void this.reviewAccess();
  }

  /** Reviews the identity's rights now and again every recheck period; delivers everything again once allowed. */
  private async reviewAccess(): Promise<void> {
    this.reviewing = true;
    try {
      await this.reviewOnce();
    } finally {
      this.reviewing = false;
    }
    if (this.reviewAgain && !this.stopped) {
      this.reviewAgain = false;
      this.cancelReview?.();
      void this.reviewAccess();
    }
  }

  private async reviewOnce(): Promise<void> {
    let problem: string | undefined;
    try {
      problem = await identityProblem(this.bridge.api, this.config, this.bridge.requireIdentity ?? false);
    } catch (err) {
      // No verdict (a kind not served yet, the apiserver away or failing): the last one stands
      // for a grace period — a blip must not stop a fleet — and after it deliveries are held, so
      // that a revocation the bridge cannot see does not go on being ignored. Until there is a
      // first verdict, nothing is delivered.
      if (this.stopped) return;
      const now = this.bridge.clock.now();
      this.undecidedSince ??= now;
      if (this.verdict === 'allowed' && now - this.undecidedSince >= undecidedGraceMs) {
        this.verdict = 'undecided';
        const problem = `its identity's rights could not be reviewed for ${Math.round((now - this.undecidedSince) / 1000)} s (${(err as Error).message}): deliveries are held until they can be`;
        this.bridge.onProblem?.(this.config.name, 'identity', problem);
        this.bridge.log.warn({ reconciler: this.config.name, problem }, 'not delivering: its identity cannot be reviewed');
      }
      this.scheduleReview();
      return;
    }
    if (this.stopped) return;
    this.undecidedSince = undefined;
    const before = this.verdict;
    this.verdict = problem ? 'refused' : 'allowed';
    this.bridge.onProblem?.(this.config.name, 'identity', problem);
    if (problem && before !== 'refused') this.bridge.log.warn({ reconciler: this.config.name, problem }, 'not delivering: its identity may not see what it would be sent');
    if (!problem && before === 'refused') this.bridge.log.info({ reconciler: this.config.name }, 'its identity may see what it is sent now; delivering');
    if (problem && before !== 'refused') await this.effects.refused();
    if (!problem && before !== 'allowed') {
      if (before !== 'undecided') await this.effects.allowed();
      if (this.stopped) return;
      this.effects.redeliver();
    }
    this.scheduleReview();
  }

  /**
   * The next review: after the recheck period once allowed; sooner while not — the identity's
   * ServiceAccount and Role are often applied just after the Reconciler (kfn deploy), and the
   * first delivery should not wait a whole period for them — and sooner while reviews fail.
   */
  private scheduleReview(): void {
    // Allowed: again after the period, long while RBAC changes are watched (each one has the rights
    // reviewed at once). Not allowed, or not decided: sooner, up to identityRecheckMs — what is
    // missing may be the ServiceAccount or its consent, or the apiserver's answer.
    const fixed = this.bridge.identityRecheckMs;
    const period = fixed ?? (this.bridge.rbacWatched?.() ? identityRecheckWatchedMs : identityRecheckMs);
    const settled = this.verdict === 'allowed' && this.undecidedSince === undefined;
    this.reviewsFailed = settled ? 0 : this.reviewsFailed + 1;
    const delay = settled ? period : Math.min(fixed ?? identityRecheckMs, 1000 * 2 ** (this.reviewsFailed - 1));
    this.cancelReview = this.bridge.clock.setTimer(() => void this.reviewAccess(), delay);
  }
}
