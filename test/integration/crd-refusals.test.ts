// kfn refuses, before any cluster, the CRDs the apiserver would refuse (kube/crd.ts,
// crdRefusals). This test keeps the two from drifting apart: for each case it sends the CRD kfn
// would have written — the local check bypassed — to the real apiserver as a server-side dry run
// (POST customresourcedefinitions?dryRun=All: validated in full, nothing stored), and checks that
// the apiserver refuses it too, on the same field; and that what kfn does write is accepted.
// A few of kfn's checks are stricter than the apiserver (Kubernetes' naming conventions, bounds
// no value can meet): those cases say so, and check that the apiserver still accepts them, so a
// change on either side shows here.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { Type as t, type TSchema } from '@sinclair/typebox';
import { generateServingPki } from '../../core/certificates.ts';
import { functionDirs, loadFunction } from '../../cli/functions.ts';
import { crdOf } from '../../functions/sdk/kind.ts';
import { ApiError, type KubeApi } from '../../kube/api.ts';
import { crdRefusals, customResourceDefinition, type CrdOptions } from '../../kube/crd.ts';
import { kubeApi, testCluster } from '../support/cluster.ts';

/** A group of this run's own: a dry run stores nothing, but must not collide with a CRD that exists. */
const group = `r${randomBytes(3).toString('hex')}.kfn-test.example.com`;

function options(spec: TSchema, names: Partial<Pick<CrdOptions, 'group' | 'kind' | 'plural'>> & { version?: string } = {}): CrdOptions {
  return { group: names.group ?? group, kind: names.kind ?? 'Thing', plural: names.plural ?? 'things', scope: 'Namespaced', versions: [{ name: names.version ?? 'v1', spec, storage: true }] };
}

/** The CRD kfn writes for these options, its own check left out. */
const written = (spec: TSchema, names?: Parameters<typeof options>[1]) => customResourceDefinition(options(spec, names), { check: false });

/** A CRD with its spec schema's field `name` replaced by `schema`, as an older kfn (or a hand) wrote it. */
function withField(name: string, schema: Record<string, unknown>): Record<string, unknown> {
  const crd = written(t.Object({ [name]: t.String() }));
  const versions = (crd.spec as { versions: { schema: { openAPIV3Schema: { properties: { spec: { properties: Record<string, unknown> } } } } }[] }).versions;
  versions[0]!.schema.openAPIV3Schema.properties.spec.properties[name] = schema;
  return crd;
}

interface Case {
  name: string;
  crd: Record<string, unknown>;
  /** What kfn says (one of its problems matches). */
  kfn: RegExp;
  /** What the apiserver says, or why it accepts what kfn refuses. */
  apiserver: { refuses: RegExp } | { accepts: string };
}

const cases: Case[] = [
  { name: 'a type JSON Schema lacks (t.Date())', crd: written(t.Object({ when: t.Date() })), kfn: /^spec\.properties\.when\.type: "Date" is not a type/, apiserver: { refuses: /properties\[when\]\.type: Unsupported value: "Date"/ } },
  { name: 'a field without a type (t.Unknown())', crd: written(t.Object({ anything: t.Unknown() })), kfn: /^spec\.properties\.anything\.type: must be set/, apiserver: { refuses: /properties\[anything\]\.type: Required value: must not be empty for specified object fields/ } },
  { name: 'an integer-or-string union without x-kubernetes-int-or-string', crd: withField('size', { anyOf: [{ type: 'integer' }, { type: 'string' }] }), kfn: /^spec\.properties\.size\.type: must be set.*x-kubernetes-int-or-string/, apiserver: { refuses: /properties\[size\]\.type: Required value/ } },
  { name: 'a union of number and string', crd: written(t.Object({ size: t.Union([t.Number(), t.String()]) })), kfn: /^spec\.properties\.size: a union of number and string has no CRD form/, apiserver: { refuses: /properties\[size\]\.(type: Required value|anyOf\[\d\]\.type: Forbidden: must be empty to be structural)/ } },
  { name: 'an intersection (allOf with types)', crd: written(t.Object({ both: t.Intersect([t.Object({ a: t.String() }), t.Object({ b: t.String() })]) })), kfn: /^spec\.properties\.both\.allOf\[0\]: a branch of allOf may only constrain values/, apiserver: { refuses: /properties\[both\]\.allOf\[0\]\.(type|properties\[a\]\.type): Forbidden: must be empty to be structural/ } },
  { name: 'properties with additionalProperties: false', crd: written(t.Object({ strict: t.Object({ a: t.String() }, { additionalProperties: false }) })), kfn: /^spec\.properties\.strict\.additionalProperties: false cannot go with properties/, apiserver: { refuses: /properties\[strict\]\.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive/ } },
  { name: 'a tuple (items as a list)', crd: written(t.Object({ pair: t.Tuple([t.String(), t.Integer()]) })), kfn: /^spec\.properties\.pair\.items: must be one schema/, apiserver: { refuses: /properties\[pair\]\.items: Forbidden: items must be a schema object and not an array/ } },
  { name: 'uniqueItems', crd: written(t.Object({ tags: t.Array(t.String(), { uniqueItems: true }) })), kfn: /^spec\.properties\.tags\.uniqueItems/, apiserver: { refuses: /properties\[tags\]\.uniqueItems: Forbidden/ } },
  { name: "TypeBox's numeric exclusiveMinimum, as it would be without kfn's rewrite", crd: withField('ratio', { type: 'number', exclusiveMinimum: 0 }), kfn: /^spec\.properties\.ratio\.exclusiveMinimum: must be true or false/, apiserver: { refuses: /exclusiveMinimum|cannot unmarshal number/ } },
  { name: 'a default below its minimum', crd: written(t.Object({ replicas: t.Integer({ minimum: 1, default: 0 }) })), kfn: /^spec\.properties\.replicas\.default: 0 is below minimum 1$/, apiserver: { refuses: /properties\[replicas\]\.default: Invalid value/ } },
  { name: 'a default above its maximum', crd: written(t.Object({ replicas: t.Integer({ maximum: 5, default: 6 }) })), kfn: /^spec\.properties\.replicas\.default: 6 is above maximum 5$/, apiserver: { refuses: /properties\[replicas\]\.default: Invalid value/ } },
  { name: 'a default shorter than its minLength', crd: written(t.Object({ name: t.String({ minLength: 3, default: 'ab' }) })), kfn: /^spec\.properties\.name\.default: "ab" is shorter than minLength 3$/, apiserver: { refuses: /properties\[name\]\.default: Invalid value/ } },
  { name: 'a default that breaks its pattern', crd: written(t.Object({ name: t.String({ pattern: '^[a-z]+$', default: 'Web' }) })), kfn: /^spec\.properties\.name\.default: "Web" does not match pattern/, apiserver: { refuses: /properties\[name\]\.default: Invalid value/ } },
  { name: 'a default outside its enum', crd: written(t.Object({ mode: t.Union([t.Literal('fast'), t.Literal('safe')], { default: 'slow' }) })), kfn: /^spec\.properties\.mode\.default: "slow" is not one of "fast", "safe"$/, apiserver: { refuses: /properties\[mode\]\.default: (Unsupported|Invalid) value/ } },
  { name: 'a default of the wrong type', crd: written(t.Object({ replicas: t.Integer({ default: 'one' }) })), kfn: /^spec\.properties\.replicas\.default: "one" is not an integer$/, apiserver: { refuses: /properties\[replicas\]\.default: Invalid value/ } },
  { name: 'a default with a field the schema would prune', crd: written(t.Object({ web: t.Object({ port: t.Integer() }, { default: { port: 80, extra: 1 } }) })), kfn: /^spec\.properties\.web\.default\.extra: not in the schema/, apiserver: { refuses: /properties\[web\]\.default/ } },
  { name: 'a kind that is not a DNS label lowercased (Broken_Thing)', crd: written(t.Object({}), { kind: 'Broken_Thing' }), kfn: /^kind "Broken_Thing": must be UpperCamelCase/, apiserver: { refuses: /spec\.names\.kind: Invalid value: "Broken_Thing"/ } },
  { name: 'a group that is not a DNS subdomain', crd: written(t.Object({}), { group: 'Broken_Example' }), kfn: /^group "Broken_Example": must be a DNS subdomain/, apiserver: { refuses: /spec\.group: Invalid value: "Broken_Example"/ } },
  { name: 'a group without a dot', crd: written(t.Object({}), { group: 'example' }), kfn: /^group "example": must have at least one dot/, apiserver: { refuses: /spec\.group: Invalid value: "example": should be a domain with at least one dot/ } },
  { name: "a group of the Kubernetes project's", crd: written(t.Object({}), { group: `${group.split('.')[0]}.k8s.io` }), kfn: /\*\.k8s\.io and \*\.kubernetes\.io are for APIs the Kubernetes project approves/, apiserver: { refuses: /api-approved\.kubernetes\.io/ } },
  { name: 'a version that is not a DNS label (v1.0)', crd: written(t.Object({}), { version: 'v1.0' }), kfn: /^version "v1\.0": must be v<N>/, apiserver: { refuses: /spec\.versions\[0\]\.name: Invalid value: "v1\.0"/ } },
  { name: 'a plural with capitals', crd: written(t.Object({}), { plural: 'Things' }), kfn: /^plural "Things": must be a DNS label/, apiserver: { refuses: /spec\.names\.plural: Invalid value: "Things"/ } },
  // kfn's own conventions, stricter than the apiserver:
  { name: 'a kind that is not UpperCamelCase (broken-thing)', crd: written(t.Object({}), { kind: 'broken-thing' }), kfn: /^kind "broken-thing": must be UpperCamelCase/, apiserver: { accepts: 'the apiserver only asks that the kind, lowercased, be a DNS label; kubectl, client libraries and Go types assume UpperCamelCase kinds' } },
  { name: 'a version outside Kubernetes\' version scheme (version1)', crd: written(t.Object({}), { version: 'version1' }), kfn: /^version "version1": must be v<N>/, apiserver: { accepts: 'the apiserver takes any DNS label as a version, but orders versions (and picks the preferred one) by the v<N>[alpha|beta<M>] scheme' } },
  { name: 'minimum above maximum', crd: written(t.Object({ replicas: t.Integer({ minimum: 5, maximum: 1 }) })), kfn: /^spec\.properties\.replicas: minimum 5 is above maximum 1, so no value is valid$/, apiserver: { accepts: 'the apiserver does not compare bounds; no object could ever be valid, so kfn refuses the kind' } },
  { name: 'minLength above maxLength', crd: written(t.Object({ name: t.String({ minLength: 5, maxLength: 1 }) })), kfn: /^spec\.properties\.name: minLength 5 is above maxLength 1/, apiserver: { accepts: 'the apiserver does not compare bounds; no object could ever be valid' } },
  { name: 'minItems above maxItems', crd: written(t.Object({ tags: t.Array(t.String(), { minItems: 3, maxItems: 2 }) })), kfn: /^spec\.properties\.tags: minItems 3 is above maxItems 2/, apiserver: { accepts: 'the apiserver does not compare bounds; no object could ever be valid' } },
];

/** The apiserver's verdict on creating `crd`, as a server-side dry run: undefined when it accepts it. */
async function dryRunCreate(api: KubeApi, crd: Record<string, unknown>): Promise<ApiError | undefined> {
  try {
    await api.request('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { body: crd, query: { dryRun: 'All' } });
    return undefined;
  } catch (err) {
    if (err instanceof ApiError && (err.status === 400 || err.status === 422)) return err;
    throw err;
  }
}

describe('CRDs kfn refuses, the apiserver refuses', () => {
  for (const c of cases) {
    test(c.name, async () => {
      const api = kubeApi((await testCluster()).kc);
      const problems = crdRefusals(c.crd);
      assert.ok(problems.some((p) => c.kfn.test(p)), `kfn says ${JSON.stringify(problems)}, expected ${c.kfn}`);
      const refused = await dryRunCreate(api, c.crd);
      if ('refuses' in c.apiserver) {
        assert.ok(refused, `the apiserver accepted a CRD kfn refuses (${problems.join('; ')}): the local check is stricter than it says, or the apiserver changed`);
        assert.match(refused.message, c.apiserver.refuses);
      } else {
        assert.equal(refused?.message, undefined, `kfn's stricter check (${c.apiserver.accepts}) is now the apiserver's too: move the case to refuses`);
      }
    });
  }
});

describe("what kfn writes, the apiserver accepts", () => {
  test('a kind using what kfn rewrites: int-or-string, numeric exclusive bounds, literal unions, maps, defaults', async () => {
    const api = kubeApi((await testCluster()).kc);
    const crd = customResourceDefinition(
      options(
        t.Object({
          size: t.Union([t.Integer(), t.String()], { default: '1Gi' }),
          ratio: t.Number({ exclusiveMinimum: 0, exclusiveMaximum: 1, default: 0.5 }),
          mode: t.Union([t.Literal('fast'), t.Literal('safe')], { default: 'safe' }),
          labels: t.Optional(t.Record(t.String(), t.String())),
          replicas: t.Integer({ minimum: 1, maximum: 10, default: 1 }),
          ports: t.Array(t.Object({ port: t.Integer({ minimum: 1 }) }), { default: [{ port: 80 }] }),
          when: t.Optional(t.String({ format: 'date-time' })),
        }),
      ),
    );
    assert.deepEqual(crdRefusals(crd), []);
    assert.equal((await dryRunCreate(api, crd))?.message, undefined);
  });

  test("every example function's CRD", async () => {
    const api = kubeApi((await testCluster()).kc);
    const pki = generateServingPki('crd-refusals', ['localhost'], { ips: ['127.0.0.1'] });
    for (const dir of functionDirs()) {
      const kind = (await loadFunction(dir)).for;
      const crd = crdOf(kind, kind.options.previousVersions?.length ? { conversion: { client: { url: 'https://127.0.0.1:9443' }, caBundle: pki.caCert } } : {});
      assert.deepEqual(crdRefusals(crd), [], dir);
      // Under this run's group: the example's own CRD may be installed (a dry-run create would conflict).
      const spec = crd.spec as { group: string; names: { plural: string } };
      spec.group = `${spec.group.split('.')[0]}.${group}`;
      (crd.metadata as { name: string }).name = `${spec.names.plural}.${spec.group}`;
      const refused = await dryRunCreate(api, crd);
      assert.equal(refused?.message, undefined, `${dir}: the apiserver refuses its CRD`);
    }
  });
});
