/**
 * The README's trajstore quick start runs as written, in order, from a fresh home: a new user copies
 * its commands one by one, so each must work on the dataset the ones before it built. The first line
 * (scripts/main.sh) is the set-up, which installs packages, and is left out; `claude` is a fake that
 * exits 0, as `agent` needs an installed Claude Code.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { toolScript } from '../../lib/testing/run-tool.js';
import { PROJECT_TESTDATA, REPO_ROOT } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
const section = readme.slice(readme.indexOf('### Quick start'));
const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
/** The commands of the block, without their comments (a comment starts at `  #`) and comment-only lines. */
const commands = block
  .split('\n')
  .map((line) => line.replace(/\s+#\s.*$/, '').replace(/^#.*$/, '').trim())
  .filter((line) => line !== '' && !line.startsWith('scripts/'));

test('the quick start has the commands a new user runs', () => {
  assert.ok(commands.length >= 6, `found ${JSON.stringify(commands)}`);
  assert.ok(commands.some((c) => c.startsWith('trajstore show ')));
});

test('every command of the quick start runs as written, in order, from a fresh home', () => {
  const s = sandbox('readme-quickstart-test-');
  symlinkSync(PROJECT_TESTDATA, s.path('testdata'));
  const bin = s.path('bin');
  mkdirSync(bin);
  const tools = { trajstore: `exec "${process.execPath}" "${toolScript('trajstore')}" "$@"`, claude: 'cat >/dev/null' };
  for (const [name, body] of Object.entries(tools)) {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  }
  const env: NodeJS.ProcessEnv = { ...process.env, ...s.env, PATH: `${bin}:${process.env.PATH ?? ''}` };
  delete env.TRAJSTORE_CONFIG;
  for (const command of commands) {
    const r = spawnSync('bash', ['-o', 'pipefail', '-c', command], { cwd: s.home, env, input: '', encoding: 'utf8', timeout: 120_000 });
    assert.is(r.status, 0, `${command}\nexit ${r.status}\n${r.stderr}`);
  }
});

test.run();
