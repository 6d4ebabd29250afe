/**
 * The project's own models: a llama-architecture GGUF whose weights are a bigram model fitted by
 * counting the words of an in-repo corpus (corpus.ts), with no training loop and nothing downloaded.
 *
 * Vocabulary (byte-fallback SentencePiece, as llama.cpp reads it): `<unk>`, `<s>`, `</s>`, the 256
 * byte tokens `<0x00>`..`<0xFF>`, `▁` (the space), printable ASCII, then `▁word` for the corpus's
 * words with every prefix piece (`▁w`, `▁wo`, ...), scored by length so the tokenizer merges a
 * word whole. How it computes the next token:
 * - each token's embedding is one-hot on its context class: one class per frequent word or
 *   punctuation mark (as many as the width allows), class 0 for every other token;
 * - the blocks add nothing (their output projections `attn_output` and `ffn_down` are zero; the
 *   other matrices are seeded noise, so they still cost what a real model's do), so the final norm
 *   sees the one-hot vector, scaled to sqrt(width);
 * - the output matrix holds, for each class, the log-probabilities of the next unit after it
 *   (smoothed with the unigram), so the logits are exactly the bigram's.
 * Paragraphs end with `</s>`, so replies end on their own now and then. The GGUF carries a chat
 * template (`tokenizer.chat_template`) as real models do. The same bytes every run.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { DurableFile } from '../../../lib/durable.js';
import { seededRandom } from '../../../lib/random.js';
import { CORPUS } from './corpus.js';
import { ggufPieces, type GgufTensor, type GgufValue } from './gguf.js';

export interface ModelShape {
  /** general.name */
  name: string;
  /** Width of the residual stream (and the number of context classes). */
  embedding: number;
  layers: number;
  feedForward: number;
  heads: number;
  contextLength: number;
}

/** The tiny model: about 5 MB, thousands of tokens per second on one core. */
export const TINY_SHAPE: ModelShape = { name: 'tiny', embedding: 256, layers: 2, feedForward: 256, heads: 4, contextLength: 2048 };

const SPACE = '\u2581';
const UNK = 0;
const BOS = 1;
const EOS = 2;
const TYPE = { normal: 1, unknown: 2, control: 3, byte: 6 } as const;
/** Logit of a token the bigram never produces (byte tokens, word prefixes, controls but `</s>`). */
const NEVER = -30;
/** Weight of the unigram in each class's next-unit distribution. */
const SMOOTHING = 0.05;
const WEIGHT_SEED = 0x5eed;
/** The chat template (Jinja, as in real models' GGUF metadata): one `role: content` line per message. */
const CHAT_TEMPLATE = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

interface Vocabulary {
  tokens: string[];
  scores: number[];
  types: number[];
  ids: Map<string, number>;
}

/** The corpus as paragraphs of units: words as `▁word`, punctuation marks as themselves. */
function paragraphs(): string[][] {
  return CORPUS.split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => [...line.matchAll(/[A-Za-z']+|[.,!?;:]/g)].map((m) => (/^[.,!?;:]$/.test(m[0]) ? m[0] : SPACE + m[0])));
}

function vocabulary(words: readonly string[]): Vocabulary {
  const v: Vocabulary = { tokens: [], scores: [], types: [], ids: new Map() };
  const add = (token: string, type: number, score = 0): void => {
    if (v.ids.has(token)) return;
    v.ids.set(token, v.tokens.length);
    v.tokens.push(token);
    v.scores.push(score);
    v.types.push(type);
  };
  add('<unk>', TYPE.unknown);
  add('<s>', TYPE.control);
  add('</s>', TYPE.control);
  for (let b = 0; b < 256; b++) add(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`, TYPE.byte);
  add(SPACE, TYPE.normal);
  for (let c = 0x21; c < 0x7f; c++) add(String.fromCharCode(c), TYPE.normal);
  const pieces = new Set<string>();
  for (const word of words) for (let n = 2; n <= word.length; n++) pieces.add(word.slice(0, n));
  for (const piece of [...pieces].sort((a, b) => a.length - b.length || (a < b ? -1 : 1))) add(piece, TYPE.normal, piece.length);
  return v;
}

/** The model as GGUF metadata and tensors. */
export function bigramModel(shape: ModelShape): { metadata: Map<string, GgufValue>; tensors: GgufTensor[] } {
  const { embedding: n, layers, feedForward, heads, contextLength } = shape;
  if (n % heads !== 0) throw new Error(`embedding ${n} is not a multiple of heads ${heads}`);
  const text = paragraphs();
  const counts = new Map<string, number>();
  for (const units of text) for (const u of units) counts.set(u, (counts.get(u) ?? 0) + 1);
  // The most frequent units get a context class each (1..n-1); ties in alphabetical order.
  const ranked = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, n - 1);
  const classOf = new Map(ranked.map(([u], i) => [u, i + 1]));
  const vocab = vocabulary(ranked.map(([u]) => u).filter((u) => u.startsWith(SPACE)));
  const tokenOf = (unit: string): number => vocab.ids.get(unit)!;
  const V = vocab.tokens.length;

  // Next-unit counts per class; class 0 (any other token) is the start of a paragraph.
  const next = Array.from({ length: n }, () => new Map<number, number>());
  const unigram = new Map<number, number>();
  for (const units of text) {
    let from = 0;
    for (const u of [...units, '</s>']) {
      const cls = classOf.get(u);
      if (cls === undefined && u !== '</s>') {
        from = 0;
        continue;
      }
      const to = u === '</s>' ? EOS : tokenOf(u);
      next[from]!.set(to, (next[from]!.get(to) ?? 0) + 1);
      unigram.set(to, (unigram.get(to) ?? 0) + 1);
      from = cls ?? 0;
    }
  }
  const unigramTotal = [...unigram.values()].reduce((a, b) => a + b, 0);

  // output.weight [n, V]: row j holds the logit of token j for each class, divided by the norm's sqrt(n).
  const scale = 1 / Math.sqrt(n);
  const output = new Float32Array(V * n).fill(NEVER * scale);
  for (let c = 0; c < n; c++) {
    const row = next[c]!;
    const total = [...row.values()].reduce((a, b) => a + b, 0);
    for (const [to, u] of unigram) {
      const p = ((row.get(to) ?? 0) + SMOOTHING * (u / unigramTotal)) / (total + SMOOTHING);
      output[to * n + c] = Math.log(p) * scale;
    }
  }
  // token_embd.weight [n, V]: one-hot on the token's class.
  const embd = new Float32Array(V * n);
  for (let t = 0; t < V; t++) embd[t * n + (classOf.get(vocab.tokens[t]!) ?? 0)] = 1;

  const random = seededRandom(WEIGHT_SEED);
  const noise = (count: number, fanIn: number): Float32Array => {
    const a = 1 / Math.sqrt(fanIn);
    const out = new Float32Array(count);
    for (let i = 0; i < count; i++) out[i] = (random() * 2 - 1) * a;
    return out;
  };
  const ones = (): Float32Array => new Float32Array(n).fill(1);
  const tensors: GgufTensor[] = [
    { name: 'token_embd.weight', dims: [n, V], data: embd },
    { name: 'output_norm.weight', dims: [n], data: ones() },
    { name: 'output.weight', dims: [n, V], data: output },
  ];
  for (let b = 0; b < layers; b++) {
    const blk = `blk.${b}`;
    tensors.push(
      { name: `${blk}.attn_norm.weight`, dims: [n], data: ones() },
      { name: `${blk}.attn_q.weight`, dims: [n, n], data: noise(n * n, n) },
      { name: `${blk}.attn_k.weight`, dims: [n, n], data: noise(n * n, n) },
      { name: `${blk}.attn_v.weight`, dims: [n, n], data: noise(n * n, n) },
      { name: `${blk}.attn_output.weight`, dims: [n, n], data: new Float32Array(n * n) },
      { name: `${blk}.ffn_norm.weight`, dims: [n], data: ones() },
      { name: `${blk}.ffn_gate.weight`, dims: [n, feedForward], data: noise(n * feedForward, n) },
      { name: `${blk}.ffn_up.weight`, dims: [n, feedForward], data: noise(n * feedForward, n) },
      { name: `${blk}.ffn_down.weight`, dims: [feedForward, n], data: new Float32Array(feedForward * n) },
    );
  }

  const metadata = new Map<string, GgufValue>([
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: shape.name }],
    ['general.file_type', { type: 'u32', value: 0 }],
    ['llama.context_length', { type: 'u32', value: contextLength }],
    ['llama.embedding_length', { type: 'u32', value: n }],
    ['llama.block_count', { type: 'u32', value: layers }],
    ['llama.feed_forward_length', { type: 'u32', value: feedForward }],
    ['llama.attention.head_count', { type: 'u32', value: heads }],
    ['llama.attention.head_count_kv', { type: 'u32', value: heads }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f32', value: 1e-5 }],
    ['llama.rope.dimension_count', { type: 'u32', value: n / heads }],
    ['llama.vocab_size', { type: 'u32', value: V }],
    ['tokenizer.ggml.model', { type: 'string', value: 'llama' }],
    ['tokenizer.ggml.tokens', { type: 'string[]', value: vocab.tokens }],
    ['tokenizer.ggml.scores', { type: 'f32[]', value: vocab.scores }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: vocab.types }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: BOS }],
    ['tokenizer.ggml.eos_token_id', { type: 'u32', value: EOS }],
    ['tokenizer.ggml.unknown_token_id', { type: 'u32', value: UNK }],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: true }],
    ['tokenizer.ggml.add_eos_token', { type: 'bool', value: false }],
    ['tokenizer.chat_template', { type: 'string', value: CHAT_TEMPLATE }],
  ]);
  return { metadata, tensors };
}

/**
 * Writes the model of `shape` to `path` (crash-safe) unless the file there already holds exactly
 * these bytes; true when it wrote.
 */
export function writeBigramModel(path: string, shape: ModelShape): boolean {
  const { metadata, tensors } = bigramModel(shape);
  const pieces = ggufPieces(metadata, tensors);
  const size = pieces.reduce((a, p) => a + p.byteLength, 0);
  const digest = (parts: Iterable<Uint8Array>): string => {
    const hash = createHash('sha256');
    for (const p of parts) hash.update(p);
    return hash.digest('hex');
  };
  try {
    const existing = readFileSync(path);
    if (existing.length === size && digest([existing]) === digest(pieces)) return false;
  } catch {
    // no file yet (or unreadable): write it
  }
  const file = new DurableFile(path, { createDirectory: true });
  try {
    for (const p of pieces) file.write(p);
    file.commit();
  } catch (error) {
    file.abort();
    throw error;
  }
  return true;
}
