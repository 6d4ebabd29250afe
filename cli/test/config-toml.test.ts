/** The settings file of a tool (cli/kit/config-toml.ts): values by key, and errors that name the line but never quote it. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { InvalidInputError } from '../../lib/errors.js';
import { parseSettingsFile } from '../kit/config-toml.js';
import type { ConfigSchema } from '../kit/config-schema.js';

const SCHEMA: ConfigSchema = { '': { images_dir: 'path' }, cluster: { name: 'text', size: 'positive' } };

function failure(text: string): string {
  try {
    parseSettingsFile('/etc/demo.toml', text, SCHEMA);
  } catch (error) {
    assert.instance(error, InvalidInputError);
    return (error as Error).message;
  }
  throw new Error('expected the file to be refused');
}

test('values by key, paths resolved against the file, with their lines', () => {
  const entries = parseSettingsFile('/etc/demo.toml', 'images_dir = "img"\n\n[cluster]\n# a comment\nname = "c1"\nsize = 3\n', SCHEMA);
  assert.equal(entries, [
    { key: 'images_dir', value: '/etc/img', line: 1 },
    { key: 'cluster.name', value: 'c1', line: 5 },
    { key: 'cluster.size', value: 3, line: 6 },
  ]);
});

test('an unknown key or table, or a value of the wrong kind, names the file and the line', () => {
  assert.match(failure('[cluster]\nname = "c1"\ncolour = "red"\n'), /^\/etc\/demo\.toml:3: unknown key `cluster\.colour`/);
  assert.match(failure('images_dir = "i"\n[cache]\nsize = 1\n'), /^\/etc\/demo\.toml:2: unknown table \[cache\]/);
  assert.match(failure('[cluster]\nsize = 0\n'), /^\/etc\/demo\.toml:2: `cluster\.size` must be a whole number above 0/);
  // A dotted key is on its own line too.
  assert.match(failure('cluster.size = -1\n'), /^\/etc\/demo\.toml:1: `cluster\.size`/);
});

test('a syntax error gives its line and column, never the text of the line (it may hold a secret)', () => {
  const message = failure('[cluster]\nname = "c1"\nsecret = "hunter2\n');
  assert.match(message, /^\/etc\/demo\.toml:3: invalid TOML at column \d+/);
  assert.not.match(message, /hunter2/);
});

test.run();
