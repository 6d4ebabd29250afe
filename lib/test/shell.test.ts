import { execFileSync } from 'node:child_process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { shellQuote } from '../shell.js';

/** What bash reads back from `quoted` as one word. */
const readBack = (quoted: string): string => execFileSync('bash', ['-c', `printf %s ${quoted}`]).toString('utf8');

test('shellQuote writes a word bash reads back exactly, with no character a terminal acts on left raw', () => {
  const words = ['plain', "it's", 'a b', 'line\nbreak', 'esc\x1b[2J', 'csi\u009b31m', 'bidi\u202egnp.exe\u2066x\u2069', 'rlm\u200f', '中文 🚀', '$HOME `x` \\'];
  for (const word of words) {
    const quoted = shellQuote(word);
    assert.not.match(quoted, /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/, JSON.stringify(quoted));
    assert.is(readBack(quoted), word, JSON.stringify(quoted));
  }
});

test.run();
