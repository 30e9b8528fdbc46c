// Files written from code, kept in the repo for tools that read files (kustomize, kubectl):
// `npm run generate` rewrites them; a unit test fails while one is out of date.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { reconcilerCrdYaml } from '../bridge/config.ts';
import { identityPolicyChartYaml, identityPolicyYaml } from '../bridge/identity-policy.ts';
import { repoRoot } from '../cluster/paths.ts';

export const generated: Record<string, () => string> = {
  'manifests/crds/reconciler.yaml': reconcilerCrdYaml,
  // Helm installs a chart's crds/ before its templates (and never deletes them).
  'charts/kfn/crds/reconciler.yaml': reconcilerCrdYaml,
  'manifests/policies/reconciler-identity.yaml': identityPolicyYaml,
  'charts/kfn/templates/reconciler-identity.yaml': identityPolicyChartYaml,
};

if (import.meta.main) {
  for (const [path, text] of Object.entries(generated)) {
    writeFileSync(join(repoRoot, path), text());
    console.log(`wrote ${path}`);
  }
}
