/**
 * What `import -f` reads, through the real CLI: a directory walk never follows symbolic links (a link
 * to `..` or a loop of links is no error), gzip and zstd on stdin are decompressed as compressed files
 * are, a named pipe is read as stdin is, and an unreadable directory or file is bad input naming it (exit 2), left out and listed by
 * `--on-error skip`, in both modes alike.
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { gzipSync, zstdCompressSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { sandbox, unprivilegedSandbox } from './helpers/sandbox.js';

const storyline = (id: string) => JSON.stringify({ schema_version: 'storyline/v1', session: id, trajectory: id, agent: { id: 'a' }, turns: [{ id: 1, src: 'user', msg: `hello ${id}` }] });

interface Summary {
  total: { runs: number };
  skipped_files: Array<{ source_path: string; reason: string; exit_code: number }>;
}

test('symbolic links in a source directory are not followed: a link to .. and a loop of links are no error', async () => {
  const s = sandbox('import-sources');
  mkdirSync(s.path('src', 'sub'), { recursive: true });
  writeFileSync(s.path('src', 'a.storyline.json'), storyline('a'));
  writeFileSync(s.path('src', 'sub', 'b.storyline.json'), storyline('b'));
  symlinkSync('..', s.path('src', 'sub', 'up'));
  symlinkSync('loop2', s.path('src', 'loop1.storyline.json'));
  symlinkSync('loop1.storyline.json', s.path('src', 'loop2'));
  for (const [name, extra] of [['ds', []], ['ds-skip', ['--on-error', 'skip']]] as const) {
    const r = await s.run(['import', '-f', s.path('src'), '-t', s.path(name), '--format', 'json', ...extra]);
    assert.is(r.code, 0, r.stderr);
    const summary = JSON.parse(r.stdout) as Summary;
    assert.is(summary.total.runs, 2);
    assert.equal(summary.skipped_files, []);
  }
  const listed = await s.run(['list', s.path('src'), '--format', 'json']);
  assert.is(listed.code, 0, listed.stderr);
  assert.equal((JSON.parse(listed.stdout) as Array<{ source_path: string }>).map((r) => r.source_path), ['a.storyline.json', 'sub/b.storyline.json']);
});

test('gzip and zstd on stdin are decompressed as a compressed file is, and detected from their content', async () => {
  const s = sandbox('import-sources');
  const jsonl = `${storyline('x')}\n${storyline('y')}\n`;
  for (const [name, bytes] of [['gz', gzipSync(jsonl)], ['zst', zstdCompressSync(jsonl)]] as const) {
    const r = await s.run(['--log-level', 'info', 'import', '-f', '-', '-t', s.path(name), '-o', 'preserve', '--format', 'json'], bytes);
    assert.is(r.code, 0, `${name}: ${r.stderr}`);
    assert.match(r.stderr, 'info: -: detected storyline');
    assert.is((JSON.parse(r.stdout) as Summary).total.runs, 2);
    const back = await s.run(['export', '-f', s.path(name), '-t', '-', '-o', 'storyline']);
    assert.is(back.stdout, jsonl, name);
  }
  const damaged = await s.run(['import', '-f', '-', '-t', s.path('bad')], Buffer.concat([gzipSync(jsonl).subarray(0, 12), Buffer.from('garbage')]));
  assert.is(damaged.code, 2, damaged.stderr);
  assert.match(damaged.stderr, '-: not valid gzip data');
  assert.not.ok(existsSync(s.path('bad')));
  // zstd's decoder names its errors ZSTD_error_*, not Z_*.
  const garbled = await s.run(['import', '-f', '-', '-t', s.path('bad')], Buffer.concat([zstdCompressSync(jsonl).subarray(0, 4), Buffer.alloc(64, 7)]));
  assert.is(garbled.code, 2, garbled.stderr);
  assert.match(garbled.stderr, '-: not valid zstd data');
  assert.not.ok(existsSync(s.path('bad')));
});

test('a named pipe given to -f (a FIFO, or a shell process substitution <(...)) is read once as it comes, as stdin is; a device is refused', async () => {
  const s = sandbox('import-sources');
  const jsonl = `${storyline('p')}\n${storyline('q')}\n`;
  const fifo = s.path('pipe');
  execFileSync('mkfifo', [fifo]);
  // The writer opens the FIFO when the import does, as a shell's process substitution does.
  const writer = spawn('sh', ['-c', `cat > ${fifo}`], { stdio: ['pipe', 'ignore', 'inherit'] });
  writer.stdin.end(gzipSync(jsonl));
  const r = await s.run(['--log-level', 'info', 'import', '-f', fifo, '-t', s.path('ds'), '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stderr, `info: ${fifo}: detected storyline`);
  assert.is((JSON.parse(r.stdout) as Summary).total.runs, 2);
  const device = await s.run(['import', '-f', '/dev/zero', '-t', s.path('zero')]);
  assert.is(device.code, 2, device.stderr);
  assert.match(device.stderr, '-f /dev/zero: not a file, directory or pipe');
});

test('a zstd file cut short is bad input naming it, not the start of its content (the decoder would take it whole)', async () => {
  const s = sandbox('import-sources');
  // Enough lines for several blocks, so that the cut falls after whole lines have been decoded.
  const lines = Array.from({ length: 4000 }, (_, i) => storyline(`run-${i}-${'x'.repeat(i % 97)}`)).join('\n');
  const whole = zstdCompressSync(`${lines}\n`);
  writeFileSync(s.path('runs.jsonl.zst'), whole.subarray(0, whole.length - 100));
  for (const extra of [[], ['--on-error', 'skip']]) {
    const r = await s.run(['import', '-f', s.path('runs.jsonl.zst'), '-t', s.path('ds'), '-i', 'storyline', ...extra]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, /runs\.jsonl\.zst: not valid zstd data: it ends in the middle of a frame after \d+ bytes \(the file is cut short\)/);
    assert.not.ok(existsSync(s.path('ds')));
  }
  writeFileSync(s.path('runs.jsonl.zst'), whole);
  const r = await s.run(['import', '-f', s.path('runs.jsonl.zst'), '-t', s.path('ds'), '-i', 'storyline', '--format', 'json']);
  assert.is(r.code, 0, r.stderr);
  assert.is((JSON.parse(r.stdout) as Summary).total.runs, 4000);
});

test('an unreadable directory or file in a source is bad input naming it; --on-error skip leaves it out and lists it', async () => {
  const s = unprivilegedSandbox('import-sources');
  mkdirSync(s.path('src', 'locked'), { recursive: true });
  writeFileSync(s.path('src', 'ok.storyline.json'), storyline('ok'));
  writeFileSync(s.path('src', 'locked', 'x.storyline.json'), storyline('x'));
  chmodSync(s.path('src', 'locked'), 0o000);

  const failed = await s.run(['import', '-f', 'src', '-t', 'ds']);
  assert.is(failed.code, 2, failed.stderr);
  assert.match(failed.stderr, 'trajstore: error: src/locked: permission denied');
  assert.not.ok(existsSync(s.path('ds')));
  const skipped = await s.run(['import', '-f', 'src', '-t', 'ds', '--on-error', 'skip', '--format', 'json']);
  assert.is(skipped.code, 0, skipped.stderr);
  const summary = JSON.parse(skipped.stdout) as Summary;
  assert.is(summary.total.runs, 1);
  assert.equal(summary.skipped_files.map((f) => [f.source_path, f.exit_code]), [['locked', 2]]);
  assert.match(summary.skipped_files[0]?.reason ?? '', 'permission denied');
  assert.match(skipped.stderr, 'warn: skipped locked: ');
  const listed = await s.run(['list', 'src', '--format', 'json']);
  assert.is(listed.code, 0, listed.stderr);
  assert.match(listed.stderr, 'not listed: locked: ');

  chmodSync(s.path('src', 'locked'), 0o755);
  chmodSync(s.path('src', 'locked', 'x.storyline.json'), 0o000);
  for (const from of ['src', 'src/locked/x.storyline.json']) {
    const r = await s.run(['import', '-f', from, '-t', 'ds-file']);
    assert.is(r.code, 2, `${from}: ${r.stderr}`);
    assert.match(r.stderr, 'trajstore: error: src/locked/x.storyline.json: permission denied');
    assert.not.ok(existsSync(s.path('ds-file')));
  }
  const fileSkipped = await s.run(['import', '-f', 'src', '-t', 'ds-file', '--on-error', 'skip', '--format', 'json']);
  assert.is(fileSkipped.code, 0, fileSkipped.stderr);
  assert.equal((JSON.parse(fileSkipped.stdout) as Summary).skipped_files.map((f) => [f.source_path, f.exit_code]), [['locked/x.storyline.json', 2]]);
});

test('a file or directory whose name is not UTF-8 is bad input saying so by its bytes; --on-error skip leaves it out', async () => {
  const s = sandbox('import-sources');
  const src = Buffer.from(s.path('src-bytes'));
  const under = (...names: Buffer[]): Buffer => Buffer.concat([src, ...names.flatMap((name) => [Buffer.from('/'), name])]);
  mkdirSync(under(Buffer.from('d-\xff', 'latin1')), { recursive: true });
  writeFileSync(under(Buffer.from('d-\xff', 'latin1'), Buffer.from('a.storyline.json')), storyline('a'));
  writeFileSync(under(Buffer.from('f-\xfe.storyline.json', 'latin1')), storyline('f'));
  writeFileSync(under(Buffer.from('ok.storyline.json')), storyline('ok'));
  const r = await s.run(['import', '-f', s.path('src-bytes'), '-t', s.path('bytes-ds')]);
  assert.is(r.code, 2, r.stderr);
  assert.match(r.stderr, /error: (d-\\xff|f-\\xfe\.storyline\.json): the name is not UTF-8 \(rename it to import it\)/);
  assert.not.ok(existsSync(s.path('bytes-ds')));
  const skipped = await s.run(['import', '-f', s.path('src-bytes'), '-t', s.path('bytes-skip'), '--on-error', 'skip', '--format', 'json']);
  assert.is(skipped.code, 0, skipped.stderr);
  const summary = JSON.parse(skipped.stdout) as Summary;
  assert.is(summary.total.runs, 1);
  assert.equal(summary.skipped_files.map((f) => [f.reason.replace(/^.*: the name/, 'the name'), f.exit_code]), [
    ['the name is not UTF-8 (rename it to import it)', 2],
    ['the name is not UTF-8 (rename it to import it)', 2],
  ]);
});

test('messages name a file as it was given: a single file by its path, a file of a directory by its path in it', async () => {
  const s = sandbox('import-sources');
  mkdirSync(s.path('src', 'a'), { recursive: true });
  mkdirSync(s.path('src', 'b'), { recursive: true });
  writeFileSync(s.path('src', 'a', 'input.jsonl'), `${storyline('a')}\n`);
  writeFileSync(s.path('src', 'b', 'input.jsonl'), 'not-json\n');
  const bad = 'input.jsonl:1:2: invalid JSON: unexpected "o"';
  for (const from of ['src/b/input.jsonl', s.path('src', 'b', 'input.jsonl')]) {
    for (const extra of [[], ['-o', 'compact-jsonl']]) {
      const r = await s.run(['import', '-f', from, '-t', 'ds', ...extra]);
      assert.is(r.code, 2, r.stderr);
      assert.match(r.stderr, `trajstore: error: ${from.replace(/input\.jsonl$/, bad)}\n`);
    }
  }
  const walked = await s.run(['import', '-f', 'src', '-t', 'ds']);
  assert.is(walked.code, 2, walked.stderr);
  assert.match(walked.stderr, `trajstore: error: b/${bad}\n`);
  const listed = await s.run(['list', 'src/b/input.jsonl']); // list resolves the path it reads
  assert.match(listed.stderr, `not listed: ${s.path('src', 'b', bad)}\n`);
  const detected = await s.run(['--log-level', 'info', 'import', '-f', 'src/a/input.jsonl', '-t', 'ds']);
  assert.is(detected.code, 0, detected.stderr);
  assert.match(detected.stderr, 'info: src/a/input.jsonl: detected storyline');
  const wrongFormat = await s.run(['import', '-f', 'src/a/input.jsonl', '-t', 'ds-codex', '-i', 'agenta']);
  assert.is(wrongFormat.code, 2, wrongFormat.stderr);
  assert.match(wrongFormat.stderr, 'trajstore: error: src/a/input.jsonl: no agenta document');
});


test('a dataset given as the source is bad input saying how to copy one, not an unrecognised file of its insides', async () => {
  const s = sandbox('import-sources');
  mkdirSync(s.path('src'));
  writeFileSync(s.path('src', 'a.storyline.json'), storyline('a'));
  assert.is((await s.run(['import', '-f', s.path('src'), '-t', s.path('ds')])).code, 0);
  for (const extra of [[], ['--on-error', 'skip'], ['-i', 'compact-jsonl']]) {
    const r = await s.run(['import', '-f', s.path('ds'), '-t', s.path('copy'), ...extra]);
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, `trajstore: error: -f ${s.path('ds')}: a trajstore dataset, not trajectory files`);
    assert.match(r.stderr, `trajstore: hint: to copy its runs: trajstore export -f ${s.path('ds')} -t - -o storyline | trajstore import -f - -i storyline -t NEW`);
    assert.not.ok(existsSync(s.path('copy')), 'nothing is written');
  }
});
test.run();
