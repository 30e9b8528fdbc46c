// What a function may do with each kind, from what it declares: its primary kind, `owns`,
// `watches` (read by name; listed only with `list: true`) and `uses`. Its RBAC
// (manifests.ts) grants exactly this, and the runtime refuses a ctx.get or ctx.list outside it
// — in a unit test as in a cluster, instead of a 403 at the first deploy.
import type { Reconciler } from './reconciler.ts';
import { groupOf, sameKind, type KindRef } from '../../core/objects.ts';

export type Verb = 'get' | 'list' | 'watch' | 'create' | 'update' | 'patch' | 'delete';

export interface Access {
  ref: KindRef;
  verbs: Verb[];
  /** The rights are on this subresource (`status`, `ephemeralcontainers`), not on the objects. */
  subresource?: string;
  /** The rights are on these objects only (RBAC resourceNames). */
  names?: string[];
}

/** Every right the function declares, kind by kind (the Events it records included). */
export function declaredAccess(reconciler: Reconciler): Access[] {
  const primary: KindRef = { apiVersion: reconciler.for.apiVersion, kind: reconciler.for.kind };
  return [
    // list: the bridge delivers every object of its kind for this identity (bridge/identity.ts),
    // so the identity must be one that could list them itself.
    { ref: primary, verbs: ['get', 'list', 'patch'] },
    { ref: primary, verbs: ['get', 'patch', 'update'], subresource: 'status' },
    ...(reconciler.owns ?? []).map((o): Access => ({ ref: o, verbs: ['get', 'list', 'create', 'patch', 'update', 'delete'] })),
    ...(reconciler.watches ?? []).map((w): Access => ({ ref: w, verbs: w.list ? ['get', 'list'] : ['get'] })),
    ...(reconciler.uses ?? []).map((u): Access => ({ ref: u.kind, verbs: [...u.verbs], ...(u.subresource ? { subresource: u.subresource } : {}), ...(u.names ? { names: [...u.names] } : {}) })),
    { ref: { apiVersion: 'v1', kind: 'Event' }, verbs: ['create', 'patch', 'get'] },
  ];
}

/**
 * Throws, saying what to declare, unless the function declares `verb` on objects of `ref` (on
 * the object `name`, for a get: rights may be limited to names).
 */
export function checkDeclared(reconciler: Reconciler, ref: KindRef, verb: 'get' | 'list', name?: string): void {
  const kindRights = declaredAccess(reconciler).filter((a) => !a.subresource && sameKind(a.ref, ref) && a.verbs.includes(verb));
  if (kindRights.some((a) => !a.names || (name !== undefined && a.names.includes(name)))) return;
  const what = `${ref.apiVersion} ${ref.kind}`;
  if (kindRights.length) {
    const names = kindRights.flatMap((a) => a.names ?? []);
    throw new Error(`ctx.${verb}(${what}, ${name}): ${reconciler.name} declares that it may ${verb} only the ${ref.kind} objects named ${names.join(', ')}, so its RBAC in a cluster refuses ${name}: add ${name} to the names of its \`uses\` entry`);
  }
  const watched = (reconciler.watches ?? []).some((w) => sameKind(w, ref));
  const how = verb === 'list' && watched ? `add \`list: true\` to its watch of ${ref.kind}` : `add { kind: ${ref.kind}, verbs: ['${verb}'] } to its \`uses\` (or the kind to \`owns\` or \`watches\`)`;
  throw new Error(`ctx.${verb}(${what}): ${reconciler.name} does not declare that it may ${verb} ${ref.kind} objects (${groupOf(ref.apiVersion) || 'core'} API), so its RBAC in a cluster refuses it: ${how}`);
}
