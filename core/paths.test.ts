import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { mapValuesAt, pathTree, pickFields, setValueAt, valueAt, valuesAt } from './paths.ts';

const web = {
  metadata: { name: 'site', annotations: { a: '1' } },
  spec: { selector: { app: 'web' }, ports: [{ name: 'http', port: 80 }, { name: 'admin', port: 9000 }], note: 'x', empty: null, gone: undefined },
};

describe('valueAt', () => {
  test('reads a dotted path or its parts', () => {
    assert.deepEqual(valueAt(web, 'spec.selector'), { app: 'web' });
    assert.equal(valueAt(web, ['spec', 'selector', 'app']), 'web');
    assert.equal(valueAt(web, ''), undefined);
  });

  test('a missing field, or one on the way that is no object, reads undefined', () => {
    assert.equal(valueAt(web, 'spec.template.metadata'), undefined);
    assert.equal(valueAt(web, 'spec.note.length'), undefined);
    assert.equal(valueAt(web, 'spec.empty.x'), undefined);
    assert.equal(valueAt(undefined, 'spec'), undefined);
    assert.equal(valueAt(web, 'spec.empty'), null);
  });

  test('a list is read by index, and * is a field name like any other', () => {
    assert.equal(valueAt(web, 'spec.ports.1.port'), 9000);
    assert.equal(valueAt(web, 'spec.ports.name'), undefined);
    assert.equal(valueAt({ a: { '*': 1 } }, 'a.*'), 1);
  });
});

describe('valuesAt', () => {
  test('* stands for each item of a list or value of an object', () => {
    assert.deepEqual(valuesAt(web, 'spec.ports.*.port'), [80, 9000]);
    assert.deepEqual(valuesAt(web, ['metadata', '*']), ['site', { a: '1' }]);
    assert.deepEqual(valuesAt(web, ['spec', 'selector']), [{ app: 'web' }]);
  });

  test('a missing or undefined field gives none; null is a value', () => {
    assert.deepEqual(valuesAt(web, 'spec.template.*'), []);
    assert.deepEqual(valuesAt(web, 'spec.gone'), []);
    assert.deepEqual(valuesAt(web, 'spec.empty'), [null]);
    assert.deepEqual(valuesAt(web, []), [web]);
    assert.deepEqual(valuesAt(undefined, []), []);
  });

  test('a list is spread only through *, unless each item is asked for', () => {
    assert.deepEqual(valuesAt(web, 'spec.ports.name'), []);
    assert.deepEqual(valuesAt(web, 'spec.ports'), [web.spec.ports]);
    assert.deepEqual(valuesAt(web, 'spec.ports.name', { eachItem: true }), ['http', 'admin']);
    assert.deepEqual(valuesAt({ refs: [['a', 'b'], 'c'] }, 'refs', { eachItem: true }), [['a', 'b'], 'c'], 'one level of list at a time');
    assert.deepEqual(valuesAt({ spec: { names: ['a', 'b'] } }, 'spec.names', { eachItem: true }), ['a', 'b']);
    assert.deepEqual(valuesAt([{ n: 1 }, { n: 2 }], 'n', { eachItem: true }), [1, 2]);
  });
});

describe('mapValuesAt', () => {
  const upper = (v: unknown) => String(v).toUpperCase();

  test('copies the objects on the way and shares the rest; the original is untouched', () => {
    const out = mapValuesAt(web, 'spec.selector.app', upper) as typeof web;
    assert.equal(out.spec.selector.app, 'WEB');
    assert.equal(web.spec.selector.app, 'web');
    assert.equal(out.metadata, web.metadata);
    assert.equal(out.spec.ports, web.spec.ports);
  });

  test('a missing field stays missing: change is not called, and no object is made for it', () => {
    const never = () => assert.fail('change called');
    assert.equal(mapValuesAt(web, 'status.x', never), web);
    assert.deepEqual(mapValuesAt(web, 'spec.template.x', never), web);
    assert.deepEqual(mapValuesAt(web, 'spec.gone', never), web);
    assert.deepEqual(mapValuesAt(web, 'spec.note.length', never), web);
  });

  test('* maps each item of a list, which stays a list, and each value of an object', () => {
    const out = mapValuesAt(web, 'spec.ports.*.name', upper) as typeof web;
    assert.deepEqual(out.spec.ports, [{ name: 'HTTP', port: 80 }, { name: 'ADMIN', port: 9000 }]);
    assert.ok(Array.isArray(out.spec.ports));
    assert.deepEqual(mapValuesAt({ data: { a: 'x', b: 'y' } }, 'data.*', upper), { data: { a: 'X', b: 'Y' } });
  });

  test('a list is entered through * alone', () => {
    const out = mapValuesAt(web, 'spec.ports.0.name', upper) as typeof web;
    assert.equal(out.spec.ports, web.spec.ports);
  });

  test('change is told the field names that led to each value', () => {
    const seen: string[] = [];
    mapValuesAt(web, 'spec.ports.*.port', (v, at) => (seen.push(at.join('.')), v));
    assert.deepEqual(seen, ['spec.ports.0.port', 'spec.ports.1.port']);
  });
});

describe('setValueAt', () => {
  test('makes the objects on the way, replacing what is not one', () => {
    const target: Record<string, unknown> = { spec: 'x' };
    setValueAt(target, 'spec.selector.app', 'web');
    setValueAt(target, ['status', 'ready'], true);
    assert.deepEqual(target, { spec: { selector: { app: 'web' } }, status: { ready: true } });
  });

  test('copies the objects on the way: one shared with another object is not changed', () => {
    const shared = { name: 'site' };
    const target: Record<string, unknown> = { metadata: shared };
    setValueAt(target, 'metadata.annotations', { a: '1' });
    assert.deepEqual(target, { metadata: { name: 'site', annotations: { a: '1' } } });
    assert.deepEqual(shared, { name: 'site' });
  });
});

describe('pickFields', () => {
  test('projects an object to the paths given, an absent one left out', () => {
    const record = { apiVersion: 'v1', kind: 'Service', metadata: { name: 'site' } };
    const out = pickFields(record, web, ['metadata.annotations', 'spec.selector', 'status', 'spec.gone']);
    assert.equal(out, record);
    assert.deepEqual(out, { apiVersion: 'v1', kind: 'Service', metadata: { name: 'site', annotations: { a: '1' } }, spec: { selector: { app: 'web' } } });
    assert.equal(out.metadata.annotations, web.metadata.annotations, 'the value itself is shared, not copied');
  });

  test('keeps null, which the source holds', () => {
    assert.deepEqual(pickFields({}, web, ['spec.empty']), { spec: { empty: null } });
  });
});

describe('pathTree', () => {
  test('a path takes in the longer ones under it, in either order', () => {
    assert.deepEqual(pathTree(['status', 'spec.selector', 'spec.template.metadata.labels']), { status: true, spec: { selector: true, template: { metadata: { labels: true } } } });
    assert.deepEqual(pathTree(['spec.selector.app', 'spec']), { spec: true });
    assert.deepEqual(pathTree(['spec', 'spec.selector']), { spec: true });
    assert.deepEqual(pathTree([['metadata'], 'metadata.annotations']), { metadata: true });
  });

  test('no paths, no fields', () => {
    assert.deepEqual(pathTree([]), {});
  });
});
