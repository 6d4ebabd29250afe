/**
 * How `show` prints a transcript for people: `text` (a terminal's view, with colours when stdout
 * is one) or `markdown` (to paste into an issue or a note). Long texts stay whole; what a tool
 * got and gave (arguments, results, observations) is clipped to `maxLines` lines of `width`
 * columns, since that is where a trajectory's bulk is, unless `full`.
 */
import { clipToWidth, escapeControls } from '../../lib/width.js';
import type { Transcript, TranscriptRun, TranscriptStep, TranscriptToolCall } from '../../pipelines/index.js';

export interface TranscriptStyle {
  /** Columns a clipped line may take. */
  width: number;
  /** Lines of a tool's arguments or result shown before "… N more lines". */
  maxLines: number;
  /** Print tool arguments and results whole. */
  full: boolean;
  colors: boolean;
}

const ANSI = { bold: '1', dim: '2', red: '31', green: '32', yellow: '33', blue: '34', magenta: '35', cyan: '36' } as const;
type Tone = keyof typeof ANSI;

const ROLE_TONE: Record<string, Tone> = { system: 'magenta', user: 'green', agent: 'cyan' };

function paint(style: TranscriptStyle, tone: Tone, text: string): string {
  return style.colors && text !== '' ? `\x1b[${ANSI[tone]}m${text}\x1b[0m` : text;
}

/** `1234` -> `1.2k`, for token counts in headers. */
function count(n: number): string {
  return n >= 10_000 ? `${Math.round(n / 1000)}k` : n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(n);
}

function money(usd: number): string {
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toPrecision(2)}`;
}

function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
}

function tokens(prompt: number | null, completion: number | null, cached: number | null): string | undefined {
  if (prompt === null && completion === null) return undefined;
  const cachedPart = cached ? ` (${count(cached)} cached)` : '';
  return `${count(prompt ?? 0)} in${cachedPart} / ${count(completion ?? 0)} out`;
}

function elapsed(from: string | null, to: string | null): number | undefined {
  if (from === null || to === null) return undefined;
  const ms = Date.parse(to) - Date.parse(from);
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

/** A tool's value as text: a JSON string as its text, anything else as indented JSON. */
function valueText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || value === undefined) return '';
  return JSON.stringify(value, null, 2);
}

/** Arguments on one line when they fit (`{"cmd":"ls"}`), else indented. */
function argumentsText(value: unknown, width: number): string {
  if (typeof value === 'string') return value;
  const flat = JSON.stringify(value ?? {});
  return flat.length <= width ? flat : JSON.stringify(value, null, 2);
}

/** Lines of `text`, each clipped to `width`, at most `maxLines` of them (unless `full`). */
function clipLines(text: string, style: TranscriptStyle, indent: number): string[] {
  const lines = text.replace(/\r\n?/g, '\n').replace(/\n+$/, '').split('\n');
  if (style.full) return lines;
  const room = Math.max(style.width - indent, 10);
  const shown = lines.slice(0, style.maxLines).map((line) => clipToWidth(line.replace(/\t/g, '  '), room));
  if (lines.length > style.maxLines) shown.push(`… ${lines.length - style.maxLines} more line${lines.length - style.maxLines === 1 ? '' : 's'} (--full shows all)`);
  return shown;
}

function runFacts(run: TranscriptRun): string[] {
  const facts: string[] = [];
  const who = [run.agent_name, run.agent_version].filter((v) => v !== null).join(' ');
  if (who) facts.push(`agent ${who}`);
  if (run.agent_model_name) facts.push(`model ${run.agent_model_name}`);
  facts.push(`${run.step_count} step${run.step_count === 1 ? '' : 's'}`, `${run.tool_call_count} tool call${run.tool_call_count === 1 ? '' : 's'}`);
  const t = tokens(run.prompt_tokens, run.completion_tokens, run.cached_tokens);
  if (t) facts.push(`tokens ${t}`);
  if (run.cost_usd !== null) facts.push(`cost ${money(run.cost_usd)}`);
  return facts;
}

function timeFacts(run: TranscriptRun): string | undefined {
  if (run.started_at === null) return undefined;
  const ms = elapsed(run.started_at, run.finished_at);
  return `${run.started_at}${run.finished_at && run.finished_at !== run.started_at ? ` → ${run.finished_at}` : ''}${ms !== undefined ? ` (${duration(ms)})` : ''}`;
}

function stepFacts(step: TranscriptStep, previous: string | null): string[] {
  const facts: string[] = [];
  if (step.kind !== step.source) facts.push(step.kind);
  if (step.model_name) facts.push(step.model_name);
  if (step.timestamp) {
    const gap = elapsed(previous, step.timestamp);
    facts.push(gap !== undefined && gap > 0 ? `${step.timestamp} (+${duration(gap)})` : step.timestamp);
  }
  const t = tokens(step.prompt_tokens, step.completion_tokens, step.cached_tokens);
  if (t) facts.push(t);
  if (step.cost_usd !== null) facts.push(money(step.cost_usd));
  if (step.latency_ms !== null) facts.push(`latency ${duration(step.latency_ms)}`);
  return facts;
}

function callFacts(call: TranscriptToolCall): string {
  const facts: string[] = [];
  if (call.is_error) facts.push('error');
  if (call.status) facts.push(call.status);
  if (call.exit_code !== null) facts.push(`exit ${call.exit_code}`);
  if (call.duration_ms !== null) facts.push(duration(call.duration_ms));
  return facts.length ? ` (${facts.join(', ')})` : '';
}

function subagentLine(s: Transcript['subagents'][number]): string {
  return `${s.document_id}${s.agent_name ? ` (${s.agent_name})` : ''}${s.parent_tool_call_id ? ` from call ${s.parent_tool_call_id}` : ''}`;
}

/**
 * The transcript with control characters other than newline and tab shown as U+FFFD: text from
 * tools can hold terminal escapes, which must not reach the terminal (or the pasted Markdown).
 */
function cleaned(t: Transcript): Transcript {
  return JSON.parse(JSON.stringify(t), (_key, value: unknown) => (typeof value === 'string' ? escapeControls(value, '\n\t', () => '\ufffd') : value)) as Transcript;
}

export function renderText(transcript: Transcript, style: TranscriptStyle): string {
  const t = cleaned(transcript);
  const out: string[] = [];
  const { run } = t;
  out.push(paint(style, 'bold', `run ${run.document_id}`) + paint(style, 'dim', `  ${[run.run_id ? `run id ${run.run_id}` : '', `session ${run.session_id}`].filter(Boolean).join(' · ')}`));
  out.push(runFacts(run).join(' · '));
  const when = timeFacts(run);
  if (when) out.push(when);
  out.push(paint(style, 'dim', `from ${run.source_path} (${run.source_format}) · snapshot ${t.snapshot_id}`));
  if (run.parent_session_id) out.push(`subagent of session ${run.parent_session_id}${run.parent_tool_call_id ? `, call ${run.parent_tool_call_id}` : ''}`);
  if (run.notes) out.push('', ...run.notes.split('\n'));
  let previous: string | null = run.started_at;
  for (const step of t.steps) {
    const facts = stepFacts(step, previous);
    out.push('', paint(style, ROLE_TONE[step.source] ?? 'blue', `── ${step.step_id} · ${step.source}`) + paint(style, 'dim', facts.map((f) => ` · ${f}`).join('')));
    previous = step.timestamp ?? previous;
    if (step.reasoning) {
      out.push(paint(style, 'yellow', 'reasoning:'));
      for (const line of step.reasoning.replace(/\n+$/, '').split('\n')) out.push(paint(style, 'dim', `  ${line}`));
    }
    if (step.message !== '') out.push(...step.message.replace(/\n+$/, '').split('\n'));
    for (const call of step.tool_calls) {
      out.push(paint(style, call.is_error ? 'red' : 'blue', `→ ${call.function_name}`) + paint(style, 'dim', ` ${call.tool_call_id}${callFacts(call)}`));
      for (const line of clipLines(argumentsText(call.arguments, style.width - 4), style, 4)) out.push(`    ${line}`);
      const result = valueText(call.result);
      if (result !== '') {
        out.push(paint(style, 'dim', '  ← result'));
        for (const line of clipLines(result, style, 4)) out.push(`    ${line}`);
      }
    }
    // The observation repeats the calls' results when there are calls; shown only when there are none.
    if (step.observation && step.tool_calls.length === 0) {
      out.push(paint(style, 'dim', '  ← observation'));
      for (const line of clipLines(step.observation, style, 4)) out.push(`    ${line}`);
    }
  }
  if (t.subagents.length > 0) {
    out.push('', paint(style, 'bold', 'subagents (trajstore show --document-id ID):'));
    for (const s of t.subagents) out.push(`  ${subagentLine(s)}`);
  }
  return `${out.join('\n')}\n`;
}

/** A fence longer than any run of backticks in `text`, so the text cannot close it. */
function fence(text: string): string {
  const longest = Math.max(2, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  return '`'.repeat(longest + 1);
}

function codeBlock(text: string, language = ''): string[] {
  const f = fence(text);
  return [`${f}${language}`, ...text.split('\n'), f];
}

export function renderMarkdown(transcript: Transcript, style: TranscriptStyle): string {
  const t = cleaned(transcript);
  const { run } = t;
  const out: string[] = [`# Run ${run.document_id}`, ''];
  const facts = [run.run_id ? `run id \`${run.run_id}\`` : '', `session \`${run.session_id}\``, ...runFacts(run), timeFacts(run) ?? '', `source \`${run.source_path}\` (${run.source_format})`, `snapshot \`${t.snapshot_id}\``];
  for (const fact of facts.filter(Boolean)) out.push(`- ${fact}`);
  if (run.parent_session_id) out.push(`- subagent of session \`${run.parent_session_id}\`${run.parent_tool_call_id ? `, call \`${run.parent_tool_call_id}\`` : ''}`);
  if (run.notes) out.push('', run.notes);
  let previous: string | null = run.started_at;
  const plain = { ...style, colors: false };
  for (const step of t.steps) {
    out.push('', `## ${step.step_id} · ${step.source}`, '');
    const stepLine = stepFacts(step, previous);
    previous = step.timestamp ?? previous;
    if (stepLine.length) out.push(`_${stepLine.join(' · ')}_`, '');
    if (step.reasoning) out.push(...step.reasoning.replace(/\n+$/, '').split('\n').map((l) => `> ${l}`), '');
    if (step.message !== '') out.push(step.message.replace(/\n+$/, ''), '');
    for (const call of step.tool_calls) {
      out.push(`**${call.function_name}** \`${call.tool_call_id}\`${callFacts(call)}`, '');
      out.push(...codeBlock(clipLines(argumentsText(call.arguments, plain.width), plain, 0).join('\n'), typeof call.arguments === 'string' ? '' : 'json'), '');
      const result = valueText(call.result);
      if (result !== '') out.push('Result:', '', ...codeBlock(clipLines(result, plain, 0).join('\n')), '');
    }
    if (step.observation && step.tool_calls.length === 0) out.push('Observation:', '', ...codeBlock(clipLines(step.observation, plain, 0).join('\n')), '');
  }
  if (t.subagents.length > 0) {
    out.push('', '## Subagents', '');
    for (const s of t.subagents) out.push(`- ${subagentLine(s)}`);
  }
  return `${out.join('\n').replace(/\n{3,}/g, '\n\n').replace(/\n+$/, '')}\n`;
}
