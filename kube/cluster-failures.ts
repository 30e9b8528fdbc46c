// What it means when a cluster fails a command, in one line: what happened, where the cluster
// came from (the kubeconfig file and context, and the server), and what to check. A refused,
// unreachable, silent or untrusted server, a credential that cannot be read, a 401 and a 403
// are explained; any other error is left as it is. A command's cluster comes connected this way
// (connectCluster): the one place that puts the kubeconfig's choice, its connection and these
// explanations together.
import { ApiError, KubeApi } from './api.ts';
import { ClientNodeMissing } from './client-node.ts';
import type { Connection, TransportFactory } from './connection.ts';
import { connectionFor, resolveKubeconfig, type ClusterSelection, type KubeconfigChoice, type KubeconfigEnvironment } from './kubeconfig.ts';

/** Where a connection goes and as whom, for messages. */
export interface ClusterIdentity {
  /** `context "dev" in ~/.kube/config`, or `the in-cluster ServiceAccount`. */
  where: string;
  server: string;
  user?: string;
}

/** The cluster cannot be used as configured; the message is the one line to show. */
export class ClusterUnavailable extends Error {
  override readonly name = 'ClusterUnavailable';
  /** No answer (refused, unreachable, silent), or an answer that cannot be trusted or refuses who this is. */
  readonly reason: 'no-answer' | 'untrusted' | 'credentials';
  constructor(message: string, reason: ClusterUnavailable['reason'], options?: ErrorOptions) {
    super(message, options);
    this.reason = reason;
  }
}

const line = (what: string, c: ClusterIdentity, check: string) => `${what} (${c.where}, server ${c.server}): ${check}`;
const seconds = (ms: number) => `${ms / 1000} s`;
const userOf = (c: ClusterIdentity) => (c.user ? `user "${c.user}"` : 'the context (it names no user)');

const untrusted = new Set(['DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'CERT_SIGNATURE_FAILURE', 'CERT_UNTRUSTED']);
const unreachable = new Set(['EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN', 'ETIMEDOUT', 'EADDRNOTAVAIL']);

/** The one line for a failure to reach or trust the server; undefined for any other error. */
export function explainFailure(err: unknown, c: ClusterIdentity): string | undefined {
  const e = err as { code?: string; step?: string; ms?: number; message?: string; cause?: { code?: string } };
  const code = e?.code ?? e?.cause?.code;
  if (!code) return undefined;
  const check = {
    running: 'check that the cluster is running and that the server address is right',
    network: 'check the network (VPN, firewall, proxy) and the server address',
    apiserver: 'check that the address is a Kubernetes apiserver\'s (scheme and port) and that it is not overloaded',
  };
  if (code === 'KFN_NO_ANSWER') {
    if (e.step === 'connect') return line(`no connection to the server within ${seconds(e.ms!)}`, c, check.network);
    if (e.step === 'handshake') return line(`the server took the connection but there was no TLS handshake within ${seconds(e.ms!)}`, c, check.apiserver);
    return line(`the server did not answer within ${seconds(e.ms!)}`, c, check.apiserver);
  }
  if (code === 'ECONNREFUSED') return line('the server refused the connection', c, check.running);
  if (code === 'ECONNRESET') return line('the server closed the connection before answering', c, check.apiserver);
  if (unreachable.has(code) || code === 'UND_ERR_CONNECT_TIMEOUT') return line(`cannot reach the server (${code})`, c, check.network);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return line(`cannot resolve the server's host name (${code})`, c, 'check the server address, and DNS or VPN');
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return line('the server did not answer in time', c, check.apiserver);
  const certificate = 'check certificate-authority (or certificate-authority-data) of the cluster in the kubeconfig: it must be the CA that signed the apiserver\'s certificate';
  // (Node's own advice after a semicolon, to trust the system's CAs, is not what a kubeconfig needs.)
  if (untrusted.has(code)) return line(`the server's certificate is not trusted (${e.message?.replace(/;.*$/, '')})`, c, certificate);
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return line(`the server's certificate is not valid now (${code})`, c, 'check the apiserver\'s certificate and this machine\'s clock');
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return line(`the server's certificate is not for this address (${e.message})`, c, 'check the server address (or tls-server-name) in the kubeconfig');
  if (code === 'EPROTO' || code === 'ERR_SSL_WRONG_VERSION_NUMBER') return line('the server does not speak TLS', c, 'check the server address: https://, and the apiserver\'s port');
  return undefined;
}

/** Whether an explained failure is no answer at all, or a server that cannot be trusted. */
function failureReason(err: unknown): ClusterUnavailable['reason'] {
  const e = err as { code?: string; cause?: { code?: string } };
  const code = e.code ?? e.cause?.code ?? '';
  return untrusted.has(code) || code.startsWith('CERT_') || code === 'ERR_TLS_CERT_ALTNAME_INVALID' ? 'untrusted' : 'no-answer';
}

/** The one line for credentials that cannot be read: a token file, a client certificate or key, a credential plugin. */
export function credentialsUnreadable(err: unknown, c: ClusterIdentity): string {
  // The library that runs the plugin is not installed: what needs it and how to install it, alone.
  if (err instanceof ClientNodeMissing) return err.message;
  return line(`the credentials of ${userOf(c)} cannot be read: ${(err as Error).message}`, c, "check the user's entry in the kubeconfig (the files it names, or its credential plugin)");
}

/** The one line for a 401: the apiserver does not accept who this is. */
function unauthorized(c: ClusterIdentity): string {
  return line(
    `the server refused the credentials of ${userOf(c)} (401 Unauthorized)`,
    c,
    'a token or client certificate may have expired or been revoked: log in again or renew the kubeconfig (for a cloud cluster, its get-credentials command), and check that the context names the right user',
  );
}

async function statusMessage(body: NodeJS.ReadableStream): Promise<{ message?: string; reason?: string }> {
  let text = '';
  for await (const chunk of body) {
    text += chunk.toString();
    if (text.length > 64 * 1024) break;
  }
  try {
    return JSON.parse(text) as { message?: string; reason?: string };
  } catch {
    return { message: text.trim().slice(0, 200) };
  }
}

/**
 * The connection with its failures explained (explainFailure, credentialsUnreadable): a 401 is
 * ClusterUnavailable; a 403 stays an ApiError with its status (callers may expect one) and its
 * message gains where and what to check. Aborts by the caller pass as they are.
 */
export function explainingConnection(connection: Connection, c: ClusterIdentity): Connection {
  return {
    server: connection.server,
    source: connection.source,
    reset: () => connection.reset(),
    async headers() {
      try {
        return await connection.headers();
      } catch (err) {
        throw new ClusterUnavailable(credentialsUnreadable(err, c), 'credentials', { cause: err });
      }
    },
    async send(request) {
      let reply;
      try {
        reply = await connection.send(request);
      } catch (err) {
        const why = request.signal?.aborted ? undefined : explainFailure(err, c);
        throw why ? new ClusterUnavailable(why, failureReason(err), { cause: err }) : err;
      }
      if (reply.statusCode === 401) {
        reply.body.resume();
        throw new ClusterUnavailable(unauthorized(c), 'credentials');
      }
      if (reply.statusCode === 403) {
        const status = await statusMessage(reply.body);
        throw new ApiError(403, line(status.message || 'forbidden', c, `check the RBAC of ${userOf(c)} (kubectl auth can-i --list)`), status.reason);
      }
      return reply;
    },
  };
}

/**
 * A first look at the cluster (GET /version, which any identity may read), bounded: a command
 * says at once that the cluster does not answer, or refuses its credentials, before it acts.
 */
export async function checkClusterAnswers(cluster: ClusterIdentity & { connection: Connection }, options: { withinMs?: number } = {}): Promise<void> {
  const withinMs = options.withinMs ?? 10_000;
  const signal = AbortSignal.timeout(withinMs);
  try {
    await new KubeApi(cluster.connection).request('GET', '/version', { signal });
  } catch (err) {
    if (err instanceof ApiError) return; // it answered
    if (signal.aborted) throw new ClusterUnavailable(line(`the server did not answer within ${seconds(withinMs)}`, cluster, "check that the address is a Kubernetes apiserver's (scheme and port) and that it is not overloaded"), 'no-answer');
    throw err;
  }
}

/** A chosen cluster and its connection. */
export interface ResolvedCluster extends KubeconfigChoice {
  connection: Connection;
}

/**
 * The cluster kubectl would use for --kubeconfig, --context and -n, for a command: its
 * connection turns a failure to reach the cluster, a credential that cannot be read, a 401 and a
 * 403 into one line that names the kubeconfig, the context and the server, and what to check
 * (explainingConnection); `explain: false` leaves them as they come, for a process that judges
 * them itself (the bridge).
 */
export function connectCluster(selection: ClusterSelection = {}, options: { transport?: TransportFactory; environment?: KubeconfigEnvironment; explain?: boolean } = {}): ResolvedCluster {
  const choice = resolveKubeconfig(selection, options.environment);
  let connection: Connection;
  try {
    connection = connectionFor(choice, options.transport);
  } catch (err) {
    throw new ClusterUnavailable(credentialsUnreadable(err, choice), 'credentials', { cause: err });
  }
  return { ...choice, connection: options.explain === false ? connection : explainingConnection(connection, choice) };
}
