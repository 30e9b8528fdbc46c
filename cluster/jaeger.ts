// Jaeger v2, built from its Go module (jaeger/go.mod) like the rest of the local cluster's tools:
// the trace backend the tracing tests export to over OTLP and read traces back from (its query
// API). Jaeger v2 is an OpenTelemetry Collector distribution with Jaeger's storage and query
// built in, so one binary both receives OTLP and answers "which traces, with which spans".
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureBuild, type BuildOptions, type BuildSpec } from './build.ts';
import { requiredVersion } from './versions.ts';

export const jaegerModuleDir = join(import.meta.dirname, 'jaeger');

function jaegerSpec(): BuildSpec {
  const goMod = join(jaegerModuleDir, 'go.mod');
  const version = requiredVersion(readFileSync(goMod, 'utf8'), 'github.com/jaegertracing/jaeger', 'cluster/jaeger/go.mod');
  return {
    label: `jaeger-${version}`,
    title: 'Jaeger',
    intro: [`Jaeger (module ${version}, the v2 binary)`, 'A first build downloads about 0.8 GiB of Go modules and takes about 4 minutes on 2 cores.'],
    moduleDirs: [jaegerModuleDir],
    inputs: [goMod, join(jaegerModuleDir, 'go.sum')],
    steps: [{ name: 'jaeger', pkg: 'github.com/jaegertracing/jaeger/cmd/jaeger', moduleDir: jaegerModuleDir, ldflags: '-s -w' }],
  };
}

/** The jaeger binary, built on first use and cached. */
export async function ensureJaeger(options: BuildOptions = {}): Promise<string> {
  return join(await ensureBuild(jaegerSpec(), options), 'jaeger');
}
