// A namespace kfn puts objects in, there and usable. A namespace being deleted (a previous
// run's clean-up: the demo's Ctrl-C deletes kfn-system) still answers GET, and updates of the
// objects left in it succeed, but nothing new may be created in it — a Secret, a TokenRequest —
// until it is gone. So a command that needs it waits for it to go, then creates it again.
import { ApiError, type KubeApi } from './api.ts';
import { systemClock, waitFor, type Clock } from '../core/clock.ts';

/** How long a namespace being deleted is waited for: its pods' grace periods and finalizers, with room. */
export const namespaceGoneTimeoutMs = 120_000;

export interface NamespaceReadyOptions {
  /** The field manager that creates it when it is missing. */
  fieldManager: string;
  /** Told once, when the namespace is being deleted and this waits for it to go. */
  say?: (line: string) => void;
  clock?: Clock;
  timeoutMs?: number;
  /** Between checks while it is being deleted (default 500 ms). */
  intervalMs?: number;
}

interface NamespaceObject {
  metadata: { deletionTimestamp?: string };
  status?: { phase?: string; conditions?: { type: string; status: string; message?: string }[] };
}

const namespacePath = (name: string) => `/api/v1/namespaces/${encodeURIComponent(name)}`;

/** The namespace as the apiserver has it now, or undefined when there is none. */
async function readNamespace(api: KubeApi, name: string): Promise<NamespaceObject | undefined> {
  try {
    return await api.request<NamespaceObject>('GET', namespacePath(name));
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  }
}

const terminating = (ns: NamespaceObject) => !!ns.metadata.deletionTimestamp || ns.status?.phase === 'Terminating';

/** What the namespace controller says still holds a namespace (its status conditions), for the timeout's message. */
function whatHolds(ns: NamespaceObject | undefined): string {
  const held = (ns?.status?.conditions ?? []).filter((c) => c.status === 'True' && c.message).map((c) => `${c.type}: ${c.message}`);
  return held.length ? ` (${held.join('; ')})` : '';
}

/**
 * Makes sure `name` exists and is not being deleted: when it is being deleted, says so once and
 * waits (bounded) until it is gone; then creates it (server-side apply) if it is missing.
 */
export async function namespaceReady(api: KubeApi, name: string, options: NamespaceReadyOptions): Promise<void> {
  const clock = options.clock ?? systemClock;
  const timeoutMs = options.timeoutMs ?? namespaceGoneTimeoutMs;
  const ns = await readNamespace(api, name);
  if (ns && !terminating(ns)) return;
  if (ns) {
    options.say?.(`Namespace ${name} is being deleted (an earlier run's clean-up); waiting for it to go (up to ${Math.round(timeoutMs / 1000)} s) to create it again.`);
    let last: NamespaceObject | undefined = ns;
    try {
      await waitFor(
        `namespace ${name} to be deleted`,
        async () => {
          last = await readNamespace(api, name);
          return !last || !terminating(last);
        },
        { clock, timeoutMs, intervalMs: options.intervalMs ?? 500 },
      );
    } catch {
      throw new Error(
        `Namespace ${name} is still being deleted after ${Math.round(timeoutMs / 1000)} s${whatHolds(last)}, and nothing can be created in it until it is gone. ` +
          `See what is left with \`kubectl get namespace ${name} -o yaml\` (its conditions name what holds it), then run this again.`,
      );
    }
    // Created again by someone else meanwhile: it is there and usable.
    if (last) return;
  }
  await api.request('PATCH', namespacePath(name), {
    body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    contentType: 'application/apply-patch+yaml',
    query: { fieldManager: options.fieldManager, force: true },
  });
}
