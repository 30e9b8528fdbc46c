// `kfn image build` and `kfn image push`: the container images of the bridge and of functions
// (or of several functions as one shared host; cli/artifacts/images.ts), imported into the local
// cluster's node or pushed to a registry.
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { clusterHealthy } from '../cluster/controlplane.ts';
import { clusterPaths, kfnVersion } from '../cluster/paths.ts';
import { nonRootUid, type BuiltImage } from '../cluster/images.ts';
import { defaultBase, defaultPlatform } from './artifacts/oci-image.ts';
import { buildingOn, bundles, bundleTarball, imported, localNode, nodeImages, onBase, pushBundle, pushTo, registryTarget } from './artifacts/images.ts';
import { functionDirs } from './functions.ts';
import { hostName, loadHostFunctions } from './hosts.ts';
import { parseCommandArgs, unknownCommand, UsageError, wantsHelp, type Command } from './command.ts';
import { checkFunctionTypes, typecheckFlag, typecheckUsage } from './typecheck.ts';
import { kfnChart, kfnFile } from './invocation.ts';

const say = (line: string) => console.error(line);
const version = kfnVersion;

const imageUsage = `Usage: kfn image build [bridge] [function dir …] [--all] [--host H] [--base REF] [--platform P] [--out DIR]
       kfn image push [bridge] [function dir …] [--all] [--host H] --registry R [--base REF] [--platform P]

Makes the container images of the bridge and of functions, without Docker:
  bridge            <name> bridge: the kfn CLI bundled, run as \`node /app/kfn.mjs bridge\`
                    (what kfn's Helm chart ${kfnChart()} runs, and its manifests:
                    \`kubectl apply -k ${kfnFile('manifests/')}\`)
  functions/<name>  <name> fn-<name>: the function and the SDK bundled, run as node /app/fn.mjs
  --all             the bridge and every function under functions/
  --host H          the functions named as one shared host's image host-H, run as node
                    /app/fn.mjs (what \`kfn deploy --host\` and \`kfn manifests --host\` run)
${typecheckUsage(17)}

Each image is built on a base image, with no Go toolchain and none of the local cluster's
tools: the base plus the bundle as one layer in /app (as ko and jib build them), running as
uid ${nonRootUid}:
  --base REF        the base, from any registry (default: the "kfn": {"base": …} field of the
                    project's package.json, else ${defaultBase}); it must have Node 24 (its
                    entrypoint if that is a node binary, else node on its PATH)
  --platform P      the platform taken from a multi-arch base (default ${defaultPlatform})

\`kfn image push\` pushes them to R (\`local\`: the local cluster's registry, \`kfn cluster
registry\`; or host[:port][/path]) as R/bridge:${version} and R/fn-<name>:${version}, the
base's layers mounted or copied from its registry, and prints each one's reference by digest:
what a manifest or the Helm chart (image.repository, image.digest) should run. Credentials
for both registries come from the Docker config (~/.docker/config.json).

\`kfn image build\` downloads the base's layers from its registry, writes each image as a
tarball and imports it into kfn's local cluster's node as kfn.local/bridge:${version} and
kfn.local/fn-<name>:${version}, where pods use them with imagePullPolicy IfNotPresent:
  --out DIR         also copy the image tarballs (docker-archive) into DIR; without a running
                    local cluster, only this
In kfn's own checkout, with no --base and no kfn.base, images are built on kfn's own Node image
instead: from Debian packages, written by the local cluster's image tool (a Go toolchain builds
it with the cluster, the first time), cached in ~/.cache/kfn/images/.`;

const imagePushFlags = { all: { type: 'boolean' }, host: { type: 'string' }, registry: { type: 'string' }, base: { type: 'string' }, platform: { type: 'string' }, ...typecheckFlag } as const;
const imageBuildFlags = { all: { type: 'boolean' }, host: { type: 'string' }, out: { type: 'string' }, base: { type: 'string' }, platform: { type: 'string' }, ...typecheckFlag } as const;

async function pushCommand(argv: string[]): Promise<number> {
  const parsed = parseCommandArgs('image push', argv, imagePushFlags, true);
  const values = parsed.values;
  const positionals: string[] = parsed.positionals;
  if (!values.registry) throw new UsageError(`kfn image push: --registry is required\n\n${imageUsage}`);
  const target = registryTarget(values.registry);
  const { wantBridge, dirs, host } = await whatToMake('push', values, positionals);
  const on = onBase(values);
  if (on) {
    say(buildingOn(on));
    for (const [name, app, main] of await bundles(wantBridge, dirs, host)) console.log((await pushBundle(on, target, name, app, main)).ref);
    return 0;
  }
  for (const image of await nodeImages(wantBridge, dirs, host)) console.log(await pushTo(target, image, say));
  return 0;
}

/** What `kfn image build` or `push` is asked to make: the bridge, which function folders, and whether as one shared host (checked: it can serve them). */
async function whatToMake(sub: 'build' | 'push', values: { all?: boolean; host?: string; 'no-typecheck'?: boolean }, positionals: string[]): Promise<{ wantBridge: boolean; dirs: string[]; host?: string }> {
  const wantBridge = values.all || positionals.includes('bridge');
  const dirs = values.all ? functionDirs() : positionals.filter((p) => p !== 'bridge');
  if (!wantBridge && !dirs.length) throw new UsageError(`kfn image ${sub}: name what to ${sub}\n\n${imageUsage}`);
  if (!values['no-typecheck']) await checkFunctionTypes(`image ${sub}`, dirs, { log: say });
  if (values.host === undefined) return { wantBridge, dirs };
  const host = hostName(`image ${sub}`, values.host);
  await loadHostFunctions(`image ${sub}`, host, dirs);
  return { wantBridge, dirs, host };
}

export const imageCommand: Command = {
  name: 'image',
  usage: imageUsage,
  options: {},
  subcommands: { build: { usage: imageUsage, options: imageBuildFlags }, push: { usage: imageUsage, options: imagePushFlags } },
  async run(argv) {
    if (argv[0] === 'push') return pushCommand(argv.slice(1));
    if (!argv.length || wantsHelp(argv)) return (console.log(imageUsage), argv.length ? 0 : 2);
    if (argv[0] !== 'build') throw unknownCommand('kfn image', argv[0]!, ['build', 'push'], imageUsage);
    const parsed = parseCommandArgs('image build', argv.slice(1), imageBuildFlags, true);
    const values = parsed.values;
    const positionals: string[] = parsed.positionals;
    const { wantBridge, dirs, host } = await whatToMake('build', values, positionals);
    const socket = values.out && !(await clusterHealthy(clusterPaths())) ? undefined : await localNode();
    const on = onBase(values);
    const images: BuiltImage[] = [];
    if (on) {
      say(buildingOn(on));
      for (const [name, app, main] of await bundles(wantBridge, dirs, host)) images.push(await bundleTarball(on, name, app, main));
    } else {
      images.push(...(await nodeImages(wantBridge, dirs, host)));
    }
    if (socket) imported(images, socket);
    if (values.out) {
      mkdirSync(values.out, { recursive: true });
      for (const i of images) {
        const name = `${i.ref.split('/').at(-1)!.replace(':', '-')}.tar`;
        copyFileSync(i.tarball, join(values.out, name));
        say(`  ${i.ref} → ${join(values.out, name)}`);
      }
    }
    return 0;
  },
};
