// The bridge's watch of RBAC: a change has the Reconcilers' rights reviewed (after a quiet second),
// not the first lists; without the right to watch it, nothing is claimed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeApiServer, until } from '../test/support/fake-apiserver.ts';
import { FakeClock } from '../core/clock.ts';
import { ApiError } from '../kube/api.ts';
import { accessKinds, RbacChanges, rbacCeilingMs, rbacQuietMs } from './rbac-changes.ts';

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

test('RBAC watched: its first lists are no change; changes in a burst are one review, a quiet second after the last', async (t) => {
  const server = new FakeApiServer({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', plural: 'rolebindings' });
  server.put('existing');
  const clock = new FakeClock();
  let reviews = 0;
  const rbac = new RbacChanges(server.api(), clock, quiet, () => reviews++, { backoffMs: [1000, 2000] });
  // The fake serves one resource whatever kind is asked: every watch (RBAC's four kinds and
  // ServiceAccounts) sees each change.
  const seen = (changes: number) => () => (rbac.changesSeen >= changes * accessKinds.length ? true : undefined);
  t.after(() => rbac.stop());
  assert.equal(rbac.watching, false, 'nothing claimed before the watches have listed');
  await rbac.start();
  await until('every RBAC watch listed', () => (rbac.watching ? true : undefined));
  clock.advance(rbacQuietMs * 2);
  assert.equal(reviews, 0, 'what was there at the start is no change');
  server.put('granted');
  await until('the grant seen', seen(1));
  clock.advance(rbacQuietMs / 2);
  server.put('granted-too');
  await until('the second grant seen', seen(2));
  clock.advance(rbacQuietMs - 1);
  assert.equal(reviews, 0, 'not while RBAC is still changing');
  clock.advance(1);
  assert.equal(reviews, 1, 'one review for the burst');
  server.remove('granted');
  await until('the revocation seen', seen(3));
  clock.advance(rbacQuietMs);
  assert.equal(reviews, 2, 'a revocation is a change too');
});

test('RBAC not watchable (the bridge may not list it): not watching, so the Controllers keep polling', async (t) => {
  const server = new FakeApiServer({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', plural: 'rolebindings' });
  const api = server.api();
  (api as { resource: unknown }).resource = async () => Promise.reject(new ApiError(403, 'forbidden'));
  const rbac = new RbacChanges(api, new FakeClock(), quiet, () => assert.fail('no change can be seen'));
  t.after(() => rbac.stop());
  await rbac.start();
  assert.equal(rbac.watching, false);
});

test('RBAC watchable in part (a kind not served or not allowed): the watches already started are stopped, none is left open', async (t) => {
  const server = new FakeApiServer({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', plural: 'rolebindings' });
  const api = server.api();
  const resource = api.resource.bind(api);
  let asked = 0;
  (api as { resource: unknown }).resource = async (apiVersion: string, kind: string) => (++asked === 3 ? Promise.reject(new ApiError(403, 'forbidden')) : resource(apiVersion, kind));
  const rbac = new RbacChanges(api, new FakeClock(), quiet, () => assert.fail('no change can be seen'));
  t.after(() => rbac.stop());
  await rbac.start();
  assert.equal(rbac.watching, false);
  await until('the two started watches to end', () => (server.openWatches === 0 ? true : undefined));
});

test('a burst that never quiets down is still reviewed: at most rbacCeilingMs after its first change, and again while it goes on', async (t) => {
  const server = new FakeApiServer({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', plural: 'roles' });
  const clock = new FakeClock();
  let reviews = 0;
  const rbac = new RbacChanges(server.api(), clock, quiet, () => reviews++, { backoffMs: [1000, 2000] });
  t.after(() => rbac.stop());
  await rbac.start();
  await until('every watch listed', () => (rbac.watching ? true : undefined));
  // A Role touched every 900 ms (less than the quiet second) for a minute: the quiet second
  // alone would never come, and a revocation in the burst would never be reviewed.
  const reviewedAt: number[] = [];
  for (let i = 1; i <= 66; i++) {
    server.put(`role-${i}`);
    await until(`change ${i} seen`, () => (rbac.changesSeen >= i * accessKinds.length ? true : undefined));
    const before = reviews;
    clock.advance(900);
    if (reviews > before) reviewedAt.push(clock.now());
  }
  assert.ok(reviewedAt.length >= 60_000 / rbacCeilingMs - 1, `reviews during a minute of changes: ${reviewedAt.length}`);
  for (let i = 1; i < reviewedAt.length; i++) assert.ok(reviewedAt[i]! - reviewedAt[i - 1]! <= rbacCeilingMs + 900, `reviews ${reviewedAt[i - 1]} and ${reviewedAt[i]} are too far apart`);
});

test('a ServiceAccount changed (its consent to serve a Reconciler withdrawn) is a change: the rights are reviewed', async (t) => {
  const server = new FakeApiServer({ apiVersion: 'v1', kind: 'ServiceAccount', plural: 'serviceaccounts' });
  server.put('fn');
  const clock = new FakeClock();
  const kindsWatched: string[] = [];
  const api = server.api();
  const resource = api.resource.bind(api);
  (api as { resource: unknown }).resource = async (apiVersion: string, kind: string) => (kindsWatched.push(`${apiVersion} ${kind}`), resource(apiVersion, kind));
  let reviews = 0;
  const rbac = new RbacChanges(api, clock, quiet, () => reviews++, { backoffMs: [1000, 2000] });
  t.after(() => rbac.stop());
  await rbac.start();
  await until('every watch listed', () => (rbac.watching ? true : undefined));
  assert.ok(kindsWatched.includes('v1 ServiceAccount'), `watched: ${kindsWatched.join(', ')}`);
  server.put('fn');
  await until('the change seen', () => (rbac.changesSeen >= accessKinds.length ? true : undefined));
  clock.advance(rbacQuietMs);
  assert.equal(reviews, 1);
});
