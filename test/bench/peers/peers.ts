// The peers kfn is measured against, built from Go modules into the cache like the control
// plane (cluster/build.ts): a controller-runtime MyWeb operator, the floors (a bare watch, the
// bare convergence writes) and Knative Eventing's ApiServerSource receive adapter.
import { join } from 'node:path';
import { ensureBuild, type BuildOptions, type BuildSpec } from '../../../cluster/build.ts';
import { requiredVersion } from '../../../cluster/versions.ts';
import { readFileSync } from 'node:fs';

const peersDir = import.meta.dirname;
const adapterDir = join(peersDir, 'apiserversource');

export interface PeerVersions {
  controllerRuntime: string;
  eventing: string;
}

export function peerVersions(): PeerVersions {
  return {
    controllerRuntime: requiredVersion(readFileSync(join(peersDir, 'go.mod'), 'utf8'), 'sigs.k8s.io/controller-runtime', 'test/bench/peers/go.mod'),
    eventing: requiredVersion(readFileSync(join(adapterDir, 'go.mod'), 'utf8'), 'knative.dev/eventing', 'test/bench/peers/apiserversource/go.mod'),
  };
}

export interface Peers {
  versions: PeerVersions;
  operator: string;
  floor: string;
  adapter: string;
}

function peersSpec(): BuildSpec {
  const v = peerVersions();
  const sources = ['myweb-operator/main.go', 'myweb-operator/types.go', 'floor/main.go', 'apiserversource/main.go'];
  return {
    label: `peers-cr-${v.controllerRuntime}-eventing-${v.eventing}`,
    title: 'the benchmark peers',
    intro: [`controller-runtime ${v.controllerRuntime}, Knative Eventing ${v.eventing}`, 'A first build downloads about 0.3 GiB of Go modules (less when the cluster is built) and takes a few minutes on 2 cores.'],
    moduleDirs: [peersDir, adapterDir],
    inputs: [...['go.mod', 'go.sum', 'apiserversource/go.mod', 'apiserversource/go.sum', ...sources].map((f) => join(peersDir, f))],
    steps: [
      { name: 'myweb-operator', pkg: 'kfn.invalid/peers/myweb-operator', moduleDir: peersDir, ldflags: '-s -w' },
      { name: 'floor', pkg: 'kfn.invalid/peers/floor', moduleDir: peersDir, ldflags: '-s -w' },
      { name: 'apiserver-adapter', pkg: 'kfn.invalid/peers/apiserversource', moduleDir: adapterDir, ldflags: '-s -w' },
    ],
  };
}

/** The peers' binaries, built first when the cache has none. */
export async function ensurePeers(options: BuildOptions = {}): Promise<Peers> {
  const dir = await ensureBuild(peersSpec(), options);
  return { versions: peerVersions(), operator: join(dir, 'myweb-operator'), floor: join(dir, 'floor'), adapter: join(dir, 'apiserver-adapter') };
}
