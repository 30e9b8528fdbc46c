// The loader: which cluster a process talks to and its connection, in one place, as client-go's
// clientcmd loader and rest.InClusterConfig are. The cluster is chosen as kubectl chooses it, so
// that every kfn command and kubectl agree:
//
//   1. --kubeconfig F: that file alone (a missing F is an error, not a reason to look further);
//   2. else $KUBECONFIG: every file it names (colon-separated), merged: the first file to name a
//      cluster, context or user wins it, current-context comes from the first file that sets
//      one, missing files are skipped;
//   3. else ~/.kube/config (read only when $KUBECONFIG is unset or empty);
//   4. else, when none of those holds a context, the pod's ServiceAccount (in-cluster).
//
// --context picks a context (default: current-context); the namespace is -n, else the
// context's, else "default" (in a pod: $POD_NAMESPACE, else the ServiceAccount's namespace).
//
// The answer (resolveKubeconfig) is the chosen context, its cluster and user parsed once, every
// file they name made absolute; and that context alone as a kubeconfig of its own, which a child
// process can be handed. connectionFor connects a choice without reading anything again;
// loadConnection chooses and connects in one call (the bridge, a function: in a pod, the
// ServiceAccount of rule 4). A kubeconfig kfn wrote itself (a ServiceAccount's, $KFN_KUBECONFIG)
// is connected from its text by connectionFromKubeconfigText.
//
// Supported users: tokens (inline or tokenFile, re-read so rotated tokens work), client
// certificates, basic auth; CAs inline or in a file, insecure-skip-tls-verify. A user that
// authenticates with an exec or auth-provider plugin (how EKS, GKE and AKS kubeconfigs work) is
// handed to @kubernetes/client-node, loaded only then: it runs the plugin and caches the
// credential until it expires; the connection (connection.ts) takes the Authorization header
// it yields.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { importClientNode } from './client-node.ts';
import { connectionFromOptions, type Connection, type TransportFactory } from './connection.ts';

/** What the user asked for: kubectl's --kubeconfig, --context and -n. */
export interface ClusterSelection {
  kubeconfig?: string;
  context?: string;
  namespace?: string;
}

/** Where the resolver looks; a parameter so that tests need no real home or pod. */
export interface KubeconfigEnvironment {
  env: Record<string, string | undefined>;
  /** The user's home directory (os.homedir(), which follows $HOME). */
  home: string;
  /** Where a pod's ServiceAccount token, CA and namespace are mounted. */
  serviceAccountDir: string;
}

export const defaultKubeconfigEnvironment = (): KubeconfigEnvironment => ({
  env: process.env,
  home: homedir(),
  serviceAccountDir: '/var/run/secrets/kubernetes.io/serviceaccount',
});

type Entry = Record<string, unknown>;

/** A context's cluster and user entries, as a kubeconfig writes them (`server`, `certificate-authority`, `token`, `exec`…). */
export interface ContextEntries {
  cluster: Entry;
  /** Empty when the context names no user. */
  user: Entry;
}

/** The cluster chosen, and how: enough to say it in one line and to connect. */
export interface KubeconfigChoice {
  /** Which rule chose it. */
  via: '--kubeconfig' | '$KUBECONFIG' | '~/.kube/config' | 'in-cluster';
  /** The kubeconfig files read, in precedence order (none in-cluster). */
  files: string[];
  /** The file that holds the chosen context. */
  file?: string;
  context?: string;
  user?: string;
  server: string;
  namespace: string;
  /** For messages: `context "dev" in ~/.kube/config`, or `the in-cluster ServiceAccount`. */
  where: string;
  /** The chosen context alone, as kubeconfig YAML whose file references are absolute. */
  kubeconfig: string;
  /** The chosen context's cluster and user, parsed once, every file they name absolute: what connectionFor connects. */
  entries: ContextEntries;
}

/** No kubeconfig anywhere and not in a pod; `tried` says where it looked. */
export class NoClusterConfigured extends Error {
  readonly tried: string[];
  constructor(tried: string[]) {
    super(`no kubeconfig found: ${tried.join('; ')}`);
    this.tried = tried;
  }
}

interface Named<T> {
  name: string;
  value: T;
  /** The file it was read from; relative paths in it resolve against that file's directory. */
  file: string;
}

/** Several kubeconfig files as one: each name kept as the first file to use it gave it. */
interface MergedKubeconfig {
  files: string[];
  currentContext?: { name: string; file: string };
  contexts: Map<string, Named<Entry>>;
  clusters: Map<string, Named<Entry>>;
  users: Map<string, Named<Entry>>;
}

/** `~/…` for a path in the home directory: shorter, and the same for every user. */
export function homePath(path: string, home = homedir()): string {
  return path === home || path.startsWith(`${home}/`) ? `~${path.slice(home.length)}` : path;
}

// The YAML parser (the `yaml` package, 250 KB) is loaded when a kubeconfig first needs it. A
// function reads a JSON kubeconfig kfn wrote, or none at all in a cluster: its bundle keeps the
// parser in a chunk of its own, and a cold start does not compile it (about 10 ms of one). A
// bundle has no node_modules to load it from synchronously, so its entry points await
// kubeconfigParserReady (or loadYamlParser) before reading a kubeconfig; run from source or from
// the package, the parser is loaded on first use. A function checks its kubeconfig when it
// starts and reads it at its first reconcile: one that turns from JSON into YAML in between (not
// what kfn writes, nor a pod's) is refused with an error that says so.
let yamlParse: ((text: string) => unknown) | undefined;

/** Loads the YAML parser (once). */
export async function loadYamlParser(): Promise<void> {
  // A CommonJS package: its exports are the module's default export, in Node and in a bundle
  // (esbuild's chunk exports only that).
  yamlParse ??= ((await import('yaml')) as unknown as { default: typeof import('yaml') }).default.parse;
}

/** JSON text parsed, or undefined when it is not JSON (YAML, JSON's superset, then reads it). */
function asJson(text: string): { doc: unknown } | undefined {
  if (!text.trimStart().startsWith('{')) return undefined;
  try {
    return { doc: JSON.parse(text) };
  } catch {
    return undefined; // YAML in flow style
  }
}

/**
 * Loads the YAML parser if a kubeconfig that `selection` would read (or `text`, a kubeconfig
 * given as text) is not JSON: what a bundled program awaits before it reads one.
 */
export async function kubeconfigParserReady(selection: ClusterSelection | { text: string } = {}, e: KubeconfigEnvironment = defaultKubeconfigEnvironment()): Promise<void> {
  if (yamlParse) return;
  const texts = 'text' in selection ? [selection.text] : kubeconfigFiles(selection, e).files.flatMap((file) => {
    try {
      return [readFileSync(file, 'utf8')];
    } catch {
      return []; // missing or unreadable: resolveKubeconfig says so
    }
  });
  if (texts.some((text) => !asJson(text))) await loadYamlParser();
}

function parseYaml(text: string): unknown {
  if (!yamlParse) {
    try {
      yamlParse = (createRequire(import.meta.url)('yaml') as typeof import('yaml')).parse;
    } catch {
      throw new Error("it is YAML, and this bundle has not loaded the YAML parser: write it as JSON, or have the program await kubeconfigParserReady() (from 'kfn/sdk') before its first reconcile");
    }
  }
  return yamlParse(text);
}

/**
 * A kubeconfig's text as a document. One kfn wrote (a resolved kubeconfig, kubeconfigText below)
 * is JSON, read without the YAML parser, which is slow on its first call; anything else, and text
 * that only starts like JSON (YAML's flow style), as YAML.
 */
export function parseKubeconfig(text: string): unknown {
  return (asJson(text) ?? { doc: parseYaml(text) }).doc;
}

function readKubeconfig(file: string, into: MergedKubeconfig): void {
  let doc: unknown;
  try {
    doc = parseKubeconfig(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read kubeconfig ${file}: ${(err as Error).message}`);
  }
  into.files.push(file);
  if (doc === null || doc === undefined) return; // an empty file is an empty kubeconfig, as kubectl reads it
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new Error(`cannot read kubeconfig ${file}: not a YAML mapping`);
  const d = doc as Record<string, unknown>;
  const current = d['current-context'];
  if (typeof current === 'string' && current && !into.currentContext) into.currentContext = { name: current, file };
  for (const [key, map] of [['contexts', into.contexts], ['clusters', into.clusters], ['users', into.users]] as const) {
    const field = key.replace(/s$/, '');
    const list = d[key] ?? [];
    if (!Array.isArray(list)) throw new Error(`cannot read kubeconfig ${file}: ${key} is not a list`);
    for (const item of list as { name?: unknown; [k: string]: unknown }[]) {
      if (typeof item?.name !== 'string' || map.has(item.name)) continue;
      map.set(item.name, { name: item.name, value: (item[field] ?? {}) as Entry, file });
    }
  }
}

const emptyMerge = (): MergedKubeconfig => ({ files: [], contexts: new Map(), clusters: new Map(), users: new Map() });

/** A copy of the entry with the named file references resolved against the directory of the file it came from. */
function absolute(entry: Named<Entry>, keys: string[]): Entry {
  const base = dirname(entry.file);
  const out: Entry = structuredClone(entry.value);
  for (const k of keys) if (typeof out[k] === 'string' && out[k] && !isAbsolute(out[k] as string)) out[k] = resolve(base, out[k] as string);
  // An exec plugin named by a relative path (one with a slash) is found beside the kubeconfig;
  // a bare name is looked up on $PATH (client-go does the same).
  const exec = out.exec as { command?: unknown } | undefined;
  if (exec && typeof exec.command === 'string' && exec.command.includes('/') && !isAbsolute(exec.command)) exec.command = resolve(base, exec.command);
  return out;
}

/** The kubeconfig files kubectl would read, with the rule that named them. */
function kubeconfigFiles(selection: ClusterSelection, e: KubeconfigEnvironment): { via: KubeconfigChoice['via']; files: string[] } {
  if (selection.kubeconfig) return { via: '--kubeconfig', files: [resolve(selection.kubeconfig)] };
  const fromEnv = (e.env.KUBECONFIG ?? '').split(':').filter(Boolean);
  if (fromEnv.length) return { via: '$KUBECONFIG', files: [...new Set(fromEnv.map((f) => resolve(f)))] };
  return { via: '~/.kube/config', files: [join(e.home, '.kube', 'config')] };
}

/** Chooses the cluster as kubectl would; throws NoClusterConfigured when there is none, or an Error naming what is wrong in a kubeconfig. */
export function resolveKubeconfig(selection: ClusterSelection = {}, e: KubeconfigEnvironment = defaultKubeconfigEnvironment()): KubeconfigChoice {
  const show = (p: string) => homePath(p, e.home);
  const { via, files } = kubeconfigFiles(selection, e);
  if (via === '--kubeconfig' && !existsSync(files[0]!)) throw new Error(`kubeconfig ${show(files[0]!)} (--kubeconfig) does not exist`);
  const merged = emptyMerge();
  for (const file of files) if (existsSync(file)) readKubeconfig(file, merged);

  const empty = !merged.currentContext && merged.contexts.size === 0;
  if (empty && via !== '--kubeconfig') {
    const inCluster = inClusterChoice(selection, e);
    if (inCluster) return inCluster;
    throw new NoClusterConfigured([notFound(via, files, merged.files, show), notInCluster(e)]);
  }
  const sources = merged.files.map(show).join(', ') || show(files[0]!);
  const contextName = selection.context ?? merged.currentContext?.name;
  const contextNames = [...merged.contexts.keys()].sort();
  if (!contextName) throw new Error(`${sources} sets no current-context: pass --context (one of: ${contextNames.join(', ') || 'none; it has no contexts'})`);
  const context = merged.contexts.get(contextName);
  if (!context) throw new Error(`context "${contextName}" is not in ${sources} (its contexts: ${contextNames.join(', ') || 'none'})`);
  const where = `context "${contextName}" in ${show(context.file)}`;
  const clusterName = context.value.cluster as string | undefined;
  const cluster = clusterName ? merged.clusters.get(clusterName) : undefined;
  if (!cluster) throw new Error(`${where} names cluster "${clusterName ?? ''}", which is not there (clusters: ${[...merged.clusters.keys()].join(', ') || 'none'})`);
  const server = cluster.value.server;
  if (typeof server !== 'string' || !server) throw new Error(`${where}: cluster "${clusterName}" in ${show(cluster.file)} has no server`);
  const userName = context.value.user as string | undefined;
  const user = userName ? merged.users.get(userName) : undefined;
  if (userName && !user) throw new Error(`${where} names user "${userName}", which is not there (users: ${[...merged.users.keys()].join(', ') || 'none'})`);

  const entries: ContextEntries = { cluster: absolute(cluster, ['certificate-authority']), user: user ? absolute(user, ['client-certificate', 'client-key', 'tokenFile']) : {} };
  const kubeconfig = kubeconfigText({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': contextName,
    contexts: [{ name: contextName, context: { ...context.value } }],
    clusters: [{ name: clusterName, cluster: entries.cluster }],
    users: user ? [{ name: userName, user: entries.user }] : [],
  });
  const namespace = selection.namespace || (typeof context.value.namespace === 'string' && context.value.namespace) || 'default';
  return { via, files: merged.files, file: context.file, context: contextName, user: userName, server: server.replace(/\/$/, ''), namespace, where, kubeconfig, entries };
}

function notFound(via: KubeconfigChoice['via'], files: string[], read: string[], show: (p: string) => string): string {
  if (read.length) return `${via === '$KUBECONFIG' ? `the files of $KUBECONFIG (${read.map(show).join(', ')})` : show(read[0]!)} hold no contexts`;
  if (via === '$KUBECONFIG') return files.length === 1 ? `$KUBECONFIG names ${show(files[0]!)}, which does not exist` : `$KUBECONFIG names ${files.map(show).join(', ')}, none of which exists`;
  return `${show(files[0]!)} does not exist`;
}

function notInCluster(e: KubeconfigEnvironment): string {
  if (!e.env.KUBERNETES_SERVICE_HOST || !e.env.KUBERNETES_SERVICE_PORT) return 'not running in a cluster (KUBERNETES_SERVICE_HOST is not set)';
  return `not running in a cluster (no ServiceAccount token in ${e.serviceAccountDir})`;
}

/**
 * The text of a kubeconfig kfn writes (a resolved one, a ServiceAccount's): JSON, which is YAML
 * too (kubectl and every client read it), and which parseKubeconfig reads with JSON.parse
 * (`indent` 0: on one line, the shortest, for an environment variable). The YAML library's first
 * parse and stringify cost a cold function about 25 ms of its first reconcile; in a pod, no YAML
 * is read at all.
 */
export const kubeconfigText = (doc: Record<string, unknown>, indent = 2) => `${JSON.stringify(doc, null, indent)}\n`;

/** A pod's own identity: its ServiceAccount token (re-read as it rotates) and the cluster CA, as a kubeconfig. */
function inClusterChoice(selection: ClusterSelection, e: KubeconfigEnvironment): KubeconfigChoice | undefined {
  const host = e.env.KUBERNETES_SERVICE_HOST;
  const port = e.env.KUBERNETES_SERVICE_PORT;
  const token = join(e.serviceAccountDir, 'token');
  if (!host || !port || !existsSync(token)) return undefined;
  if (selection.context) throw new Error(`--context ${selection.context}: there is no kubeconfig to take it from (running in a cluster, with its ServiceAccount)`);
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  const nsFile = join(e.serviceAccountDir, 'namespace');
  const podNamespace = e.env.POD_NAMESPACE || (existsSync(nsFile) ? readFileSync(nsFile, 'utf8').trim() : '');
  const entries: ContextEntries = { cluster: { server, 'certificate-authority': join(e.serviceAccountDir, 'ca.crt') }, user: { tokenFile: token } };
  const kubeconfig = kubeconfigText({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'in-cluster',
    contexts: [{ name: 'in-cluster', context: { cluster: 'in-cluster', user: 'serviceaccount' } }],
    clusters: [{ name: 'in-cluster', cluster: entries.cluster }],
    users: [{ name: 'serviceaccount', user: entries.user }],
  });
  return { via: 'in-cluster', files: [], server, namespace: selection.namespace || podNamespace || 'default', where: 'the in-cluster ServiceAccount', kubeconfig, entries };
}

/** The line a command says before it acts: `Using context "kind-dev" (server https://127.0.0.1:6443) from ~/.kube/config`. */
export function describeCluster(c: KubeconfigChoice, home = homedir()): string {
  if (c.via === 'in-cluster') return `Using the in-cluster ServiceAccount (server ${c.server})`;
  const merged = c.via === '$KUBECONFIG' && c.files.length > 1 ? ` (one of the ${c.files.length} files of $KUBECONFIG)` : '';
  return `Using context "${c.context}" (server ${c.server}) from ${homePath(c.file!, home)}${merged}`;
}

/** What connecting a choice takes: its entries, its user's name and where it came from (for messages), its kubeconfig (for a credential plugin). */
export type ChosenContext = Pick<KubeconfigChoice, 'entries' | 'user' | 'where' | 'kubeconfig'>;

/**
 * The chosen cluster, connected: its server, TLS settings and credentials from the choice's
 * entries, nothing read again but the files they name (a CA, a client certificate; a token file
 * as it rotates). Requests go by `transport` (default: Node's HTTP client). Failures come as the
 * transport and the apiserver give them: a command's connection explains them
 * (cluster-failures.ts's connectCluster).
 */
export function connectionFor(choice: ChosenContext, transport?: TransportFactory): Connection {
  return contextConnection(choice.entries, { userName: choice.user ?? '', source: choice.where, base: '/', text: choice.kubeconfig, transport });
}

/**
 * The cluster kubectl would use (--kubeconfig `path`, else every file of $KUBECONFIG merged,
 * else ~/.kube/config, else in-cluster), connected: the one call of a process that needs no
 * more than a connection (the bridge, a function, in a pod or not).
 */
export function loadConnection(path?: string, transport?: TransportFactory): Connection {
  return connectionFor(resolveKubeconfig({ kubeconfig: path }), transport);
}

/** A kubeconfig's document, as far as its current context is read. */
interface KubeconfigFile {
  'current-context'?: string;
  contexts?: { name: string; context: { cluster: string; user?: string } }[];
  clusters?: { name: string; cluster: { server: string; 'certificate-authority'?: string; 'certificate-authority-data'?: string; 'insecure-skip-tls-verify'?: boolean } }[];
  users?: { name: string; user: Entry }[];
}

/** The current context of a kubeconfig's text: its document, the context and the cluster it names. */
function currentContext(text: string, path: string) {
  let doc: KubeconfigFile;
  try {
    doc = parseKubeconfig(text) as KubeconfigFile;
    if (!doc || typeof doc !== 'object') throw new Error('not a YAML mapping');
  } catch (err) {
    throw new Error(`cannot read kubeconfig ${path}: ${(err as Error).message}`);
  }
  const contextName = doc['current-context'];
  const context = doc.contexts?.find((c) => c.name === contextName)?.context;
  if (!context) throw new Error(`kubeconfig ${path} has no current context${contextName ? ` named ${contextName}` : ''}`);
  const cluster = doc.clusters?.find((c) => c.name === context.cluster)?.cluster;
  if (!cluster?.server) throw new Error(`kubeconfig ${path}: cluster ${context.cluster} has no server`);
  return { doc, context, cluster };
}

const b64 = (s: string) => Buffer.from(s, 'base64').toString('utf8');
const fileIn = (base: string) => (p: string) => readFileSync(isAbsolute(p) ? p : join(base, p), 'utf8');
const stringIn = (entry: Entry) => (k: string) => (typeof entry[k] === 'string' ? (entry[k] as string) : undefined);

/** A cluster entry's server and TLS settings, its CA read if it names a file (a relative one against `base`). */
function clusterSettings(cluster: Entry, base: string): { server: string; ca?: string; insecureSkipTlsVerify: boolean } {
  const caData = cluster['certificate-authority-data'] as string | undefined;
  const caFile = cluster['certificate-authority'] as string | undefined;
  const ca = caData ? b64(caData) : caFile ? fileIn(base)(caFile) : undefined;
  return { server: cluster.server as string, ...(ca ? { ca } : {}), insecureSkipTlsVerify: cluster['insecure-skip-tls-verify'] === true };
}

/** The cluster of a kubeconfig's current context: its server and CA (read, if it names a file; relative paths resolve against `base`). */
export function kubeconfigCluster(text: string, path: string, base = process.cwd()): { server: string; ca?: string; insecureSkipTlsVerify: boolean } {
  return clusterSettings(currentContext(text, path).cluster, base);
}

/** A kubeconfig's current context from its text (one kfn wrote: a ServiceAccount's, $KFN_KUBECONFIG); relative file paths resolve against `base`. */
export function connectionFromKubeconfigText(text: string, path: string, base = process.cwd(), transport?: TransportFactory): Connection {
  const { doc, context, cluster } = currentContext(text, path);
  const user = (context.user ? doc.users?.find((u) => u.name === context.user)?.user : undefined) ?? {};
  return contextConnection({ cluster, user }, { userName: context.user ?? '', source: path, base, text, transport });
}

/**
 * A context's cluster and user as a Connection. `text` is the kubeconfig they came from, for a
 * credential plugin (@kubernetes/client-node reads it whole); `base` resolves relative paths.
 */
function contextConnection(entries: ContextEntries, o: { userName: string; source: string; base: string; text: string; transport?: TransportFactory }): Connection {
  const { server, ca, insecureSkipTlsVerify } = clusterSettings(entries.cluster, o.base);
  const user = entries.user;
  if (user.exec || user['auth-provider']) {
    return connectionFromOptions({ server, ca, insecureSkipTlsVerify, source: o.source, transport: o.transport, authenticate: pluginCredentials(o.text, o.source, o.base, o.userName, pluginName(user)) });
  }
  const file = fileIn(o.base);
  const str = stringIn(user);
  return connectionFromOptions({
    server,
    ca,
    insecureSkipTlsVerify,
    token: str('token'),
    tokenFile: str('tokenFile') ? (isAbsolute(str('tokenFile')!) ? str('tokenFile') : join(o.base, str('tokenFile')!)) : undefined,
    cert: str('client-certificate-data') ? b64(str('client-certificate-data')!) : str('client-certificate') ? file(str('client-certificate')!) : undefined,
    key: str('client-key-data') ? b64(str('client-key-data')!) : str('client-key') ? file(str('client-key')!) : undefined,
    username: str('username'),
    password: str('password'),
    source: o.source,
    transport: o.transport,
  });
}

/** A user's plugin as a person knows it: the exec command (\`aws\`, \`gke-gcloud-auth-plugin\`) or the auth provider's name. */
function pluginName(user: Record<string, unknown>): string {
  const exec = user.exec as { command?: unknown } | undefined;
  const provider = user['auth-provider'] as { name?: unknown } | undefined;
  return typeof exec?.command === 'string' ? `exec: ${exec.command}` : `auth-provider: ${String(provider?.name ?? 'unnamed')}`;
}

/**
 * The Authorization header of a kubeconfig user with an exec or auth-provider plugin, from
 * @kubernetes/client-node (kube/client-node.ts: an optional peer dependency, imported on first
 * use, as it costs the process tens of MiB). It caches the plugin's credential until it expires.
 */
function pluginCredentials(text: string, path: string, base: string, userName: string, plugin: string): () => Promise<Record<string, string>> {
  let config: Promise<import('@kubernetes/client-node').KubeConfig> | undefined;
  return async () => {
    config ??= importClientNode(`the user "${userName}" (${homePath(path)}) authenticates with a credential plugin (${plugin})`).then(({ KubeConfig }) => {
      const kc = new KubeConfig();
      kc.loadFromString(text);
      kc.makePathsAbsolute(base);
      return kc;
    });
    const kc = await config;
    const opts: { headers?: Record<string, string> } = {};
    try {
      await kc.applyToHTTPSOptions(opts as never);
    } catch (err) {
      throw new Error(`kubeconfig ${path}: the credential plugin of user ${userName} failed: ${(err as Error).message}`);
    }
    const authorization = opts.headers?.Authorization;
    if (!authorization) throw new Error(`kubeconfig ${path}: the credential plugin of user ${userName} gave no token (a plugin that returns a client certificate is not supported; use one that returns a token)`);
    return { Authorization: authorization };
  };
}
