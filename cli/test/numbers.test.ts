/**
 * Number flags (`--max-results 10`, `--rate 2.5`): decimal only, as the HTTP APIs take them; a whole
 * number is digits, not `1e3` or `0x10`, which `Number()` would take.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { parseNumber } from '../kit/flags.js';

const refused = (text: string, integer: boolean): boolean => {
  try {
    parseNumber('--n', text, { integer });
    return false;
  } catch (error) {
    return /^invalid --n /.test((error as Error).message);
  }
};

test('whole numbers are decimal digits', () => {
  assert.equal(['10', ' 7 ', '+3', '-2', '0'].map((t) => parseNumber('--n', t, { integer: true })), [10, 7, 3, -2, 0]);
  for (const text of ['1e3', '0x10', '0b11', '0o7', '1.0', 'Infinity', '', '1_000', '١٢']) assert.ok(refused(text, true), text);
});

test('numbers are decimal, with an exponent if need be', () => {
  assert.equal(['2.5', '.5', '5.', '1e3', '-1.5E-2'].map((t) => parseNumber('--n', t)), [2.5, 0.5, 5, 1000, -0.015]);
  for (const text of ['0x10', 'Infinity', 'NaN', '1,5', '', 'e3']) assert.ok(refused(text, false), text);
});

test('actorctl seconds flags past a timer\'s range (about 24.8 days) exit 2 naming their bound, not a timer of 1 ms', async () => {
  const runs = [
    ['inspect', 'cluster', '--seeds', '127.0.0.1:1', '--timeout', '1e9'],
    ['call', 'echo', 'echo', '[]', '--seeds', '127.0.0.1:1', '--timeout', '3000000'],
    ['inspect', 'watch', '--seeds', '127.0.0.1:1', '--interval', '1e7', '--max_rounds', '1'],
  ];
  for (const args of runs) {
    const run = await runTool('actorctl', args);
    const flag = args[args.findIndex((a) => a === '--timeout' || a === '--interval')]!;
    assert.is(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
    assert.match(run.stderr, new RegExp(`actorctl: error: invalid ${flag} "[^"]+": expected a number >= [0-9.]+ and <= 86400\n`));
    assert.not.match(run.stderr, 'TimeoutOverflowWarning');
  }
});

test.run();
