import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ExitCode } from '../../lib/errors.js';
import { installation } from '../../lib/install.js';
import { runTool } from '../../lib/testing/run-tool.js';

const demo = (args: string[], env?: NodeJS.ProcessEnv) => runTool('cli/test/fixtures/kit-demo.js', args, env ? { env } : {});

for (const [name, code] of Object.entries(ExitCode)) {
  if (code === ExitCode.Ok) continue;
  test(`a ${name} error exits ${code} and names the input`, async () => {
    const r = await demo(['fail', String(code)]);
    assert.is(r.code, code);
    assert.is(r.stdout, '');
    assert.match(r.stderr, `kit-demo: error: failing with ${code} on input demo.json:3`);
    assert.match(r.stderr, 'hint: this is a hint');
    assert.not.match(r.stderr, /\n\s+at /, 'no stack trace below debug');
  });
}

test('an unexpected error is internal (1) with a stack trace only at debug level', async () => {
  const plain = await demo(['fail', 'crash']);
  assert.is(plain.code, 1);
  assert.match(plain.stderr, 'internal error: something broke');
  assert.not.match(plain.stderr, /\n\s+at /);
  const debug = await demo(['--log-level', 'debug', 'fail', 'crash']);
  assert.is(debug.code, 1);
  assert.match(debug.stderr, /Error: something broke\n\s+at /);
});

test('control characters a message quotes reach stderr escaped: warnings, errors and hints', async () => {
  const r = await demo(['quote', 'x\x1b]52;c;QQ==\x07\u009b2J']);
  assert.is(r.code, 2);
  const shown = 'x\\x1b]52;c;QQ==\\x07\\x9b2J';
  assert.is(r.stderr, `warn: read ${shown}\nkit-demo: error: bad input ${shown}\nkit-demo: hint: rename ${shown}\n`);
});

test('a line break a message quotes forges no line: each diagnostic is one line, the hint on its own', async () => {
  const r = await demo(['quote', 'x\nkit-demo: error: forged\x1b[2J']);
  assert.is(r.code, 2);
  const shown = 'x\\nkit-demo: error: forged\\x1b[2J';
  assert.is(r.stderr, `warn: read ${shown}\nkit-demo: error: bad input ${shown}\nkit-demo: hint: rename ${shown}\n`);
  const debug = await demo(['--log-level', 'debug', 'quote', 'x\nkit-demo: error: forged']);
  assert.not.ok(debug.stderr.split('\n').some((line) => line.startsWith('kit-demo: error: forged')), debug.stderr);
});

test('--log-level changes stderr only, never stdout or the exit code', async () => {
  for (const format of ['table', 'json', 'jsonl', 'csv']) {
    const runs = await Promise.all(['error', 'warn', 'info', 'debug'].map((level) => demo(['rows', '--format', format, '--log-level', level])));
    const [first] = runs;
    for (const r of runs) {
      assert.is(r.code, 0);
      assert.is(r.stdout, first?.stdout);
      assert.not.match(r.stdout, 'message');
    }
    assert.is(runs[0]?.stderr, 'error: a error message\n');
    assert.match(runs[3]?.stderr ?? '', 'debug: a debug message');
  }
});

test('an invalid --log-level is invalid input', async () => {
  const r = await demo(['--log-level', 'loud', 'rows']);
  assert.is(r.code, 2);
  assert.match(r.stderr, 'invalid --log-level "loud"');
});

test('an unknown command exits 2 with a hint', async () => {
  const r = await demo(['rowz']);
  assert.is(r.code, 2);
  assert.match(r.stderr, 'unknown command `rowz`');
  assert.match(r.stderr, 'did you mean `rows`?');
});

test('no command exits 2 and points at --help', async () => {
  const r = await demo([]);
  assert.is(r.code, 2);
  assert.match(r.stderr, '--help');
});

test('an unknown option exits 2 with a hint', async () => {
  const r = await demo(['rows', '--formatt', 'csv']);
  assert.is(r.code, 2);
  assert.match(r.stderr, 'unknown option `--formatt`');
  assert.match(r.stderr, 'did you mean `--format`?');
  // An option of another command: named as typed, and never suggested as a spelling of itself.
  const other = await demo(['rows', '--limit-count=3']);
  assert.is(other.code, 2);
  assert.match(other.stderr, 'unknown option `--limit-count`');
  const capital = await demo(['rows', '--Format', 'csv']);
  assert.match(capital.stderr, 'unknown option `--Format`');
  assert.match(capital.stderr, 'did you mean `--format`?');
  const elsewhere = await demo(['rows', '--limit', '3']);
  assert.is(elsewhere.code, 2);
  assert.not.match(elsewhere.stderr, 'did you mean `--limit`');
});

test('a missing argument exits 2 with the usage', async () => {
  const r = await demo(['group', 'alpha']);
  assert.is(r.code, 2);
  assert.match(r.stderr, 'usage: kit-demo group alpha <value>');
});

test('--help works on the tool, every command and a command group', async () => {
  const top = await demo(['--help']);
  assert.is(top.code, 0);
  assert.match(top.stdout, 'exercises the shared command-line kit');
  assert.match(top.stdout, 'rows');
  const command = await demo(['rows', '--help']);
  assert.is(command.code, 0);
  assert.match(command.stdout, '--format <format>');
  assert.match(command.stdout, '--log-level');
  const group = await demo(['group', '--help']);
  assert.is(group.code, 0);
  assert.match(group.stdout, 'group alpha <value>');
  assert.match(group.stdout, 'group beta');
});

test('--help of a switch with a --no- form does not call the --no- form the default', async () => {
  const help = await demo(['toggle', '--help']);
  assert.is(help.code, 0);
  assert.match(help.stdout, /--color\s+colour the output \(default\)/);
  assert.match(help.stdout, /--no-color\s+plain output\n/);
  assert.not.match(help.stdout, 'default: true');
  assert.is((await demo(['toggle'])).stdout, 'true\n');
  assert.is((await demo(['toggle', '--no-color'])).stdout, 'false\n');
});

test('--help names a command\'s aliases, and an alias runs the command', async () => {
  const top = await demo(['--help']);
  assert.match(top.stdout, /truth\s+print the value of --on \(also: tf\)/);
  assert.is((await demo(['tf', '--on', 'yes'])).stdout, 'true\n');
});

test('a True/False option takes the spellings its error lists, and refuses others naming it', async () => {
  for (const [given, shown] of [['True', 'true'], ['no', 'false'], ['ON', 'true'], ['0', 'false']]) assert.is((await demo(['truth', '--on', given!])).stdout, `${shown}\n`);
  const bad = await demo(['truth', '--on', 'maybe']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, 'invalid --on "maybe": expected True or False (or yes/no, on/off, 1/0)');
});

test('words after -- are operands (a dataset named -x), continuing those before it; one too many is refused', async () => {
  const shown = async (argv: string[]): Promise<unknown> => JSON.parse((await demo(argv)).stdout);
  assert.equal(await shown(['operands', '--', '-x']), ['-x', null, []]);
  assert.equal(await shown(['operands', 'a', '--', '-y', '--z', 'w']), ['a', '-y', ['--z', 'w']]);
  assert.equal(await shown(['operands', 'a', 'b', 'c', '--', '-d']), ['a', 'b', ['c', '-d']]);
  const extra = await demo(['truth', '--', 'stray']);
  assert.is(extra.code, 2);
  assert.match(extra.stderr, 'Unused args: `stray`');
  // A command that passes the words after -- on takes them as they are.
  assert.equal(await shown(['passes', 'w', '--', '--key', 'value']), ['w', ['--key', 'value']]);
});

test('two-word commands run, and a bad group member gets a hint', async () => {
  const alpha = await demo(['--log-level', 'info', 'group', 'alpha', 'x']);
  assert.is(alpha.stdout, 'alpha x\n');
  assert.is(alpha.code, 0);
  const bare = await demo(['group']);
  assert.is(bare.code, 2);
  assert.match(bare.stderr, 'one of: alpha, beta');
  const typo = await demo(['group', 'bet']);
  assert.is(typo.code, 2);
  assert.match(typo.stderr, 'did you mean `group beta`?');
});

test('--version prints the product version', async () => {
  const r = await demo(['--version']);
  assert.is(r.code, 0);
  assert.match(r.stdout, installation().version);
});

test('-c, then the tool environment variable, then XDG locate the configuration', async () => {
  const flag = await demo(['-c', '/etc/x.toml', 'config'], { KIT_DEMO_CONFIG: '/env.toml' });
  assert.is(flag.stdout, 'flag /etc/x.toml\n');
  const env = await demo(['config'], { KIT_DEMO_CONFIG: '/env.toml' });
  assert.is(env.stdout, 'env /env.toml\n');
  const xdg = await demo(['config'], { XDG_CONFIG_HOME: '/xdg', KIT_DEMO_CONFIG: '' });
  assert.is(xdg.stdout, 'default /xdg/kit-demo/config.toml\n');
});

for (const tool of ['trajstore', 'actorctl', 'sandboxd']) {
  test(`${tool} answers --help and --version, and rejects an unknown command with exit 2`, async () => {
    const help = await runTool(tool, ['--help']);
    assert.is(help.code, 0);
    assert.match(help.stdout, `${tool}:`);
    const version = await runTool(tool, ['--version']);
    assert.is(version.code, 0);
    assert.match(version.stdout, installation().version);
    const unknown = await runTool(tool, ['no-such-command']);
    assert.is(unknown.code, 2);
    assert.match(unknown.stderr, 'unknown command `no-such-command`');
  });
}

test('option values keep what the user typed when a number would change it', async () => {
  const values = async (...args: string[]) => JSON.parse((await demo(['values', ...args])).stdout) as Record<string, unknown>;
  assert.equal(await values('--id', '0123', '--limit', '10'), { id: ['0123'], limit: '10' });
  assert.equal(await values('-i', '1e3', '--id=   ', '--id', '7'), { id: ['1e3', '   ', '7'] });
  assert.equal(await values('--id', 'abc', '--limit', '0x10'), { id: ['abc'], limit: '0x10' });
  // Another command declares --id without -i: the short form of this one still keeps its text.
  assert.equal(await values('-i', '0123'), { id: ['0123'] });
});

test('values that start with "-" but cannot be flags are values: "-", negative numbers, text with spaces, words no flag spells', async () => {
  const values = async (...args: string[]) => JSON.parse((await demo(['values', ...args])).stdout) as Record<string, unknown>;
  assert.equal(await values('--limit', '-1', '-i', '-'), { id: ['-'], limit: '-1' });
  assert.equal(await values('--limit', '-0.5'), { id: [], limit: '-0.5' });
  assert.equal(await values('--id', '-- a comment\nSELECT 1'), { id: ['-- a comment\nSELECT 1'] });
  assert.equal(await values('--limit', '-x', '--id', '-why?'), { id: ['-why?'], limit: '-x' });
  assert.equal(await values('--id=-h'), { id: ['-h'] });
  // A flag of the tool, its short flags run together, or any --word is a flag: the value was forgotten or the flag misspelt.
  for (const [next, shown] of [['-i', /`-i, --id <id>` value is missing/], ['-ii', /`--limit <n>` value is missing/], ['--format', /unknown option `--format`/], ['--idd', /unknown option `--idd`/]] as const) {
    const r = await demo(['values', '--limit', next]);
    assert.is(r.code, 2, `--limit ${next}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, shown);
  }
  assert.match((await demo(['values', '--limit', '-h'])).stdout, /Usage:/);
});

test('an option given an empty value is invalid input naming it, never a value such as 0', async () => {
  for (const args of [['values', '-i', ''], ['values', '--id', 'a', '--id', ''], ['other', '--id', '']]) {
    const r = await demo(args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /error: (-i\/)?--id is empty/);
  }
});

test.run();
