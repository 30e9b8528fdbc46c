// A CustomResourceDefinition from TypeBox schemas: the one definition that gives a kind's
// TypeScript types, its validation in code, and the OpenAPI schema the apiserver enforces. The
// SDK's kinds and the bridge's own Reconciler are both written this way.
import type { TSchema } from '@sinclair/typebox';

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
}

/** One served version: its spec and status schemas; the storage version has the printer columns. */
export interface CrdVersion {
  name: string;
  spec: TSchema;
  status?: TSchema;
  storage: boolean;
}

export interface CrdOptions {
  group: string;
  kind: string;
  plural: string;
  scope: 'Namespaced' | 'Cluster';
  shortNames?: string[];
  categories?: string[];
  printerColumns?: PrinterColumn[];
  versions: CrdVersion[];
  /** The CRD's spec.conversion, when versions convert through a webhook. */
  conversion?: Record<string, unknown>;
}

/**
 * Keys a schema may carry for kfn's own validation in code (the words of an error message)
 * that a CRD schema has no field for: dropped from the OpenAPI form.
 */
export const codeOnlyKeys = ['expected', 'sensitive'] as const;

/**
 * A TypeBox schema as plain OpenAPI for a CRD: TypeBox's symbol keys and the code-only keys
 * dropped, and nothing a structural schema forbids.
 */
export function openApi(schema: TSchema): Record<string, unknown> {
  return structural(JSON.parse(JSON.stringify(schema))) as Record<string, unknown>;
}

/**
 * Rewrites what TypeBox emits but CRD schemas reject: a Record's patternProperties become
 * additionalProperties, a literal (const) or a union of literals becomes an enum.
 */
function structural(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(structural);
  if (typeof node !== 'object' || node === null) return node;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(node)) if (!(codeOnlyKeys as readonly string[]).includes(k)) out[k] = structural(v);
  if ('const' in out) {
    out.enum = [out.const];
    delete out.const;
  }
  const anyOf = out.anyOf as { enum?: unknown[]; type?: string }[] | undefined;
  if (anyOf?.length && anyOf.every((a) => a.enum?.length === 1 && a.type === anyOf[0]!.type)) {
    delete out.anyOf;
    out.type = anyOf[0]!.type;
    out.enum = anyOf.map((a) => a.enum![0]);
  }
  const patterns = out.patternProperties as Record<string, unknown> | undefined;
  if (patterns) {
    const values = Object.values(patterns);
    if (values.length !== 1) throw new Error('a CRD schema cannot express several property patterns; use one t.Record per map');
    delete out.patternProperties;
    out.additionalProperties = values[0];
  }
  return out;
}

/** status.conditions as every kfn kind has it: metav1.Condition's shape, a map keyed by type. */
const conditionsSchema = {
  type: 'array',
  'x-kubernetes-list-type': 'map',
  'x-kubernetes-list-map-keys': ['type'],
  items: {
    type: 'object',
    required: ['type', 'status', 'reason', 'message', 'lastTransitionTime'],
    properties: {
      type: { type: 'string' },
      status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
      reason: { type: 'string' },
      message: { type: 'string' },
      observedGeneration: { type: 'integer' },
      lastTransitionTime: { type: 'string', format: 'date-time' },
    },
  },
};

/** A version's schema: spec and status, the status with the standard observedGeneration and conditions. */
function versionSchema(spec: TSchema, statusSchema: TSchema | undefined): Record<string, unknown> {
  const status = (statusSchema ? openApi(statusSchema) : { type: 'object' }) as { properties?: Record<string, unknown> };
  return {
    openAPIV3Schema: {
      type: 'object',
      required: ['spec'],
      properties: {
        spec: openApi(spec),
        status: { ...status, type: 'object', properties: { ...(status.properties ?? {}), observedGeneration: { type: 'integer' }, conditions: conditionsSchema } },
      },
    },
  };
}

/** The CustomResourceDefinition: every version served with the status subresource, one stored. */
export function customResourceDefinition(o: CrdOptions): Record<string, unknown> {
  const version = (v: CrdVersion) => ({
    name: v.name,
    served: true,
    storage: v.storage,
    subresources: { status: {} },
    ...(o.printerColumns && v.storage ? { additionalPrinterColumns: o.printerColumns } : {}),
    schema: versionSchema(v.spec, v.status),
  });
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${o.plural}.${o.group}` },
    spec: {
      group: o.group,
      scope: o.scope,
      names: {
        kind: o.kind,
        listKind: `${o.kind}List`,
        plural: o.plural,
        singular: o.kind.toLowerCase(),
        ...(o.shortNames ? { shortNames: o.shortNames } : {}),
        ...(o.categories ? { categories: o.categories } : {}),
      },
      versions: o.versions.map(version),
      ...(o.conversion ? { conversion: o.conversion } : {}),
    },
  };
}
