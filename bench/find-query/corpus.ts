/**
 * A generated ATIF corpus for the find/query benchmark: JSONL files, one ATIF document per line,
 * 20 steps per document (user / agent with reasoning, metrics and sometimes a tool call and its
 * observation). Words are invented from English letter frequencies (30,000 of them, used with Zipf
 * frequencies, plus common function words), so trigrams and phrases are about as selective as in
 * English text. Deterministic (seeded) so runs compare.
 */
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { seededRandom } from '../../lib/random.js';

export interface Corpus {
  dir: string;
  files: number;
  documents: number;
  steps: number;
  bytes: number;
}

const STEPS_PER_DOCUMENT = 20;
const DOCUMENTS_PER_FILE = 1000;
const MODELS = ['model-alpha', 'model-beta', 'model-gamma', 'model-delta'];
const AGENTS = ['planner', 'coder', 'reviewer'];
const TOOLS = ['bash', 'read_file', 'edit_file', 'search'];

/** English letter frequencies (per mille), so common trigrams are common as in English text. */
const LETTERS = 'etaoinshrdlcumwfgypbvkjxqz';
const LETTER_WEIGHTS = [127, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28, 24, 24, 22, 20, 20, 19, 15, 10, 8, 2, 2, 1, 1];
const FUNCTION_WORDS = ['the', 'to', 'and', 'of', 'a', 'in', 'is', 'for', 'on', 'it', 'with', 'that', 'this', 'as', 'be', 'not', 'at', 'by', 'from', 'or'];

function vocabulary(rand: () => number, size: number): string[] {
  const total = LETTER_WEIGHTS.reduce((a, b) => a + b, 0);
  const letter = (): string => {
    let x = rand() * total;
    for (let i = 0; i < LETTER_WEIGHTS.length; i++) if ((x -= LETTER_WEIGHTS[i] as number) < 0) return LETTERS[i] as string;
    return 'e';
  };
  const words = new Set<string>();
  while (words.size < size) {
    const length = 3 + Math.floor(rand() * 8);
    let w = '';
    for (let i = 0; i < length; i++) w += letter();
    words.add(w);
  }
  return [...words];
}

export interface CorpusShape {
  seed?: number;
  /** Steps per document (default 20); the serve benchmark makes one run of 2,000. */
  stepsPerDocument?: number;
  /** Prefix of the trajectory and session ids, so that two corpora can go into one dataset. */
  idPrefix?: string;
}

export async function generateCorpus(dir: string, steps: number, { seed = 7, stepsPerDocument = STEPS_PER_DOCUMENT, idPrefix = 'bench' }: CorpusShape = {}): Promise<Corpus> {
  mkdirSync(dir, { recursive: true });
  const rand = seededRandom(seed);
  const words = vocabulary(rand, 30_000);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rand() * list.length)] as T;
  // Word ranks are log-uniform (frequency ~ 1/rank, as Zipf's law has it); one word in five is a function word.
  const word = (): string => (rand() < 0.2 ? pick(FUNCTION_WORDS) : (words[Math.floor(Math.exp(rand() * Math.log(words.length))) - 1] as string));
  const sentence = (n: number): string => Array.from({ length: n }, word).join(' ');
  const documents = Math.ceil(steps / stepsPerDocument);
  let bytes = 0;
  let files = 0;
  let written = 0;
  let clock = Date.UTC(2026, 0, 1);
  for (let first = 0; first < documents; first += DOCUMENTS_PER_FILE) {
    const file = join(dir, `part-${String(files++).padStart(4, '0')}.jsonl`);
    const out = createWriteStream(file);
    for (let d = first; d < Math.min(documents, first + DOCUMENTS_PER_FILE); d++) {
      const count = Math.min(stepsPerDocument, steps - written);
      const doc = {
        schema_version: 'ATIF-v1.7',
        session_id: `${idPrefix}-session-${d}`,
        trajectory_id: `${idPrefix}-${d}`,
        agent: { name: pick(AGENTS), version: '1.0', model_name: pick(MODELS) },
        extra: { batch: d % 100, status: rand() < 0.8 ? 'done' : 'failed' },
        steps: Array.from({ length: count }, (_, i) => {
          clock += 1000 + Math.floor(rand() * 5000);
          const timestamp = new Date(clock).toISOString();
          if (i % 2 === 0) return { step_id: i + 1, source: 'user', message: sentence(12 + Math.floor(rand() * 18)), timestamp };
          const message = sentence(10 + Math.floor(rand() * 15));
          const step: Record<string, unknown> = {
            step_id: i + 1,
            source: 'agent',
            message,
            reasoning_content: sentence(8 + Math.floor(rand() * 8)),
            model_name: pick(MODELS),
            timestamp,
            metrics: { prompt_tokens: 500 + Math.floor(rand() * 5000), completion_tokens: 20 + Math.floor(rand() * 400), cached_tokens: Math.floor(rand() * 400) },
          };
          if (rand() < 0.4) {
            const id = `call-${d}-${i}`;
            step.tool_calls = [{ tool_call_id: id, function_name: pick(TOOLS), arguments: { arg: sentence(3) } }];
            step.observation = { results: [{ source_call_id: id, content: sentence(10 + Math.floor(rand() * 20)) }] };
          }
          return step;
        }),
      };
      written += count;
      const line = `${JSON.stringify(doc)}\n`;
      bytes += Buffer.byteLength(line);
      if (!out.write(line)) await once(out, 'drain');
    }
    out.end();
    await once(out, 'finish');
  }
  return { dir, files, documents, steps: written, bytes };
}
