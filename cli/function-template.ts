// The files of a function `kfn new` writes (and `kfn init` as a project's first), as a table:
// index.ts (the kind, and a reconcile that owns a ConfigMap holding its message), index.test.ts
// (a unit test without a cluster, and samples.yaml against the schema), samples.yaml and a
// README with its commands, spelled for kfn's checkout or for a project that depends on kfn.
import { pluralOf } from '../functions/sdk/kind.ts';
import { kfnCommand } from './invocation.ts';

/** What a new function's files say: its names, and how its index.ts imports the SDK. */
export interface FunctionTemplate {
  name: string;
  group: string;
  version: string;
  kind: string;
  /** The SDK's import specifier: a relative path to functions/sdk/index.ts, or "kfn/sdk". */
  sdk: string;
}

/** A kind's name as a variable: its first letter lowercase. */
const identOf = (kind: string) => kind[0]!.toLowerCase() + kind.slice(1);

const indexFile = ({ name, group, version, kind, sdk }: FunctionTemplate, ident = identOf(kind)) => `// ${kind} (${group}/${version}): written by \`kfn new\`. Each ${kind} owns a ConfigMap holding
// its message; status says which message the ConfigMap holds. Change the kind's schema and the
// reconcile to make it yours — the CRD, the RBAC and the types follow from this file.
import { ConfigMap, child, defineKind, defineReconciler, t } from '${sdk}';

export const ${kind} = defineKind({
  group: '${group}',
  version: '${version}',
  kind: '${kind}',
  spec: t.Object({
    message: t.String({ minLength: 1, default: 'hello' }),
  }),
  status: t.Object({
    observedMessage: t.Optional(t.String()),
  }),
  printerColumns: [{ name: 'Message', type: 'string', jsonPath: '.spec.message' }],
});

export default defineReconciler({
  name: '${name}',
  for: ${kind},
  owns: [ConfigMap],
  reconcile(${ident}) {
    return {
      children: [child(ConfigMap, { metadata: { name: \`\${${ident}.metadata.name}-message\` }, data: { message: ${ident}.spec.message } })],
      status: { observedMessage: ${ident}.spec.message },
      ready: true,
    };
  },
});
`;

const testFile = ({ kind, sdk }: FunctionTemplate) => `// ${kind} without a cluster: what the reconcile decides, given the object; and samples.yaml
// against the kind's schema, as the apiserver will hold it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ConfigMap } from '${sdk}';
import { checkSamples, testReconcile } from '${sdk.endsWith('/index.ts') ? sdk.replace(/index\.ts$/, 'testing.ts') : `${sdk}/testing`}';
import ${kind}Function, { ${kind} } from './index.ts';

test('a ${kind} gets a ConfigMap with its message, and is Ready', async () => {
  const out = await testReconcile(${kind}Function, { object: { metadata: { name: 'first', namespace: 'default' }, spec: { message: 'hello' } } });
  assert.equal(out.error, undefined);
  assert.deepEqual(out.child(ConfigMap, 'first-message')?.data, { message: 'hello' });
  assert.equal(out.status?.observedMessage, 'hello');
  assert.equal(out.ready?.status, 'True');
});

test('samples.yaml fits the ${kind} schema', () => {
  assert.deepEqual(checkSamples(${kind}, readFileSync(new URL('samples.yaml', import.meta.url), 'utf8')), []);
});
`;

const samplesFile = ({ group, version, kind }: FunctionTemplate) => `apiVersion: ${group}/${version}
kind: ${kind}
metadata:
  name: first
spec:
  message: hello from ${kind}
`;

const readmeFile = ({ name, group, version, kind, sdk }: FunctionTemplate, plural = pluralOf(kind)) => `# ${name}: ${kind} (${group}/${version})

Written by \`kfn new\`. Each ${kind} owns a ConfigMap \`<name>-message\` holding \`spec.message\`;
\`status.observedMessage\` says which message it holds.

| | |
| --- | --- |
${
  sdk === 'kfn/sdk'
    ? `| its unit test and its samples against the schema (no cluster), with every other function's | \`npm test\` |
| run it on a local dev server, reloading on save, with its samples | \`npx kfn dev functions/${name}\` |
| the CRD, RBAC and Reconciler | \`npx kfn manifests functions/${name}\` |
| deploy it as a pod | \`npx kfn deploy functions/${name}\` |`
    : `| run it on the local cluster, with its samples | \`${kfnCommand(`demo --function ${name}`)}\` |
| its unit test (no cluster) | \`node --test ${name}/index.test.ts\` |
| the CRD, RBAC and Reconciler | \`${kfnCommand(`manifests ${name}`)}\` |
| deploy it as a pod | \`${kfnCommand(`deploy ${name}`)}\` |`
}

The objects are \`${plural}.${group}\`: \`kubectl get ${plural}\`.
`;

/** The files of a new function, by name. */
export function newFunctionFiles(o: FunctionTemplate): Record<string, string> {
  return { 'index.ts': indexFile(o), 'index.test.ts': testFile(o), 'samples.yaml': samplesFile(o), 'README.md': readmeFile(o) };
}
