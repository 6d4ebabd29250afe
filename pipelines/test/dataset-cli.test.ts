/** `trajstore dataset ...` through the real CLI, with a private HOME and XDG_CONFIG_HOME. */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { toolScript, runTool, type ToolResult } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';

const SECRET = 'Zq8-secret-never-printed-7781';
const ACCESS = 'AKIA-access-never-printed';

function sandbox() {
  const home = scratchDir('dataset-cli');
  const env: NodeJS.ProcessEnv = { HOME: home, XDG_CONFIG_HOME: join(home, 'cfg'), XDG_DATA_HOME: join(home, 'data') };
  delete process.env.TRAJSTORE_CONFIG;
  delete process.env.TRAJSTORE_ACCESS_KEY;
  delete process.env.TRAJSTORE_SECRET_KEY;
  const all: ToolResult[] = [];
  const run = async (args: string[], options: { input?: string; env?: NodeJS.ProcessEnv } = {}) => {
    const r = await runTool('trajstore', ['--log-level', 'debug', ...args], { env: { ...env, ...options.env }, cwd: home, ...(options.input !== undefined ? { input: options.input } : {}) });
    all.push(r);
    return r;
  };
  const configPath = join(home, 'cfg', 'trajstore', 'config.toml');
  /** No secret was ever printed by any run of this sandbox. */
  const noSecretPrinted = () => {
    for (const r of all) {
      for (const text of [r.stdout, r.stderr]) {
        assert.not.match(text, SECRET);
        assert.not.match(text, ACCESS);
      }
    }
  };
  return { home, env, run, configPath, noSecretPrinted };
}

test('pin, list, show, set, rename, unpin: the whole life of a pin', async () => {
  const s = sandbox();
  let r = await s.run(['dataset', 'pin', 'work', 'datasets/work']);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, `pinned @work -> ${join(s.home, 'datasets', 'work')}\n`);
  assert.match(readFileSync(s.configPath, 'utf8'), `[pins.work]\nuri = "${join(s.home, 'datasets', 'work')}"`);
  assert.is(statSync(s.configPath).mode & 0o777, 0o644);

  r = await s.run(['dataset', 'list', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  const rows = JSON.parse(r.stdout) as Array<Record<string, unknown>>;
  assert.equal(rows.map((row) => row.name), ['@work', '@agenta', '@agentb', '@agentb-code']);
  assert.equal(rows.map((row) => row.source), ['config', 'built-in', 'built-in', 'built-in']);
  assert.is(rows[1]?.uri, join(s.home, '.codex', 'sessions'));
  assert.is(rows[2]?.uri, join(s.home, '.claude'));
  assert.is(rows[3]?.uri, join(s.home, '.claude', 'projects'));

  r = await s.run(['dataset', 'list'], { env: { CODEX_HOME: '/opt/codex', CLAUDE_CONFIG_DIR: '/opt/claude' } });
  assert.is(r.code, 0);
  assert.match(r.stdout, /^NAME +KIND +URI/);
  assert.match(r.stdout, /@agenta +local +\/opt\/codex\/sessions/);
  assert.match(r.stdout, /@agentb-code +local +\/opt\/claude\/projects/);

  r = await s.run(['dataset', 'set', 'work', '/srv/work']);
  assert.is(r.code, 0, r.stderr);
  r = await s.run(['dataset', 'rename', 'work', 'main']);
  assert.is(r.code, 0, r.stderr);
  r = await s.run(['dataset', 'show', '@main', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout), {
    name: '@main', kind: 'local', uri: '/srv/work', endpoint: null, region: null, credentials: null, source: 'config', note: null, exists: false,
  });
  r = await s.run(['dataset', 'show', 'work']);
  assert.is(r.code, 3);
  assert.match(r.stderr, 'no pin named @work');
  r = await s.run(['dataset', 'unpin', 'main']);
  assert.is(r.code, 0, r.stderr);
  r = await s.run(['dataset', 'list', '--format', 'csv']);
  assert.is(r.stdout.split('\n')[1]?.split(',')[0], '@agenta', 'only built-ins are left');
});

test('s3 pins: region default, http endpoint, credentials stored (0600) and never printed', async () => {
  const s = sandbox();
  let r = await s.run(['dataset', 'pin', 'lake', 's3://team-bucket/traces', '--endpoint', 'http://127.0.0.1:9000', '--ak', ACCESS, '--sk', SECRET]);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout, 'pinned @lake -> s3://team-bucket/traces (endpoint http://127.0.0.1:9000, region us-west-2 (default), credentials stored)\n');
  assert.match(r.stderr, '--sk on the command line is visible', 'argv secrets are discouraged');
  assert.is(statSync(s.configPath).mode & 0o777, 0o600);
  const text = readFileSync(s.configPath, 'utf8');
  assert.match(text, `secret_key = "${SECRET}"`);
  assert.not.match(text, 'region', 'the default region is applied, not written');

  await Promise.all(
    ['table', 'json', 'jsonl', 'csv'].map(async (format) => {
      const listed = await s.run(['dataset', 'list', '--format', format]);
      assert.is(listed.code, 0);
      assert.match(listed.stdout, 'stored');
      const shown = await s.run(['dataset', 'show', 'lake', '--format', format]);
      assert.is(shown.code, 0);
      assert.match(shown.stdout, 'us-west-2');
    }),
  );
  r = await s.run(['dataset', 'set', 'lake', 's3://team-bucket/v2']);
  assert.is(r.code, 0);
  assert.match(readFileSync(s.configPath, 'utf8'), `secret_key = "${SECRET}"`, 'set keeps the credentials');
  r = await s.run(['dataset', 'set', 'lake', '/local/now']);
  assert.is(r.code, 2, 'a local pin cannot keep an endpoint');
  assert.match(r.stderr, 'unpin it and pin it again');
  r = await s.run(['dataset', 'rename', 'lake', 'lake2']);
  assert.is(r.code, 0);
  r = await s.run(['dataset', 'pin', 'eu', 's3://eu-bucket', '--region', 'eu-central-1']);
  assert.is(r.code, 0);
  assert.match(r.stdout, 'region eu-central-1)');
  s.noSecretPrinted();
});

test('set never moves stored credentials to another kind of service (s3:// keys to a catalog:// locator or back)', async () => {
  const s = sandbox();
  const keys = { env: { TRAJSTORE_ACCESS_KEY: ACCESS, TRAJSTORE_SECRET_KEY: SECRET } };
  assert.is((await s.run(['dataset', 'pin', 'lake', 's3://team-bucket/traces'], keys)).code, 0);
  assert.is((await s.run(['dataset', 'pin', 'team', 'catalog://127.0.0.1:7070'], keys)).code, 0);
  assert.is((await s.run(['dataset', 'pin', 'plain', '/data/plain'])).code, 0);
  const before = readFileSync(s.configPath, 'utf8');
  // A catalog pin sends its keys as HTTP Basic to whatever listens on that port: an S3 secret must never go there.
  let r = await s.run(['dataset', 'set', 'lake', 'catalog://127.0.0.1:7071']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, 'pin @lake holds credentials for an s3:// store; they would be sent to a catalog:// directory service');
  assert.match(r.stderr, 'unpin it and pin it again');
  r = await s.run(['dataset', 'set', 'team', 's3://team-bucket/other']);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, 'pin @team holds credentials for a catalog:// directory service; they would be sent to an s3:// store');
  assert.is(readFileSync(s.configPath, 'utf8'), before, 'nothing was written');
  // Without credentials a pin may name another kind of place; with them, another place of the same kind.
  assert.is((await s.run(['dataset', 'set', 'plain', 's3://team-bucket/plain'])).code, 0);
  assert.is((await s.run(['dataset', 'set', 'team', 'catalog://127.0.0.1:7072'])).code, 0);
  s.noSecretPrinted();
});

test('credentials from the environment or stdin keep them out of argv', async () => {
  const s = sandbox();
  let r = await s.run(['dataset', 'pin', 'lake', 's3://team-bucket'], { env: { TRAJSTORE_ACCESS_KEY: ACCESS, TRAJSTORE_SECRET_KEY: SECRET } });
  assert.is(r.code, 0, r.stderr);
  assert.not.match(r.stderr, 'visible');
  assert.match(readFileSync(s.configPath, 'utf8'), `access_key = "${ACCESS}"\nsecret_key = "${SECRET}"`);
  r = await s.run(['dataset', 'pin', 'team', 'catalog://127.0.0.1:7070', '--ak', ACCESS, '--sk-stdin'], { input: `${SECRET}\n` });
  assert.is(r.code, 0, r.stderr);
  r = await s.run(['dataset', 'pin', 'team2', 'catalog://127.0.0.1:7071', '--ak-stdin', '--sk-stdin'], { input: `${ACCESS}\n${SECRET}\n` });
  assert.is(r.code, 0, r.stderr);
  const text = readFileSync(s.configPath, 'utf8');
  assert.match(text, `[pins.team2]\nuri = "catalog://127.0.0.1:7071"\naccess_key = "${ACCESS}"\nsecret_key = "${SECRET}"`);
  r = await s.run(['dataset', 'pin', 'local', '/data/x'], { env: { TRAJSTORE_ACCESS_KEY: ACCESS, TRAJSTORE_SECRET_KEY: SECRET } });
  assert.is(r.code, 0, 'credential variables do not apply to a local pin');
  assert.not.match(readFileSync(s.configPath, 'utf8'), /\[pins\.local\]\nuri = "\/data\/x"\naccess_key/);
  s.noSecretPrinted();
});

test('a credential typed into a URI is never echoed: the user info is shown as ***', async () => {
  const s = sandbox();
  const withCredentials = (scheme: string, rest: string) => `${scheme}://${ACCESS}:${SECRET}@${rest}`;
  const cases: string[][] = [
    ['dataset', 'pin', 'lake', withCredentials('s3', 'bucket-a/x')],
    ['dataset', 'pin', 'team', withCredentials('catalog', '127.0.0.1:7070')],
    ['stats', withCredentials('s3', 'bucket-a/x')],
    ['stats', withCredentials('catalog', '127.0.0.1:7070')],
    ['list', withCredentials('s3', 'bucket-a/x')],
    ['import', '-f', withCredentials('s3', 'bucket-a/x'), '-t', join(s.home, 'ds')],
    ['import', '-f', join(s.home, 'nothing'), '-t', withCredentials('s3', 'bucket-a/x')],
    ['export', '-f', withCredentials('s3', 'bucket-a/x'), '-t', '-', '-o', 'storyline'],
    ['query', withCredentials('s3', 'bucket-a/x'), '--sql', 'SELECT 1'],
    ['find', withCredentials('s3', 'bucket-a/x'), '--match', 'x'],
    ['drop', withCredentials('s3', 'bucket-a/x'), '--yes'],
    // A uri a slash short is refused as mistyped, and its user info is still not echoed.
    ['dataset', 'pin', 'lake', `s3:/${ACCESS}:${SECRET}@bucket-a/x`],
    ['stats', `s3:${ACCESS}:${SECRET}@bucket-a`],
    ['dataset', 'pin', 'team', `catalog:/${ACCESS}:${SECRET}@127.0.0.1:7070`],
    // A raw "@" in the password still counts as user info up to the last "@" before the host.
    ['stats', `s3://${ACCESS}:${SECRET}@x@bucket-a/x`],
  ];
  for (const args of cases) {
    const r = await s.run(args);
    assert.ok(r.code === 2 || r.code === 3, `${args.join(' ')}: exit ${r.code}: ${r.stderr}`);
    assert.match(r.stderr, '***@', args.join(' '));
  }
  s.noSecretPrinted();
});

test('flag misuse exits 2 (or 3/4) with a clear message and writes nothing', async () => {
  const s = sandbox();
  assert.is((await s.run(['dataset', 'pin', 'work', '/data/work'])).code, 0);
  const before = readFileSync(s.configPath, 'utf8');
  const cases: Array<[string[], number, string | RegExp]> = [
    [['dataset', 'pin', 'Work', '/x'], 2, 'invalid pin name "Work"'],
    [['dataset', 'pin', 'agenta', '/x'], 2, 'built in'],
    [['dataset', 'pin', 'work', '/x'], 4, 'already exists'],
    [['dataset', 'pin', 'alias', '@work'], 2, 'points at another pin'],
    [['dataset', 'pin', 'default', 's3://bucket-a/x'], 2, 'must be a local directory'],
    [['dataset', 'pin', 'x', '/x', '--region', 'eu-west-1'], 2, 'applies to s3:// pins only'],
    [['dataset', 'pin', 'x', '/x', '--ak', ACCESS, '--sk', SECRET], 2, '--ak/--sk apply to s3:// and catalog:// pins only'],
    [['dataset', 'pin', 'x', 's3://bucket-a', '--ak', ACCESS], 2, 'must be given together'],
    [['dataset', 'pin', 'x', 's3://bucket-a', '--endpoint', 'ftp://h'], 2, 'http:// or https://'],
    [['dataset', 'pin', 'x', 's3://bucket-a', '--endpoint', `http://u:${SECRET}@h`], 2, 'must not carry a user name or password'],
    [['dataset', 'pin', 'x', 'gs://bucket/x'], 2, 'unsupported uri scheme'],
    // A slash short of a uri is a typo, not a local directory named `s3:` under the working directory.
    [['dataset', 'pin', 'x', 's3:/bucket-a/x'], 2, 'the uri starts with "s3:" but not "s3://"'],
    [['dataset', 'pin', 'x', 'S3:bucket-a'], 2, 'the uri starts with "S3:" but not "S3://"'],
    [['dataset', 'pin', 'team', 'catalog:127.0.0.1:7070', '--ak', ACCESS, '--sk', SECRET], 2, 'the uri starts with "catalog:" but not "catalog://"'],
    [['dataset', 'pin', 'team', 'catalog://127.0.0.1:7070'], 2, 'needs --ak and --sk'],
    [['dataset', 'pin', 'team', 'catalog://127.0.0.1:7070', '--ak', ACCESS, '--sk', SECRET, '--endpoint', 'http://127.0.0.1:1'], 2, 'endpoint applies to s3:// pins only'],
    [['dataset', 'pin', 'team', 'catalog://127.0.0.1:7070', '--ak', ACCESS, '--sk', SECRET, '--region', 'r'], 2, 'region applies to s3:// pins only'],
    [['dataset', 'pin', 'team', 'catalog://example.com:7070', '--ak', ACCESS, '--sk', SECRET], 2, 'catalog://127.0.0.1:<port>'],
    [['dataset', 'pin', 'x'], 2, 'missing required args'],
    [['dataset', 'unpin', 'nope'], 3, 'no pin named @nope'],
    [['dataset', 'unpin', 'agenta'], 2, 'built in'],
    [['dataset', 'set', 'nope', '/x'], 3, 'no pin named @nope'],
    [['dataset', 'rename', 'nope', 'x'], 3, 'no pin named @nope'],
    [['dataset', 'rename', 'work', 'agentb'], 2, 'built in'],
    [['dataset', 'list', '--format', 'yaml'], 2, 'invalid --format "yaml"'],
    [['dataset', 'show', 'nope'], 3, 'no pin named @nope'],
    [['dataset', 'pinn', 'x', 'y'], 2, 'did you mean `dataset pin`?'],
  ];
  // Independent runs (none of them writes): three at a time to keep the suite short.
  const pending = [...cases];
  const worker = async (): Promise<void> => {
    for (let next = pending.shift(); next; next = pending.shift()) {
      const [args, code, message] = next;
      const r = await s.run(args);
      assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message, args.join(' '));
      assert.is(r.stdout, '', args.join(' '));
    }
  };
  await Promise.all([worker(), worker(), worker()]);
  assert.is(readFileSync(s.configPath, 'utf8'), before, 'nothing was written');
  assert.is((await s.run(['dataset', 'pin', 'other', '/data/other'])).code, 0);
  assert.is((await s.run(['dataset', 'rename', 'work', 'other'])).code, 4);
  // A key that looks like a number is stored exactly as typed (no 0123 -> 123).
  assert.is((await s.run(['dataset', 'pin', 'num', 's3://bucket-n', '--ak', '00123', '--sk', '1e3'])).code, 0);
  const stored = readFileSync(s.configPath, 'utf8');
  assert.match(stored, 'access_key = "00123"');
  assert.match(stored, 'secret_key = "1e3"');
  s.noSecretPrinted();
});

test('the configuration comes from -c, then TRAJSTORE_CONFIG; a bad one exits 2 naming file and line', async () => {
  const s = sandbox();
  const flagFile = join(s.home, 'flag.toml');
  const envFile = join(s.home, 'env.toml');
  writeFileSync(flagFile, '[pins.fromflag]\nuri = "/f"\n');
  writeFileSync(envFile, '[pins.fromenv]\nuri = "/e"\n');
  let r = await s.run(['-c', flagFile, 'dataset', 'list', '--format', 'jsonl'], { env: { TRAJSTORE_CONFIG: envFile } });
  assert.match(r.stdout, '@fromflag');
  assert.not.match(r.stdout, '@fromenv');
  r = await s.run(['dataset', 'list', '--format', 'jsonl'], { env: { TRAJSTORE_CONFIG: envFile } });
  assert.match(r.stdout, '@fromenv');
  r = await s.run(['-c', join(s.home, 'missing.toml'), 'dataset', 'list']);
  assert.is(r.code, 3);
  assert.match(r.stderr, 'missing.toml');
  r = await s.run(['-c', join(s.home, 'new.toml'), 'dataset', 'pin', 'a', '/a']);
  assert.is(r.code, 0, 'pin creates a named configuration file');

  const legacy = join(s.home, 'legacy.toml');
  writeFileSync(legacy, `# old layout\ndefault_dataset = "atif"\n\n[[datasets]]\nname = "atif"\nuri = "atif"\n`);
  r = await s.run(['-c', legacy, 'dataset', 'list']);
  assert.is(r.code, 2);
  assert.match(r.stderr, `${legacy}:2: legacy key \`default_dataset\``);
  writeFileSync(legacy, `[pins.a]\nuri = "s3://bucket-a"\naccess_key = "${ACCESS}"\nsecret_key = "${SECRET}"\nsecret = "${SECRET}"\n`);
  r = await s.run(['-c', legacy, 'dataset', 'show', 'a']);
  assert.is(r.code, 2);
  assert.match(r.stderr, `${legacy}:5: unknown key \`pins.a.secret\``);
  s.noSecretPrinted();
});

/** `script` (util-linux) gives the tool a real terminal, so the hidden prompt can be exercised. */
const HAVE_SCRIPT = spawnSync('script', ['--version']).status === 0;

test('on a terminal, missing keys are prompted for and the secret is not echoed', async () => {
  if (!HAVE_SCRIPT) return;
  const s = sandbox();
  const command = `${process.execPath} ${toolScript('trajstore')} dataset pin team catalog://127.0.0.1:7070`;
  const child = spawn('script', ['-q', '-c', command, '/dev/null'], { env: { ...process.env, ...s.env }, stdio: ['pipe', 'pipe', 'pipe'] });
  let screen = '';
  const typed: string[] = [];
  const answers: Array<[string, string]> = [['access key: ', `${ACCESS}\r`], ['secret key (not shown): ', `${SECRET}\r`]];
  child.stdout.on('data', (chunk: Buffer) => {
    screen += chunk.toString();
    // Type each answer only once its prompt is on the screen, as a person would.
    for (const [prompt, answer] of answers) {
      if (screen.includes(prompt) && !typed.includes(prompt)) {
        typed.push(prompt);
        child.stdin.write(answer);
      }
    }
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.is(code, 0, screen);
  assert.match(screen, 'pinned @team -> catalog://127.0.0.1:7070 (credentials stored)');
  assert.not.match(screen, SECRET, 'the secret is not echoed');
  assert.match(readFileSync(s.configPath, 'utf8'), `access_key = "${ACCESS}"\nsecret_key = "${SECRET}"`);
});

test.run();
