import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubeObject } from '../kube/api.ts';
import { readyForGeneration } from '../core/conditions.ts';
import { TimeToReady } from './ready-time.ts';

function obj(generation: number, ready?: { status: string; observedGeneration?: number }, statusGeneration?: number): KubeObject {
  return {
    apiVersion: 'example.com/v1',
    kind: 'Thing',
    metadata: { name: 'a', namespace: 'ns', generation },
    ...(ready || statusGeneration !== undefined
      ? { status: { ...(statusGeneration !== undefined ? { observedGeneration: statusGeneration } : {}), conditions: ready ? [{ type: 'Progressing', status: 'True' }, { type: 'Ready', ...ready }] : [] } }
      : {}),
  } as KubeObject;
}

test('Ready for its generation: a True Ready condition whose observedGeneration (its own, else the status\') has reached the object\'s', () => {
  assert.equal(readyForGeneration(obj(2)), false, 'no status');
  assert.equal(readyForGeneration(obj(2, { status: 'False', observedGeneration: 2 })), false);
  assert.equal(readyForGeneration(obj(2, { status: 'True', observedGeneration: 1 })), false, 'Ready for the generation before');
  assert.equal(readyForGeneration(obj(2, { status: 'True', observedGeneration: 2 })), true);
  assert.equal(readyForGeneration(obj(2, { status: 'True' }, 1)), false, "the status' observedGeneration when the condition has none");
  assert.equal(readyForGeneration(obj(2, { status: 'True' }, 2)), true);
  assert.equal(readyForGeneration(obj(2, { status: 'True' })), true, 'no observedGeneration anywhere: the condition is taken as current');
});

test('the time to Ready runs from the first change the object is not Ready for until its watch shows it Ready for that generation', () => {
  const observed: number[] = [];
  const t = new TimeToReady((s) => observed.push(s));
  // Created (generation 1, no status) at 1 s; the function's status write shows it Ready at 3.5 s.
  t.seen('ns/a', obj(1), 1000);
  t.seen('ns/a', obj(1, { status: 'False', observedGeneration: 1 }), 2000);
  assert.deepEqual(observed, []);
  t.seen('ns/a', obj(1, { status: 'True', observedGeneration: 1 }), 3500);
  assert.deepEqual(observed, [2.5]);
  assert.equal(t.size, 0, 'nothing held for an object that is Ready');
  // Status-only updates of a Ready object: nothing to time.
  t.seen('ns/a', obj(1, { status: 'True', observedGeneration: 1 }), 4000);
  assert.deepEqual(observed, [2.5]);
  // Edited twice before it is Ready again: timed from the first edit, done when Ready for the last.
  t.seen('ns/a', obj(2, { status: 'True', observedGeneration: 1 }), 10_000);
  t.seen('ns/a', obj(3, { status: 'True', observedGeneration: 1 }), 11_000);
  t.seen('ns/a', obj(3, { status: 'True', observedGeneration: 2 }), 12_000);
  assert.deepEqual(observed, [2.5], 'Ready for generation 2 is not Ready for 3');
  t.seen('ns/a', obj(3, { status: 'True', observedGeneration: 3 }), 14_000);
  assert.deepEqual(observed, [2.5, 4]);
});

test('an object deleted before it is Ready is forgotten, and never observed', () => {
  const observed: number[] = [];
  const t = new TimeToReady((s) => observed.push(s));
  t.seen('ns/a', obj(1), 0);
  t.gone('ns/a');
  assert.equal(t.size, 0);
  t.seen('ns/a', obj(1, { status: 'True', observedGeneration: 1 }), 5000);
  assert.deepEqual(observed, [], 'a new object of the name, Ready when first seen, was not waited for');
});

test('a Ready object falling back without a change of its spec (a pod lost) is not timed: an outage, not a change to wait for', () => {
  const observed: number[] = [];
  const t = new TimeToReady((s) => observed.push(s));
  const ready = obj(1, { status: 'True', observedGeneration: 1 });
  const fallen = obj(1, { status: 'False', observedGeneration: 1 });
  t.seen('ns/a', fallen, 1000, ready);
  t.seen('ns/a', ready, 9000, fallen);
  assert.deepEqual(observed, []);
  assert.equal(t.size, 0);
  // Its spec edited (generation 2): timed from the edit.
  t.seen('ns/a', obj(2, { status: 'True', observedGeneration: 1 }), 10_000, ready);
  t.seen('ns/a', obj(2, { status: 'True', observedGeneration: 2 }), 11_500, obj(2, { status: 'True', observedGeneration: 1 }));
  assert.deepEqual(observed, [1.5]);
});
