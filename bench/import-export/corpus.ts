/**
 * A generated trajectory corpus for the import/export benchmark: Claude Code style session JSONL
 * (the shape of `~/.claude/projects/<cwd>/<session>.jsonl`: user prompts, assistant lines with
 * tool_use and usage, tool_result lines, text replies), Codex CLI rollouts (the shape of
 * `~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`: the session's base instructions, a turn context
 * per turn, encrypted reasoning, exec_command calls and their output, and the event stream that
 * repeats messages and output), or Storyline JSONL. Content is invented and deterministic (a
 * seeded generator).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { seededRandom } from '../../lib/random.js';

export type CorpusKind = 'agentb-code' | 'agenta' | 'storyline';

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

/** The instructions every Codex session of the corpus starts with (as every real rollout repeats its CLI's). */
const CODEX_INSTRUCTIONS = (() => {
  const rand = seededRandom(7);
  return Array.from({ length: 120 }, (_, i) => `- Rule ${i + 1}: ${text(rand, 14)}.`).join('\n');
})();

const base64 = (rand: () => number, n: number): string => {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  return Array.from({ length: n }, () => alphabet[Math.floor(rand() * 64)]).join('');
};

function codexSession(rand: () => number, index: number, turns: number): { name: string; lines: string[] } {
  const id = `0196d${hex(rand, 3)}-${hex(rand, 4)}-7${hex(rand, 3)}-8${hex(rand, 3)}-${hex(rand, 12)}`;
  const cwd = `/home/dev/project-${index % 50}`;
  let clock = Date.UTC(2026, 4, 1) + index * 3_600_000;
  const lines: string[] = [];
  const push = (type: string, payload: Record<string, unknown>): void => {
    clock += 50 + Math.floor(rand() * 2000);
    lines.push(JSON.stringify({ timestamp: new Date(clock).toISOString(), type, payload }));
  };
  const start = new Date(clock).toISOString();
  push('session_meta', { id, timestamp: start, cwd, originator: 'codex_cli_rs', cli_version: '0.130.0', source: 'cli', model_provider: 'openai', base_instructions: { text: CODEX_INSTRUCTIONS } });
  push('response_item', { type: 'message', role: 'user', content: [{ type: 'input_text', text: `<environment_context>\n  <cwd>${cwd}</cwd>\n  <shell>bash</shell>\n</environment_context>` }] });
  const total = { input_tokens: 0, cached_input_tokens: 0, output_tokens: 0, reasoning_output_tokens: 0, total_tokens: 0 };
  const prompt = `Please ${text(rand, 30)}`;
  const turnId = `0196d${hex(rand, 3)}-${hex(rand, 4)}-7${hex(rand, 3)}-a${hex(rand, 3)}-${hex(rand, 12)}`;
  push('event_msg', { type: 'task_started', turn_id: turnId, model_context_window: 258400 });
  push('turn_context', { turn_id: turnId, cwd, approval_policy: 'on-request', sandbox_policy: { type: 'workspace-write', writable_roots: [], network_access: false }, model: 'gpt-5.3-codex', effort: 'medium', summary: 'auto' });
  push('response_item', { type: 'message', role: 'user', content: [{ type: 'input_text', text: prompt }] });
  push('event_msg', { type: 'user_message', message: prompt, images: [] });
  for (let t = 0; t < turns; t++) {
    const summary = `**${text(rand, 4)}**`;
    push('response_item', { type: 'reasoning', summary: [{ type: 'summary_text', text: summary }], content: null, encrypted_content: `gAAAAAB${base64(rand, 600 + Math.floor(rand() * 1200))}` });
    push('event_msg', { type: 'agent_reasoning', text: summary });
    const callId = `call_${base64(rand, 24)}`;
    push('response_item', { type: 'function_call', name: 'exec_command', arguments: JSON.stringify({ cmd: `rg -n ${WORDS[t % WORDS.length]} src`, workdir: cwd, yield_time_ms: 1000 }), call_id: callId });
    const last = { input_tokens: 10_000 + Math.floor(rand() * 30_000), cached_input_tokens: 8_000 + Math.floor(rand() * 20_000), output_tokens: 40 + Math.floor(rand() * 400), reasoning_output_tokens: Math.floor(rand() * 200), total_tokens: 0 };
    last.total_tokens = last.input_tokens + last.output_tokens;
    for (const key of Object.keys(total) as Array<keyof typeof total>) total[key] += last[key];
    push('event_msg', { type: 'token_count', info: { total_token_usage: { ...total }, last_token_usage: last, model_context_window: 258400 } });
    const output = Array.from({ length: 12 + Math.floor(rand() * 20) }, (_, i) => `src/${WORDS[i % WORDS.length]}.rs:${i * 7}: ${text(rand, 10)}`).join('\n');
    push('event_msg', { type: 'exec_command_end', call_id: callId, turn_id: turnId, command: ['bash', '-lc', `rg -n ${WORDS[t % WORDS.length]} src`], cwd, stdout: output, stderr: '', aggregated_output: output, exit_code: 0, duration: { secs: 0, nanos: 41_000_000 } });
    push('response_item', { type: 'function_call_output', call_id: callId, output: `Chunk ID: ${hex(rand, 6)}\nWall time: 0.0412 seconds\nProcess exited with code 0\nOutput:\n${output}` });
  }
  const answer = text(rand, 40);
  push('response_item', { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: answer }], phase: 'final_answer' });
  push('event_msg', { type: 'agent_message', message: answer, phase: 'final_answer' });
  push('event_msg', { type: 'task_complete', turn_id: turnId, last_agent_message: answer });
  const day = start.slice(0, 10).split('-');
  return { name: join(...day, `rollout-${start.slice(0, 19).replaceAll(':', '-')}-${id}.jsonl`), lines };
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
  const rand = seededRandom(42);
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
      if (kind === 'agenta') {
        // One rollout per file, under the date directories Codex writes them in.
        const { name, lines: rollout } = codexSession(rand, session, turns);
        session += 1;
        const body = `${rollout.join('\n')}\n`;
        mkdirSync(join(dir, name, '..'), { recursive: true });
        writeFileSync(join(dir, name), body);
        files += 1;
        total += Buffer.byteLength(body);
        lineCount += rollout.length;
        continue;
      }
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
