import assert from 'node:assert/strict';
import { test } from 'node:test';
import { escapePointerToken, isObject, pointerAsField, pointerTokens, unescapePointerToken } from './json.ts';

test('isObject: a JSON object, not null and not a list', () => {
  assert.equal(isObject({}), true);
  assert.equal(isObject({ a: 1 }), true);
  for (const v of [null, undefined, [], [1], 'a', 1, true]) assert.equal(isObject(v), false, JSON.stringify(v));
});

test('a pointer token is unescaped ~1 first, then ~0, and escaping undoes it', () => {
  assert.equal(unescapePointerToken('a~1b'), 'a/b');
  assert.equal(unescapePointerToken('a~0b'), 'a~b');
  assert.equal(unescapePointerToken('~01'), '~1', 'not "/": ~0 is unescaped after ~1');
  for (const token of ['plain', 'a/b', 'a~b', '~1', '~/0']) assert.equal(unescapePointerToken(escapePointerToken(token)), token);
  assert.equal(escapePointerToken('~/'), '~0~1');
});

test('pointerTokens and pointerAsField', () => {
  assert.deepEqual(pointerTokens(''), []);
  assert.deepEqual(pointerTokens('/metadata/annotations/kfn.dev~1owner'), ['metadata', 'annotations', 'kfn.dev/owner']);
  assert.equal(pointerAsField('spec', '/shelves/0/slots'), 'spec.shelves[0].slots');
  assert.equal(pointerAsField('spec', '/a~1b/1'), 'spec.a/b[1]');
  assert.equal(pointerAsField('spec', ''), 'spec');
});
