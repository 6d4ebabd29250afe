/**
 * Duration flags (`--interval 5s`, `--timeout 30s`, `--lock-timeout 0`): a value that is not a
 * duration is told how to write one; a well-written value out of range is told which bound it passes.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { parseDuration } from '../kit/flags.js';

const refused = (text: string, min?: 0 | 1): string => {
  try {
    parseDuration('--interval', text, min);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error(`${text} was taken`);
};

test('durations are read in ms, s, m, min, h or bare seconds', () => {
  assert.equal(['500ms', '30s', '2m', '1min', '1h', '1.5', '0'].map((t) => parseDuration('--x', t, 0)), [500, 30_000, 120_000, 60_000, 3_600_000, 1500, 0]);
});

test('0 where a duration must be greater than 0 says so, not how to write a duration', () => {
  assert.is(refused('0s'), 'invalid --interval "0s": must be greater than 0');
  assert.is(refused('0'), 'invalid --interval "0": must be greater than 0');
  assert.is(refused('25h', 0), 'invalid --interval "25h": must be at most 24h');
  assert.is(refused('soon'), 'invalid --interval "soon": expected a duration such as 30s, 500ms or 2m (at most 24h)');
  assert.is(refused('-1s', 0), 'invalid --interval "-1s": expected a duration such as 30s, 500ms or 2m (at most 24h)');
});

test('through the commands: sync --interval 0s and query --timeout 0 exit 2 saying it must be greater than 0', async () => {
  const home = scratchDir('durations-test');
  const env = { HOME: home, XDG_CONFIG_HOME: `${home}/cfg`, XDG_DATA_HOME: `${home}/data`, XDG_CACHE_HOME: `${home}/cache` };
  const sync = await runTool('trajstore', ['sync', '--from', home, '--to', `${home}/mirror`, '--convert', `${home}/ds`, '--interval', '0s', '--once'], { env, cwd: home });
  assert.is(sync.code, 2, sync.stderr);
  assert.match(sync.stderr, 'trajstore: error: invalid --interval "0s": must be greater than 0\n');
  const query = await runTool('trajstore', ['query', `${home}/ds`, '--sql', 'SELECT 1', '--timeout', '0'], { env, cwd: home });
  assert.is(query.code, 2, query.stderr);
  assert.match(query.stderr, 'trajstore: error: invalid --timeout "0": must be greater than 0\n');
});

test.run();
