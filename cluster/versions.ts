// The pinned versions of the local control plane. The Go module files in this folder are the
// one place they are written: `go.mod` pins Kubernetes (and, through it, etcd), `kwok/go.mod`
// pins kwok, `coredns/go.mod` the cluster DNS server, `image/go.mod` go-containerregistry. `bump-kubernetes.sh` rewrites them for another release.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const clusterModuleDir = import.meta.dirname;
export const kwokModuleDir = join(import.meta.dirname, 'kwok');
export const corednsModuleDir = join(import.meta.dirname, 'coredns');
/** kfn's own node tools: the image writer (go-containerregistry) and the pod sandbox process. */
export const imageModuleDir = join(import.meta.dirname, 'image');

export interface PinnedVersions {
  kubernetes: string;
  etcd: string;
  kwok: string;
  coredns: string;
  /** The `go` directive of the Kubernetes module: the oldest Go toolchain that can build it. */
  minimumGo: string;
}

/** Reads the version a go.mod requires for `module`, or throws naming the file. */
export function requiredVersion(goMod: string, module: string, file = 'go.mod'): string {
  const escaped = module.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const match = goMod.match(new RegExp(`^\\s*(?:require\\s+)?${escaped}\\s+(v[^\\s]+)`, 'm'));
  if (!match?.[1]) throw new Error(`${file} does not require ${module}; regenerate it with cluster/bump-kubernetes.sh`);
  return match[1];
}

export function goDirective(goMod: string, file = 'go.mod'): string {
  const match = goMod.match(/^go\s+(\d+\.\d+(?:\.\d+)?)\s*$/m);
  if (!match?.[1]) throw new Error(`${file} has no go directive`);
  return match[1];
}

export function pinnedVersions(): PinnedVersions {
  const main = readFileSync(join(clusterModuleDir, 'go.mod'), 'utf8');
  const kwok = readFileSync(join(kwokModuleDir, 'go.mod'), 'utf8');
  return {
    kubernetes: requiredVersion(main, 'k8s.io/kubernetes', 'cluster/go.mod'),
    etcd: requiredVersion(main, 'go.etcd.io/etcd/server/v3', 'cluster/go.mod'),
    kwok: requiredVersion(kwok, 'sigs.k8s.io/kwok', 'cluster/kwok/go.mod'),
    coredns: requiredVersion(readFileSync(join(corednsModuleDir, 'go.mod'), 'utf8'), 'github.com/coredns/coredns', 'cluster/coredns/go.mod'),
    minimumGo: goDirective(main, 'cluster/go.mod'),
  };
}

/** Compares dotted numeric versions ("1.26.8" vs "1.25"); missing parts count as 0. */
export function compareVersions(a: string, b: string): number {
  const pa = a.replace(/^v|^go/, '').split('.').map((p) => Number.parseInt(p, 10) || 0);
  const pb = b.replace(/^v|^go/, '').split('.').map((p) => Number.parseInt(p, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}
