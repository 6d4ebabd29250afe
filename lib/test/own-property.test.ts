/** setOwn: a key from input stays data, __proto__ included. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { setOwn } from '../own-property.js';

test('__proto__ becomes an own property, and the prototype is untouched', () => {
  const out: Record<string, unknown> = {};
  setOwn(out, '__proto__', { role: 'admin' });
  setOwn(out, 'name', 'x');
  assert.is(Object.getPrototypeOf(out), Object.prototype);
  assert.is(out.role, undefined);
  assert.equal(Object.keys(out), ['__proto__', 'name']);
  assert.is(JSON.stringify(out), '{"__proto__":{"role":"admin"},"name":"x"}');
  assert.equal(JSON.parse(JSON.stringify(out)), JSON.parse('{"__proto__":{"role":"admin"},"name":"x"}'));
});

test('other keys are set as by assignment', () => {
  const out: Record<string, unknown> = { a: 1 };
  setOwn(out, 'a', 2);
  setOwn(out, 'constructor', 'c');
  assert.equal(out, { a: 2, constructor: 'c' });
});

test.run();
