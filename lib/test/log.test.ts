import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Logger, diagnosticText } from '../log.js';

/** What a logger at `level` writes. */
function logged(level: 'warn' | 'info', write: (log: Logger) => void): string {
  let out = '';
  write(new Logger(level, { write: (chunk: string) => (out += chunk) }));
  return out;
}

// An OSC 52 clipboard write and a screen clear, as a file name or a model id in the data may hold them.
const ATTACK = '\x1b]52;c;ZWNobw==\x07\x1b[2J';

test('diagnostics show control characters from the data escaped, C1, line breaks and tabs included: one line each', () => {
  const out = logged('info', (log) => {
    log.warn(`no price for model${ATTACK}`);
    log.info(`x\u009b31m.json: detected storyline\r(reason)\x7f`);
    log.warn('first line\n\tsecond line');
  });
  assert.is(
    out,
    'warn: no price for model\\x1b]52;c;ZWNobw==\\x07\\x1b[2J\n' +
      'info: x\\x9b31m.json: detected storyline\\r(reason)\\x7f\n' +
      'warn: first line\\n\\tsecond line\n',
  );
});

test('diagnostic text is escaped and redacted, never otherwise changed', () => {
  assert.is(diagnosticText(`s3://key:secret@bucket/x${ATTACK}`), 's3://***@bucket/x\\x1b]52;c;ZWNobw==\\x07\\x1b[2J');
  assert.is(diagnosticText('plain: 中文 ✓ line\nnext'), 'plain: 中文 ✓ line\\nnext');
  assert.is(diagnosticText(diagnosticText('a\nb\x1b')), 'a\\nb\\x1b', 'escaped once, however often rendered');
});

test.run();
