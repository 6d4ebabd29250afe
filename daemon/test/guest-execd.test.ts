/**
 * The execution service run as a real host process and driven through the official
 * `@alibaba-group/opensandbox` SDK's command and file adapters.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import { scratchDir } from '../../lib/testing/scratch.js';
import * as assert from 'uvu/assert';
import { SandboxApiException } from '@alibaba-group/opensandbox';
import { execdClient, startGuestService, type GuestService } from './guest-process.js';

let svc: GuestService;
let sdk: ReturnType<typeof execdClient>;
let work: string;

test.before(async () => {
  svc = await startGuestService('execd', { args: ['--ping-interval-ms', '200'] });
  sdk = execdClient(svc.addr, svc.headers);
  work = scratchDir('guest-execd');
});

test.after(async () => {
  await sdk?.close();
  await svc?.stop();
});

/** A command's status once it has stopped running (polled for up to 5 s). */
async function statusOnceStopped(id: string) {
  let status = await sdk.commands.getCommandStatus(id);
  for (let i = 0; i < 100 && status.running; i++) {
    await new Promise((r) => setTimeout(r, 50));
    status = await sdk.commands.getCommandStatus(id);
  }
  return status;
}

/** Fails unless `fn` throws an SDK API error carrying this code and a message. */
async function expectApiError(fn: () => Promise<unknown>, code: string, status?: number): Promise<void> {
  try {
    await fn();
  } catch (e) {
    assert.instance(e, SandboxApiException);
    const err = e as SandboxApiException;
    if (status !== undefined) assert.is(err.statusCode, status);
    // Upload and download report the raw body; JSON adapters parse it into `error`.
    const body = typeof err.rawBody === 'string' ? (JSON.parse(err.rawBody) as { code: string; message: string }) : undefined;
    const got = body?.code ?? err.error.code;
    assert.is(got, code, `expected code ${code}, got ${got} (${err.message})`);
    assert.ok((body?.message ?? err.error.message ?? '').length > 0, 'error message is empty');
    return;
  }
  assert.unreachable(`expected an API error with code ${code}`);
}

test('ping, ready and metrics answer', async () => {
  assert.is(await sdk.health.ping(), true);
  // Readiness answers without a token: the SDK's poll carries none.
  const ready = await fetch(`http://${svc.addr}/ready`);
  assert.equal(await ready.json(), { initialized: true });
  const m = await sdk.metrics.getMetrics();
  assert.ok(m.cpuCount >= 1, JSON.stringify(m));
  assert.ok(m.memoryTotalMiB > 0, JSON.stringify(m));
});

test('foreground command: stdout, stderr and exit code 0', async () => {
  const ex = await sdk.commands.run('echo out; echo err >&2');
  assert.is(ex.exitCode, 0);
  assert.is(ex.logs.stdout.map((m) => m.text).join(''), 'out\n');
  assert.is(ex.logs.stderr.map((m) => m.text).join(''), 'err\n');
  assert.ok(ex.id && ex.id.length > 0);
  assert.ok(ex.complete);
});

test('non-zero exit codes come back through the error event', async () => {
  const ex = await sdk.commands.run('echo partial; exit 7');
  assert.is(ex.exitCode, 7);
  assert.is(ex.error?.name, 'CommandExecError');
  assert.is(ex.logs.stdout[0]?.text, 'partial\n');
});

test('output streams while the command runs (it waits for the client to see its first line)', async () => {
  const flag = join(work, 'seen-first-line');
  // The command cannot finish until the test has received "ready": buffering would deadlock it.
  const script = `echo ready; for i in $(seq 100); do [ -e '${flag}' ] && { echo after; exit 0; }; sleep 0.1; done; echo never; exit 9`;
  const seen: string[] = [];
  const ex = await sdk.commands.run(script, {}, {
    onStdout: (m) => {
      seen.push(m.text);
      if (m.text.includes('ready')) writeFileSync(flag, '');
    },
  });
  assert.is(ex.exitCode, 0, seen.join(''));
  assert.is(seen.join(''), 'ready\nafter\n');
});

test('keep-alive ping events arrive during a quiet command', async () => {
  const types: string[] = [];
  for await (const ev of sdk.commands.runStream('sleep 0.7; echo done')) types.push(ev.type);
  assert.is(types[0], 'init');
  assert.ok(types.includes('ping'), types.join(','));
  assert.is(types.at(-1), 'execution_complete');
});

test('cwd and envs apply; the service environment is not leaked into a clean variable', async () => {
  const ex = await sdk.commands.run('pwd; printf "%s\\n" "$GREETING"', { workingDirectory: work, envs: { GREETING: 'grüß dich ✓' } });
  assert.is(ex.exitCode, 0);
  assert.is(ex.logs.stdout.map((m) => m.text).join(''), `${work}\ngrüß dich ✓\n`);
});

/** POSTs a body to /command as is and reads its events (bare JSON lines) to the end, or its error. */
async function rawCommand(body: unknown): Promise<{ status: number; events: Array<{ type: string; text?: string; error?: { evalue: string } }>; error?: { code: string; message: string } }> {
  const res = await fetch(`http://${svc.addr}/command`, { method: 'POST', headers: { ...svc.headers, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) return { status: res.status, events: [], error: JSON.parse(text) as { code: string; message: string } };
  return { status: res.status, events: text.split('\n').filter((line) => line.trim()).map((line) => JSON.parse(line) as { type: string }) };
}

test('argv runs a program with literal arguments, no shell (the Python SDK sends a list as argv)', async () => {
  const out = (r: Awaited<ReturnType<typeof rawCommand>>): string => r.events.filter((e) => e.type === 'stdout').map((e) => e.text).join('');
  const literal = await rawCommand({ argv: ['printf', '%s|', 'a b', '$HOME', '*', "it's"], cwd: work });
  assert.is(literal.status, 200, JSON.stringify(literal.error));
  assert.is(out(literal), "a b|$HOME|*|it's|");
  assert.is(literal.events.at(-1)?.type, 'execution_complete');
  // A bare name is looked up in the command's PATH, which envs may set.
  const found = await rawCommand({ argv: ['env'], envs: { PATH: '/usr/bin:/bin', MARK: 'x y' } });
  assert.match(out(found), /^MARK=x y$/m);
  const failed = await rawCommand({ argv: ['sh', '-c', 'exit 3'] });
  assert.is(failed.events.at(-1)?.error?.evalue, '3');
  const background = await rawCommand({ argv: ['echo', 'in the log'], background: true });
  const id = background.events.find((e) => e.type === 'init')!.text!;
  assert.is((await statusOnceStopped(id)).exitCode, 0);
  assert.is((await sdk.commands.getBackgroundCommandLogs(id)).content, 'in the log\n');
  const refused: Array<[unknown, RegExp]> = [
    [{ argv: ['echo'], command: 'echo' }, /exactly one of 'command' and 'argv'/],
    [{ cwd: '/' }, /exactly one of 'command' and 'argv'/],
    [{ argv: [] }, /'argv' is empty/],
    [{ argv: ['', 'x'] }, /'argv\[0\]' is empty/],
    [{ argv: ['echo', 'a\u0000b'] }, /'argv\[1\]' contains a NUL byte/],
    [{ argv: ['no-such-program-here'] }, /'argv\[0\]'.*no-such-program-here/],
  ];
  for (const [body, message] of refused) {
    const r = await rawCommand(body);
    assert.is(r.status, 400, JSON.stringify(body));
    assert.is(r.error?.code, 'INVALID_REQUEST_BODY');
    assert.match(r.error!.message, message);
  }
});

/** The command the Python SDK's `commands.set_env(key, value)` runs (opensandbox 1.1.1): it appends one entry to $EXECD_ENVS. */
function setEnvCommand(key: string, value: string): string {
  const entry = value.includes("'") ? `${key}="${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n').replace(/\r/g, '\\r').replace(/\t/g, '\\t')}"` : `${key}='${value}'`;
  const quoted = `'${entry.replace(/'/g, "'\\''")}'`;
  return [
    `if [ -z "\${EXECD_ENVS:-}" ]; then printf '%s\\n' 'EXECD_ENVS is not set; cannot persist environment variable ${key}' >&2; exit 1; fi`,
    'mkdir -p "$(dirname "$EXECD_ENVS")"',
    `printf '%s\\n' ${quoted} >> "$EXECD_ENVS"`,
  ].join('\n');
}

test('set_env: variables appended to $EXECD_ENVS reach later commands and sessions, under the request envs', async () => {
  const stdout = (ex: { logs: { stdout: Array<{ text: string }> } }): string => ex.logs.stdout.map((m) => m.text).join('');
  for (const [key, value] of [['SET_PLAIN', 'a $HOME b'], ['SET_QUOTED', 'it\'s "x"\tz\\n'], ['SET_LINES', 'one\ntwo']]) {
    const set = await sdk.commands.run(setEnvCommand(key!, value!));
    assert.is(set.exitCode, 0, set.logs.stderr.map((m) => m.text).join(''));
  }
  const expected = 'a $HOME b|it\'s "x"\tz\\n|one\ntwo';
  assert.is(stdout(await sdk.commands.run('printf "%s|%s|%s" "$SET_PLAIN" "$SET_QUOTED" "$SET_LINES"')), expected);
  assert.is(stdout(await sdk.commands.run('printf %s "$SET_PLAIN"', { envs: { SET_PLAIN: 'the request wins' } })), 'the request wins');
  const session = await sdk.commands.createSession();
  assert.is(stdout(await sdk.commands.runInSession(session, 'printf "%s|%s|%s" "$SET_PLAIN" "$SET_QUOTED" "$SET_LINES"')), expected);
  await sdk.commands.deleteSession(session);
  // A file that cannot be read as entries stops commands with a message naming it, and the files API repairs it.
  const file = stdout(await sdk.commands.run('printf %s "$EXECD_ENVS"'));
  assert.ok(file.startsWith('/'), file);
  await sdk.files.writeFiles([{ path: file, data: 'SET_PLAIN=1\nnot an entry\n' }]);
  await expectApiError(() => sdk.commands.run('true'), 'RUNTIME_ERROR', 500);
  await sdk.files.deleteFiles([file]);
  assert.is(stdout(await sdk.commands.run('printf %s "${SET_PLAIN-unset}"')), 'unset');
});

test('cwd expands $NAME and ${NAME} from the command environment and a leading ~ to the service user home', async () => {
  const pwd = async (cwd: string, envs?: Record<string, string>): Promise<string> => (await sdk.commands.run('pwd', { workingDirectory: cwd, ...(envs ? { envs } : {}) })).logs.stdout.map((m) => m.text).join('');
  mkdirSync(join(work, 'sub dir'), { recursive: true });
  assert.is(await pwd('$CWD_BASE/${CWD_LEAF}', { CWD_BASE: work, CWD_LEAF: 'sub dir' }), `${join(work, 'sub dir')}\n`);
  assert.is(await pwd('~'), `${realpathSync(process.env.HOME ?? '/')}\n`);
  // Variables of the env file count as the command's own.
  assert.is((await sdk.commands.run(setEnvCommand('CWD_FROM_FILE', work))).exitCode, 0);
  assert.is(await pwd('${CWD_FROM_FILE}'), `${work}\n`);
  await expectApiError(() => sdk.commands.run('pwd', { workingDirectory: '$CWD_UNSET_VARIABLE/x' }), 'INVALID_REQUEST_BODY', 400);
  const unset = await rawCommand({ command: 'pwd', cwd: '$CWD_UNSET_VARIABLE/x' });
  assert.match(unset.error!.message, /field 'cwd': \$CWD_UNSET_VARIABLE is not set/);
});

test('a foreground command that leaves a background process behind still completes', async () => {
  // The background sleep inherits stdout; the command must end when the shell does.
  const ex = await sdk.commands.run('sleep 30 & echo "bg=$!"', { timeoutSeconds: 20 });
  assert.is(ex.exitCode, 0);
  const pid = /bg=(\d+)/.exec(ex.logs.stdout.map((m) => m.text).join(''))?.[1];
  assert.ok(pid);
  // It is still alive (not killed by SIGPIPE or by the service): stop it ourselves.
  const alive = await sdk.commands.run(`kill -0 ${pid} && echo alive; kill ${pid}`);
  assert.is(alive.logs.stdout[0]?.text, 'alive\n');
});

test('a foreground command stops when its client goes away', async () => {
  // Plain fetch: the SDK 0.1.11 detaches its abort signal once response headers arrive.
  const abort = new AbortController();
  const res = await fetch(`http://${svc.addr}/command`, {
    method: 'POST',
    headers: svc.headers,
    body: JSON.stringify({ command: 'echo started; sleep 30' }),
    signal: abort.signal,
  });
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('started')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  const id = (JSON.parse(text.split('\n')[0]!) as { type: string; text: string }).text;
  abort.abort();
  const status = await statusOnceStopped(id);
  assert.is(status.running, false);
  assert.is(status.exitCode, 137);
});

test('a quiet foreground command stops as soon as its client goes away, not at the next ping', async () => {
  const quiet = await startGuestService('execd', { args: ['--ping-interval-ms', '600000'] });
  try {
    const abort = new AbortController();
    const res = await fetch(`http://${quiet.addr}/command`, { method: 'POST', headers: quiet.headers, body: JSON.stringify({ command: 'echo started; sleep 60' }), signal: abort.signal });
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('started')) text += new TextDecoder().decode((await reader.read()).value);
    const id = (JSON.parse(text.split('\n')[0]!) as { text: string }).text;
    abort.abort();
    const left = Date.now();
    let status = { running: true, exit_code: undefined as number | undefined };
    while (status.running && Date.now() - left < 5_000) {
      await new Promise((r) => setTimeout(r, 50));
      status = (await (await fetch(`http://${quiet.addr}/command/status/${id}`, { headers: quiet.headers })).json()) as typeof status;
    }
    assert.equal([status.running, status.exit_code], [false, 137], `after ${Date.now() - left} ms`);
    // The same in a session: its next run is not held behind the command its client left.
    const post = (path: string, body: unknown, signal?: AbortSignal) => fetch(`http://${quiet.addr}${path}`, { method: 'POST', headers: quiet.headers, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
    const session = ((await (await post('/session', {})).json()) as { session_id: string }).session_id;
    const leave = new AbortController();
    const run = (await post(`/session/${session}/run`, { command: 'echo started; sleep 60' }, leave.signal)).body!.getReader();
    for (let seen = ''; !seen.includes('started'); ) seen += new TextDecoder().decode((await run.read()).value);
    leave.abort();
    const next = Date.now();
    const after = await (await post(`/session/${session}/run`, { command: 'echo next' })).text();
    assert.match(after, /"text":"next\\n"/);
    assert.ok(Date.now() - next < 5_000, `the next run waited ${Date.now() - next} ms`);
  } finally {
    await quiet.stop();
  }
});

test('metrics/watch streams one snapshot event after another', async () => {
  const res = await fetch(`http://${svc.addr}/metrics/watch`, { headers: svc.headers });
  assert.is(res.headers.get('content-type'), 'text/event-stream');
  const reader = res.body!.getReader();
  let text = '';
  while ((text.match(/\n\n/g) ?? []).length < 2) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  await reader.cancel();
  const events = text.split('\n\n').filter(Boolean).slice(0, 2).map((e) => JSON.parse(e) as Record<string, number>);
  assert.is(events.length, 2);
  for (const ev of events) assert.ok(ev.cpu_count! >= 1 && ev.mem_total_mib! > 0, JSON.stringify(ev));
  assert.ok(events[1]!.timestamp! > events[0]!.timestamp!);
});

test('uid and gid select the identity of the command', async () => {
  if (process.getuid?.() === 0) {
    const ex = await sdk.commands.run('id -u; id -g; id -G', { uid: 65534, gid: 65533 });
    assert.is(ex.exitCode, 0);
    assert.is(ex.logs.stdout.map((m) => m.text).join(''), '65534\n65533\n65533\n');
  } else {
    // Without the privilege to switch users the service says so instead of running as itself.
    await expectApiError(() => sdk.commands.run('id -u', { uid: 0 }), 'RUNTIME_ERROR', 500);
  }
});

test('a timeout kills the command and reports an error exit', async () => {
  const started = Date.now();
  const ex = await sdk.commands.run('echo begin; sleep 30; echo unreachable', { timeoutSeconds: 0.5 });
  assert.is(ex.exitCode, 137);
  assert.match(ex.error?.traceback.join('\n') ?? '', /timed out/);
  assert.is(ex.logs.stdout.map((m) => m.text).join(''), 'begin\n');
  assert.ok(Date.now() - started < 20_000);
});

test('background command: status, logs with cursor, then completion', async () => {
  const ex = await sdk.commands.run(`echo first; while [ ! -e '${work}/go' ]; do sleep 0.05; done; echo second >&2; exit 3`, { background: true });
  assert.ok(ex.id);
  const id = ex.id!;
  const running = await sdk.commands.getCommandStatus(id);
  assert.is(running.running, true);
  assert.is(running.content?.startsWith('echo first'), true);
  let logs = await sdk.commands.getBackgroundCommandLogs(id);
  for (let i = 0; i < 100 && !logs.content.includes('first'); i++) {
    await new Promise((r) => setTimeout(r, 50));
    logs = await sdk.commands.getBackgroundCommandLogs(id);
  }
  assert.is(logs.content, 'first\n');
  assert.is(logs.cursor, 6);
  writeFileSync(join(work, 'go'), '');
  let status = await sdk.commands.getCommandStatus(id);
  for (let i = 0; i < 200 && status.running; i++) {
    await new Promise((r) => setTimeout(r, 50));
    status = await sdk.commands.getCommandStatus(id);
  }
  assert.is(status.running, false);
  assert.is(status.exitCode, 3);
  assert.ok(status.finishedAt instanceof Date);
  const rest = await sdk.commands.getBackgroundCommandLogs(id, logs.cursor);
  assert.is(rest.content, 'second\n');
});

test('interrupting a background command kills its whole process group', async () => {
  const ex = await sdk.commands.run('sleep 60 & sleep 60; wait', { background: true });
  const id = ex.id!;
  await sdk.commands.interrupt(id);
  const status = await statusOnceStopped(id);
  assert.is(status.running, false);
  assert.is(status.exitCode, 137);
});

test('concurrent commands run at the same time', async () => {
  const n = 6;
  const dir = mkdtempSync(join(work, 'barrier-'));
  // Each command announces itself, then waits until all have: only concurrent runs pass.
  const script = (i: number) =>
    `touch '${dir}/${i}'; for t in $(seq 200); do [ $(ls '${dir}' | wc -l) -ge ${n} ] && { echo ok-${i}; exit 0; }; sleep 0.05; done; exit 1`;
  const results = await Promise.all(Array.from({ length: n }, (_, i) => sdk.commands.run(script(i))));
  results.forEach((ex, i) => {
    assert.is(ex.exitCode, 0, `command ${i}`);
    assert.is(ex.logs.stdout[0]?.text, `ok-${i}\n`);
  });
});

test('bash sessions keep cwd and variables between runs', async () => {
  const sid = await sdk.commands.createSession({ workingDirectory: work });
  const first = await sdk.commands.runInSession(sid, 'cd /tmp && export KEEP=kept; echo -n partial');
  assert.is(first.exitCode, 0);
  assert.is(first.logs.stdout.map((m) => m.text).join(''), 'partial');
  const second = await sdk.commands.runInSession(sid, 'pwd; echo $KEEP; false');
  assert.is(second.logs.stdout.map((m) => m.text).join(''), '/tmp\nkept\n');
  assert.is(second.exitCode, 1);
  await sdk.commands.deleteSession(sid);
  await expectApiError(() => sdk.commands.deleteSession(sid), 'SESSION_NOT_FOUND', 404);
});

test('a session command that times out ends the session', async () => {
  const sid = await sdk.commands.createSession();
  const ex = await sdk.commands.runInSession(sid, 'echo before; sleep 30', { timeoutSeconds: 0.5 });
  assert.is(ex.exitCode, 137);
  assert.is(ex.logs.stdout[0]?.text, 'before\n');
  await expectApiError(() => sdk.commands.runInSession(sid, 'true'), 'SESSION_NOT_FOUND', 404);
});

test('files: upload, read, info, range, list, search, replace, move, permissions, delete — unicode paths', async () => {
  const dir = join(work, 'データ dir');
  const path = join(dir, 'ファイル ✓.txt');
  await sdk.files.writeFiles([{ path, data: 'héllo wörld\nsecond line\n', mode: 640 }]);
  assert.is(await sdk.files.readFile(path), 'héllo wörld\nsecond line\n');
  assert.is(readFileSync(path, 'utf8'), 'héllo wörld\nsecond line\n');
  const info = (await sdk.files.getFileInfo([path]))[path]!;
  assert.is(info.type, 'file');
  assert.is(info.size, Buffer.byteLength('héllo wörld\nsecond line\n'));
  assert.is(info.mode, 640);
  assert.ok(info.modifiedAt instanceof Date);
  assert.is(await sdk.files.readFile(path, { range: 'bytes=0-4' }), 'héll');
  assert.is(await sdk.files.readFile(path, { offset: 1, limit: 1 }), 'second line\n');

  await sdk.files.createDirectories([{ path: join(dir, 'sub', 'deeper'), mode: 755 }]);
  await sdk.files.writeFiles([{ path: join(dir, 'sub', 'deeper', 'x.py'), data: 'print(1)' }]);
  const depth1 = (await sdk.files.listDirectory({ path: dir, depth: 1 })).map((f) => f.path).sort();
  assert.equal(depth1, [join(dir, 'sub'), path].sort());
  const depth3 = (await sdk.files.listDirectory({ path: dir, depth: 3 })).map((f) => f.path);
  assert.ok(depth3.includes(join(dir, 'sub', 'deeper', 'x.py')), depth3.join(','));
  const found = await sdk.files.search({ path: dir, pattern: '*.py' });
  assert.equal(found.map((f) => f.path), [join(dir, 'sub', 'deeper', 'x.py')]);

  const counts = await sdk.files.replaceContentsDetailed([{ path, oldContent: 'ö', newContent: 'oe' }]);
  assert.equal(counts, [{ path, replacedCount: 1 }]);
  assert.is(readFileSync(path, 'utf8'), 'héllo woerld\nsecond line\n');

  const moved = join(dir, 'moved', 'ü.txt');
  await sdk.files.moveFiles([{ src: path, dest: moved }]);
  assert.is(existsSync(path), false);
  await sdk.files.setPermissions([{ path: moved, mode: 600 }]);
  assert.is(statSync(moved).mode & 0o777, 0o600);
  await sdk.files.deleteFiles([moved]);
  assert.is(existsSync(moved), false);
  await sdk.files.deleteDirectories([dir]);
  assert.is(existsSync(dir), false);
});

test('a ~100 MB upload and download stream with bounded service memory', async () => {
  const size = 100 * 1024 * 1024;
  const chunk = Buffer.alloc(1024 * 1024);
  for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 31 + 7) & 0xff;
  const sent = createHash('sha256');
  async function* source(): AsyncIterable<Uint8Array> {
    for (let i = 0; i < size / chunk.length; i++) {
      sent.update(chunk);
      yield chunk;
    }
  }
  const path = join(work, 'big.bin');
  await sdk.files.writeFiles([{ path, data: source() }]);
  assert.is(statSync(path).size, size);
  const got = createHash('sha256');
  let total = 0;
  for await (const part of sdk.files.readBytesStream(path)) {
    got.update(part);
    total += part.length;
  }
  assert.is(total, size);
  assert.is(got.digest('hex'), sent.digest('hex'));
  const peak = svc.peakRssKiB();
  // The whole file through memory would be 100 MiB; streaming keeps the service far below.
  assert.ok(peak < 64 * 1024, `execd peak RSS ${peak} KiB`);
});

test('every error path answers {code, message}', async () => {
  await expectApiError(() => sdk.files.readFile(join(work, 'missing.txt')), 'FILE_NOT_FOUND', 404);
  await expectApiError(() => sdk.files.getFileInfo([join(work, 'missing.txt')]), 'FILE_NOT_FOUND', 404);
  await expectApiError(() => sdk.files.deleteFiles([join(work, 'missing.txt')]), 'FILE_NOT_FOUND', 404);
  await expectApiError(() => sdk.files.listDirectory({ path: join(work, 'nope'), depth: 1 }), 'FILE_NOT_FOUND', 404);
  await expectApiError(() => sdk.files.moveFiles([{ src: join(work, 'nope'), dest: join(work, 'n2') }]), 'FILE_NOT_FOUND', 404);
  await expectApiError(() => sdk.files.deleteDirectories([join(work, 'nope')]), 'FILE_NOT_FOUND', 404);
  await expectApiError(() => sdk.files.setPermissions([{ path: work, mode: 999 }]), 'INVALID_REQUEST_BODY', 400);
  writeFileSync(join(work, 'small.txt'), 'abc');
  await expectApiError(() => sdk.files.readFile(join(work, 'small.txt'), { range: 'bytes=10-20' }), 'INVALID_RANGE', 416);
  await expectApiError(() => sdk.files.readFile(work), 'INVALID_FILE', 400);
  await expectApiError(() => sdk.commands.run('true', { workingDirectory: join(work, 'nope') }), 'INVALID_REQUEST_BODY', 400);
  await expectApiError(() => sdk.commands.getCommandStatus('no-such-id'), 'COMMAND_NOT_FOUND', 404);
  await expectApiError(() => sdk.commands.interrupt('no-such-id'), 'COMMAND_NOT_FOUND', 404);
  await expectApiError(() => sdk.commands.getBackgroundCommandLogs('no-such-id'), 'COMMAND_NOT_FOUND', 404);
  await expectApiError(() => sdk.commands.runInSession('no-such-session', 'true'), 'SESSION_NOT_FOUND', 404);

  // Requests the SDK would not send malformed are checked with plain fetch.
  const raw = async (path: string, init: RequestInit = {}): Promise<{ status: number; body: { code: string; message: string } }> => {
    const res = await fetch(`http://${svc.addr}${path}`, { ...init, headers: svc.headers });
    return { status: res.status, body: (await res.json()) as { code: string; message: string } };
  };
  const cases: [string, RequestInit, number, string][] = [
    ['/command', { method: 'POST', body: '{not json' }, 400, 'INVALID_REQUEST_BODY'],
    ['/command', { method: 'POST', body: '{"command":"true","timeout":0}' }, 400, 'INVALID_REQUEST_BODY'],
    ['/command', { method: 'POST', body: '{"command":"true","gid":5}' }, 400, 'INVALID_REQUEST_BODY'],
    ['/command', { method: 'POST', body: '{"command":"true","bogus":1}' }, 400, 'INVALID_REQUEST_BODY'],
    ['/command', { method: 'DELETE' }, 400, 'MISSING_QUERY'],
    ['/files/download', {}, 400, 'MISSING_QUERY'],
    ['/files/upload', { method: 'POST', body: 'x', headers: { 'content-type': 'text/plain' } }, 400, 'INVALID_FILE'],
    ['/code', { method: 'POST', body: '{"code":"1"}' }, 501, 'NOT_SUPPORTED'],
    ['/code/context', { method: 'POST', body: '{"language":"python"}' }, 501, 'NOT_SUPPORTED'],
    ['/no/such/route', {}, 404, 'NOT_FOUND'],
    ['/ping', { method: 'POST' }, 405, 'METHOD_NOT_ALLOWED'],
  ];
  for (const [path, init, status, code] of cases) {
    const got = await raw(path, init);
    assert.is(got.status, status, `${init.method ?? 'GET'} ${path}`);
    assert.is(got.body.code, code, `${init.method ?? 'GET'} ${path}`);
    assert.ok(got.body.message.length > 0);
  }
  const form = new FormData();
  form.append('file', new Blob(['x']), 'x.txt');
  const orphan = await raw('/files/upload', { method: 'POST', body: form });
  assert.is(orphan.status, 400);
  assert.is(orphan.body.code, 'INVALID_FILE_METADATA');
});

test('the access token is enforced, never needed for /ping, and gone from the environment it came in', async () => {
  const token = 'tok-' + 'x'.repeat(40);
  const guarded = await startGuestService('execd', { token });
  const anonymous = execdClient(guarded.addr);
  const wrong = execdClient(guarded.addr, { 'X-EXECD-ACCESS-TOKEN': token.replace('x', 'y') });
  const right = execdClient(guarded.addr, { 'X-EXECD-ACCESS-TOKEN': token });
  try {
    assert.is(await anonymous.health.ping(), true);
    await expectApiError(() => anonymous.commands.run('true'), 'UNAUTHORIZED', 401);
    await expectApiError(() => wrong.files.getFileInfo(['/']), 'UNAUTHORIZED', 401);
    await expectApiError(() => wrong.files.readFile('/etc/hostname'), 'UNAUTHORIZED', 401);
    // An upload refused for its missing token still gets the JSON answer, not a reset.
    await expectApiError(() => anonymous.files.writeFiles([{ path: join(work, 'denied.bin'), data: new Uint8Array(8 << 20) }]), 'UNAUTHORIZED', 401);
    assert.is(existsSync(join(work, 'denied.bin')), false);
    const ex = await right.commands.run('echo let-in');
    assert.is(ex.logs.stdout[0]?.text, 'let-in\n');
    // The token travels in the environment variable named on the command line, not in argv,
    // and the service scrubs it from its environment once read: no command it runs inherits it.
    const cmdline = readFileSync(`/proc/${guarded.child.pid}/cmdline`, 'utf8');
    assert.not.ok(cmdline.includes(token));
    assert.not.ok(readFileSync(`/proc/${guarded.child.pid}/environ`, 'utf8').includes(token));
    const env = await right.commands.run('env');
    assert.not.ok(env.logs.stdout.map((m) => m.text).join('').includes(token));
  } finally {
    await Promise.all([anonymous.close(), wrong.close(), right.close()]);
    await guarded.stop();
  }
});

test.run();
