import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ExitCode, ToolError, pathError } from '../errors.js';
import { scratchDir } from '../testing/scratch.js';

const thrown = (act: () => unknown): unknown => {
  try {
    act();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
};

const dir = scratchDir('errors');
writeFileSync(join(dir, 'file'), 'x');

test('an fs error about a path becomes the typed error it is, naming the path', () => {
  const cases: Array<[() => unknown, ExitCode, string]> = [
    [() => readFileSync(join(dir, 'file', 'below')), ExitCode.InvalidInput, `${join(dir, 'file', 'below')}: not a directory`],
    [() => mkdirSync(join(dir, 'file')), ExitCode.Conflict, `${join(dir, 'file')}: already exists`],
    [() => readFileSync(join(dir, 'missing')), ExitCode.NotFound, `${join(dir, 'missing')}: no such file or directory`],
    [() => mkdirSync('/proc/trajstore-test'), ExitCode.InvalidInput, '/proc/trajstore-test: cannot make a directory there'],
  ];
  for (const [act, code, message] of cases) {
    const error = pathError(thrown(act));
    assert.ok(error instanceof ToolError, String(error));
    assert.is(error.exitCode, code);
    assert.is(error.message, message);
  }
});

test('a full disk is a resource limit (exit 5), with or without a path to name', () => {
  const full = pathError(thrown(() => writeFileSync('/dev/full', 'x')));
  assert.ok(full instanceof ToolError, String(full));
  assert.is(full.exitCode, ExitCode.ResourceLimit);
  assert.match(full.message, 'no space left on device');
});

test('an fs error that names no path takes the subject given; anything else is left as it is', () => {
  const read = thrown(() => readFileSync(dir)); // EISDIR from the read: no path in the error
  assert.is((pathError(read) as Error).message, (read as Error).message);
  const named = pathError(read, `configuration file ${dir}`);
  assert.ok(named instanceof ToolError);
  assert.is(named.message, `configuration file ${dir}: is a directory`);
  const plain = new Error('a bug');
  assert.is(pathError(plain), plain);
  const typed = new ToolError(ExitCode.ResourceLimit, 'too big');
  assert.is(pathError(typed), typed);
});

test.run();
