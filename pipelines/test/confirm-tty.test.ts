/**
 * The confirmations of `drop` and `import --mode replace` on a real terminal: each command runs under
 * `script` (util-linux), which gives it a pseudo-terminal and types the answer. Declining is the
 * same rejection as giving no confirmation (exit 2) and changes nothing; `y` goes ahead.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT, runTool } from '../../cli/test/helpers/run-tool.js';
import { scratchDir } from '../../cli/test/helpers/scratch.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const home = scratchDir('confirm-tty');
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const ATIF = join(SHARED_FIXTURES, 'persisting', 'atif');
const dataset = join(home, 'ds');

const quote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`;

/** Runs trajstore on a pseudo-terminal, answering `answer` to its question. */
function onTerminal(args: string[], answer: string): { code: number | null; output: string } {
  const command = [process.execPath, join(DIST_ROOT, 'cli', 'trajstore.js'), ...args].map(quote).join(' ');
  const r = spawnSync('script', ['-qec', command, '/dev/null'], { input: `${answer}\n`, encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  return { code: r.status, output: r.stdout };
}
const snapshotOf = (path: string) => (JSON.parse(readFileSync(join(path, 'trajstore.json'), 'utf8')) as { snapshot_id: string }).snapshot_id;

test.before(async () => {
  const r = await runTool('trajstore', ['import', '-f', join(ATIF, 'dialogue_10.json'), '-t', dataset], { env, cwd: home });
  assert.is(r.code, 0, r.stderr);
});

test('import --mode replace: "n" exits 2 and keeps the dataset; "y" replaces it', () => {
  const before = snapshotOf(dataset);
  const declined = onTerminal(['import', '-f', join(ATIF, 'multimodal_18.json'), '-t', dataset, '--mode', 'replace'], 'n');
  assert.match(declined.output, `replace the dataset ${dataset}?`);
  assert.is(declined.code, 2, declined.output);
  assert.match(declined.output, 'confirm with --yes');
  assert.is(snapshotOf(dataset), before);
  const accepted = onTerminal(['import', '-f', join(ATIF, 'multimodal_18.json'), '-t', dataset, '--mode', 'replace'], 'y');
  assert.is(accepted.code, 0, accepted.output);
  assert.is.not(snapshotOf(dataset), before);
  // A missing source fails before anything is asked.
  const missing = onTerminal(['import', '-f', join(home, 'no-such-file.json'), '-t', dataset, '--mode', 'replace'], 'y');
  assert.is(missing.code, 3, missing.output);
  assert.not.match(missing.output, 'replace the dataset');
  assert.match(missing.output, 'no-such-file.json: no such file or directory');
});

test('drop: "n" exits 2 and deletes nothing; "y" deletes the dataset', () => {
  const before = snapshotOf(dataset);
  const declined = onTerminal(['drop', dataset], 'n');
  assert.match(declined.output, `Permanently delete the storyline dataset ${dataset}`);
  assert.is(declined.code, 2, declined.output);
  assert.match(declined.output, 'not confirmed; nothing deleted');
  assert.is(snapshotOf(dataset), before);
  const accepted = onTerminal(['drop', dataset], 'y');
  assert.is(accepted.code, 0, accepted.output);
  assert.match(accepted.output, `dropped ${dataset}`);
  assert.not.ok(existsSync(dataset));
});

test.run();
