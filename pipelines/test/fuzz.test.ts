/**
 * Fuzzing the importer with mutated fixture files, generated at test time from a fixed seed (set
 * FUZZ_SEED to try others; a failure names the seed and the file). Bytes are flipped, cut, doubled
 * and inserted; lines are dropped and repeated; JSON values are replaced with values of other
 * types, huge numbers, deep nesting and long strings. Every file either imports or is refused as
 * bad input (exit 2) or over a limit (exit 5): never an internal error or a signal, and nothing is
 * left beside the dataset. Most files go through `--on-error skip` in batches (each skipped file
 * carries its own exit code); some alone, with and without `-i`, through the plain failing path.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { seededRandom } from '../../lib/random.js';
import { PROJECT_TESTDATA, SHARED_FIXTURES } from './helpers/fixtures.js';
import { filesUnder, sandbox } from './helpers/sandbox.js';

const SEED = Number(process.env.FUZZ_SEED ?? 20261125);
const MUTANTS = 360;
const BATCH = 40;
const ALONE = 24;

const s = sandbox('fuzz');

const rand = seededRandom(SEED);
const below = (n: number): number => Math.floor(rand() * n);
const pick = <T>(items: readonly T[]): T => items[below(items.length)] as T;

/** The seeds: one file of every format, as a user has them. */
const SEEDS = [
  ...filesUnder(join(PROJECT_TESTDATA, 'samples')).map((f) => join(PROJECT_TESTDATA, 'samples', f)),
  join(SHARED_FIXTURES, 'synthetic', 'actf', 'csv-dedupe-two-attempts.actf.json'),
  join(SHARED_FIXTURES, 'persisting', 'atif', 'unicode_zh_15.json'),
  join(SHARED_FIXTURES, 'synthetic', 'claude-code', 'projects', '-home-dev-ledger-svc', '2ad842e0-db61-4fd6-8a57-f55969d81e22.jsonl'),
].map((path) => ({ path, name: path.split('/').pop() as string, bytes: readFileSync(path) }));

/** Nested arrays `levels` deep, as text (JSON.parse of the text would be the value). */
const nestedText = (levels: number): string => `${'['.repeat(levels)}${']'.repeat(levels)}`;

/** A value to put in place of another: each kind breaks a different assumption of a decoder. */
function strangeValue(): unknown {
  switch (below(12)) {
    case 0:
      return null;
    case 1:
      return pick([true, false]);
    case 2:
      return pick([-1, 0, 1.5, -0, 1e308, -1e308, 2 ** 53, 2 ** 63, 1e23]);
    case 3:
      return '';
    case 4:
      return 'x'.repeat(below(100_000));
    case 5:
      return [];
    case 6:
      return {};
    case 7:
      // Around the nesting limit: some land within it, some past it.
      return JSON.parse(nestedText(400 + below(300)));
    case 8:
      return pick(['\u0000', '\ud800', '日本語', '\u202e', '<script>', '../../etc/passwd', 'null']);
    case 9:
      return { type: pick(['assistant', 'user', 'tool_use', 'session_meta', 'response_item']), id: below(10) };
    case 10:
      return Array.from({ length: below(5) }, () => ({ step_id: below(5) }));
    default:
      return below(1000);
  }
}

/** Every container path of a JSON value, for picking where to mutate. */
function paths(value: unknown, prefix: Array<string | number> = [], out: Array<Array<string | number>> = []): Array<Array<string | number>> {
  out.push(prefix);
  if (out.length > 2000) return out;
  if (Array.isArray(value)) value.forEach((v, i) => paths(v, [...prefix, i], out));
  else if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) paths(v, [...prefix, k], out);
  return out;
}

/** Replaces, removes or renames one node of a JSON value. */
function mutateJson(value: unknown): unknown {
  const all = paths(value).filter((p) => p.length > 0);
  if (all.length === 0) return strangeValue();
  const path = pick(all);
  let parent = value as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>;
  const key = path[path.length - 1] as string | number;
  const action = below(4);
  if (action === 0 && !Array.isArray(parent)) delete parent[key];
  else if (action === 1 && !Array.isArray(parent)) {
    parent[`${String(key)}_`] = parent[key];
    delete parent[key];
  } else parent[key] = strangeValue();
  return value;
}

/** One mutant of a seed's bytes. */
function mutate(bytes: Buffer, jsonl: boolean): Buffer {
  const text = bytes.toString('utf8');
  switch (below(9)) {
    case 0: {
      // Flip a few bytes.
      const out = Buffer.from(bytes);
      for (let n = 1 + below(4); n > 0; n--) out[below(out.length)] = below(256);
      return out;
    }
    case 1:
      return bytes.subarray(0, below(bytes.length));
    case 2: {
      // Insert bytes that are not UTF-8, or a NUL, or a BOM.
      const at = below(bytes.length);
      return Buffer.concat([bytes.subarray(0, at), Buffer.from(pick([[0xff], [0xc3], [0x00], [0xef, 0xbb, 0xbf], [0xed, 0xa0, 0x80]])), bytes.subarray(at)]);
    }
    case 3: {
      const lines = text.split('\n');
      lines.splice(below(lines.length), 1);
      return Buffer.from(lines.join('\n'));
    }
    case 4: {
      const lines = text.split('\n');
      const i = below(lines.length);
      lines.splice(i, 0, lines[i] as string);
      return Buffer.from(lines.join('\n'));
    }
    case 5:
      // Deep nesting spliced into a value position.
      return Buffer.from(text.replace(/:\s*("[^"]*"|\d+|true|false|null)/, `: ${nestedText(below(2) ? 500 : 5000)}`));
    case 6:
      // A number far past int64 where one stood.
      return Buffer.from(text.replace(/(:\s*)\d+/, `$1${'9'.repeat(20 + below(300))}`));
    default: {
      // Structural mutations of parsed JSON (per line for JSONL).
      if (!jsonl) {
        try {
          return Buffer.from(JSON.stringify(mutateJson(JSON.parse(text))));
        } catch {
          return bytes;
        }
      }
      const lines = text.split('\n');
      const i = below(lines.length);
      try {
        lines[i] = JSON.stringify(mutateJson(JSON.parse(lines[i] as string)));
      } catch {
        lines[i] = `${lines[i]}}`;
      }
      return Buffer.from(lines.join('\n'));
    }
  }
}

/** Writes MUTANTS mutated files into batches of directories; returns their paths. */
function writeMutants(): string[] {
  const files: string[] = [];
  for (let i = 0; i < MUTANTS; i++) {
    const seed = pick(SEEDS);
    const batch = s.path('mutants', `batch-${Math.floor(i / BATCH)}`);
    mkdirSync(batch, { recursive: true });
    const path = join(batch, `m${String(i).padStart(4, '0')}-${seed.name}`);
    writeFileSync(path, mutate(seed.bytes, /\.jsonl$/.test(seed.name)));
    files.push(path);
  }
  return files;
}

/** Nothing of the run but the dataset itself (when it succeeded) is beside it. */
function leftovers(name: string, imported: boolean): string[] {
  return readdirSync(s.home).filter((f) => (f === name && !imported) || f.startsWith(`.${name}`));
}

const files = writeMutants();

test(`${MUTANTS} mutated files in batches with --on-error skip: each imports or exits 2 or 5 (seed ${SEED})`, async () => {
  const batches = readdirSync(s.path('mutants')).sort();
  let skipped = 0;
  for (const batch of batches) {
    const name = `ds-${batch}`;
    const r = await s.run(['import', '-f', s.path('mutants', batch), '-t', s.path(name), '--on-error', 'skip', '--format', 'json']);
    const where = `seed ${SEED}, ${batch}: exit ${r.code}${r.signal ? ` (${r.signal})` : ''}: ${r.stderr.split('\n').slice(-4).join(' | ')}`;
    assert.ok(r.code === 0 || r.code === 2 || r.code === 5, where);
    assert.equal(leftovers(name, r.code === 0), [], where);
    if (r.code !== 0) continue;
    const summary = JSON.parse(r.stdout) as { skipped_files: Array<{ source_path: string; exit_code: number; reason: string }> };
    for (const file of summary.skipped_files) {
      assert.ok(file.exit_code === 2 || file.exit_code === 5, `seed ${SEED}: ${file.source_path}: ${file.exit_code} ${file.reason}`);
      // A reason quotes the input, never all of it (a mutant may hold a 100 KB string).
      assert.ok(file.reason.length < 1000, `seed ${SEED}: ${file.source_path}: a reason of ${file.reason.length} characters`);
    }
    skipped += summary.skipped_files.length;
    // What was imported reads back: the dataset is whole.
    const stats = await s.run(['stats', s.path(name), '--format', 'json']);
    assert.is(stats.code, 0, stats.stderr);
  }
  // The mutations must mostly break their files, or this test would prove little.
  assert.ok(skipped > MUTANTS / 4, `only ${skipped} of ${MUTANTS} mutants were refused`);
});

test(`${ALONE} mutated files alone, detected and named with -i: exit 0, 2 or 5, nothing left (seed ${SEED})`, async () => {
  const formatOf = (name: string): string | undefined =>
    Object.entries({ '.actf.json': 'actf', '.atif.json': 'atif', '.atif.jsonl': 'atif', '.storyline.json': 'storyline', 'rollout-': 'agenta' }).find(([k]) => name.includes(k))?.[1];
  for (let i = 0; i < ALONE; i++) {
    const file = files[below(files.length)] as string;
    const name = `alone-${i}`;
    const format = i % 2 ? formatOf(file) : undefined;
    const r = await s.run(['import', '-f', file, '-t', s.path(name), ...(format ? ['-i', format] : [])]);
    const where = `seed ${SEED}, ${relative(s.home, file)}${format ? ` -i ${format}` : ''}: exit ${r.code}${r.signal ? ` (${r.signal})` : ''}: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`;
    assert.ok(r.code === 0 || r.code === 2 || r.code === 5, where);
    assert.equal(leftovers(name, r.code === 0), [], where);
    if (r.code === 0) rmSync(s.path(name), { recursive: true });
  }
});

test.run();
