// A kind with CEL rules, and objects with what the apiserver answers them: the unit test
// (functions/sdk/rules.test.ts) holds checkRules to these answers without a cluster, the
// integration test (test/integration/rules.test.ts) holds the real apiserver to the same.
import { defineKind, defineReconciler, quantity, t } from '../../functions/sdk/index.ts';

export const Shop = defineKind({
  group: 'rules.kfn.test',
  version: 'v1',
  kind: 'Shop',
  spec: t.Object({
    replicas: t.Integer({ minimum: 0 }),
    minReplicas: t.Optional(t.Integer()),
    port: t.Optional(t.Integer({ 'x-kubernetes-validations': [{ rule: 'self >= 1024', message: 'must not be privileged' }] })),
    image: t.String({ maxLength: 256 }),
    region: t.Optional(t.String({ maxLength: 32, 'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'is immutable' }] })),
    tags: t.Optional(t.Array(t.String({ maxLength: 16, 'x-kubernetes-validations': [{ rule: 'self.lowerAscii() == self', messageExpression: "'must be lowercase: ' + self.lowerAscii()" }] }), { maxItems: 8 })),
    // Kubernetes' quantity library: every function of it, on an int-or-string.
    memory: t.Optional(t.Unsafe<string | number>({
      ...quantity(),
      maxLength: 32,
      'x-kubernetes-validations': [
        { rule: 'isQuantity(string(self))', message: 'is not a quantity' },
        // (A computed number cannot be printed in a CRD's message: its cost estimate refuses it.)
        { rule: "!isQuantity(string(self)) || !quantity(string(self)).isLessThan(quantity('1Mi'))", messageExpression: "quantity(string(self)).isInteger() ? 'is ' + string(self) + ' bytes, less than 1Mi' : 'is less than 1Mi'" },
        { rule: "!isQuantity(string(self)) || quantity(string(self)).sub(quantity('1Gi')).compareTo(quantity('1')) < 0", message: 'must be at most 1Gi' },
        // compareTo, not ==: the apiserver refuses == on quantities in a CRD (its estimated cost).
        { rule: "!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('512Mi')) != 0", message: 'must not be 512Mi' },
        { rule: "!isQuantity(string(self)) || !quantity(string(self)).isGreaterThan(quantity('1Mi')) || quantity(string(self)).isInteger()", message: 'must be written as a whole number above 1Mi' },
        { rule: '!isQuantity(string(self)) || sign(quantity(string(self))) >= 0', message: 'must not be negative' },
        { rule: '!isQuantity(string(self)) || !quantity(string(self)).isInteger() || quantity(string(self)).add(1).asInteger() % 1024 == 1', message: 'must be whole KiB' },
        { rule: '!isQuantity(string(self)) || quantity(string(self)).asApproximateFloat() < 2e9', message: 'must be less than 2e9' },
      ],
    })),
  }),
  status: t.Object({}),
  rules: [
    { rule: 'self.replicas <= 10', message: 'must be at most 10', fieldPath: '.replicas' },
    // int arithmetic: a JSON number would be a CEL double, and double + int has no overload.
    { rule: '!has(self.minReplicas) || self.minReplicas + 1 <= self.replicas + 1', message: 'minReplicas must not exceed replicas', fieldPath: '.minReplicas', reason: 'FieldValueForbidden' },
    { rule: "self.image.matches('^[a-z0-9./-]+(:[A-Za-z0-9._-]+)?$')" },
  ],
});

export interface RuleCase {
  name: string;
  spec: Record<string, unknown>;
  /** The spec before, for an update. */
  old?: Record<string, unknown>;
  /** Each refusal, as the apiserver words it; none: allowed. */
  refusals: string[];
}

export const ruleCases: RuleCase[] = [
  { name: 'valid', spec: { replicas: 3, minReplicas: 2, image: 'kfn.local/nginx:1.22', tags: ['a', 'b'] }, refusals: [] },
  {
    name: 'every rule broken at once',
    spec: { replicas: 11, minReplicas: 12, image: 'Nginx', tags: ['ok', 'NotOk'] },
    refusals: [
      'spec.replicas: Invalid value: must be at most 10',
      'spec.minReplicas: Forbidden: minReplicas must not exceed replicas',
      'spec: Invalid value: failed rule: self.image.matches(\'^[a-z0-9./-]+(:[A-Za-z0-9._-]+)?$\')',
      'spec.tags[1]: Invalid value: "NotOk": must be lowercase: notok',
    ],
  },
  { name: 'a rule on an integer field', spec: { replicas: 1, image: 'nginx', port: 80 }, refusals: ['spec.port: Invalid value: 80: must not be privileged'] },
  { name: 'a transition rule on a create', spec: { replicas: 1, image: 'nginx', region: 'eu' }, refusals: [] },
  { name: 'an immutable field set for the first time', spec: { replicas: 1, image: 'nginx', region: 'eu' }, old: { replicas: 1, image: 'nginx' }, refusals: [] },
  { name: 'quantities within the rules', spec: { replicas: 1, image: 'nginx', memory: '256Mi' }, refusals: [] },
  { name: 'a quantity in another form within the rules', spec: { replicas: 1, image: 'nginx', memory: '4096k' }, refusals: [] },
  { name: 'a quantity as an integer', spec: { replicas: 1, image: 'nginx', memory: 1000 }, refusals: ['spec.memory: Invalid value: 1000: is 1000 bytes, less than 1Mi', 'spec.memory: Invalid value: 1000: must be whole KiB'] },
  { name: 'a quantity in thousandths', spec: { replicas: 1, image: 'nginx', memory: '1000m' }, refusals: ['spec.memory: Invalid value: "1000m": is less than 1Mi'] },
  { name: 'a quantity equal to a forbidden one in another form, and with a fraction', spec: { replicas: 1, image: 'nginx', memory: '0.5Gi' }, refusals: ['spec.memory: Invalid value: "0.5Gi": must not be 512Mi', 'spec.memory: Invalid value: "0.5Gi": must be written as a whole number above 1Mi'] },
  { name: 'a quantity too large', spec: { replicas: 1, image: 'nginx', memory: '2Gi' }, refusals: ['spec.memory: Invalid value: "2Gi": must be at most 1Gi', 'spec.memory: Invalid value: "2Gi": must be less than 2e9'] },
  { name: 'a negative quantity', spec: { replicas: 1, image: 'nginx', memory: '-2' }, refusals: ['spec.memory: Invalid value: "-2": is -2 bytes, less than 1Mi', 'spec.memory: Invalid value: "-2": must not be negative', 'spec.memory: Invalid value: "-2": must be whole KiB'] },
  { name: 'not a quantity', spec: { replicas: 1, image: 'nginx', memory: 'lots' }, refusals: ['spec.memory: Invalid value: "lots": is not a quantity'] },
  { name: 'an immutable field changed', spec: { replicas: 1, image: 'nginx', region: 'us' }, old: { replicas: 1, image: 'nginx', region: 'eu' }, refusals: ['spec.region: Invalid value: "us": is immutable'] },
];

// A function's guards on other kinds (ValidatingAdmissionPolicies), and requests with what the
// apiserver answers them: functions/sdk/policies.test.ts and test/integration/rules.test.ts.
export const guarding = defineReconciler({
  name: 'guard-test',
  for: Shop,
  reconcile: () => ({}),
  guards: [
    {
      kind: { apiVersion: 'apps/v1', kind: 'Deployment' },
      rules: [
        { expression: 'object.spec.replicas <= 5', messageExpression: "'at most 5 replicas, not ' + string(object.spec.replicas)" },
        { expression: "request.operation != 'UPDATE' || object.spec.template.spec.containers[0].image == oldObject.spec.template.spec.containers[0].image", message: 'the image is set once', reason: 'Forbidden' },
      ],
    },
    { kind: { apiVersion: 'v1', kind: 'ConfigMap' }, operations: ['DELETE'], rules: [{ expression: "!has(oldObject.metadata.labels) || !('protect' in oldObject.metadata.labels)", message: 'is protected' }] },
  ],
});

type Manifest = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> } } & Record<string, unknown>;
const deployment = (name: string, replicas: number, image: string): Manifest => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name, labels: { app: name } },
  spec: { replicas, selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'c', image }] } } },
});
const configMap = (name: string, labels?: Record<string, string>): Manifest => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, ...(labels ? { labels } : {}) }, data: { a: '1' } });

export interface GuardCase {
  name: string;
  operation: 'CREATE' | 'UPDATE' | 'DELETE';
  object?: Manifest;
  /** What is stored before (UPDATE, DELETE). */
  oldObject?: Manifest;
  /** The guard's refusals (the part after "denied request: "), in order; none: allowed. */
  refusals: string[];
}

export const guardCases: GuardCase[] = [
  { name: 'a Deployment within the guard', operation: 'CREATE', object: deployment('small', 2, 'nginx:1'), refusals: [] },
  { name: 'too many replicas', operation: 'CREATE', object: deployment('big', 7, 'nginx:1'), refusals: ['at most 5 replicas, not 7'] },
  { name: 'the image changed on an update', operation: 'UPDATE', oldObject: deployment('web', 1, 'nginx:1'), object: deployment('web', 1, 'nginx:2'), refusals: ['the image is set once'] },
  { name: 'an unprotected ConfigMap deleted', operation: 'DELETE', oldObject: configMap('loose'), refusals: [] },
  { name: 'a protected ConfigMap deleted', operation: 'DELETE', oldObject: configMap('kept', { protect: 'yes' }), refusals: ['is protected'] },
];

/** MyApp's refusals of {replicas: 11, image: "Nginx:latest"}, as the apiserver words them (functions/myapp's unit test and test/integration/rules.test.ts). */
export const myAppRefusals = ['spec.replicas: Invalid value: 11: must be ≤ 10', 'spec.image: Invalid value: "Nginx:latest": is not an image reference (lowercase name, then :tag or @sha256:digest)'];

/** MyApp's declared defaults: each image sent, and the image stored (functions/myapp's unit test; test/integration/rules.test.ts on the apiserver's MutatingAdmissionPolicy). */
export const myAppDefaultCases: { image: string; stored: string }[] = [
  { image: 'nginx', stored: 'nginx:latest' },
  { image: 'kfn.local/nginx', stored: 'kfn.local/nginx:latest' },
  { image: 'localhost:5000/team/app', stored: 'localhost:5000/team/app:latest' },
  { image: 'nginx:1.22', stored: 'nginx:1.22' },
  { image: 'kfn.local/nginx:1.22', stored: 'kfn.local/nginx:1.22' },
  { image: `app@sha256:${'a'.repeat(64)}`, stored: `app@sha256:${'a'.repeat(64)}` },
];

// A function's declared defaults (a MutatingAdmissionPolicy), and objects with what the apiserver
// stores: functions/sdk/policies.test.ts and test/integration/rules.test.ts.
export const Box = defineKind({
  group: 'defaults.kfn.test',
  version: 'v1',
  kind: 'Box',
  spec: t.Object({ size: t.Optional(t.Integer()), color: t.Optional(t.String({ maxLength: 16 })), tags: t.Optional(t.Array(t.String({ maxLength: 16 }), { maxItems: 8 })) }),
  status: t.Object({}),
});

export const boxes = defineReconciler({
  name: 'boxes',
  for: Box,
  reconcile: () => ({}),
  defaults: [
    { when: '!has(object.spec.size)', set: { '/spec/size': '1' } },
    // Reads what the first wrote: declarations run in order, each on what the ones before wrote.
    { set: { '/spec/color': "has(object.spec.color) ? object.spec.color : 'red'", '/metadata/labels': "{'size': string(object.spec.size)}" } },
    { when: "has(object.spec.tags) && !('checked' in object.spec.tags)", set: { '/spec/tags/-': "'checked'" } },
  ],
});

export interface DefaultCase {
  name: string;
  spec: Record<string, unknown>;
  /** What the stored object's spec and labels are. */
  stored: { spec: Record<string, unknown>; labels?: Record<string, string> };
}

export const defaultCases: DefaultCase[] = [
  { name: 'nothing given', spec: {}, stored: { spec: { size: 1, color: 'red' }, labels: { size: '1' } } },
  { name: 'everything given', spec: { size: 3, color: 'blue' }, stored: { spec: { size: 3, color: 'blue' }, labels: { size: '3' } } },
  { name: 'an item appended', spec: { size: 2, tags: ['a'] }, stored: { spec: { size: 2, color: 'red', tags: ['a', 'checked'] }, labels: { size: '2' } } },
  { name: 'the item there already', spec: { tags: ['checked'] }, stored: { spec: { size: 1, color: 'red', tags: ['checked'] }, labels: { size: '1' } } },
];
