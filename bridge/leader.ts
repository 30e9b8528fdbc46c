// Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it:
// a candidate takes the lease when its holder has not renewed it for leaseDuration (judged by
// the candidate's own clock since an answer last showed the lease changed — dated when that
// answer arrived — so clock skew between machines does not matter); the leader renews every retryPeriod and gives up — and the
// process must stop at once — when it could not renew for renewDeadline. A Lease the candidate
// saw and then finds deleted changed when it was found gone: it is created again only a whole
// leaseDuration later, and taken over from the holder last seen.
//
// No split brain: renewDeadline (10 s) is shorter than leaseDuration (15 s), it is counted
// from when the last successful renewal was *sent* (a standby saw that renewal no earlier),
// and every request made while renewing carries the deadline, so a renewal stuck on a frozen
// connection cannot keep a leader leading past it.
import { systemClock, type Clock } from '../core/clock.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';

export interface LeaderElectionOptions {
  api: KubeApi;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /**
   * Before this time (ms, on `clock`) the candidate only watches the Lease and never takes it,
   * even free: its judgement of expiry starts at once, its claim later (a sharded replica's
   * claim on other replicas' shards).
   */
  acquireAfter?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  clock?: Clock;
  /** Draws the retry's jitter, from [0, 1) (default Math.random). */
  random?: () => number;
  /**
   * A hand-over: on release, the text `handOver()` answers is written into this annotation of
   * the Lease, for the next holder (its Takeover's `note`), which removes it on taking the Lease.
   */
  handOverAnnotation?: string;
  handOver?: () => string;
}

/** How a candidate came to hold the Lease: what the previous holder may have left undone. */
export type Takeover =
  /** Nobody held it before (the Lease is new). */
  | { from: 'nobody' }
  /** The previous holder let it go, with its hand-over note if it wrote one. */
  | { from: 'released'; note?: string }
  /** The previous holder stopped renewing without letting go (killed, partitioned, restarted). */
  | { from: 'expired'; holder: string };

interface Lease {
  metadata: { name: string; namespace: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

/** What a candidate last saw of the Lease's record, and when (clock.now()) that last changed. */
interface Observed {
  holder?: string;
  renewTime?: string;
  transitions?: number;
  resourceVersion?: string;
  durationMs: number;
  /** Found deleted at `at`; the rest is the Lease as last seen. */
  gone: boolean;
  at: number;
}

function microTime(ms: number): string {
  // MicroTime: RFC 3339 with microseconds.
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** How long a Lease lasts unrenewed (client-go's default, and the bridge's). */
export const defaultLeaseDurationMs = 15_000;

export class LeaderElector {
  private readonly o: Required<Pick<LeaderElectionOptions, 'api' | 'namespace' | 'name' | 'identity' | 'leaseDurationMs' | 'renewDeadlineMs' | 'retryPeriodMs'>> &
    Pick<LeaderElectionOptions, 'log' | 'acquireAfter' | 'handOverAnnotation' | 'handOver'>;
  private readonly clock: Clock;
  private readonly random: () => number;
  /** Undefined until this candidate first reads or writes the Lease. */
  private observed: Observed | undefined;
  private stopped = false;
  private leading = false;
  /** The Lease as last read or written, while this candidate holds it (undefined otherwise). */
  private written: Lease | undefined;
  /** When the request of the last successful take or renewal was sent. */
  private renewedAt = 0;
  /** How this candidate took the Lease (set by the take, read when it starts leading). */
  private takeover: Takeover = { from: 'nobody' };

  constructor(options: LeaderElectionOptions) {
    const { clock, random, ...rest } = options;
    this.o = { leaseDurationMs: defaultLeaseDurationMs, renewDeadlineMs: 10_000, retryPeriodMs: 2_000, ...rest };
    this.clock = clock ?? systemClock;
    this.random = random ?? Math.random;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.clock.setTimer(resolve, ms));
  }

  /** One attempt, with every request aborted after `limitMs`. */
  private async attempt(limitMs: number): Promise<{ ok: boolean; sentAt: number; why?: string }> {
    const sentAt = this.clock.now();
    const controller = new AbortController();
    const cancel = this.clock.setTimer(() => controller.abort(new Error(`no answer from the apiserver within ${limitMs} ms`)), Math.max(0, limitMs));
    try {
      const ok = await this.tryAcquireOrRenew(sentAt, controller.signal);
      return { ok, sentAt, why: ok ? undefined : 'another candidate holds the lease' };
    } catch (err) {
      return { ok: false, sentAt, why: controller.signal.aborted ? (controller.signal.reason as Error).message : (err as Error).message };
    } finally {
      cancel();
    }
  }

  get isLeader(): boolean {
    return this.leading;
  }

  private get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.o.namespace}/leases/${this.o.name}`;
  }

  /** One attempt to take or renew the lease; true when we hold it afterwards. */
  async tryAcquireOrRenew(now = this.clock.now(), signal?: AbortSignal): Promise<boolean> {
    const { identity } = this.o;
    const api = signal ? this.o.api.withSignal(signal) : this.o.api;
    // Times written to the Lease are wall time, for other processes to read; whether a lease
    // has expired is measured here on the monotonic clock, from when its record last changed.
    const wall = this.clock.wall();
    const spec = (transitions: number, acquireTime: string) => ({
      holderIdentity: identity,
      leaseDurationSeconds: Math.round(this.o.leaseDurationMs / 1000),
      acquireTime,
      renewTime: microTime(wall),
      leaseTransitions: transitions,
    });
    if (this.leading && this.written) {
      // Renewing: the Lease as this candidate last wrote it, with the new time. Its
      // resourceVersion makes the write fail (409) if anyone wrote since; then the Lease is read.
      const written = this.written;
      try {
        const renewed = await api.request<Lease>('PUT', this.path, { body: { ...written, spec: { ...written.spec, renewTime: microTime(wall) } } });
        this.observe(renewed, this.clock.now());
        return true;
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 409) throw err;
        this.written = undefined;
        // Stopping meanwhile (stop() let the Lease go): not taken back.
        if (this.stopped) return false;
      }
    }
    let lease: Lease;
    try {
      lease = await api.request<Lease>('GET', this.path);
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 404) throw err;
      // A Lease seen before and gone now (deleted by hand, by an undeploy) may still be led: its
      // holder's last renewal was accepted before the deletion, so before this answer, and it
      // leads until its renew deadline (shorter than the duration) from that renewal. The
      // deletion is a change of the record, seen now. This candidate's own Lease while it leads
      // is the exception: nobody else can have led since its last renewal. A candidate that never
      // saw the Lease cannot tell a deleted one from a new one (nor can client-go's).
      const last = this.observed;
      const predecessor = last && !(this.leading && last.holder === identity) ? last : undefined;
      if (predecessor) {
        const gone = predecessor.gone ? predecessor : (this.observed = { ...predecessor, gone: true, at: this.clock.now() });
        if (now - gone.at <= gone.durationMs) return false;
      }
      if (now < (this.o.acquireAfter ?? 0)) return false;
      try {
        const created = await api.request<Lease>('POST', `/apis/coordination.k8s.io/v1/namespaces/${this.o.namespace}/leases`, {
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.o.name, namespace: this.o.namespace }, spec: spec(0, microTime(wall)) },
        });
        this.observe(created, this.clock.now());
        this.takeover = predecessor?.holder ? { from: 'expired', holder: predecessor.holder } : { from: 'nobody' };
        return true;
      } catch (createErr) {
        if (createErr instanceof ApiError && createErr.status === 409) return false; // someone else created it first
        throw createErr;
      }
    }
    const s = lease.spec ?? {};
    // Observed when the answer arrived, not when the request was sent: the apiserver may have
    // read the Lease long after the request left, and the renewal it shows was sent no earlier
    // than that read. Dating it by the request would start the expiry early (client-go dates
    // its observedTime the same way).
    const o = this.observed;
    const changed = !o || o.gone || s.holderIdentity !== o.holder || s.renewTime !== o.renewTime || s.leaseTransitions !== o.transitions || lease.metadata.resourceVersion !== o.resourceVersion;
    const seen = changed ? this.observe(lease, this.clock.now()) : o;
    const heldByOther = !!s.holderIdentity && s.holderIdentity !== identity;
    const expired = now - seen.at > seen.durationMs;
    if (heldByOther && !expired) return false;
    if (s.holderIdentity !== identity && now < (this.o.acquireAfter ?? 0)) return false; // not our turn yet
    const transitions = (s.leaseTransitions ?? 0) + (s.holderIdentity === identity ? 0 : 1);
    const acquireTime = s.holderIdentity === identity && s.acquireTime ? s.acquireTime : microTime(wall);
    // Taking (not renewing): what the previous holder may have left running. A holder of this
    // very identity that this candidate is not is a predecessor (a restarted container).
    const taking = !this.leading;
    const note = this.o.handOverAnnotation ? lease.metadata.annotations?.[this.o.handOverAnnotation] : undefined;
    const metadata = taking && this.o.handOverAnnotation ? { ...lease.metadata, annotations: withoutKey(lease.metadata.annotations, this.o.handOverAnnotation) } : lease.metadata;
    try {
      // The resourceVersion makes this an optimistic write: if another candidate wrote first, 409.
      const updated = await api.request<Lease>('PUT', this.path, { body: { ...lease, metadata, spec: spec(transitions, acquireTime) } });
      this.observe(updated, this.clock.now());
      if (taking) this.takeover = s.holderIdentity ? { from: 'expired', holder: s.holderIdentity } : { from: 'released', ...(note !== undefined ? { note } : {}) };
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) return false;
      throw err;
    }
  }

  private observe(lease: Lease, now: number): Observed {
    this.written = lease.spec?.holderIdentity === this.o.identity ? lease : undefined;
    const spec = lease.spec ?? {};
    return (this.observed = {
      holder: spec.holderIdentity,
      renewTime: spec.renewTime,
      transitions: spec.leaseTransitions,
      resourceVersion: lease.metadata.resourceVersion,
      durationMs: (spec.leaseDurationSeconds ?? this.o.leaseDurationMs / 1000) * 1000,
      gone: false,
      at: now,
    });
  }

  /**
   * Waits until this candidate holds the lease, then keeps renewing it in the background.
   * `onLost` is called once if a renewal deadline passes; the caller must stop at once.
   */
  async run(onLeading: (takeover: Takeover) => void | Promise<void>, onLost: (why: string) => void): Promise<void> {
    while (!this.stopped) {
      const attempt = await this.attempt(this.o.renewDeadlineMs);
      if (attempt.ok) {
        this.renewedAt = attempt.sentAt;
        break;
      }
      if (attempt.why !== 'another candidate holds the lease') this.o.log?.('lease acquisition failed; retrying', { error: attempt.why });
      await this.sleep(this.o.retryPeriodMs * (1 + this.random() * 0.2));
    }
    if (this.stopped) return;
    this.leading = true;
    this.o.log?.('became leader', { lease: `${this.o.namespace}/${this.o.name}`, identity: this.o.identity });
    void this.renewLoop(onLost);
    await onLeading(this.takeover);
  }

  private async renewLoop(onLost: (why: string) => void): Promise<void> {
    while (!this.stopped && this.leading) {
      const deadline = this.renewedAt + this.o.renewDeadlineMs;
      await this.sleep(Math.min(this.o.retryPeriodMs, Math.max(0, deadline - this.clock.now())));
      if (this.stopped || !this.leading) return;
      const attempt = await this.attempt(deadline - this.clock.now());
      if (attempt.ok) {
        this.renewedAt = attempt.sentAt;
        continue;
      }
      if (this.clock.now() >= deadline || attempt.why === 'another candidate holds the lease') {
        this.leading = false;
        onLost(`could not renew lease ${this.o.namespace}/${this.o.name} within ${this.o.renewDeadlineMs} ms (${attempt.why})`);
        return;
      }
    }
  }

  /**
   * Stops renewing; with `release`, clears the holder so a standby takes over at once, and
   * leaves it the hand-over note.
   */
  async stop(release = true): Promise<void> {
    this.stopped = true;
    if (!release || !this.leading) return;
    this.leading = false;
    try {
      const lease = await this.o.api.request<Lease>('GET', this.path);
      if (lease.spec?.holderIdentity === this.o.identity) {
        const { handOverAnnotation, handOver } = this.o;
        const metadata = handOverAnnotation && handOver ? { ...lease.metadata, annotations: { ...lease.metadata.annotations, [handOverAnnotation]: handOver() } } : lease.metadata;
        await this.o.api.request('PUT', this.path, { body: { ...lease, metadata, spec: { ...lease.spec, holderIdentity: undefined, leaseDurationSeconds: 1, renewTime: microTime(this.clock.wall()) } } });
      }
    } catch {
      /* best effort: the lease expires by itself */
    }
  }
}

function withoutKey(record: Record<string, string> | undefined, key: string): Record<string, string> | undefined {
  if (!record || !(key in record)) return record;
  const { [key]: _, ...rest } = record;
  return rest;
}
