// Conditions in metav1.Condition's shape: the type, how one is set (its transition time kept
// while its status stays), and how a failing Ready is explained. The SDK writes a primary's
// Ready with these, the bridge a Reconciler's; both read a sink's or a Knative Service's.

export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface Condition {
  type: string;
  status: ConditionStatus;
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime: string;
}

/** A condition as someone else's status may hold it (reason and message are optional there). */
export interface ReadCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

/**
 * The condition to write: `next` stamped with the generation it describes, keeping the last
 * transition time of the condition of that type in `previous` while its status is unchanged.
 */
export function settleCondition(previous: readonly Condition[] | undefined, next: Pick<Condition, 'type' | 'status' | 'reason' | 'message'>, generation: number | undefined, now: Date): Condition {
  const was = previous?.find((c) => c.type === next.type);
  return {
    type: next.type,
    status: next.status,
    reason: next.reason,
    message: next.message,
    observedGeneration: generation,
    lastTransitionTime: was && was.status === next.status ? was.lastTransitionTime : now.toISOString(),
  };
}

/** True when writing `next` would change nothing that `current` says (its time aside). */
export function sameCondition(current: Condition | undefined, next: Pick<Condition, 'status' | 'reason' | 'message' | 'observedGeneration'>): boolean {
  return !!current && current.status === next.status && current.reason === next.reason && current.message === next.message && current.observedGeneration === next.observedGeneration;
}

/**
 * Why an object is not Ready, from its conditions: `Reason: message`, followed by the first
 * other failing condition that says more (Knative's Ready says little — "no ready Revision" —
 * and its failing part says why). Undefined unless Ready is False.
 */
export function whyNotReady(conditions: readonly ReadCondition[] | undefined): string | undefined {
  const ready = conditions?.find((c) => c.type === 'Ready');
  if (ready?.status !== 'False') return undefined;
  const cause = conditions!.find((c) => c.type !== 'Ready' && c.status === 'False' && c.message && c.message !== ready.message);
  const text = (c: ReadCondition) => `${c.reason ?? 'NotReady'}${c.message ? `: ${c.message.trim()}` : ''}`;
  return `${text(ready)}${cause ? ` (${cause.type}: ${text(cause)})` : ''}`;
}

/**
 * Whether an object's Ready condition is True for its current generation: the condition's own
 * observedGeneration, else the status', has reached metadata.generation (a condition and status
 * without one count as current). The object as a watch holds it: its status is not trusted.
 */
export function readyForGeneration(obj: { metadata: { generation?: number }; status?: unknown }): boolean {
  const status = obj.status as { conditions?: unknown; observedGeneration?: unknown } | undefined;
  if (!status || !Array.isArray(status.conditions)) return false;
  const ready = (status.conditions as (Partial<ReadCondition> & { observedGeneration?: unknown } | null)[]).find((c) => c?.type === 'Ready');
  if (!ready || ready.status !== 'True') return false;
  const observed = typeof ready.observedGeneration === 'number' ? ready.observedGeneration : typeof status.observedGeneration === 'number' ? status.observedGeneration : undefined;
  const generation = obj.metadata.generation;
  return observed === undefined || generation === undefined || observed >= generation;
}
