/**
 * Export fidelity through the real CLI: what an export writes, imported again and exported again to
 * the same format, comes out byte for byte the same. Fixtures of every source shape are imported
 * together (Claude Code with a subagent, Codex, Storyline, chat-messages per-call rows as a JSON
 * array), then each output format goes export -> import -> export.
 */
import { cpSync, mkdirSync, readFileSync } from 'node:fs';
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

test.run();
