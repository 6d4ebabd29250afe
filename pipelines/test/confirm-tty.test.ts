/**
 * The confirmations of `drop` and `import --mode replace` on a real (pseudo-)terminal: declining is
 * the same rejection as giving no confirmation (exit 2) and changes nothing; `y` goes ahead.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { hasScript, trajstoreOnTerminal } from './helpers/terminal.js';

const home = scratchDir('confirm-tty');
const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_CACHE_HOME: join(home, 'cache') };
const ATIF = join(SHARED_FIXTURES, 'persisting', 'atif');
const dataset = join(home, 'ds');
const onTerminal = (args: string[], answer: string) => trajstoreOnTerminal(args, answer, env);
const snapshotOf = (path: string) => (JSON.parse(readFileSync(join(path, 'trajstore.json'), 'utf8')) as { snapshot_id: string }).snapshot_id;

test.before(async () => {
  const r = await runTool('trajstore', ['import', '-f', join(ATIF, 'dialogue_10.json'), '-t', dataset], { env, cwd: home });
  assert.is(r.code, 0, r.stderr);
});

if (!hasScript) process.stderr.write('util-linux `script` (a pseudo-terminal) is not installed, skipping the terminal tests\n');
const maybe = hasScript ? test : test.skip;

maybe('import --mode replace: "n" exits 2 and keeps the dataset; "y" replaces it; a missing source fails first', async () => {
  const before = snapshotOf(dataset);
  const replace = ['import', '-f', join(ATIF, 'multimodal_18.json'), '-t', dataset, '--mode', 'replace'];
  const declined = await onTerminal(replace, 'n');
  assert.match(declined.output, `replace the dataset ${dataset}?`);
  assert.is(declined.code, 2, declined.output);
  assert.match(declined.output, 'confirm with --yes');
  assert.is(snapshotOf(dataset), before);
  const accepted = await onTerminal(replace, 'y');
  assert.is(accepted.code, 0, accepted.output);
  assert.is.not(snapshotOf(dataset), before);
  const missing = await onTerminal(['import', '-f', join(home, 'no-such-file.json'), '-t', dataset, '--mode', 'replace'], 'y');
  assert.is(missing.code, 3, missing.output);
  assert.not.match(missing.output, 'replace the dataset');
  assert.match(missing.output, 'no-such-file.json: no such file or directory');
});

maybe('drop: "n" exits 2 and deletes nothing; "y" deletes the dataset', async () => {
  const before = snapshotOf(dataset);
  const declined = await onTerminal(['drop', dataset], 'n');
  assert.match(declined.output, `Permanently delete the storyline dataset ${dataset}`);
  assert.is(declined.code, 2, declined.output);
  assert.match(declined.output, 'not confirmed; nothing deleted');
  assert.is(snapshotOf(dataset), before);
  const accepted = await onTerminal(['drop', dataset], 'y');
  assert.is(accepted.code, 0, accepted.output);
  assert.match(accepted.output, `dropped ${dataset}`);
  assert.not.ok(existsSync(dataset));
});

test.run();
