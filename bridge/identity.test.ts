// Whose rights a Reconciler's deliveries carry: the questions asked, and the verdicts, against
// a stand-in authorizer (the real apiserver's answers are in test/integration/identity.test.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseReconciler } from './config.ts';
import { accessQuestions, identityProblem } from './identity.ts';
import { identityForAnnotation } from '../core/names.ts';
import { ApiError, type KubeApi } from '../kube/api.ts';

const config = (spec: Record<string, unknown> = {}) =>
  parseReconciler({
    metadata: { name: 'projects' },
    spec: { for: { apiVersion: 'xyz.com/v1', kind: 'Project' }, owns: [{ apiVersion: 'v1', kind: 'Secret' }], watches: [{ apiVersion: 'v1', kind: 'ConfigMap', mapping: { label: 'p' } }], sink: { uri: 'https://elsewhere.example/' }, serviceAccount: { namespace: 'team-a', name: 'fn' }, ...spec },
  });

/** An apiserver that knows one ServiceAccount and allows what `allowed` says. */
function authorizer(allowed: (attrs: { verb: string; resource: string; namespace?: string }) => boolean, annotations: Record<string, string> | undefined = { [identityForAnnotation]: 'other, projects' }) {
  const reviews: Record<string, unknown>[] = [];
  const api = {
    async resource(apiVersion: string, kind: string) {
      return { apiVersion, kind, plural: `${kind.toLowerCase()}s`, namespaced: true, verbs: [] };
    },
    async request(method: string, path: string, options: { body?: { spec: { user: string; resourceAttributes: { verb: string; resource: string; namespace?: string } } } } = {}) {
      if (method === 'GET' && path === '/api/v1/namespaces/team-a/serviceaccounts/fn') return { metadata: { name: 'fn', namespace: 'team-a', annotations } };
      if (method === 'GET') throw new ApiError(404, 'not found');
      reviews.push(options.body!.spec as never);
      return { status: { allowed: allowed(options.body!.spec.resourceAttributes) } };
    },
  } as unknown as KubeApi;
  return { api, reviews };
}

describe("a Reconciler's identity", () => {
  test('the questions: list of the primary and each owned kind, list of a kind mapped by label or selector, get of a kind mapped by reference, in each namespace it looks in (every namespace when none)', () => {
    assert.deepEqual(
      accessQuestions(config({ namespaces: ['a', 'b'] })).map((q) => `${q.verb} ${q.kind.kind} ${q.namespace}`),
      ['list Project a', 'list Project b', 'list Secret a', 'list Secret b', 'list ConfigMap a', 'list ConfigMap b'],
    );
    assert.deepEqual(accessQuestions(config()).map((q) => q.namespace), ['', '', '']);
    // A label or a selector names whatever matches it (the names travel as triggers): only who
    // may list the kind may learn them. A reference names one object the primary already names.
    const mapped = config({
      watches: [
        { apiVersion: 'v1', kind: 'ConfigMap', mapping: { label: 'p' } },
        { apiVersion: 'v1', kind: 'Pod', mapping: { selectorField: 'spec.selector' } },
        { apiVersion: 'v1', kind: 'Secret', mapping: { referenceField: 'spec.secretRef.name' } },
      ],
      owns: [],
    });
    assert.deepEqual(accessQuestions(mapped).map((q) => `${q.verb} ${q.kind.kind}`), ['list Project', 'list ConfigMap', 'list Pod', 'get Secret']);
  });

  test('allowed everything: no problem; each review names the ServiceAccount as the authorizer knows it', async () => {
    const { api, reviews } = authorizer(() => true);
    assert.equal(await identityProblem(api, config(), true), undefined);
    assert.equal(reviews.length, 3);
    assert.deepEqual(reviews[0], { user: 'system:serviceaccount:team-a:fn', groups: ['system:serviceaccounts', 'system:serviceaccounts:team-a', 'system:authenticated'], resourceAttributes: { group: 'xyz.com', resource: 'projects', verb: 'list' } });
  });

  test('many namespaces: one cluster-wide question per kind when the identity may list everywhere; else each namespace, at most 16 reviews in flight', async () => {
    const namespaces = Array.from({ length: 1000 }, (_, i) => `team-${i}`);
    const everywhere = authorizer(() => true);
    assert.equal(await identityProblem(everywhere.api, config({ namespaces }), true), undefined);
    assert.equal(everywhere.reviews.length, 3, 'allowed in every namespace answers for the 1,000');
    assert.ok(everywhere.reviews.every((r) => !(r as { resourceAttributes: { namespace?: string } }).resourceAttributes.namespace));
    let inFlight = 0;
    let most = 0;
    const each = authorizer((attributes: { namespace?: string }) => attributes.namespace !== undefined);
    const request = each.api.request.bind(each.api);
    (each.api as { request: unknown }).request = async (...args: Parameters<typeof request>) => {
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((r) => setImmediate(r));
      try {
        return await request(...args);
      } finally {
        inFlight--;
      }
    };
    assert.equal(await identityProblem(each.api, config({ namespaces }), true), undefined);
    assert.equal(each.reviews.length, 3 + 3 * 1000, 'refused everywhere: asked namespace by namespace');
    assert.ok(most <= 16, `at most 16 requests at once, not ${most}`);
  });

  test('a right it lacks: refused, naming the kind, the verb and where', async () => {
    const { api } = authorizer((a) => a.resource !== 'secrets');
    assert.match((await identityProblem(api, config({ namespaces: ['team-a'] }), true))!, /ServiceAccount team-a\/fn may not list secrets in namespace team-a: nothing is delivered until it may/);
  });

  test('a ServiceAccount that does not name the Reconciler is not its identity, however powerful: refused before any review', async () => {
    const { api, reviews } = authorizer(() => true, { [identityForAnnotation]: 'someone-else' });
    assert.match((await identityProblem(api, config(), true))!, /ServiceAccount team-a\/fn does not agree to be the identity of Reconciler projects: if it should, annotate it \(kubectl annotate serviceaccount -n team-a fn kfn\.dev\/identity-for=projects\)/);
    assert.equal(reviews.length, 0);
    assert.match((await identityProblem(authorizer(() => true, {}).api, config(), true))!, /does not agree/);
  });

  test('no identity: refused where one is required, delivered as before where not; a missing ServiceAccount is named', async () => {
    const { api } = authorizer(() => true);
    const { serviceAccount: _, ...without } = config();
    assert.match((await identityProblem(api, without, true))!, /spec\.serviceAccount is not set/);
    assert.equal(await identityProblem(api, without, false), undefined);
    assert.match((await identityProblem(api, config({ serviceAccount: { namespace: 'team-a', name: 'gone' } }), false))!, /ServiceAccount team-a\/gone does not exist/);
  });
});
