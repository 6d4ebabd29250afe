/**
 * What the benchmark sends: synthetic prompts of a target token length, or prompts read from a
 * JSONL file or a ShareGPT dump. Each prompt's request body is serialised once, up front, so
 * sending costs no JSON work.
 */
import { readFile } from 'node:fs/promises';
import { InvalidInputError, NotFoundError } from '../../lib/errors.js';
import type { BenchConfig, TokenTarget, TokenizerName } from './types.js';
import { seededRandom } from '../../lib/random.js';

export interface Tokenizer {
  count(text: string): number;
}

/**
 * The longest run without whitespace counted in one piece. BPE merges within a run take time
 * quadratic in its length: one 100,000-character run (a model repeating a character, a blob in a
 * prompt) takes seconds, one of a megabyte many minutes, while the client's clock stalls. A longer
 * run is counted in pieces of this length, which may count it a token more per piece than whole.
 */
const MAX_RUN = 256;
const LONG_RUN = new RegExp(`\\S{${MAX_RUN}}`, 'g');

/** Counts the text in pieces, each ending at a cut inside a long run (or at the text's end). */
function countInPieces(countTokens: (text: string) => number, text: string): number {
  let count = 0;
  let start = 0;
  for (const run of text.matchAll(LONG_RUN)) {
    const cut = run.index + MAX_RUN;
    count += countTokens(text.slice(start, cut));
    start = cut;
  }
  return start < text.length || start === 0 ? count + countTokens(text.slice(start)) : count;
}

/** Loads a gpt-tokenizer encoding; `usage` means "trust the server's counts" and has none. */
export async function loadTokenizer(name: TokenizerName): Promise<Tokenizer | undefined> {
  if (name === 'usage') return undefined;
  const encoding = (await import(`gpt-tokenizer/encoding/${name}`)) as { countTokens(text: string): number };
  encoding.countTokens('warm'); // builds the rank tables now rather than inside the first measured request
  return { count: (text) => countInPieces((piece) => encoding.countTokens(piece), text) };
}

export interface Prompt {
  body: string;
  /** Tokens in the message contents, when a tokenizer counted them. */
  inputTokens: number | undefined;
  maxTokens: number;
}


function sampleTokens(target: TokenTarget, random: () => number): number {
  if (target.spread === 0) return Math.max(1, Math.round(target.mean));
  const u = Math.max(random(), Number.EPSILON);
  const normal = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
  return Math.max(1, Math.round(target.mean + target.spread * normal));
}

// Common English words that every supported encoding keeps as one token each, with or without
// the leading space, so a synthetic prompt of N words is N tokens.
const WORDS = (
  'the of and to in is it you that was for on are with as his they be at one have this from or had by ' +
  'word but what some we can out other were all there when up use your how said an each she which do ' +
  'their time if will way about many then them write would like so these her long make thing see him ' +
  'two has look more day could go come did number sound no most people my over know water than call ' +
  'first who may down side been now find any new work part take get place made live where after back ' +
  'little only round man year show every good me give our under name very through just form great'
).split(' ');

function syntheticText(tokens: number, random: () => number): string {
  const words = new Array<string>(tokens);
  for (let i = 0; i < tokens; i++) words[i] = WORDS[Math.floor(random() * WORDS.length)] as string;
  return words.join(' ');
}

interface BodyOptions {
  model: string;
  stream: boolean;
}

function requestBody(options: BodyOptions, messages: Array<{ role: string; content: string }>, maxTokens: number): string {
  return JSON.stringify({
    model: options.model,
    messages,
    max_tokens: maxTokens,
    stream: options.stream,
    // Asks for the usage chunk, the fallback when no tokenizer counts the stream.
    ...(options.stream ? { stream_options: { include_usage: true } } : {}),
  });
}

/** Distinct synthetic prompts cycled through; distinct so that prefix caches do not flatter the server. */
const SYNTHETIC_POOL = 512;

export function syntheticPrompts(config: BenchConfig, tokenizer: Tokenizer | undefined): Prompt[] {
  const random = seededRandom(config.seed);
  const prompts: Prompt[] = [];
  for (let i = 0; i < SYNTHETIC_POOL; i++) {
    const inputTokens = sampleTokens(config.input, random);
    const maxTokens = sampleTokens(config.output, random);
    const content = syntheticText(inputTokens, random);
    const counted = tokenizer?.count(content);
    prompts.push({ body: requestBody(config, [{ role: 'user', content }], maxTokens), inputTokens: counted, maxTokens });
  }
  return prompts;
}

type Message = { role: string; content: string };

function asMessages(value: unknown): Message[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const messages: Message[] = [];
  for (const m of value) {
    if (!m || typeof m !== 'object') return undefined;
    const { role, content } = m as Record<string, unknown>;
    if (typeof role !== 'string' || typeof content !== 'string') return undefined;
    messages.push({ role, content });
  }
  return messages;
}

const SHAREGPT_ROLES: Record<string, string> = { human: 'user', user: 'user', gpt: 'assistant', assistant: 'assistant', system: 'system' };

/** One record of a prompts file: `{prompt}`, `{messages}` or a ShareGPT `{conversations}`. */
function promptOf(record: unknown, where: string, config: BenchConfig, tokenizer: Tokenizer | undefined, random: () => number): Prompt {
  if (!record || typeof record !== 'object' || Array.isArray(record)) {
    throw new InvalidInputError(`${where}: expected an object with "prompt", "messages" or "conversations"`);
  }
  const r = record as Record<string, unknown>;
  let messages: Message[] | undefined;
  let answer: string | undefined;
  if (typeof r.prompt === 'string') messages = [{ role: 'user', content: r.prompt }];
  else if (r.messages !== undefined) {
    messages = asMessages(r.messages);
    if (!messages) throw new InvalidInputError(`${where}: "messages" must be a non-empty list of {role, content} strings`);
  } else if (Array.isArray(r.conversations)) {
    // ShareGPT: the first human turn is the prompt; the reply after it sets the output length.
    const turns = r.conversations as Array<Record<string, unknown>>;
    const first = turns.findIndex((t) => SHAREGPT_ROLES[String(t?.from)] === 'user' && typeof t.value === 'string');
    if (first < 0) throw new InvalidInputError(`${where}: "conversations" has no human turn with a string "value"`);
    messages = [{ role: 'user', content: turns[first]?.value as string }];
    const reply = turns[first + 1];
    if (reply && SHAREGPT_ROLES[String(reply.from)] === 'assistant' && typeof reply.value === 'string') answer = reply.value;
  } else {
    throw new InvalidInputError(`${where}: expected "prompt", "messages" or "conversations"`);
  }
  let maxTokens: number;
  const explicit = r.output_tokens ?? r.max_tokens;
  if (explicit !== undefined) {
    if (typeof explicit !== 'number' || !Number.isInteger(explicit) || explicit < 1) {
      throw new InvalidInputError(`${where}: "output_tokens"/"max_tokens" must be a positive integer`);
    }
    maxTokens = explicit;
  } else if (answer !== undefined && tokenizer) maxTokens = Math.max(1, tokenizer.count(answer));
  else maxTokens = sampleTokens(config.output, random);
  const inputTokens = tokenizer ? messages.reduce((sum, m) => sum + tokenizer.count(m.content), 0) : undefined;
  return { body: requestBody(config, messages, maxTokens), inputTokens, maxTokens };
}

export async function filePrompts(file: string, config: BenchConfig, tokenizer: Tokenizer | undefined): Promise<Prompt[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new NotFoundError(`--prompts file ${file} does not exist`);
    throw new InvalidInputError(`--prompts file ${file} cannot be read: ${(error as Error).message}`);
  }
  const random = seededRandom(config.seed);
  const prompts: Prompt[] = [];
  if (text.trimStart().startsWith('[')) {
    // A ShareGPT dump is one JSON array rather than JSON lines.
    let records: unknown;
    try {
      records = JSON.parse(text);
    } catch (error) {
      throw new InvalidInputError(`${file}: not valid JSON: ${(error as Error).message}`);
    }
    (records as unknown[]).forEach((record, i) => prompts.push(promptOf(record, `${file}: record ${i + 1}`, config, tokenizer, random)));
  } else {
    const lines = text.split('\n');
    lines.forEach((line, i) => {
      if (line.trim() === '') return;
      let record: unknown;
      try {
        record = JSON.parse(line);
      } catch {
        throw new InvalidInputError(`${file}:${i + 1}: not valid JSON`);
      }
      prompts.push(promptOf(record, `${file}:${i + 1}`, config, tokenizer, random));
    });
  }
  if (prompts.length === 0) throw new InvalidInputError(`--prompts file ${file} has no prompts`);
  return prompts;
}
