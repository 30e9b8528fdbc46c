// The finalizer, step 3 of docs/functions.md: `kfn.dev/<name>` on the object before its first
// reconcile when the function has `finalize`; once the object is being deleted, the user's
// finalize, then the finalizer removed — whoever wrote it. Every write names the object's uid,
// so that an object deleted and recreated under the same name meanwhile is never created again
// nor touched.
import { refOf } from '../../core/objects.ts';
import { finalizeFailingSinceAnnotation, skipFinalizerAnnotation } from '../../core/names.ts';
import { ApiError, type KubeApi, type KubeObject } from '../../kube/api.ts';
import type { InvocationScope } from './invocation.ts';
import type { ReconcileContext } from './reconciler.ts';

/** How long a failing finalize is retried after its first failure, by default. */
export const defaultFinalizeTimeoutSeconds = 600;

/** Before the first reconcile of a function with `finalize`: its finalizer on the object. */
export async function addFinalizer(run: InvocationScope, obj: KubeObject): Promise<void> {
  const { api, reconciler } = run;
  const finalizer = reconciler.finalizer;
  if (!finalizer || obj.metadata.finalizers?.includes(finalizer)) return;
  // Applying only our finalizer under our field manager: other finalizers are someone else's.
  const written = await run.step('adding the finalizer', () =>
    api.request<KubeObject | undefined>('PATCH', run.primaryPath, {
      // The uid makes the apply a precondition: it never creates a deleted object again, nor
      // touches a new object that took the name (409 / 422 instead).
      body: { apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid: obj.metadata.uid, finalizers: [finalizer] } },
      contentType: 'application/apply-patch+yaml',
      query: { fieldManager: `${reconciler.fieldManager}-finalizer`, force: true },
    }),
  );
  // Later writes are preconditioned on the version this one made.
  if (written?.metadata?.resourceVersion) obj.metadata.resourceVersion = written.metadata.resourceVersion;
  run.changes.push({ action: 'finalizer', ref: refOf(obj), detail: `added ${finalizer}` });
}

/** Deletion: run the user's finalize (bounded by finalizeTimeoutSeconds), then let the object go. */
export async function finalize(run: InvocationScope, obj: KubeObject, ctx: ReconcileContext): Promise<void> {
  const finalizer = run.reconciler.finalizer;
  if (!finalizer || !obj.metadata.finalizers?.includes(finalizer)) return;
  if (obj.metadata.annotations?.[skipFinalizerAnnotation] === 'true') {
    run.log.warn({}, `${skipFinalizerAnnotation} is set: removing the finalizer without cleanup`);
    await ctx.event('Warning', 'FinalizerSkipped', `${skipFinalizerAnnotation} is set: ${finalizer} removed without running cleanup`).catch(() => undefined);
  } else {
    await run.step('finalize', async () => run.reconciler.finalize!(obj as never, ctx)).catch((err: unknown) => finalizeFailed(run, obj, ctx, err));
  }
  const removed = await run.step('removing the finalizer', () => removeFinalizer(run.api, run.primaryPath, obj, finalizer));
  if (!removed) {
    // This object is gone (and a new one of the same name is not ours to touch). Nothing is left to finalize.
    run.log.info({}, 'the object went while it was being finalized');
    return;
  }
  run.changes.push({ action: 'finalizer', ref: refOf(obj), detail: `removed ${finalizer}` });
  run.log.info({}, 'finalized');
}

/**
 * A failed finalize is retried (rethrown) until finalizeTimeoutSeconds have passed since its
 * first failure, noted on the object (finalizeFailingSinceAnnotation), and then given up, so
 * that deletion can finish. Not from the deletion: a delivery held up past the timeout would
 * make a first, passing failure the last. Not by attempts either: they count the bridge's
 * retries of this object whatever their cause and may be high already.
 */
async function finalizeFailed(run: InvocationScope, obj: KubeObject, ctx: ReconcileContext, err: unknown): Promise<void> {
  const finalizer = run.reconciler.finalizer!;
  const timeoutSeconds = run.reconciler.finalizeTimeoutSeconds ?? defaultFinalizeTimeoutSeconds;
  const cause = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message;
  const now = run.now().getTime();
  // The event's copy may predate the note: the live object says (a read on failure only).
  const noted = obj.metadata.annotations?.[finalizeFailingSinceAnnotation] ?? (await run.api.request<KubeObject>('GET', run.primaryPath).then((live) => live.metadata.annotations?.[finalizeFailingSinceAnnotation], () => undefined));
  const since = noted === undefined ? NaN : Date.parse(noted);
  if (Number.isNaN(since)) {
    const body = { metadata: { uid: obj.metadata.uid, annotations: { [finalizeFailingSinceAnnotation]: new Date(now).toISOString() } } };
    await run.api.request('PATCH', run.primaryPath, { body, contentType: 'application/merge-patch+json' }).catch((patchErr: unknown) => run.log.warn({ error: (patchErr as Error).message }, 'could not note when finalize first failed; the next failure tries again'));
  }
  const first = Number.isNaN(since) ? now : since;
  const elapsedSeconds = Math.max(0, Math.round((now - first) / 1000));
  if (elapsedSeconds < timeoutSeconds) {
    const giveUpAt = new Date(first + timeoutSeconds * 1000).toISOString();
    await ctx.event('Warning', 'FinalizeFailed', `cleanup failed: ${cause}; retried until ${giveUpAt}, then ${finalizer} is removed without it (annotate ${skipFinalizerAnnotation}=true to let the object go now)`).catch(() => undefined);
    throw err;
  }
  run.log.error({ elapsedSeconds, timeoutSeconds, error: cause }, 'finalize kept failing past its timeout; letting the object go');
  await ctx.event('Warning', 'FinalizerGaveUp', `cleanup kept failing for ${elapsedSeconds}s since its first failure (finalizeTimeoutSeconds ${timeoutSeconds}), last: ${cause}; ${finalizer} removed so that deletion can finish`).catch(() => undefined);
}

/** Whether the apiserver's refusal is an admission webhook's (its message says so), not its own check. */
const refusedByWebhook = (err: ApiError) => /admission webhook "[^"]*" denied the request/.test(err.message);

/**
 * Removes `finalizer` whoever wrote it (an apply of an empty list would remove only an entry
 * kfn's field manager owns, and an object restored with the finalizer in its manifest would
 * stay Terminating): a JSON patch that tests the uid and the list as read and writes the list
 * without it. A list changed meanwhile (another controller's finalizer) is read again. False
 * when the object is gone, or another object has taken its name.
 */
async function removeFinalizer(api: KubeApi, path: string, obj: KubeObject, finalizer: string): Promise<boolean> {
  const uid = obj.metadata.uid;
  let finalizers = obj.metadata.finalizers ?? [];
  for (let attempt = 1; ; attempt++) {
    if (!finalizers.includes(finalizer)) return true;
    const patch = [
      { op: 'test', path: '/metadata/uid', value: uid },
      { op: 'test', path: '/metadata/finalizers', value: finalizers },
      { op: 'replace', path: '/metadata/finalizers', value: finalizers.filter((f) => f !== finalizer) },
    ];
    try {
      await api.request('PATCH', path, { body: patch, contentType: 'application/json-patch+json' });
      return true;
    } catch (err) {
      if (!(err instanceof ApiError) || (err.status !== 422 && err.status !== 404) || attempt === 5) throw err;
      // An admission webhook's refusal comes as a 422 too: it is no changed list, and reading
      // again would not change it.
      if (refusedByWebhook(err)) throw err;
      const fresh = await api.request<KubeObject>('GET', path).catch((e: unknown) => (e instanceof ApiError && e.status === 404 ? undefined : Promise.reject(e)));
      if (!fresh || fresh.metadata.uid !== uid) return false;
      finalizers = fresh.metadata.finalizers ?? [];
    }
  }
}
