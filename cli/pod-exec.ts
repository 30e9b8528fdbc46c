// A command run in a pod's container through the apiserver, as `kubectl exec` runs it: pods/exec
// over a WebSocket speaking Kubernetes' channel protocol, with the chosen cluster's server, TLS
// settings and credentials (kube/kubeconfig.ts's connectionFor). For reading a file out of a pod
// (the bridge's journal) with no port of its own and no other rights than kubectl's.
//
// The protocol (v4.channel.k8s.io, served since Kubernetes 1.4): every message is binary, its
// first byte the stream it belongs to — 1 standard output, 2 standard error, 3 the command's end
// as a Status (Success, or Failure with its exit code) — and the apiserver closes the socket once
// the command has ended. Nothing is sent to the command (no standard input, no terminal).
//
// Rights: `get` and `create` on pods/exec in the pod's namespace. A WebSocket opens with a GET,
// which older apiservers authorize as `get`; from Kubernetes 1.35 they ask for `create` as well
// (as they always did for kubectl's SPDY requests).
import { Agent, WebSocket } from 'undici';
import { KubeApi } from '../kube/api.ts';
import { nodeTransport, type Connection, type TlsSettings } from '../kube/connection.ts';
import { connectionFor, type ChosenContext } from '../kube/kubeconfig.ts';

export interface ExecTarget {
  namespace: string;
  pod: string;
  container: string;
}

export interface ExecOptions {
  /** The most bytes of standard output kept; past it the command is cut off and the exec fails (default 512 MiB). */
  maxBytes?: number;
  /** How long the exec may take, from its request to the command's end (default 300 s: a full journal, 60 MiB, over a slow link). */
  timeoutMs?: number;
}

/** A command that could not run, or ended with an error: what failed, where, and what to do. */
export class ExecFailed extends Error {
  readonly target: ExecTarget;
  constructor(target: ExecTarget, message: string) {
    super(`exec in pod ${target.namespace}/${target.pod} (container ${target.container}): ${message}`);
    this.target = target;
  }
}

/** The stream a message of the channel protocol belongs to: its first byte. */
const channel = { stdout: 1, stderr: 2, status: 3 } as const;

interface Status {
  status?: string;
  message?: string;
  reason?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}

/** A connection to the chosen cluster, with the TLS settings it was made with (a WebSocket needs them too). */
function connectionWithTls(cluster: ChosenContext): { connection: Connection; tls: TlsSettings } {
  let tls: TlsSettings = { rejectUnauthorized: true };
  const connection = connectionFor(cluster, (settings) => {
    tls = settings;
    return nodeTransport(settings);
  });
  return { connection, tls };
}

/** The exec URL: the apiserver's own, as ws(s), with the command as repeated `command` parameters. */
export function execUrl(server: string, target: ExecTarget, command: string[]): URL {
  const url = new URL(`${server.replace(/\/$/, '')}/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}/exec`);
  url.protocol = url.protocol === 'http:' ? 'ws:' : 'wss:';
  url.searchParams.set('container', target.container);
  url.searchParams.set('stdout', 'true');
  url.searchParams.set('stderr', 'true');
  for (const c of command) url.searchParams.append('command', c);
  return url;
}

/**
 * Runs `command` in the target's container and answers its standard output once it has ended
 * with exit status 0. Throws ExecFailed, naming the pod and what to do, when the exec is refused
 * (with the right that is missing, asked of the apiserver), fails to start, ends in an error (its
 * standard error included), takes longer than its timeout, or says more than `maxBytes`.
 */
export async function execInPod(cluster: ChosenContext, target: ExecTarget, command: string[], options: ExecOptions = {}): Promise<Buffer> {
  const { connection, tls } = connectionWithTls(cluster);
  const maxBytes = options.maxBytes ?? 512 * 1024 * 1024;
  const timeoutMs = options.timeoutMs ?? 300_000;
  // HTTP/1.1: a WebSocket over HTTP/2 needs extended CONNECT, which apiservers do not offer.
  const dispatcher = new Agent({ allowH2: false, connect: { ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: tls.rejectUnauthorized } });
  try {
    const socket = new WebSocket(execUrl(connection.server, target, command), { protocols: ['v4.channel.k8s.io'], headers: await connection.headers(), dispatcher });
    socket.binaryType = 'arraybuffer';
    const outcome = await new Promise<{ opened: boolean; stdout: Buffer[]; stderr: Buffer[]; status?: Status; problem?: string }>((resolve) => {
      const out = { opened: false, stdout: [] as Buffer[], stderr: [] as Buffer[], status: undefined as Status | undefined, problem: undefined as string | undefined };
      let bytes = 0;
      const timer = setTimeout(() => {
        out.problem = `the command did not end within ${timeoutMs / 1000} s`;
        socket.close();
      }, timeoutMs);
      socket.onopen = () => (out.opened = true);
      socket.onmessage = (event) => {
        const data = typeof event.data === 'string' ? Buffer.from(event.data) : Buffer.from(event.data as ArrayBuffer);
        // The apiserver opens each stream with a message of its byte alone.
        if (data.length < 2) return;
        const body = data.subarray(1);
        if (data[0] === channel.stdout) {
          bytes += body.length;
          if (bytes > maxBytes) {
            out.problem = `the command wrote more than ${maxBytes} bytes, the most this reader keeps`;
            socket.close();
            return;
          }
          out.stdout.push(body);
        } else if (data[0] === channel.stderr) {
          if (out.stderr.reduce((n, b) => n + b.length, 0) < 64 * 1024) out.stderr.push(body);
        } else if (data[0] === channel.status) {
          try {
            out.status = JSON.parse(body.toString('utf8')) as Status;
          } catch {
            out.status = { status: 'Failure', message: body.toString('utf8') };
          }
        }
      };
      socket.onclose = () => {
        clearTimeout(timer);
        resolve(out);
      };
    });
    if (outcome.problem) throw new ExecFailed(target, outcome.problem);
    if (!outcome.opened) throw new ExecFailed(target, await whyNotOpened(new KubeApi(connection), target));
    const stderr = Buffer.concat(outcome.stderr).toString('utf8').trim();
    if (outcome.status?.status !== 'Success') {
      const exitCode = outcome.status?.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
      const what = outcome.status ? (exitCode ? `the command ended with exit status ${exitCode}` : (outcome.status.message ?? 'the command failed')) : 'the connection closed before the command ended';
      throw new ExecFailed(target, `${what}${stderr ? `: ${stderr}` : ''}`);
    }
    return Buffer.concat(outcome.stdout);
  } finally {
    void dispatcher.close().catch(() => undefined);
  }
}

/**
 * Why a WebSocket to pods/exec did not open (the WebSocket API hides the answer's status): the
 * rights the user lacks, as the apiserver answers a SelfSubjectAccessReview, or the pod's state.
 */
async function whyNotOpened(api: KubeApi, target: ExecTarget): Promise<string> {
  const can = async (verb: string) => {
    const review = await api.request<{ status?: { allowed?: boolean } }>('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
      body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: { namespace: target.namespace, verb, resource: 'pods', subresource: 'exec', name: target.pod } } },
    });
    return review.status?.allowed === true;
  };
  try {
    const missing = [];
    for (const verb of ['get', 'create']) if (!(await can(verb))) missing.push(verb);
    if (missing.length) return `the apiserver refused: you may not ${missing.join(' or ')} pods/exec in namespace ${target.namespace} (kubectl auth can-i create pods/exec -n ${target.namespace}); ask for a Role with get and create on pods/exec there`;
    const pod = await api.request<{ status?: { phase?: string } }>('GET', `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(target.pod)}`);
    if (pod.status?.phase !== 'Running') return `the pod is ${pod.status?.phase ?? 'not running'}, and a command runs only in a running container`;
  } catch (err) {
    return `the exec did not open, and the apiserver could not say why (${(err as Error).message.trim()})`;
  }
  return 'the exec did not open (a proxy in front of the apiserver that refuses WebSockets? `kubectl exec` through the same kubeconfig tells)';
}
