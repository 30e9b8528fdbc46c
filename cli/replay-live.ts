// `kfn replay --live`: a recorded event sent to the running function again, reason replay,
// signed as the bridge signs it — to the URL given, or where the function's Reconciler delivers
// (a cluster address through the apiserver's service proxy), with the credentials of its auth
// Secret — and the changes it answers set beside the recorded ones.
import { authenticate, type Credentials } from '../core/authentication.ts';
import { encodeReconcileEvent } from '../core/event.ts';
import { reconcilerApiVersion, reconcilerPlural } from '../core/names.ts';
import { objectKey } from '../core/objects.ts';
import type { ReconcilerObject, WrittenReconcilerSpec } from '../core/reconciler-spec.ts';
import { type ReconcileResponse } from '../core/response.ts';
import { ApiError, KubeApi, readText } from '../kube/api.ts';
import { UsageError } from './command.ts';
import type { Selected } from './replay-select.ts';

/** Where a live replay goes and with what credentials: given, or as the function's Reconciler and auth Secret say. */
interface ReplayTarget {
  url?: string;
  credentials: Credentials;
  /** A cluster address (service.namespace.svc…) is reached through the apiserver's service proxy. */
  viaProxy?: { path: string };
}

async function replayTarget(s: Selected, o: { to?: string; api: () => KubeApi; namespace: string }): Promise<ReplayTarget> {
  const reconcilerName = s.event.data.reconciler;
  const fromEnv: Credentials | undefined = process.env.KFN_AUTH_SECRET ? { kind: 'hmac', secret: process.env.KFN_AUTH_SECRET } : process.env.KFN_AUTH_TOKEN ? { kind: 'bearer', token: process.env.KFN_AUTH_TOKEN } : undefined;
  if (o.to && fromEnv) return { url: o.to, credentials: fromEnv };
  // No Reconciler (404): the function runs under kfn dev, which keeps only its auth Secret in the cluster.
  const rec = await o
    .api()
    .request<ReconcilerObject>('GET', `/apis/${reconcilerApiVersion}/${reconcilerPlural}/${reconcilerName}`)
    .catch((err) => {
      if (err instanceof ApiError && err.status === 404) return undefined;
      throw new UsageError(`cannot read Reconciler ${reconcilerName} from the cluster (${(err as Error).message.trim()}); pass --to URL and set KFN_AUTH_SECRET`);
    });
  const credentials = fromEnv ?? (await secretCredentials(s, o, rec?.spec.auth, !rec));
  if (o.to) return { url: o.to, credentials };
  if (!rec) throw new UsageError(`there is no Reconciler ${reconcilerName} in the cluster to say where the function runs: pass --to with its URL (under kfn dev: http://127.0.0.1:8070/fn/${s.function})`);
  const url = rec.spec.sink.uri;
  if (!url) throw new UsageError(`Reconciler ${reconcilerName} delivers to a sink reference (a Knative Service?); pass --to with the function's URL`);
  const u = new URL(url);
  const host = u.hostname.split('.');
  if (host.length >= 2 && (host[2] === 'svc' || u.hostname.endsWith('.svc'))) {
    return { url, credentials, viaProxy: { path: `/api/v1/namespaces/${host[1]}/services/${host[0]}:${u.port || (u.protocol === 'https:' ? 443 : 80)}/proxy${u.pathname}` } };
  }
  return { url, credentials };
}

/** The credentials in the Reconciler's auth Secret (or, under kfn dev, the function's own); none when there is neither. */
async function secretCredentials(s: Selected, o: { api: () => KubeApi; namespace: string }, auth: WrittenReconcilerSpec['auth'], underDev: boolean): Promise<Credentials> {
  const ref = auth?.secretRef ?? (underDev ? { name: `kfn-fn-${s.function}`, namespace: o.namespace, key: 'secret' } : undefined);
  if (!ref) return { kind: 'none' };
  const secret = await o
    .api()
    .request<{ data?: Record<string, string> }>('GET', `/api/v1/namespaces/${ref.namespace}/secrets/${ref.name}`)
    .catch((err) => {
      if (underDev && err instanceof ApiError && err.status === 404) return undefined;
      throw new UsageError(`cannot read the function's auth Secret ${ref.namespace}/${ref.name} (${(err as Error).message.trim()}); set KFN_AUTH_SECRET`);
    });
  if (!secret) return { kind: 'none' };
  const value = Buffer.from(secret.data?.[ref.key ?? 'secret'] ?? '', 'base64').toString('utf8');
  return auth?.type === 'bearer' ? { kind: 'bearer', token: value } : { kind: 'hmac', secret: value };
}

/** Sends the event again, reason replay, as the bridge would; says whether the function's changes equal the recorded ones. */
export async function replayLive(s: Selected, o: { to?: string; api: () => KubeApi; namespace: string; quiet: boolean }): Promise<boolean> {
  const target = await replayTarget(s, o);
  const { message, event } = encodeReconcileEvent({ reconciler: s.event.data.reconciler, primary: s.event.data.primary, reason: 'replay', ...(s.event.data.trigger ? { trigger: s.event.data.trigger } : {}), observedAt: Date.now() }, 1, 'kfn-replay', Date.now() + 30_000);
  const signed = authenticate(message, target.credentials);
  let res: { status: number; text: string };
  if (target.viaProxy) {
    const api = o.api();
    const reply = await api.connection.send({ method: 'POST', url: new URL(api.connection.server + target.viaProxy.path), headers: { ...(await api.connection.headers()), ...signed.headers }, body: signed.body });
    res = { status: reply.statusCode, text: await readText(reply.body) };
  } else {
    const reply = await fetch(target.url!, { method: 'POST', headers: signed.headers, body: signed.body });
    res = { status: reply.status, text: await reply.text() };
  }
  const text = res.text;
  let answer: ReconcileResponse | { error?: string } | undefined;
  try {
    answer = JSON.parse(text) as ReconcileResponse;
  } catch {
    answer = undefined;
  }
  console.log(`  live: event ${event.id.slice(0, 12)} (reason replay) → ${target.viaProxy ? `service proxy ${target.viaProxy.path}` : target.url}: HTTP ${res.status}`);
  if (res.status !== 200 || !answer || !('changes' in answer)) {
    console.log(`  ✗ the function answered ${res.status}: ${(answer as { error?: string } | undefined)?.error ?? text.slice(0, 300)}`);
    return false;
  }
  return sameChanges(answer.changes, s.record?.result?.changes, o.quiet);
}

/** Prints the changes a replay made and whether they equal the recorded ones (true when nothing was recorded). */
function sameChanges(changes: ReconcileResponse['changes'], recorded: ReconcileResponse['changes'] | undefined, quiet: boolean): boolean {
  const changeKey = (c: ReconcileResponse['changes'][number]) => `${c.action} ${c.ref.kind} ${objectKey(c.ref)}`;
  const now = changes.map(changeKey);
  for (const c of now) console.log(`    ${c}`);
  if (!now.length) console.log('    no changes: the object is as the function wants it');
  if (!recorded) return true;
  const then = recorded.map(changeKey);
  const same = now.length === then.length && now.every((c) => then.includes(c));
  if (!same || !quiet) console.log(same ? '  ✓ the changes equal the recorded ones' : `  ✗ the changes differ from the recorded ones (then: ${then.join('; ') || 'none'})`);
  return same;
}
