/**
 * The atif, actf and chat-messages fixtures through the real `trajstore import` and `export`:
 * detection, counts in the summary, re-encoded exports semantically equal to the sources,
 * `-o preserve` exports byte for byte, and the bad ATIF/JSON inputs refused with exit 2.
 */
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';
import { chatCanonical, parseArgumentStrings, sortKeys } from './helpers/format-harness.js';

/** Copies fixtures into one flat directory (the import root). */
function stage(dir: string, paths: string[]): string[] {
  mkdirSync(dir, { recursive: true });
  return paths.map((p) => {
    copyFileSync(join(SHARED_FIXTURES, p), join(dir, basename(p)));
    return basename(p);
  });
}

const jsonDocuments = (file: string): unknown[] => {
  const text = readFileSync(file, 'utf8');
  return /\.(jsonl|ndjson)$/.test(file) ? text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l)) : [JSON.parse(text)];
};
const documentsUnder = (dir: string): unknown[] => readdirSync(dir).sort().flatMap((f) => jsonDocuments(join(dir, f)));
/** A multiset of documents compared without order: each canonical form as text, sorted. */
const bag = (docs: unknown[], canonical: (d: unknown) => unknown) => docs.map((d) => JSON.stringify(canonical(d))).sort();

const CASES = [
  {
    format: 'atif',
    files: [
      'persisting/atif/dialogue_10.json',
      'persisting/atif/multimodal_18.json',
      'persisting/atif/sequential_tools_12.json',
      'persisting/atif/unicode_zh_15.json',
      'persisting/examples/data/atif/support-ticket.json',
      'letta-trajectory/atif/tool-calls/input.json',
    ],
    runs: 6,
    steps: 10 + 18 + 12 + 15 + 3 + 3,
    toolCalls: 2 + 2 + 1 + 1 + 2,
    prompt: 744 + 1840 + 985 + 1533,
    canonical: (d: unknown) => sortKeys(d),
  },
  {
    format: 'actf',
    files: [
      'synthetic/actf/csv-dedupe-two-attempts.actf.json',
      'persisting/examples/data/actf/code-repair.actf.json',
      'persisting/import_roundtrip/make-doom-for-mips_trimmed.actf.json',
      'persisting/import_roundtrip/protein-assembly_trimmed.actf.json',
    ],
    runs: 5,
    steps: 6 + 2 + 2 + 2,
    toolCalls: 4 + 1 + 1 + 1,
    prompt: 6463 + 48 + 48,
    canonical: (d: unknown) => sortKeys(parseArgumentStrings(d)),
  },
  {
    format: 'chat-messages',
    files: ['synthetic/chat-messages/conversations.jsonl', 'synthetic/chat-messages/session-steps.json'],
    runs: 6,
    steps: 5 + 4 + 4 + 3 + 6 + 4,
    toolCalls: 5 + 3,
    prompt: 353,
    canonical: (d: unknown) => chatCanonical([d]),
  },
];

for (const c of CASES) {
  test(`${c.format}: import detects and counts, export re-encodes to equal documents`, async () => {
    const s = sandbox('format-cli');
    stage(s.path('in'), c.files);
    const imported = await s.run(['import', '-f', s.path('in'), '-t', s.path('ds'), '--format', 'json', '--log-level', 'info']);
    assert.is(imported.code, 0, imported.stderr);
    const summary = JSON.parse(imported.stdout);
    assert.equal(summary.by_format.map((f: { format: string }) => f.format), [c.format]);
    assert.equal([summary.total.runs, summary.total.steps, summary.total.tool_calls, summary.total.prompt_tokens], [c.runs, c.steps, c.toolCalls, c.prompt]);
    assert.match(imported.stderr, new RegExp(`detected ${c.format}`));

    const exported = await s.run(['export', '-f', s.path('ds'), '-t', `${s.path('out')}/`, '-o', c.format]);
    assert.is(exported.code, 0, exported.stderr);
    const sources = c.files.flatMap((f) => jsonDocuments(join(SHARED_FIXTURES, f)));
    assert.equal(bag(documentsUnder(s.path('out')), c.canonical), bag(sources, c.canonical));

    // The export reads back with the same counts.
    const again = await s.run(['import', '-f', s.path('out'), '-t', s.path('again'), '-i', c.format, '--format', 'json']);
    assert.is(again.code, 0, again.stderr);
    const second = JSON.parse(again.stdout);
    assert.equal([second.total.runs, second.total.steps, second.total.tool_calls, second.total.prompt_tokens], [c.runs, c.steps, c.toolCalls, c.prompt]);
  });

  test(`${c.format}: -o preserve exports the source files byte for byte`, async () => {
    const s = sandbox('format-cli');
    const names = stage(s.path('in'), c.files);
    const imported = await s.run(['import', '-f', s.path('in'), '-t', s.path('ds'), '-o', 'preserve']);
    assert.is(imported.code, 0, imported.stderr);
    const exported = await s.run(['export', '-f', s.path('ds'), '-t', `${s.path('out')}/`, '-o', c.format]);
    assert.is(exported.code, 0, exported.stderr);
    assert.equal(readdirSync(s.path('out')).sort(), [...names].sort());
    for (const name of names) assert.ok(readFileSync(s.path('out', name)).equals(readFileSync(s.path('in', name))), name);
  });
}

test('a UTF-8 byte order mark before the JSON (as Windows editors save) does not hide the format; the bytes export back with it', async () => {
  const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
  const files = [
    ...CASES.map((c) => ({ format: c.format, path: c.files[0] as string })),
    { format: 'storyline', path: 'synthetic/storyline/incident-triage-0007.storyline.json' },
    { format: 'agenta', path: 'synthetic/codex/sessions/2026/05/14/rollout-2026-05-14T09-12-03-0196d2a4-7c1e-7b3a-9f0d-2e5c8a41b6d7.jsonl' },
    { format: 'agentb-code', path: 'synthetic/claude-code/projects/-home-dev-ledger-svc/2ad842e0-db61-4fd6-8a57-f55969d81e22.jsonl' },
  ];
  for (const { format, path } of files) {
    const s = sandbox('format-cli');
    mkdirSync(s.path('in'));
    const name = basename(path);
    writeFileSync(s.path('in', name), Buffer.concat([BOM, readFileSync(join(SHARED_FIXTURES, path))]));
    const imported = await s.run(['import', '-f', s.path('in'), '-t', s.path('ds'), '-o', 'preserve', '--format', 'json']);
    assert.is(imported.code, 0, `${path}: ${imported.stderr}`);
    assert.equal(JSON.parse(imported.stdout).by_format.map((f: { format: string }) => f.format), [format], path);
    if (format === 'agenta' || format === 'agentb-code') continue; // decode only: nothing to export them back as
    const exported = await s.run(['export', '-f', s.path('ds'), '-t', `${s.path('out')}/`, '-o', format]);
    assert.is(exported.code, 0, exported.stderr);
    assert.ok(readFileSync(s.path('out', name)).equals(readFileSync(s.path('in', name))), path);
  }
});

test('stdin: JSONL read from - is detected, and a preserved import streams back byte for byte to -', async () => {
  const s = sandbox('format-cli');
  const file = join(SHARED_FIXTURES, 'synthetic/chat-messages/conversations.jsonl');
  const bytes = readFileSync(file);
  const imported = await runTool('trajstore', ['import', '-f', '-', '-t', s.path('ds'), '-o', 'preserve', '--format', 'json'], { env: s.env, cwd: s.path(), input: bytes });
  assert.is(imported.code, 0, imported.stderr);
  assert.equal(JSON.parse(imported.stdout).by_format.map((f: { format: string; runs: number }) => [f.format, f.runs]), [['chat-messages', 4]]);
  const raw = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'chat-messages']);
  assert.is(raw.code, 0, raw.stderr);
  assert.is(raw.stdout, bytes.toString('utf8'));
  // Re-encoded to another format on stdout: one ATIF document per line.
  const atif = await s.run(['export', '-f', s.path('ds'), '-t', '-', '-o', 'atif']);
  assert.is(atif.code, 0, atif.stderr);
  const lines = atif.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as { schema_version: string; session_id: string });
  assert.equal(lines.map((d) => [d.schema_version, d.session_id]), [['ATIF-v1.7', 'swe-syn-0001'], ['ATIF-v1.7', 'swe-syn-0002'], ['ATIF-v1.7', 'sharegpt-syn-0003'], ['ATIF-v1.7', 'swe-syn-0004']]);
});

test('bad inputs are refused with exit 2, naming the file and place, and leave no dataset', async () => {
  const s = sandbox('format-cli');
  const bad = join(SHARED_FIXTURES, 'synthetic', 'bad');
  const version = await s.run(['import', '-f', join(bad, 'wrong-schema-version.atif.json'), '-t', s.path('v')]);
  assert.is(version.code, 2, version.stderr);
  assert.match(version.stderr, /wrong-schema-version\.atif\.json(:\d+:\d+)? at \/schema_version: unsupported ATIF schema_version "ATIF-v9\.0"/);
  const truncated = await s.run(['import', '-f', join(bad, 'truncated.atif.json'), '-t', s.path('t')]);
  assert.is(truncated.code, 2, truncated.stderr);
  assert.match(truncated.stderr, /truncated\.atif\.json:17:59: invalid JSON/);
  for (const format of ['atif', 'actf', 'chat-messages']) {
    const shape = await s.run(['import', '-f', join(bad, 'wrong-shape.json'), '-t', s.path(`w-${format}`), '-i', format]);
    assert.is(shape.code, 2, shape.stderr);
    assert.match(shape.stderr, /wrong-shape\.json(:\d+(:\d+)?)? at \/0: /);
  }
  assert.equal(readdirSync(s.path()).filter((f) => !['cfg', 'data', 'cache'].includes(f)), []);
});

test.run();
