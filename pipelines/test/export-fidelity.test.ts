/**
 * Export fidelity through the real CLI: what an export writes, imported again and exported again to
 * the same format, comes out byte for byte the same. Fixtures of every source shape are imported
 * together (Claude Code with a subagent, Codex, Storyline, chat-messages per-call rows as a JSON
 * array), then each output format goes export -> import -> export.
 */
import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { OUTPUT_FORMATS } from '../formats/registry.js';
import { PROJECT_TESTDATA, SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const SYNTHETIC = join(SHARED_FIXTURES, 'synthetic');

/** One directory holding a fixture of each source shape. */
function mixedSources(dir: string): void {
  mkdirSync(dir, { recursive: true });
  cpSync(join(SYNTHETIC, 'claude-code'), join(dir, 'claude-code'), { recursive: true });
  cpSync(join(SYNTHETIC, 'storyline'), join(dir, 'storyline'), { recursive: true });
  cpSync(join(PROJECT_TESTDATA, 'samples', 'agenta'), join(dir, 'agenta'), { recursive: true });
  cpSync(join(SHARED_FIXTURES, 'persisting', 'examples', 'data', 'openai-messages', 'training.json'), join(dir, 'training.json'));
}

test('a second export (export -> import -> export) equals the first byte for byte, in every output format', async () => {
  const s = sandbox('export-fidelity');
  mixedSources(s.path('src'));
  const imported = await s.run(['import', '-f', s.path('src'), '-t', s.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  const differing: string[] = [];
  for (const format of OUTPUT_FORMATS) {
    const first = s.path(`first.${format}.jsonl`);
    const second = s.path(`second.${format}.jsonl`);
    const e1 = await s.run(['export', '-f', s.path('ds'), '-t', first, '-o', format]);
    assert.is(e1.code, 0, e1.stderr);
    const again = await s.run(['import', '-f', first, '-i', format, '-t', s.path(`again.${format}`)]);
    assert.is(again.code, 0, again.stderr);
    const e2 = await s.run(['export', '-f', s.path(`again.${format}`), '-t', second, '-o', format]);
    assert.is(e2.code, 0, e2.stderr);
    const [a, b] = [readFileSync(first, 'utf8'), readFileSync(second, 'utf8')];
    if (a !== b) {
      const at = [...a].findIndex((c, i) => c !== b[i]);
      differing.push(`${format}: the second export differs from the first at character ${at}:\n first: ${a.slice(at - 120, at + 80)}\nsecond: ${b.slice(at - 120, at + 80)}`);
    }
  }
  assert.equal(differing, []);
});

/** A Storyline whose numbers are floats with an integral value beyond 2^53, as a measure is written (with an exponent). */
const LARGE_FLOATS = `{"schema_version":"storyline/v1","session":"floats","agent":{"id":"a"},"turns":[
{"id":"t1","src":"user","msg":"go"},
{"id":"t2","src":"agent","msg":"ok","metrics":{"extra":{"bytes":1e16,"neg":-9007199254740993e0,"pow":2e53}},
 "tool_calls":[{"tcid":"c1","fn":"f","args":{"limit":1.5e17}}]}]}`;

/** Runs, steps and tool calls of a dataset. */
async function counts(s: ReturnType<typeof sandbox>, dataset: string): Promise<string> {
  const r = await s.run(['query', dataset, '--sql', 'SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM steps) AS steps, (SELECT count(*) FROM tool_calls) AS calls', '--format', 'csv']);
  assert.is(r.code, 0, r.stderr);
  return r.stdout.trim().split('\n')[1] as string;
}

test('a directory export imported again keeps its runs, and exports again to the same files, in every output format', async () => {
  const s = sandbox('export-fidelity');
  mixedSources(s.path('src'));
  // Per-call rows one per line: two sessions over five rows.
  const { session_steps: rows } = JSON.parse(readFileSync(join(SYNTHETIC, 'chat-messages', 'session-steps.json'), 'utf8')) as { session_steps: unknown[] };
  writeFileSync(s.path('src', 'calls.jsonl'), rows.map((row) => `${JSON.stringify(row)}\n`).join(''));
  const imported = await s.run(['import', '-f', s.path('src'), '-t', s.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  for (const format of OUTPUT_FORMATS) {
    const e1 = await s.run(['export', '-f', s.path('ds'), '-t', s.path(`first-${format}/`), '-o', format]);
    assert.is(e1.code, 0, e1.stderr);
    const again = await s.run(['import', '-f', s.path(`first-${format}`), '-i', format, '-t', s.path(`dir-again.${format}`)]);
    assert.is(again.code, 0, again.stderr);
    // ACTF makes a step of each agent turn; the runs stay.
    const [runs] = (await counts(s, s.path('ds'))).split(',');
    assert.is((await counts(s, s.path(`dir-again.${format}`))).split(',')[0], runs, `${format}: runs after a directory round trip`);
    const e2 = await s.run(['export', '-f', s.path(`dir-again.${format}`), '-t', s.path(`second-${format}/`), '-o', format]);
    assert.is(e2.code, 0, e2.stderr);
    const names = readdirSync(s.path(`first-${format}`)).sort();
    assert.equal(readdirSync(s.path(`second-${format}`)).sort(), names, format);
    for (const name of names) assert.is(readFileSync(s.path(`second-${format}`, name), 'utf8'), readFileSync(s.path(`first-${format}`, name), 'utf8'), `${format}: ${name}`);
  }
});

test('floats with an integral value beyond 2^53 are exported as numbers the import reads back (not integer literals it refuses)', async () => {
  const s = sandbox('export-fidelity');
  writeFileSync(s.path('floats.storyline.json'), LARGE_FLOATS);
  const imported = await s.run(['import', '-f', s.path('floats.storyline.json'), '-t', s.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  for (const format of OUTPUT_FORMATS) {
    const out = s.path(`floats.${format}.jsonl`);
    const exported = await s.run(['export', '-f', s.path('ds'), '-t', out, '-o', format]);
    assert.is(exported.code, 0, exported.stderr);
    const text = readFileSync(out, 'utf8');
    assert.not.match(text, /[^.\d]\d{16}/, `${format}: an integer literal beyond 2^53`);
    // Every format carries the call's arguments; ACTF and chat-messages have no place for the metrics' extra.
    const carried = format === 'atif' || format === 'storyline' ? [1e16, -9007199254740993e0, 2e53, 1.5e17] : [1.5e17];
    for (const n of carried) assert.ok(text.includes(n.toExponential()), `${format}: ${n} written as ${n.toExponential()}`);
    const again = await s.run(['import', '-f', out, '-i', format, '-t', s.path(`again.${format}`)]);
    assert.is(again.code, 0, `${format}: ${again.stderr}`);
  }
});

test('ATIF export keeps a tool call\'s Storyline-only fields of a document whose origin says ATIF (under extra.storyline)', async () => {
  const s = sandbox('export-fidelity');
  // Its origin is ATIF, and its call tc-1 has kind, duration_ms and response, which ATIF has no place for.
  const imported = await s.run(['import', '-f', join(SYNTHETIC, 'storyline', 'incident-triage-0007.storyline.json'), '-t', s.path('ds')]);
  assert.is(imported.code, 0, imported.stderr);
  const exported = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'atif']);
  assert.is(exported.code, 0, exported.stderr);
  const trajectory = JSON.parse(exported.stdout.split('\n')[0] as string) as { steps: Array<{ tool_calls?: Array<{ tool_call_id: string; extra?: unknown }> }> };
  const call = trajectory.steps.flatMap((step) => step.tool_calls ?? []).find((c) => c.tool_call_id === 'tc-1');
  assert.equal(call?.extra, { storyline: { kind: 'function', duration_ms: 930, response: { status: 'completed', exit_code: 0 } } });
});

test.run();
