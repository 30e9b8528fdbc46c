// Helm, built from its Go module (helm/go.mod) like the rest of the local cluster's tools: what
// the tests install and upgrade kfn's chart (charts/kfn) with, as a user would.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureBuild, type BuildOptions, type BuildSpec } from './build.ts';
import { requiredVersion } from './versions.ts';

export const helmModuleDir = join(import.meta.dirname, 'helm');

function helmSpec(): BuildSpec {
  const goMod = join(helmModuleDir, 'go.mod');
  const version = requiredVersion(readFileSync(goMod, 'utf8'), 'helm.sh/helm/v4', 'cluster/helm/go.mod');
  return {
    label: `helm-${version}`,
    title: 'Helm',
    intro: [`Helm ${version}`, 'A first build downloads about 0.3 GiB of Go modules and takes about 3 minutes on 2 cores.'],
    moduleDirs: [helmModuleDir],
    inputs: [goMod, join(helmModuleDir, 'go.sum')],
    steps: [{ name: 'helm', pkg: 'helm.sh/helm/v4/cmd/helm', moduleDir: helmModuleDir, ldflags: `-s -w -X helm.sh/helm/v4/internal/version.version=${version}` }],
  };
}

/** The helm binary, built on first use and cached. */
export async function ensureHelm(options: BuildOptions = {}): Promise<string> {
  return join(await ensureBuild(helmSpec(), options), 'helm');
}
