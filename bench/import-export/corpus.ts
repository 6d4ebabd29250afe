/**
 * A generated trajectory corpus for the import/export benchmark: Claude Code style session JSONL
 * (the shape of `~/.claude/projects/<cwd>/<session>.jsonl`: user prompts, assistant lines with
 * tool_use and usage, tool_result lines, text replies), or Storyline JSONL when no Claude Code
 * decoder is registered. Content is invented and deterministic (a seeded generator).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { random } from '../lib/random.js';

export type CorpusKind = 'agentb-code' | 'storyline';

export interface Corpus {
  dir: string;
  kind: CorpusKind;
  files: number;
  bytes: number;
  lines: number;
}

const WORDS = 'index parse stream batch commit snapshot config retry worker queue buffer socket render token schema column module cache flush error'.split(' ');

function text(rand: () => number, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(WORDS[Math.floor(rand() * WORDS.length)] as string);
  return out.join(' ');
}

const hex = (rand: () => number, n: number): string => Array.from({ length: n }, () => Math.floor(rand() * 16).toString(16)).join('');

function claudeSession(rand: () => number, index: number, turns: number): string[] {
  const sessionId = `${hex(rand, 8)}-${hex(rand, 4)}-4${hex(rand, 3)}-a${hex(rand, 3)}-${hex(rand, 12)}`;
  const envelope = { version: '2.1.140', cwd: `/home/dev/project-${index % 50}`, gitBranch: 'main', isSidechain: false, userType: 'external', sessionId };
  let clock = Date.UTC(2026, 4, 1) + index * 3_600_000;
  let parent: string | null = null;
  const lines: string[] = [];
  const push = (record: Record<string, unknown>): void => {
    const uuid = `${hex(rand, 8)}-${hex(rand, 4)}-4${hex(rand, 3)}-b${hex(rand, 3)}-${hex(rand, 12)}`;
    clock += 500 + Math.floor(rand() * 4000);
    lines.push(JSON.stringify({ parentUuid: parent, ...envelope, ...record, uuid, timestamp: new Date(clock).toISOString() }));
    parent = uuid;
  };
  push({ type: 'user', message: { role: 'user', content: `Please ${text(rand, 30)}` } });
  for (let t = 0; t < turns; t++) {
    const msgId = `msg_${hex(rand, 24)}`;
    const toolId = `toolu_${hex(rand, 24)}`;
    const usage = { input_tokens: 3 + Math.floor(rand() * 20), cache_creation_input_tokens: Math.floor(rand() * 2000), cache_read_input_tokens: 20_000 + Math.floor(rand() * 60_000), output_tokens: 50 + Math.floor(rand() * 400) };
    const message = (content: unknown[], stop: string) => ({ id: msgId, type: 'message', role: 'assistant', model: 'claude-example-4', content, stop_reason: stop, stop_sequence: null, usage });
    push({ type: 'assistant', requestId: `req_${hex(rand, 24)}`, message: message([{ type: 'thinking', thinking: text(rand, 60), signature: hex(rand, 64) }], 'tool_use') });
    push({ type: 'assistant', requestId: `req_${hex(rand, 24)}`, message: message([{ type: 'tool_use', id: toolId, name: 'Bash', input: { command: `grep -rn ${WORDS[t % WORDS.length]} src/`, description: text(rand, 6) } }], 'tool_use') });
    const output = Array.from({ length: 12 + Math.floor(rand() * 20) }, (_, i) => `src/${WORDS[i % WORDS.length]}.ts:${i * 7}: ${text(rand, 10)}`).join('\n');
    push({ type: 'user', message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolId, content: output, is_error: false }] }, toolUseResult: { stdout: output, stderr: '', interrupted: false, isImage: false } });
    push({ type: 'assistant', requestId: `req_${hex(rand, 24)}`, message: message([{ type: 'text', text: text(rand, 40) }], 'end_turn') });
  }
  return lines;
}

function storylineSession(rand: () => number, index: number, turns: number, template: Record<string, unknown>): string[] {
  const turnList: unknown[] = [{ id: 1, src: 'user', msg: `Please ${text(rand, 30)}`, ts: new Date(Date.UTC(2026, 4, 1) + index * 1000).toISOString() }];
  for (let t = 0; t < turns; t++) {
    const tcid = `call-${index}-${t}`;
    const output = Array.from({ length: 12 + Math.floor(rand() * 20) }, (_, i) => `src/${WORDS[i % WORDS.length]}.ts:${i * 7}: ${text(rand, 10)}`).join('\n');
    turnList.push({
      id: t + 2,
      src: 'agent',
      msg: text(rand, 40),
      reason: text(rand, 60),
      model: 'example-model',
      tool_calls: [{ tcid, fn: 'bash', args: { command: `grep -rn ${WORDS[t % WORDS.length]} src/` } }],
      observation: { results: [{ source_call_id: tcid, content: output }] },
      metrics: { prompt_tokens: 20_000 + Math.floor(rand() * 60_000), completion_tokens: 50 + Math.floor(rand() * 400), cached_tokens: 20_000 },
    });
  }
  return [JSON.stringify({ ...template, session: `bench-${index}`, trajectory: `bench-${index}`, turns: turnList })];
}

/** Writes about `bytes` of corpus into `dir` as files of roughly 4 MB. */
export function generateCorpus(dir: string, bytes: number, kind: CorpusKind): Corpus {
  mkdirSync(dir, { recursive: true });
  const rand = random(42);
  const template = { schema_version: 'storyline/v1', agent: { id: 'bench-agent', name: 'Bench Agent' } };
  let total = 0;
  let files = 0;
  let lineCount = 0;
  let session = 0;
  while (total < bytes) {
    const lines: string[] = [];
    let size = 0;
    while (size < 4_000_000 && total + size < bytes) {
      const turns = 10 + Math.floor(rand() * 30);
      const produced = kind === 'agentb-code' ? claudeSession(rand, session, turns) : storylineSession(rand, session, turns, template);
      session += 1;
      if (kind === 'agentb-code') {
        // One session per file, as Claude Code writes them; several sessions per project directory.
        const body = `${produced.join('\n')}\n`;
        const sub = join(dir, `-home-dev-project-${session % 50}`);
        mkdirSync(sub, { recursive: true });
        writeFileSync(join(sub, `session-${String(session).padStart(6, '0')}.jsonl`), body);
        files += 1;
        total += Buffer.byteLength(body);
        lineCount += produced.length;
        continue;
      }
      for (const line of produced) {
        lines.push(line);
        size += Buffer.byteLength(line) + 1;
      }
    }
    if (lines.length > 0) {
      writeFileSync(join(dir, `part-${String(files).padStart(4, '0')}.storyline.jsonl`), `${lines.join('\n')}\n`);
      files += 1;
      total += size;
      lineCount += lines.length;
    }
  }
  return { dir, kind, files, bytes: total, lines: lineCount };
}
