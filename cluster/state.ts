// A local cluster's recorded state (state.json: ports, network, binaries, one record per
// process), the credentials it keeps, the lock that lets parallel processes share one cluster,
// and the ports it needs free.
import { mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type NodeNetwork, type NodePorts } from './node.ts';
import { displayPath, type ClusterPaths } from './paths.ts';
import { type ProcessRecord } from './processes.ts';
import { waitFor } from '../core/clock.ts';

export interface ClusterPorts {
  apiserver: number;
  etcd: number;
  etcdPeer: number;
  controllerManager: number;
  scheduler: number;
}

export const defaultPorts: ClusterPorts = {
  apiserver: 16443,
  etcd: 12379,
  etcdPeer: 12380,
  controllerManager: 10257,
  scheduler: 10259,
};

/** The real node: its kubelet registers it under this name. */
export const nodeName = 'kfn-node-0';
/** Fake nodes (kwok) carry this taint: only pods that tolerate it land there. */
export const fakeNodeTaint = { key: 'kfn.dev/fake-node', value: 'true', effect: 'NoSchedule' } as const;
export const fakeNodeName = (i: number) => `kfn-fake-${i}`;

export interface ClusterState {
  version: 1;
  kubernetes: string;
  binDir: string;
  ports: ClusterPorts;
  network: NodeNetwork;
  nodePorts: NodePorts;
  fakeNodes: number;
  server: string;
  startedAt: string;
  processes: ProcessRecord[];
}

export function readState(paths: ClusterPaths): ClusterState | undefined {
  try {
    return JSON.parse(readFileSync(paths.state, 'utf8')) as ClusterState;
  } catch {
    return undefined;
  }
}

export function writeState(paths: ClusterPaths, state: ClusterState): void {
  writeFileSync(paths.state, `${JSON.stringify(state, null, 2)}\n`);
}


export async function withLock<T>(paths: ClusterPaths, log: (line: string) => void, fn: () => Promise<T>): Promise<T> {
  mkdirSync(join(paths.lock, '..'), { recursive: true });
  let waitingSaid = false;
  for (;;) {
    try {
      mkdirSync(paths.lock);
      writeFileSync(join(paths.lock, 'pid'), String(process.pid));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(readFileSafe(join(paths.lock, 'pid')));
      if (owner && !pidAlive(owner)) {
        rmSync(paths.lock, { recursive: true, force: true });
        continue;
      }
      if (!waitingSaid) log(`Waiting for another kfn process (pid ${owner || '?'}) that is starting or stopping the cluster…`);
      waitingSaid = true;
      await sleep(250);
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(join(paths.lock, 'pid'), { force: true });
    rmdirSync(paths.lock);
  }
}

export function readFileSafe(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

export const portFlags: Record<keyof ClusterPorts, string> = {
  apiserver: '--apiserver-port',
  etcd: '--etcd-port',
  etcdPeer: '--etcd-peer-port',
  controllerManager: '--controller-manager-port',
  scheduler: '--scheduler-port',
};

export const nodePortFlags: Record<keyof NodePorts, string> = {
  kubelet: '--kubelet-port',
  kubeletHealthz: '--kubelet-healthz-port',
  kubeProxyMetrics: '--kube-proxy-metrics-port',
  kubeProxyHealthz: '--kube-proxy-healthz-port',
};

/**
 * True when the port is free or becomes free within a few seconds: a component of a cluster
 * that was just killed (a crash, then `up`) holds its sockets a moment after /proc stops
 * showing its command line.
 */
export function portFreeSoon(port: number, waitMs = 5000): Promise<boolean> {
  return waitFor(`port ${port} to be free`, () => portFree(port), { timeoutMs: waitMs }).catch(() => false);
}

export async function checkPorts(ports: ClusterPorts, nodePorts: NodePorts): Promise<void> {
  const seen = new Map<number, string>();
  const flags: Record<string, string> = { ...portFlags, ...nodePortFlags };
  for (const [key, port] of Object.entries({ ...ports, ...nodePorts })) {
    if (seen.has(port)) throw new Error(`Port ${port} is given for both ${seen.get(port)} and ${key}; each component needs its own port.`);
    seen.set(port, key);
    if (!(await portFreeSoon(port))) {
      throw new Error(
        `Port ${port} on 127.0.0.1 (for ${key}) is already in use by another program. ` +
          `Stop that program, or choose another port with \`kfn cluster up ${flags[key]} <port>\`.`,
      );
    }
  }
}

/** The static token of `user` in tokens.csv (token,user,uid,"groups"), or '' when none. */
export function tokenOf(paths: ClusterPaths, user: string): string {
  const line = readFileSync(join(paths.dir, 'tokens.csv'), 'utf8').split('\n').find((l) => l.split(',')[1] === user);
  return line?.split(',')[0] ?? '';
}

export const adminToken = (paths: ClusterPaths) => tokenOf(paths, 'kfn-admin');

export function caPem(paths: ClusterPaths): string {
  return readFileSync(join(paths.pki, 'ca.crt'), 'utf8');
}

export function requireState(paths: ClusterPaths): ClusterState {
  const state = readState(paths);
  if (!state) throw new Error(`No local cluster state in ${displayPath(paths.dir)}: kfn's local cluster is not running (\`kfn cluster up\` starts it).`);
  return state;
}
