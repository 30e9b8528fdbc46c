// Where `kfn replay` reads records and journal lines:
//
//   a file            with its rotations (F.5 … F.1, F), oldest first
//   -                 standard input
//   cluster:<fn>      the logs of the function's pods (records are JSON lines among them), each
//                     container's previous log too when it restarted: what a crash left
//   cluster:bridge    the journal of each bridge pod, read out of the pod (pods/exec) from the
//                     path its --journal names; a bridge journaling to its standard output is
//                     read from its log
//
// Each text comes with a name, so that a line that cannot be used is named where it is.
import { existsSync, readFileSync } from 'node:fs';
import { ApiError, type KubeApi } from '../kube/api.ts';
import { functionLabel } from '../core/names.ts';
import { UsageError } from './command.ts';
import { kfnChart, kfnFile } from './invocation.ts';
import { ExecFailed, type ExecTarget } from './pod-exec.ts';

export interface SourceText {
  text: string;
  name: string;
}

/** What reading from the cluster needs: its API, and a command run in a pod (cli/pod-exec.ts). */
export interface ClusterAccess {
  api: KubeApi;
  exec(target: ExecTarget, command: string[]): Promise<Buffer>;
}

/** The source that names the bridge's journal rather than a function's records. */
export const bridgeSource = 'cluster:bridge';

/** The bridge's pods, as manifests/ and the chart label them. */
export const bridgeSelector = 'app.kubernetes.io/name=kfn-bridge';

interface Container {
  name: string;
  command?: string[];
  args?: string[];
}

interface Pod {
  metadata: { name: string };
  spec: { containers: Container[] };
  status?: { phase?: string; containerStatuses?: { name: string; restartCount?: number }[] };
}

/** The texts of a source; `say` is told what was read from the cluster (standard error). */
export async function readSource(source: string, cluster: () => ClusterAccess, namespace: string, say: (line: string) => void = (l) => console.error(l)): Promise<SourceText[]> {
  if (source === '-') return [{ text: readFileSync(0, 'utf8'), name: 'stdin' }];
  if (source === bridgeSource) return bridgeJournal(cluster(), namespace, say);
  if (source.startsWith('cluster:')) return functionLogs(cluster().api, source.slice('cluster:'.length), namespace);
  try {
    const rotated = [];
    for (let i = 1; existsSync(`${source}.${i}`); i++) rotated.unshift({ text: readFileSync(`${source}.${i}`, 'utf8'), name: `${source}.${i}` });
    return [...rotated, { text: readFileSync(source, 'utf8'), name: source }];
  } catch (err) {
    throw new UsageError(`cannot read ${source}: ${(err as Error).message}`);
  }
}

/** The logs of a function's pods: the function's container's, and its previous one's after a restart. */
async function functionLogs(api: KubeApi, fn: string, namespace: string): Promise<SourceText[]> {
  const pods = await api.request<{ items: Pod[] }>('GET', `/api/v1/namespaces/${namespace}/pods`, { query: { labelSelector: `${functionLabel}=${fn}` } });
  if (!pods.items.length) throw new UsageError(`no pods of function ${fn} in namespace ${namespace} (label ${functionLabel}=${fn}); is it deployed (kfn deploy ${fn})? The bridge's journal is ${bridgeSource}`);
  const out: SourceText[] = [];
  for (const pod of pods.items) {
    // Named, because a pod on Knative has the queue proxy beside it.
    const container = pod.spec.containers.find((c) => c.name === 'function')?.name ?? pod.spec.containers[0]!.name;
    const path = `/api/v1/namespaces/${namespace}/pods/${pod.metadata.name}/log`;
    const restarted = (pod.status?.containerStatuses?.find((c) => c.name === container)?.restartCount ?? 0) > 0;
    if (restarted) {
      // Only the container before the last restart is kept; a log the kubelet no longer has is no error.
      const previous = await api.text('GET', path, { query: { container, previous: true } }).catch((err) => {
        if (err instanceof ApiError && (err.status === 400 || err.status === 404)) return undefined;
        throw err;
      });
      if (previous) out.push({ text: previous, name: `cluster:${fn} pod ${pod.metadata.name} (before its restart)` });
    }
    out.push({ text: await api.text('GET', path, { query: { container } }), name: `cluster:${fn} pod ${pod.metadata.name}` });
  }
  return out;
}

/** Marks the start of each file in what the journal reader prints: not JSON, so never a journal line. */
const fileMark = '#kfn-journal-file ';

/**
 * Prints the journal at argv[1] and its rotations, oldest first, each after a mark line that
 * names it, and a newline after each (a file may end in half a line). Run by the bridge's own
 * Node, so it needs nothing else in the image.
 */
export const journalReader = [
  "const fs = process.getBuiltinModule('node:fs');",
  'const path = process.argv[1];',
  'const files = [];',
  'for (let i = 1; fs.existsSync(`${path}.${i}`); i++) files.unshift(`${path}.${i}`);',
  'if (fs.existsSync(path)) files.push(path);',
  "if (!files.length) { process.stderr.write(`no journal at ${path} (nothing delivered since the pod started?)\\n`); process.exit(3); }",
  `for (const f of files) { process.stdout.write(${JSON.stringify(fileMark)} + f + '\\n'); process.stdout.write(fs.readFileSync(f)); process.stdout.write('\\n'); }`,
].join('\n');

/** What the reader printed, split back into its files. */
export function journalFiles(output: string, pod: string): SourceText[] {
  const out: SourceText[] = [];
  for (const part of output.split(new RegExp(`^${fileMark}`, 'm'))) {
    const newline = part.indexOf('\n');
    if (!part.trim() || newline < 0) continue;
    out.push({ name: `${bridgeSource} pod ${pod}:${part.slice(0, newline)}`, text: part.slice(newline + 1) });
  }
  return out;
}

/** The bridge's container in its pod, and the journal its command line names (the last --journal, as the bridge reads it). */
export function journalOf(pod: Pod): { container: Container; journal?: string } {
  const words = (c: Container) => [...(c.command ?? []), ...(c.args ?? [])];
  const container = pod.spec.containers.find((c) => words(c).some((w) => w === '--journal' || w.startsWith('--journal='))) ?? pod.spec.containers.find((c) => c.name === 'bridge') ?? pod.spec.containers[0]!;
  let journal: string | undefined;
  const w = words(container);
  w.forEach((word, i) => {
    if (word.startsWith('--journal=')) journal = word.slice('--journal='.length);
    else if (word === '--journal' && w[i + 1] !== undefined) journal = w[i + 1];
  });
  return { container, ...(journal ? { journal } : {}) };
}

/** The Node of the bridge's container: its command's, else the one on the image's PATH. */
function nodeOf(container: Container): string {
  const first = container.command?.[0];
  return first && /(^|\/)node(js)?$/.test(first) ? first : 'node';
}

const onOutput = new Set(['/dev/stdout', '/dev/stderr', '/proc/self/fd/1', '/proc/self/fd/2']);

/** Each bridge pod's journal: every replica's, since each journals what it delivered while it led. */
async function bridgeJournal(cluster: ClusterAccess, namespace: string, say: (line: string) => void): Promise<SourceText[]> {
  const pods = await cluster.api.request<{ items: Pod[] }>('GET', `/api/v1/namespaces/${namespace}/pods`, { query: { labelSelector: bridgeSelector } });
  if (!pods.items.length) throw new UsageError(`no bridge pods in namespace ${namespace} (label ${bridgeSelector}): is the bridge installed there (kubectl apply -k ${kfnFile('manifests/')}, or kfn's Helm chart ${kfnChart()})? -n names another namespace`);
  const out: SourceText[] = [];
  const skipped: string[] = [];
  for (const pod of pods.items) {
    const name = pod.metadata.name;
    const { container, journal } = journalOf(pod);
    if (!journal) {
      skipped.push(`pod ${name} runs the bridge without --journal, so it journals nothing (the chart's journal.enabled and manifests/ turn it on)`);
      continue;
    }
    if (pod.status?.phase !== 'Running') {
      skipped.push(`pod ${name} is ${pod.status?.phase ?? 'not running'}: its journal cannot be read`);
      continue;
    }
    if (onOutput.has(journal)) {
      const text = await cluster.api.text('GET', `/api/v1/namespaces/${namespace}/pods/${name}/log`, { query: { container: container.name } });
      say(`${bridgeSource}: pod ${name}: the journal from its log (--journal=${journal})`);
      out.push({ text, name: `${bridgeSource} pod ${name} (log)` });
      continue;
    }
    let printed: Buffer;
    try {
      printed = await cluster.exec({ namespace, pod: name, container: container.name }, [nodeOf(container), '-e', journalReader, journal]);
    } catch (err) {
      // One replica's journal may be missing (a standby that never led) while another's is there.
      if (!(err instanceof ExecFailed)) throw err;
      skipped.push(err.message);
      continue;
    }
    const files = journalFiles(printed.toString('utf8'), name);
    say(`${bridgeSource}: pod ${name}: ${journal}${files.length > 1 ? ` and ${files.length - 1} rotated file(s)` : ''}, ${(printed.length / 1024).toFixed(0)} KiB`);
    out.push(...files);
  }
  for (const s of skipped) say(`${bridgeSource}: ${s}`);
  if (!out.length) throw new UsageError(`no bridge journal to read in namespace ${namespace}: ${skipped.join('; ')}`);
  return out;
}
