// Prometheus, built from its Go module (prometheus/go.mod) like the rest of the local cluster's
// tools: what the observability tests scrape the bridge and the functions with, and evaluate the
// chart's dashboard and alert rules through (its HTTP API; the web UI's assets are not built in).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureBuild, type BuildOptions, type BuildSpec } from './build.ts';
import { requiredVersion } from './versions.ts';

export const prometheusModuleDir = join(import.meta.dirname, 'prometheus');

function prometheusSpec(): BuildSpec {
  const goMod = join(prometheusModuleDir, 'go.mod');
  const version = requiredVersion(readFileSync(goMod, 'utf8'), 'github.com/prometheus/prometheus', 'cluster/prometheus/go.mod');
  // The Go module's v0.3XX.Y is Prometheus 3.XX.Y.
  const release = version.replace(/^v0\.3(\d\d)\.(\d+)$/, (_m, minor: string, patch: string) => `3.${Number(minor)}.${patch}`);
  return {
    label: `prometheus-${version}`,
    title: 'Prometheus',
    intro: [`Prometheus ${release}`, 'A first build downloads about 0.3 GiB of Go modules and takes about 4 minutes on 2 cores.'],
    moduleDirs: [prometheusModuleDir],
    inputs: [goMod, join(prometheusModuleDir, 'go.sum')],
    // remove_all_sd: only static, file and HTTP service discovery, which is all the tests use;
    // the cloud providers' SDKs (AWS, Azure, GCE, Kubernetes…) would more than double the build.
    steps: [{ name: 'prometheus', pkg: 'github.com/prometheus/prometheus/cmd/prometheus', moduleDir: prometheusModuleDir, ldflags: `-s -w -X github.com/prometheus/common/version.Version=${release}`, tags: 'remove_all_sd' }],
  };
}

/** The prometheus binary, built on first use and cached. */
export async function ensurePrometheus(options: BuildOptions = {}): Promise<string> {
  return join(await ensureBuild(prometheusSpec(), options), 'prometheus');
}
