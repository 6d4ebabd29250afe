import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTool } from '../../lib/testing/run-tool.js';
import { ActorSystem } from '../core/system.js';
import { Router } from '../serving/index.js';
import { killAll, startNode, waitFor } from './helpers/cluster.js';

const actor = (args: string[]) => runTool('actorctl', ['actor', '--addr', '127.0.0.1:0', ...args], { timeoutMs: 20_000 });

test.after(async () => {
  await killAll();
});

test('a class path that does not lead to an actor class exits 2 with what was tried', async () => {
  const missing = await actor(['nowhere.at.All']);
  assert.is(missing.code, 2);
  assert.match(missing.stderr, 'dist/nowhere/at.js: no such file');
  assert.match(missing.stderr, "node module 'nowhere/at'");
  const noExport = await actor(['framework.examples.Nope']);
  assert.is(noExport.code, 2);
  assert.match(noExport.stderr, "no export 'Nope' (actor classes exported: Echo)");
  const notActor = await actor(['framework.core.errors.STATUS_OF']);
  assert.is(notActor.code, 2);
  assert.match(notActor.stderr, "export 'STATUS_OF' is a object, not an Actor subclass or a remote() class");
  const noDot = await actor(['Echo']);
  assert.is(noDot.code, 2);
  assert.match(noDot.stderr, 'module.path.ClassName');
});

test('inspect actors with neither --seeds nor --endpoint exits 2 naming both ways to say which nodes', async () => {
  const home = mkdtempSync(join(tmpdir(), 'actorctl-noseeds-'));
  try {
    const run = await runTool('actorctl', ['inspect', 'actors'], { env: { XDG_CONFIG_HOME: home, ACTORCTL_CONFIG: undefined } });
    assert.is(run.code, 2, run.stderr);
    assert.is(run.stderr, 'actorctl: error: --seeds needs at least one address (host:port)\nactorctl: hint: or set seeds in [cluster] of the configuration file, or give one node with --endpoint\n');
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test('an address that is not host:port exits 2 naming the flag, before any connection: a host with a path, spaces or unbracketed colons', async () => {
  const runs: Array<[string[], string]> = [
    [['inspect', 'cluster', '--seeds', 'a:b:c'], "--seeds: 'a:b:c' is not host:port"],
    [['inspect', 'cluster', '--seeds', 'http://127.0.0.1:1/x'], "--seeds: 'http://127.0.0.1:1/x' is not host:port"],
    [['inspect', 'actors', '--endpoint', 'x y:1'], "--endpoint: 'x y:1' is not host:port"],
    [['call', 'echo', 'echo', '[]', '--seeds', '[::1:1'], "--seeds: '[::1:1' is not host:port"],
    [['actor', 'framework.examples.Echo', '--addr', '127.0.0.1/x:0'], "--addr: '127.0.0.1/x:0' is not host:port"],
    [['actor', 'framework.examples.Echo', '--addr', '127.0.0.1:0', '--seeds', 'a@b:1'], "--seeds: 'a@b:1' is not host:port"],
  ];
  for (const [args, message] of runs) {
    const run = await runTool('actorctl', args, { timeoutMs: 20_000 });
    assert.is(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
    assert.match(run.stderr, `actorctl: error: ${message}\n`);
  }
  // Well-formed ones are still taken: a name, IPv4, IPv6 in brackets, an http:// URL, a bare host (port 8000).
  const fine = await runTool('actorctl', ['inspect', 'cluster', '--seeds', 'node-1.example:1,127.0.0.1:1,[::1]:1,http://127.0.0.1:1/,localhost', '--timeout', '2']);
  assert.is(fine.code, 6, fine.stderr);
});

test('settings past what the node can hold exit 2 naming them: a timer past 24 h (Node fires it at once), max_streams past an HTTP/2 SETTINGS value', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'actorctl-settings-'));
  try {
    const config = join(dir, 'actorctl.toml');
    writeFileSync(config, '[limits]\nbody_timeout_ms = 99999999999\n');
    const runs: Array<[string[], string]> = [
      [['framework.examples.Echo', '-D', 'cluster.probe_interval_ms=99999999999'], '-D cluster.probe_interval_ms: 99999999999 is more than 86400000'],
      [['framework.examples.Echo', '-D', 'limits.max_streams=99999999999'], '-D limits.max_streams: 99999999999 is more than 4294967295'],
      [['framework.examples.Echo', '-c', config], 'actorctl.toml:2 (limits.body_timeout_ms): 99999999999 is more than 86400000'],
    ];
    for (const [args, message] of runs) {
      const run = await actor(args);
      assert.is(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stderr, message);
      assert.not.match(run.stderr, 'TimeoutOverflowWarning');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bad constructor parameters exit 2 naming the parameter and the accepted ones', async () => {
  const cases: Array<[string[], string]> = [
    [['--', '--bogus', '1'], 'unknown constructor parameter --bogus (accepted parameters: --prefix <string>, --start <integer>, --delay_ms <number>, --upper <boolean>, --fail_on <string>)'],
    [['--', '--start', 'abc'], "--start: 'abc' is not an integer"],
    [['--', '--start', '1.5'], "--start: '1.5' is not an integer"],
    [['--', '--delay_ms', '-3'], '--delay_ms: Expected number to be greater or equal to 0'],
    [['--', '--prefix'], '--prefix needs a value (string)'],
    [['--', 'loose'], "expected --key after '--', got 'loose'"],
    [['--', '--upper', 'maybe'], "expected --key after '--', got 'maybe'"],
    [['-D', 'actor.extra_kwargs={"nope":1}'], "unknown constructor parameter 'nope' in actor.extra_kwargs"],
    [['-D', 'actor.extra_kwargs={bad'], 'actor.extra_kwargs is not JSON'],
    [['-D', 'cluster.probe_interval_ms=soon'], 'invalid -D cluster.probe_interval_ms "soon": expected a whole number > 0'],
    [['-D', 'cluster.suspect_timeout_ms=0'], 'invalid -D cluster.suspect_timeout_ms "0": expected a whole number > 0'],
    [['-D', 'cluster.indirect_probes=-1'], 'invalid -D cluster.indirect_probes "-1": expected a whole number >= 0'],
    [['-D', 'limits.max_call_bytes=lots'], 'invalid -D limits.max_call_bytes "lots": expected a whole number > 0'],
    // Only the class's own parameters: nothing every object inherits, however it is spelt.
    [['--', '--constructor', 'x'], 'unknown constructor parameter --constructor (accepted parameters: --prefix'],
    [['--', '--toString'], 'unknown constructor parameter --toString'],
    [['--', '--hasOwnProperty', '1'], 'unknown constructor parameter --hasOwnProperty'],
    [['--', '--__proto__', 'x'], 'unknown constructor parameter --__proto__'],
    [['-D', 'actor.extra_kwargs={"constructor":1}'], "unknown constructor parameter 'constructor' in actor.extra_kwargs (accepted parameters: --prefix"],
    [['-D', 'actor.extra_kwargs={"__proto__":{"prefix":"x"}}'], "unknown constructor parameter '__proto__' in actor.extra_kwargs"],
    // Values are taken as typed: nothing is coerced.
    [['-D', 'actor.extra_kwargs={"upper":"yes"}'], 'invalid constructor parameters: --upper: Expected boolean, got "yes" (accepted parameters: --prefix'],
    [['-D', 'actor.extra_kwargs={"start":"7"}'], '--start: Expected integer, got "7"'],
    [['--', '--upper', 'yes'], "expected --key after '--', got 'yes'"],
    [['--', '--start', '0x10'], "--start: '0x10' is not an integer"],
    [['--', '--start', ' 5'], "--start: ' 5' is not an integer"],
    [['--', '--delay_ms', 'Infinity'], "--delay_ms: 'Infinity' is not a number"],
    [['--', '--start', '1', '--start', '2'], 'constructor parameter --start is given twice'],
    [['-D', 'whatever=1'], '-D whatever: unknown key'],
    [['--prefix', 'x'], 'unknown option `--prefix`'],
    [['--seeds', '127.0.0.1:1,nowhere'], "--seeds: 'nowhere' is not host:port"],
  ];
  for (const [args, message] of cases) {
    const r = await actor(['framework.examples.Echo', ...args]);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
  }
  // A required parameter left out is said once, with what it is; a spawn in code says the same.
  const missing = await actor(['framework.serving.Router']);
  assert.is(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, 'invalid constructor parameters: --model_name is required: the model name clients send (accepted parameters:');
  assert.is(missing.stderr.split('model_name').length, 3, `named once, and once among the accepted: ${missing.stderr}`);
  const system = await ActorSystem.start({ log: () => {} });
  try {
    const error = await system.spawn(Router, { params: {} }).then(() => undefined, (e: unknown) => e as Error);
    assert.match(String(error?.message), 'invalid parameters for Router: model_name is required: the model name clients send');
  } finally {
    await system.shutdown();
  }
});

test('--help lists the actor options and the constructor parameters with types and defaults', async () => {
  const r = await runTool('actorctl', ['actor', 'framework.examples.Echo', '--help']);
  assert.is(r.code, 0);
  for (const flag of ['--addr', '--seeds', '--name', '-D, --define']) assert.match(r.stdout, flag);
  assert.match(r.stdout, /-- --start <integer>\s+Echo constructor parameter: first value of the call counter \(default: 0\)/);
  assert.match(r.stdout, /-- --upper <boolean>.*\(default: false\)/);
  assert.match(r.stdout, /-- --prefix <string>.*\(default: ""\)/);
});

test('typed parameters reach the constructor: negative numbers, values starting with -, bare boolean flags, -D JSON', async () => {
  const a = await startNode({ name: 'typed', params: ['--start', '-5', '--prefix', '-x-', '--upper'] });
  assert.match(a.output(), 'constructor parameters: {"start":-5,"prefix":"-x-","upper":true,"delay_ms":0,"fail_on":""}');
  const client = await ActorSystem.start({ seeds: [a.addr], log: () => {} });
  try {
    await waitFor('typed to be known', () => client.instances('typed').length === 1);
    const typed = client.resolve('typed');
    assert.is(await typed.ask('count'), -4);
    assert.is(await typed.ask('echo', ['y']), '-X-Y');
  } finally {
    await client.shutdown();
  }
  const bad = await runTool('actorctl', ['actor', 'framework.examples.Echo', '--addr', 'localhost']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, "--addr: 'localhost' is not host:port");
  // An address in use is a conflict (exit 4), named as given; the node does not linger with its other listener open.
  const port = a.addr.split(':')[1]!;
  const cases: Array<[string[], string]> = [
    [['framework.examples.Echo', '--addr', a.addr], `--addr ${a.addr} is in use by another process`],
    [['framework.examples.Echo', '--addr', '127.0.0.1:0', '--metrics-addr', a.addr], `--metrics-addr ${a.addr} is in use by another process`],
    [['framework.serving.Router', '--addr', '127.0.0.1:0', '--', '--http_port', port, '--model_name', 'tiny'], `framework.serving.Router: could not start: http_port ${port}: 127.0.0.1:${port} is in use by another process`],
  ];
  for (const [args, message] of cases) {
    const taken = await runTool('actorctl', ['actor', ...args], { timeoutMs: 15_000 });
    assert.is(taken.code, 4, `${args.join(' ')}: ${taken.stderr}`);
    assert.match(taken.stderr, message);
    assert.match(taken.stderr, 'hint: choose another port (0 picks a free one)');
  }
  const elsewhere = await runTool('actorctl', ['actor', 'framework.examples.Echo', '--addr', '192.0.2.1:0', '--insecure']);
  assert.is(elsewhere.code, 2, elsewhere.stderr);
  assert.match(elsewhere.stderr, '--addr 192.0.2.1:0: cannot bind: not an address of this machine');
});

test('safe by default: an address other than loopback needs TLS or --insecure, which warns', async () => {
  const refused = await runTool('actorctl', ['actor', 'framework.examples.Echo', '--addr', '0.0.0.0:0']);
  assert.is(refused.code, 2);
  assert.match(refused.stderr, 'address 0.0.0.0:0 is reachable from other machines');
  assert.match(refused.stderr, 'hint: configure TLS');
  assert.is(refused.stdout, '');
  const open = await startNode({ addr: '0.0.0.0:0', params: [], env: {}, extraArgs: ['--insecure'] });
  assert.match(open.output(), "warn: listening on 0.0.0.0:0 without TLS (--insecure): anyone who reaches it can join cluster 'default'");
  open.proc.kill('SIGKILL');
  // The observers' own port is plain HTTP, even on a TLS node: elsewhere than loopback it needs --insecure too.
  const metrics = await runTool('actorctl', ['actor', 'framework.examples.Echo', '--addr', '127.0.0.1:0', '--metrics-addr', '0.0.0.0:0'], { timeoutMs: 15_000 });
  assert.is(metrics.code, 2, metrics.stderr);
  assert.match(metrics.stderr, 'metrics address 0.0.0.0:0 is reachable from other machines');
  assert.match(metrics.stderr, 'hint: bind it to 127.0.0.1');
  assert.is(metrics.stdout, '');
  const exposed = await startNode({ params: [], env: {}, extraArgs: ['--metrics-addr', '0.0.0.0:0', '--insecure'] });
  assert.match(exposed.output(), 'warn: serving the observers on 0.0.0.0:0 over plain HTTP (--insecure)');
  exposed.proc.kill('SIGKILL');
  const help = await runTool('actorctl', ['actor', '--help']);
  assert.match(help.stdout, 'else 127.0.0.1:8000');
});

test('-D actor.extra_kwargs passes parameters without --; the default name is worker; SIGINT leaves', async () => {
  const { spawn } = await import('node:child_process');
  const { join } = await import('node:path');
  const { DIST_ROOT } = await import('../../lib/testing/run-tool.js');
  const args = ['--log-level', 'info', 'actor', 'framework.examples.Echo', '--addr', '127.0.0.1:0', '-D', 'actor.extra_kwargs={"prefix":"j:","start":7}'];
  const proc = spawn(process.execPath, [join(DIST_ROOT, 'cli/actorctl.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (c: Buffer) => (out += c));
  proc.stderr.on('data', (c: Buffer) => (err += c));
  // 'close' comes after the output is all read, which the assertions below need.
  const exited = new Promise<number | null>((resolve) => proc.once('close', (code) => resolve(code)));
  try {
    const addr = await waitFor('start', () => /\[worker\] Started at (\S+)/.exec(out)?.[1]);
    const client = await ActorSystem.start({ seeds: [addr], log: () => {} });
    try {
      await waitFor('worker known', () => client.instances('worker').length === 1);
      assert.is(await client.resolve('worker').ask('echo', ['a']), 'j:a');
      assert.is(await client.resolve('worker').ask('count'), 8);
      proc.kill('SIGINT');
      assert.is(await exited, 0);
      assert.match(err, 'info: [worker] stopping: leaving the cluster');
      assert.is(out.trim().split('\n').length, 1, `stdout has the one result line: ${out}`);
      await waitFor('worker Left', () => client.membership.list().find((m) => m.addr === addr)?.status === 'Left', 5000);
    } finally {
      await client.shutdown();
    }
  } finally {
    proc.kill('SIGKILL');
  }
});

test.run();
