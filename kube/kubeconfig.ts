// Which cluster a command talks to, chosen as kubectl chooses it (client-go's clientcmd loader),
// so that every kfn command and kubectl agree:
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
// The answer is the chosen context alone as a kubeconfig of its own, every file it names made
// absolute: connection.ts builds the connection from it, and a child process can be handed it.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';

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

type Entry = Record<string, unknown>;

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

  const kubeconfig = kubeconfigText({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': contextName,
    contexts: [{ name: contextName, context: { ...context.value } }],
    clusters: [{ name: clusterName, cluster: absolute(cluster, ['certificate-authority']) }],
    users: user ? [{ name: userName, user: absolute(user, ['client-certificate', 'client-key', 'tokenFile']) }] : [],
  });
  const namespace = selection.namespace || (typeof context.value.namespace === 'string' && context.value.namespace) || 'default';
  return { via, files: merged.files, file: context.file, context: contextName, user: userName, server: server.replace(/\/$/, ''), namespace, where, kubeconfig };
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
  const kubeconfig = kubeconfigText({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'in-cluster',
    contexts: [{ name: 'in-cluster', context: { cluster: 'in-cluster', user: 'serviceaccount' } }],
    clusters: [{ name: 'in-cluster', cluster: { server, 'certificate-authority': join(e.serviceAccountDir, 'ca.crt') } }],
    users: [{ name: 'serviceaccount', user: { tokenFile: token } }],
  });
  return { via: 'in-cluster', files: [], server, namespace: selection.namespace || podNamespace || 'default', where: 'the in-cluster ServiceAccount', kubeconfig };
}

/** The line a command says before it acts: `Using context "kind-dev" (server https://127.0.0.1:6443) from ~/.kube/config`. */
export function describeCluster(c: KubeconfigChoice, home = homedir()): string {
  if (c.via === 'in-cluster') return `Using the in-cluster ServiceAccount (server ${c.server})`;
  const merged = c.via === '$KUBECONFIG' && c.files.length > 1 ? ` (one of the ${c.files.length} files of $KUBECONFIG)` : '';
  return `Using context "${c.context}" (server ${c.server}) from ${homePath(c.file!, home)}${merged}`;
}
