import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { reimportableJson } from '../json-text.js';

test('integral floats past 2^53 are written with an exponent wherever they stand, with or without an indent', () => {
  const values: Array<[unknown, string]> = [
    [1e16, '1e+16'],
    [-1e16, '-1e+16'],
    [9007199254740993, '9.007199254740992e+15'],
    [[0, 123456789012345678], '[0,1.2345678901234568e+17]'],
    [{ a: { b: [1, -1e20] } }, '{"a":{"b":[1,-1e+20]}}'],
  ];
  for (const [value, text] of values) {
    assert.is(reimportableJson(value), text);
    assert.equal(JSON.parse(reimportableJson(value, 2)), value);
    assert.not.match(reimportableJson(value, 2), /(^|[:,[\s])-?\d{16}/);
  }
});

test('everything else is JSON.stringify\'s text: safe numbers, and digits inside strings however long', () => {
  const values = [123, 9007199254740991, { id: 'toolu_aeb7a4c54918334259669392', n: 2 }, ['x:1234567890123456,', 1.5], '12345678901234567890', { t: 1.5e300 }];
  for (const value of values) {
    assert.is(reimportableJson(value), JSON.stringify(value));
    assert.is(reimportableJson(value, 2), JSON.stringify(value, null, 2));
  }
});

test.run();
