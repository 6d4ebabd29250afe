/**
 * Running a cluster from the shell, against three node processes: /metrics scraped over HTTP/1.1
 * (the node's port and --metrics-addr), `actorctl call`, inspect's output formats with results on
 * stdout only, the configuration file (-c, $ACTORCTL_CONFIG: missing exits 3, bad exits 2) and
 * `inspect watch` showing a member killed mid-watch as Suspect, then Failed, without exiting.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import http from 'node:http';
import http2 from 'node:http2';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DIST_ROOT, runTool } from '../../lib/testing/run-tool.js';
import { killAll, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';
import { freePort } from '../../bench/lib/free-port.js';

const dir = mkdtempSync(join(tmpdir(), 'actor-ops-'));
let nodes: NodeProcess[] = [];
let metricsAddr = '';

test.before(async () => {
  // A free port for --metrics-addr.
  metricsAddr = `127.0.0.1:${await freePort()}`;
  const a = await startNode({ name: 'echo', extraArgs: ['--metrics-addr', metricsAddr] });
  const [b, c] = await Promise.all([startNode({ name: 'echo', seeds: [a.addr] }), startNode({ name: 'echo', seeds: [a.addr] })]);
  nodes = [a, b, c];
  await waitFor('3 Alive', async () => {
    const r = await runTool('actorctl', ['inspect', 'cluster', '--seeds', a.addr, '--format', 'json']);
    return r.code === 0 && (JSON.parse(r.stdout) as Array<{ status: string }>).filter((m) => m.status === 'Alive').length === 3;
  });
});

test.after(async () => {
  await killAll();
  rmSync(dir, { recursive: true, force: true });
});

/** GET over HTTP/1.1 with Node's http client (as Prometheus scrapes). */
function get(addr: string, path: string): Promise<{ status: number; type: string; body: string; version: string }> {
  const [host, port] = addr.split(':');
  return new Promise((resolve, reject) => {
    const req = http.get({ host, port: Number(port), path, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, type: String(res.headers['content-type']), body, version: res.httpVersion }));
    });
    req.on('error', reject);
  });
}

test('/metrics answers HTTP/1.1 in the Prometheus text format, on the node port and on --metrics-addr', async () => {
  for (const addr of [nodes[0]!.addr, metricsAddr, nodes[1]!.addr]) {
    const r = await get(addr, '/metrics');
    assert.is(r.status, 200, addr);
    assert.is(r.version, '1.1');
    assert.is(r.type, 'text/plain; version=0.0.4; charset=utf-8');
    assert.match(r.body, /^# HELP actor_cluster_members /m);
    assert.match(r.body, /^actor_cluster_members\{node_id="[0-9a-f]{32}",status="Alive"\} 3$/m);
    assert.match(r.body, /^process_resident_memory_bytes\{node_id="[0-9a-f]{32}"\} \d+$/m);
    // Every sample line is `name{labels} value`, as a Prometheus parser wants.
    for (const line of r.body.split('\n').filter((l) => l && !l.startsWith('#'))) assert.match(line, /^[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+$/, line);
  }
  const health = await get(nodes[0]!.addr, '/health');
  assert.is(JSON.parse(health.body).status, 'ok');
  const call = await get(nodes[0]!.addr, '/named/echo');
  assert.is(call.status, 404, 'calls are not served over HTTP/1.1');
});

test('actorctl call: ask, stream, tell, @- from stdin; errors map to exit codes; stdout holds only the result', async () => {
  const seeds = ['--seeds', nodes[1]!.addr];
  const ask = await runTool('actorctl', ['call', 'echo', 'echo', '["hello", 2]', ...seeds]);
  assert.is(ask.code, 0, ask.stderr);
  assert.is(ask.stdout, '"hello"\n');
  assert.is(ask.stderr, '');
  const stream = await runTool('actorctl', ['call', 'echo', 'stream', '[3]', '--mode', 'stream', ...seeds]);
  assert.is(stream.code, 0, stream.stderr);
  assert.equal(stream.stdout.trim().split('\n').map((l) => JSON.parse(l)), [{ index: 0, of: 3 }, { index: 1, of: 3 }, { index: 2, of: 3 }]);
  const tell = await runTool('actorctl', ['call', 'echo', 'count', '--mode', 'tell', ...seeds]);
  assert.is(tell.code, 0, tell.stderr);
  const stdin = await runTool('actorctl', ['call', 'echo', 'echo', '@-', ...seeds], { input: '[{"big": "document"}]' });
  assert.is(stdin.stdout, '{"big":"document"}\n');
  const file = join(dir, 'args.json');
  writeFileSync(file, '["from a file"]');
  assert.is((await runTool('actorctl', ['call', 'echo', 'echo', `@${file}`, ...seeds])).stdout, '"from a file"\n');
  for (const [args, code, message] of [
    [['call', 'nobody', 'echo', '[]'], 3, 'nobody'],
    [['call', 'echo', 'nothing', '[]'], 3, 'nothing'],
    [['call', 'echo', 'echo', '{"not":"an array"}'], 2, 'ARGS_JSON must be a JSON array'],
    [['call', 'echo', 'echo', '[1'], 2, 'ARGS_JSON is not JSON'],
    [['call', 'echo', 'echo', `@${join(dir, 'none.json')}`], 3, 'none.json'],
    [['call', 'echo', 'stream', '[1]'], 2, '--mode stream'],
    // Each address once, and the system's words for what happened, not Node's.
    [['call', 'echo', 'echo', '[]', '--seeds', '127.0.0.1:1', '--timeout', '1'], 6, /error: cannot connect to any seed node \(127\.0\.0\.1:1: connection refused\)\n/],
    [['inspect', 'actors', '--endpoint', '127.0.0.1:1'], 6, /error: cannot query 127\.0\.0\.1:1: connection refused\n/],
  ] as const) {
    const r = await runTool('actorctl', [...args, ...((args as readonly string[]).some((a) => a === '--seeds' || a === '--endpoint') ? [] : seeds)]);
    assert.is(r.code, code, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
    assert.is(r.stdout, '', 'errors print nothing on stdout');
  }
});

test('actorctl call: ARGS_JSON past 64 MiB, from a file or stdin, exits 5 without reading the rest', async () => {
  // `yes | actorctl call ... @-` (or @/dev/zero) was read whole: 16 GB, then the process aborted.
  const big = join(dir, 'big-args.json');
  writeFileSync(big, '');
  truncateSync(big, 65 * 1024 * 1024);
  const fromFile = await runTool('actorctl', ['call', 'echo', 'echo', `@${big}`, '--seeds', '127.0.0.1:1']);
  assert.is(fromFile.code, 5, fromFile.stderr);
  assert.match(fromFile.stderr, `ARGS_JSON (${big}) is over 64 MiB`);
  const fromStdin = await runTool('actorctl', ['call', 'echo', 'echo', '@-', '--seeds', '127.0.0.1:1'], { input: Buffer.alloc(65 * 1024 * 1024, 0x5b) });
  assert.is(fromStdin.code, 5, fromStdin.stderr);
  assert.match(fromStdin.stderr, 'ARGS_JSON (stdin) is over 64 MiB');
});

test('actorctl call: a body past the node\'s max_call_bytes exits 5 naming the limit, however far past; the node keeps serving', async () => {
  // A 40 MB body exited 6 (ENHANCE_YOUR_CALM): the client queued all of it in its HTTP/2 session at
  // once, past the session's memory cap, so its own session refused the node's 413 when it arrived.
  const seeds = ['--seeds', nodes[0]!.addr];
  for (const megabytes of [12, 40]) writeFileSync(join(dir, `args-${megabytes}mb.json`), `["${'x'.repeat(megabytes * 1024 * 1024)}"]`);
  for (const [megabytes, mode] of [[12, 'ask'], [40, 'ask'], [40, 'stream'], [40, 'tell']] as const) {
    const file = join(dir, `args-${megabytes}mb.json`);
    const r = await runTool('actorctl', ['call', 'echo', 'echo', `@${file}`, '--mode', mode, ...seeds]);
    assert.is(r.code, 5, `${megabytes} MB, --mode ${mode}: ${r.stderr}`);
    assert.match(r.stderr, 'too-large: body exceeds 4194304 bytes (limit max_call_bytes)');
    assert.is(r.stdout, '');
  }
  // The node keeps serving, and a body within the limit, sent in slices as the stream drains, arrives whole.
  const within = 'y'.repeat(3 * 1024 * 1024);
  writeFileSync(join(dir, 'args-3mb.json'), `["${within}"]`);
  const after = await runTool('actorctl', ['call', 'echo', 'echo', `@${join(dir, 'args-3mb.json')}`, ...seeds]);
  assert.is(after.code, 0, after.stderr);
  assert.ok(after.stdout === `"${within}"\n`, `the 3 MiB echo came back whole (${after.stdout.length} characters)`);
});

/** `actorctl ARGS` and its peak resident set size in MB (bench/lib/rusage.ts, preloaded: the real command, unchanged). */
async function measuredCall(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string; peakMb: number }> {
  const rssFile = join(dir, 'rss.json');
  rmSync(rssFile, { force: true });
  const preload = pathToFileURL(join(DIST_ROOT, 'bench', 'lib', 'rusage.js')).href;
  const r = await runTool('actorctl', args, { env: { NODE_OPTIONS: `--import=${preload}`, BENCH_RSS_FILE: rssFile }, timeoutMs: 120_000 });
  return { ...r, peakMb: (JSON.parse(readFileSync(rssFile, 'utf8')) as { maxRssKb: number }).maxRssKb / 1024 };
}

test('actorctl call @FILE of 40 MB: its bytes go out as they are once checked to be an array (not parsed, encoded again and copied), so the call holds about four copies, not six', async () => {
  const big = await startNode({ name: 'bigecho', extraArgs: ['-D', 'limits.max_call_bytes=67108864', '-D', 'limits.max_connection_bytes=134217728', '-D', 'limits.max_node_bytes=268435456'] });
  const seeds = ['--seeds', big.addr, '--timeout', '60'];
  const text = 'z'.repeat(40 * 1024 * 1024);
  const file = join(dir, 'args-40mb-ok.json');
  writeFileSync(file, ` [ "${text}" ]\n`);
  const small = await measuredCall(['call', 'bigecho', 'echo', '["x"]', '--mode', 'tell', ...seeds]);
  assert.is(small.code, 0, small.stderr);
  const sent = await measuredCall(['call', 'bigecho', 'echo', `@${file}`, '--mode', 'tell', ...seeds]);
  assert.is(sent.code, 0, sent.stderr);
  const grownMb = sent.peakMb - small.peakMb;
  console.log(`  actorctl call --mode tell, 40 MiB ARGS_JSON: peak RSS ${sent.peakMb.toFixed(0)} MB, ${grownMb.toFixed(0)} MB over a small call`);
  // Read, decoded, parsed for the check (here a copy of the string): 160 MiB. Encoding it again and copying that made 240.
  assert.ok(grownMb < 200, `peak RSS grew ${grownMb.toFixed(0)} MB for 40 MiB of arguments`);
  // What went out is what the file says (its spaces and newline too are JSON's), and comes back whole.
  const echoed = await runTool('actorctl', ['call', 'bigecho', 'echo', `@${file}`, ...seeds], { timeoutMs: 120_000 });
  assert.is(echoed.code, 0, echoed.stderr);
  assert.ok(echoed.stdout === `"${text}"\n`, `the 40 MiB echo came back whole (${echoed.stdout.length} characters)`);
});

test('inspect --format table|json|jsonl|csv, every format with the same columns; progress goes to stderr, never stdout', async () => {
  const seeds = ['--seeds', nodes[0]!.addr];
  for (const command of ['cluster', 'actors', 'metrics']) {
    const table = await runTool('actorctl', ['--log-level', 'info', 'inspect', command, ...seeds, '--format', 'table', ...(command === 'metrics' ? ['--raw', 'False'] : [])]);
    assert.is(table.code, 0, table.stderr);
    assert.not.match(table.stdout, /connecting|Connecting|querying/, `${command}: progress is not a result`);
    if (command === 'cluster') assert.match(table.stderr, 'info: connecting to the cluster via seeds');
    const json = await runTool('actorctl', ['inspect', command, ...seeds, '--format', 'json']);
    const rows = JSON.parse(json.stdout) as unknown[];
    assert.ok(Array.isArray(rows) && rows.length > 0, `${command} --format json is an array of rows`);
    const jsonl = await runTool('actorctl', ['inspect', command, ...seeds, '--format', 'jsonl']);
    const lines = jsonl.stdout.trim().split('\n').map((l) => JSON.parse(l) as unknown);
    assert.is(lines.length, rows.length, `${command}: one line per row`);
  }
  // A table (piped, --wide or not) has the columns the other formats have, in their order, as the README lists them.
  const a = nodes[0]!.addr;
  for (const [args, header] of [
    [['cluster', ...seeds], 'node_id,addr,status,actors'],
    [['actors', ...seeds], 'name,instances,nodes,actor_ids'],
    [['actors', '--endpoint', a], 'name,type,actor_id,class,status,module,calls,active_streams'],
    [['metrics', ...seeds, '--raw', 'False'], 'node_id,addr,series,value'],
  ] as const) {
    const csv = await runTool('actorctl', ['inspect', ...args, '--format', 'csv']);
    assert.is(csv.stdout.split('\n')[0], header, args.join(' '));
    for (const wide of [[], ['--wide']]) {
      const table = await runTool('actorctl', ['inspect', ...args, ...wide]);
      assert.equal(table.stdout.split('\n')[0]!.split(/\s+/), header.toUpperCase().split(','), `${args.join(' ')} ${wide.join(' ')}`);
    }
  }
  // What actors report keeps its type: counts are numbers in JSON.
  const [echo] = JSON.parse((await runTool('actorctl', ['inspect', 'actors', '--endpoint', a, '--format', 'json'])).stdout) as Array<Record<string, unknown>>;
  assert.is(typeof echo?.calls, 'number');
  assert.is(typeof echo?.active_streams, 'number');
  const bad = await runTool('actorctl', ['inspect', 'cluster', ...seeds, '--format', 'yaml']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, '--format');
});

test('-c FILE and $ACTORCTL_CONFIG are honoured by inspect and call; a missing file exits 3, a bad one 2', async () => {
  const config = join(dir, 'actorctl.toml');
  writeFileSync(config, `[cluster]\nseeds = ["${nodes[2]!.addr}"]\n`);
  const viaFlag = await runTool('actorctl', ['-c', config, 'inspect', 'cluster', '--format', 'json']);
  assert.is(viaFlag.code, 0, viaFlag.stderr);
  assert.is((JSON.parse(viaFlag.stdout) as unknown[]).length, 3);
  const viaEnv = await runTool('actorctl', ['call', 'echo', 'echo', '["configured"]'], { env: { ACTORCTL_CONFIG: config } });
  assert.is(viaEnv.stdout, '"configured"\n', viaEnv.stderr);
  // The cluster's name from the file is sent: a cluster of another name refuses.
  writeFileSync(config, `[cluster]\nname = "elsewhere"\nseeds = ["${nodes[2]!.addr}"]\n`);
  const stranger = await runTool('actorctl', ['-c', config, 'call', 'echo', 'echo', '[1]']);
  assert.is(stranger.code, 2, stranger.stderr);
  assert.match(stranger.stderr, "not 'elsewhere'");
  const missing = await runTool('actorctl', ['-c', join(dir, 'nowhere.toml'), 'inspect', 'cluster']);
  assert.is(missing.code, 3);
  assert.match(missing.stderr, 'nowhere.toml');
  for (const [text, why] of [
    ['[cluster\nseeds = 1\n', 'actorctl.toml:1'],
    ['[cluster]\nseeds = 5\n', 'seeds'],
    ['[clutser]\nname = "x"\n', 'clutser'],
    ['[limits]\nmax_call_bytes = -1\n', 'max_call_bytes'],
  ] as const) {
    writeFileSync(config, text);
    const r = await runTool('actorctl', ['-c', config, 'inspect', 'cluster']);
    assert.is(r.code, 2, `${JSON.stringify(text)}: ${r.stderr}`);
    assert.match(r.stderr, why);
    const node = await runTool('actorctl', ['-c', config, 'actor', 'framework.examples.Echo', '--addr', '127.0.0.1:0']);
    assert.is(node.code, 2, `actor with ${JSON.stringify(text)}: ${node.stderr}`);
  }
});

test('caps: connections beyond limits.max_connections are closed as they arrive; each connection gets limits.max_streams concurrent streams', async () => {
  const node = await startNode({ name: 'capped', extraArgs: ['-D', 'limits.max_connections=4', '-D', 'limits.max_streams=2'] });
  const [host, port] = node.addr.split(':');
  const sockets = await Promise.all(
    Array.from({ length: 6 }, () => new Promise<net.Socket>((resolve) => {
      const s = net.connect(Number(port), host!, () => resolve(s));
      s.on('error', () => {});
    })),
  );
  await new Promise((r) => setTimeout(r, 300));
  const open = sockets.filter((s) => !s.destroyed && s.readyState === 'open' && !s.readableEnded);
  assert.is(open.length, 4, `${open.length} of 6 connections stay open`);
  for (const s of sockets) s.destroy();
  // At least the two refused above: a scrape that arrives before the node has seen the others close is refused too.
  await waitFor('the node to count its refusals', async () => Number(/actor_refused_total\{reason="connections"\} (\d+)/.exec((await get(node.addr, '/metrics')).body)?.[1] ?? 0) >= 2);
  const settings = await new Promise<http2.Settings>((resolve, reject) => {
    const session = http2.connect(`http://${node.addr}`);
    session.on('error', reject);
    session.once('remoteSettings', (s) => (session.close(), resolve(s)));
  });
  assert.is(settings.maxConcurrentStreams, 2);
  node.proc.kill('SIGKILL');
});

/**
 * At limits.max_connections=8, eight connections made by `open(addr, i)` (odd ones hold a stream open)
 * and quiet for 2.5 s, `chatter` sent on each every 200 ms: a new client still gets in, the quietest
 * making room for it, and those with no stream open are closed after body_timeout_ms.
 */
async function quietConnectionsMakeRoom(open: (addr: string, i: number) => http2.ClientHttp2Session, chatter?: (session: http2.ClientHttp2Session) => void): Promise<void> {
  const node = await startNode({ name: 'echo', extraArgs: ['-D', 'limits.max_connections=8', '-D', 'limits.body_timeout_ms=4000'] });
  const sessions = Array.from({ length: 8 }, (_, i) => open(node.addr, i));
  const ticker = setInterval(() => {
    for (const s of sessions) if (chatter && !s.closed && !s.destroyed && !s.connecting) chatter(s);
  }, 200);
  try {
    await waitFor('the node to hold 8 connections', async () => sessions.every((s) => !s.connecting), 5000);
    // Quiet for a second or more (looked at once a second), not yet for body_timeout_ms.
    await new Promise((r) => setTimeout(r, 2500));
    const call = await runTool('actorctl', ['call', 'echo', 'echo', '["let me in"]', '--seeds', node.addr, '--timeout', '5']);
    assert.is(call.code, 0, call.stderr);
    assert.is(call.stdout, '"let me in"\n');
    assert.match(node.output(), 'quiet the longest, to make room');
    await waitFor('the connections without a stream to be closed', () => sessions.filter((_, i) => i % 2 === 0).every((s) => s.closed || s.destroyed), 10_000);
  } finally {
    clearInterval(ticker);
    for (const s of sessions) s.destroy();
    node.proc.kill('SIGKILL');
  }
}

test('quiet connections make room: at limits.max_connections the quietest is closed for a new client, and one with no stream is closed after body_timeout_ms', async () => {
  // Connections that say their preface and nothing more; half hold a call channel open and send nothing on it.
  await quietConnectionsMakeRoom((addr, i) => {
    const session = http2.connect(`http://${addr}`);
    session.on('error', () => {});
    if (i % 2) session.request({ ':method': 'POST', ':path': '/_channel', 'x-actor-cluster': 'default' }).on('error', () => {});
    return session;
  });
});

test('frames that ask for nothing keep no place: connections sending only PINGs and SETTINGS, or holding a reply they never read, make room at limits.max_connections and are closed when idle', async () => {
  // Connections that never ask for anything, yet send a PING and a SETTINGS every 200 ms (bytes that
  // cost nothing); half also hold a /metrics reply they never read (a window of 0).
  await quietConnectionsMakeRoom(
    (addr, i) => {
      const session = http2.connect(`http://${addr}`, { settings: { initialWindowSize: i % 2 ? 0 : 65535 } });
      session.on('error', () => {});
      if (i % 2) session.request({ ':path': '/metrics' }).on('error', () => {});
      return session;
    },
    (s) => {
      s.ping(() => {});
      s.settings({ enablePush: false });
    },
  );
});

test('inspect watch shows a member killed mid-watch as Suspect, then Failed, and keeps watching', async () => {
  const [a, , c] = nodes as [NodeProcess, NodeProcess, NodeProcess];
  const watch = runTool('actorctl', ['inspect', 'watch', '--seeds', a.addr, '--kind', 'cluster', '--interval', '0.2', '--max_rounds', '25', '--timeout', '0.5', '--format', 'jsonl']);
  await new Promise((r) => setTimeout(r, 600));
  c.proc.kill('SIGKILL');
  const w = await watch;
  assert.is(w.code, 0, w.stderr);
  const changes = w.stdout.trim().split('\n').map((l) => JSON.parse(l) as { round: number; subject: string; before: unknown; after: unknown });
  const ofC = changes.filter((ch) => ch.subject.includes(c.addr) && ch.round > 1);
  const roundOf = (status: string): number | undefined => ofC.find((ch) => ch.after === status)?.round;
  const shown = JSON.stringify(ofC.map((ch) => [ch.round, ch.after]));
  assert.ok(roundOf('Suspect') !== undefined, `Suspect shown: ${shown}`);
  assert.ok(roundOf('Failed') !== undefined, `Failed shown: ${shown}`);
  // The watch went on past the round that showed Suspect: Failed came in a later one.
  assert.ok(roundOf('Failed')! > roundOf('Suspect')!, `Suspect, then Failed in a later round: ${shown}`);
});

test.run();
