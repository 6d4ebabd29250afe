/**
 * The serving workers on the real tiny model (dist/models/tiny.gguf, made at set-up), as actors of
 * an in-process system: the model generator, the checks before a model is loaded, the contract's
 * chunks, caps, stop strings, seeds, the queue for sequences, requests joining a running batch, and
 * generation stopped when its caller leaves, and a worker that stops. Observations go through the
 * workers' load reports.
 */
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runTool } from '../../lib/testing/run-tool.js';
import { scratchDir } from '../../lib/testing/scratch.js';
import type { ActorHandle } from '../core/context.js';
import { ActorSystem } from '../core/system.js';
import type { GenerateChunk, GenerateRequest, LoadReport } from '../serving/contract.js';
import { EngineWorker } from '../serving/engine/index.js';
import { LocalModelWorker } from '../serving/index.js';
import { ggufPieces } from '../serving/models/gguf.js';
import { locateModel } from '../serving/models/locate.js';
import { ModelRunner } from '../serving/runner.js';
import { TINY_SHAPE, bigramModel, writeBigramModel } from '../serving/models/tiny.js';
import { killAll, startNode } from './helpers/cluster.js';

let system: ActorSystem;
/** max_new_tokens 16, two sequences, a short context (llama.cpp rounds it up to 256 tokens). */
let capped: ActorHandle;
/** Room for long replies, four sequences. */
let engine: ActorHandle;
let local: ActorHandle;

test.before(async () => {
  system = await ActorSystem.start({ log: () => {} });
  [capped, engine, local] = await Promise.all([
    system.spawn(EngineWorker, { name: 'capped', params: { model: 'tiny', max_new_tokens: 16, sequences: 2, context_size: 64 } }),
    system.spawn(EngineWorker, { name: 'engine', params: { model: 'tiny', max_new_tokens: 2000, sequences: 4 } }),
    system.spawn(LocalModelWorker, { name: 'local', params: { model_name: 'tiny' } }),
  ]);
});
test.after(async () => {
  await system.shutdown();
});

/** Greedy decoding of the tiny model loops on a phrase and never ends by itself: its length is the caps'. */
const GREEDY = { temperature: 0 };
const chat = (content: string, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({ messages: [{ role: 'user', content }], ...extra });

async function generate(worker: ActorHandle, request: unknown): Promise<{ text: string; chunks: GenerateChunk[]; last: GenerateChunk }> {
  const chunks: GenerateChunk[] = [];
  for await (const chunk of worker.stream<GenerateChunk>('generateStream', [request])) chunks.push(chunk);
  const text = chunks.map((c) => (c.type === 'text' ? c.text : '')).join('');
  return { text, chunks, last: chunks[chunks.length - 1]! };
}

const load = (worker: ActorHandle): Promise<LoadReport> => worker.ask<LoadReport>('load');

async function until<T>(what: string, probe: () => Promise<T | false>, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('the generated model: the same bytes every run, rewritten only when they change, with the keys llama.cpp needs', async () => {
  const digest = (pieces: Uint8Array[]): string => pieces.reduce((h, p) => h.update(p), createHash('sha256')).digest('hex');
  const a = bigramModel(TINY_SHAPE);
  assert.is(digest(ggufPieces(a.metadata, a.tensors)), digest(ggufPieces(bigramModel(TINY_SHAPE).metadata, bigramModel(TINY_SHAPE).tensors)));
  const dir = scratchDir('tiny-model');
  const path = join(dir, 'tiny.gguf');
  assert.is(writeBigramModel(path, TINY_SHAPE), true);
  assert.is(writeBigramModel(path, TINY_SHAPE), false, 'the same bytes are not written again');
  for (const key of ['llama.attention.head_count', 'llama.feed_forward_length', 'tokenizer.ggml.token_type', 'tokenizer.chat_template']) assert.ok(a.metadata.has(key), key);
  // The build made the tiny model the workers load by name.
  assert.match(locateModel('tiny'), /dist\/models\/tiny\.gguf$/);
});

test('a model file without the keys the native library needs is refused before it is loaded (the process survives)', async () => {
  const dir = scratchDir('bad-model');
  const model = bigramModel(TINY_SHAPE);
  model.metadata.delete('llama.attention.head_count');
  const noHeads = join(dir, 'no-heads.gguf');
  writeFileSync(noHeads, Buffer.concat(ggufPieces(model.metadata, model.tensors)));
  const garbage = join(dir, 'garbage.gguf');
  writeFileSync(garbage, 'not a model at all');
  const refused = async (model: string): Promise<string> => {
    const error = await system.spawn(EngineWorker, { params: { model } }).then(() => undefined, (e: unknown) => e);
    assert.instance(error, Error);
    return (error as Error).message;
  };
  assert.match(await refused(noHeads), `model file ${noHeads} lacks GGUF keys the model needs: llama.attention.head_count`);
  assert.match(await refused(garbage), `model file ${garbage} is not a readable GGUF file`);
});

test('actorctl actor: a missing model exits 2 naming where it looked; an unsupported role exits 2', async () => {
  const env = { ACTORCTL_MODELS_DIR: scratchDir('models') };
  const missing = await runTool('actorctl', ['actor', 'framework.serving.engine.EngineWorker', '--addr', '127.0.0.1:0', '--', '--model', 'nope'], { env, timeoutMs: 20_000 });
  assert.is(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, `model 'nope' not found: looked for ${join(env.ACTORCTL_MODELS_DIR, 'nope.gguf')} and `);
  assert.match(missing.stderr, 'dist/models/nope.gguf');
  const role = await runTool('actorctl', ['actor', 'framework.serving.engine.EngineWorker', '--addr', '127.0.0.1:0', '--', '--model', 'tiny', '--role', 'prefill'], { timeoutMs: 20_000 });
  assert.is(role.code, 2, role.stderr);
  assert.match(role.stderr, "role 'prefill' is not supported yet: EngineWorker runs the role 'aggregated' only");
  const file = await runTool('actorctl', ['actor', 'framework.serving.LocalModelWorker', '--addr', '127.0.0.1:0', '--', '--model_name', './missing/model.gguf'], { timeoutMs: 20_000 });
  assert.is(file.code, 2, file.stderr);
  assert.match(file.stderr, /model file \S+missing\/model\.gguf does not exist/);
});

test('actorctl actor: a worker stops on SIGTERM or SIGINT, mid-reply too: it leaves the cluster, its reply ends with an error chunk, exit 0', async () => {
  const engineNode = await startNode({ classPath: 'framework.serving.engine.EngineWorker', name: 'worker', params: ['--model', 'tiny', '--sequences', '1'] });
  const localNode = await startNode({ classPath: 'framework.serving.LocalModelWorker', name: 'worker', params: ['--model_name', 'tiny'] });
  const client = await ActorSystem.start({ seeds: [engineNode.addr], log: () => {} });
  try {
    await until('the client to see the worker', async () => client.instances('worker').length >= 1);
    const reply = client.resolve('worker', { nodeId: engineNode.nodeId }).stream<GenerateChunk>('generateStream', [{ prompt: 'The', ...GREEDY, max_tokens: 100_000 }])[Symbol.asyncIterator]();
    assert.is((await reply.next()).value?.type, 'text');
    engineNode.proc.kill('SIGTERM');
    localNode.proc.kill('SIGINT');
    let last: GenerateChunk | undefined;
    for (let r = await reply.next(); !r.done; r = await reply.next()) last = r.value;
    assert.equal(last, { type: 'error', code: 'overloaded', message: 'the worker is stopping' });
    for (const node of [engineNode, localNode]) {
      assert.is(await node.exited, 0, node.output());
      assert.match(node.output(), 'info: [worker] stopping: leaving the cluster');
      assert.match(node.output(), 'info: [worker] stopped');
    }
  } finally {
    await client.shutdown();
    await killAll();
  }
});

test('a stopping worker ends the replies it generates and those waiting for a sequence, then frees its model', async () => {
  const runner = await ModelRunner.start({ model: 'tiny', threads: 1, contextSize: 256, sequences: 1, maxQueued: 4 });
  const generating = runner.generate({ prompt: 'The', ...GREEDY, max_tokens: 100_000 });
  assert.is((await generating.next()).value?.type, 'text');
  const queued = runner.generate({ prompt: 'The', ...GREEDY });
  const queuedFirst = queued.next();
  await until('a queued request', async () => runner.load().queued === 1);
  await runner.close();
  const rest: GenerateChunk[] = [];
  for await (const chunk of generating) rest.push(chunk);
  const stopping = { type: 'error', code: 'overloaded', message: 'the worker is stopping' };
  assert.equal(rest[rest.length - 1], stopping);
  assert.equal((await queuedFirst).value, stopping);
  assert.equal((await runner.generate({ prompt: 'The' }).next()).value, stopping, 'a request after the stop');
});

test('a reply streams as text chunks and ends with the finish reason and usage; a chat goes through the GGUF chat template', async () => {
  const { chunks, last, text } = await generate(engine, chat('Tell me about the harbor.', { ...GREEDY, max_tokens: 12 }));
  assert.ok(chunks.length >= 2);
  assert.ok(chunks.slice(0, -1).every((c) => c.type === 'text'));
  assert.is(chunks.reduce((n, c) => n + (c.type === 'text' ? c.tokens : 0), 0), 12, 'the text chunks account for every token');
  assert.equal(last.type === 'end' && last.finish_reason, 'length');
  const usage = last.type === 'end' ? last.usage : undefined;
  assert.is(usage?.completion_tokens, 12);
  assert.is(usage?.total_tokens, usage!.prompt_tokens + 12);
  // "user: Tell me about the harbor.\nassistant:" in the model's own template: the prompt's token count shows it was applied.
  const bare = await generate(engine, { prompt: 'Tell me about the harbor.', ...GREEDY, max_tokens: 1 });
  assert.ok(usage!.prompt_tokens > (bare.last.type === 'end' ? bare.last.usage.prompt_tokens : Infinity) + 2, 'role markers add tokens');
  assert.match(text, /^[A-Z][a-z]+ [a-z]/, 'readable words');
});

test('max_new_tokens caps every request; the context has room for prompt and reply or the request is refused', async () => {
  const long = await generate(capped, { prompt: 'The', ...GREEDY, max_tokens: 500 });
  assert.equal(long.last.type === 'end' && [long.last.finish_reason, long.last.usage.completion_tokens], ['length', 16]);
  const tooLong = await generate(capped, { prompt: 'the harbor is quiet in the morning '.repeat(80) });
  assert.equal(tooLong.chunks.length, 1);
  assert.equal(tooLong.last.type === 'error' && tooLong.last.code, 'context_length_exceeded');
});

test('a long prompt is measured in pieces: one far past the context is refused at once, whatever its text; one that just fits is served', async () => {
  // Text the tiny model's vocabulary lacks is tokenized byte by byte, in time that grows with the
  // square of its length when tokenized whole: this one held a worker (and its membership) for a minute.
  const started = Date.now();
  const cjk = await generate(engine, { prompt: '日'.repeat(100_000), max_tokens: 1 });
  const manyMessages = await generate(engine, { messages: Array.from({ length: 200 }, () => ({ role: 'user', content: '🚀'.repeat(1000) })), max_tokens: 1 });
  const elapsed = Date.now() - started;
  for (const refused of [cjk, manyMessages]) {
    assert.equal(refused.chunks.length, 1);
    assert.ok(refused.last.type === 'error' && refused.last.code === 'context_length_exceeded', JSON.stringify(refused.last));
    assert.match(refused.last.type === 'error' ? refused.last.message : '', /the prompt is more than \d+ tokens; a sequence of this worker holds 2048/);
  }
  assert.ok(elapsed < 10_000, `refused after ${elapsed} ms`);

  // Exactly one token of room, in a text longer than a piece: the pieces' count does not refuse it.
  const promptTokens = async (k: number): Promise<number> => {
    const { last } = await generate(engine, { prompt: 'harbor '.repeat(k), max_tokens: 1, ...GREEDY });
    return last.type === 'end' ? last.usage.prompt_tokens : NaN;
  };
  const [t100, t200] = [await promptTokens(100), await promptTokens(200)];
  const perWord = (t200 - t100) / 100;
  const k = (2047 - (t100 - 100 * perWord)) / perWord;
  assert.ok(Number.isInteger(k) && 'harbor '.repeat(k).length > 8192, `${t100} and ${t200} tokens: no whole number of words fills the context exactly`);
  const { last } = await generate(engine, { prompt: 'harbor '.repeat(k), max_tokens: 10, ...GREEDY });
  assert.equal(last.type === 'end' && [last.usage.prompt_tokens, last.usage.completion_tokens, last.finish_reason], [2047, 1, 'length']);
  const over = await generate(engine, { prompt: 'harbor '.repeat(k + 1), max_tokens: 1 });
  assert.equal(over.last.type === 'error' && over.last.code, 'context_length_exceeded');
});

test('bad requests get one error chunk naming the field', async () => {
  const cases: Array<[unknown, string]> = [
    [{}, 'give either messages or prompt'],
    [{ prompt: 'a', messages: [{ role: 'user', content: 'b' }] }, 'give either messages or prompt'],
    [{ messages: [] }, '/messages'],
    [{ prompt: 'a', max_tokens: 0 }, '/max_tokens'],
    [{ prompt: 'a', temperature: 'hot' }, '/temperature'],
    [{ prompt: 'a', bogus: 1 }, '/bogus'],
    [{ messages: [{ role: 'robot', content: 'x' }] }, '/messages/0/role'],
    ['just a string', 'request'],
  ];
  for (const [request, message] of cases) {
    const { chunks, last } = await generate(engine, request);
    assert.is(chunks.length, 1, JSON.stringify(request));
    assert.ok(last.type === 'error' && last.code === 'invalid_request', JSON.stringify(last));
    assert.match((last as { message: string }).message, message);
  }
});

test('stop strings end the reply before them', async () => {
  const free = await generate(engine, { prompt: 'The', ...GREEDY, max_tokens: 30 });
  // Greedy decoding loops: "... look at the sea, and the sea, ...".
  const stop = ' sea,';
  const at = free.text.indexOf(stop);
  assert.ok(at > 0, free.text);
  const stopped = await generate(engine, { prompt: 'The', ...GREEDY, max_tokens: 30, stop: ['nowhere', stop] });
  assert.is(stopped.text, free.text.slice(0, at));
  assert.equal(stopped.last.type === 'end' && stopped.last.finish_reason, 'stop');
});

test('a fixed seed gives the same reply, alone or among concurrent requests, on either worker', async () => {
  const request = (seed: number): GenerateRequest => chat('Say something about the town.', { seed, max_tokens: 40, temperature: 1 });
  const alone = (await generate(engine, request(42))).text;
  const together = await Promise.all([41, 42, 43, 42, 44].map((seed) => generate(engine, request(seed))));
  assert.is(together[1]!.text, alone);
  assert.is(together[3]!.text, alone);
  assert.is((await generate(local, request(42))).text, alone);
  const distinct = new Set(together.map((r) => r.text));
  assert.ok(distinct.size >= 3, 'other seeds give other replies');
});

test('requests wait for a free sequence in order, and a new request joins the batch while others generate', async () => {
  const open = (worker: ActorHandle, seed: number): AsyncIterator<GenerateChunk> => worker.stream<GenerateChunk>('generateStream', [{ prompt: 'The', seed, ...GREEDY, max_tokens: 1000 }])[Symbol.asyncIterator]();
  // A request whose reader stops reading sits out steps once it is a few dozen chunks ahead, holding its sequence.
  const a = open(local, 1);
  assert.is((await a.next()).value?.type, 'text');
  const b = open(local, 2);
  const bFirst = b.next();
  await until('b queued', async () => (await load(local)).queued === 1);
  const c = open(local, 3);
  const cFirst = c.next();
  const waiting = await until('b and c queued', async () => (await load(local)).queued === 2 && load(local));
  assert.is((waiting as LoadReport).active, 1);
  // First come, first served: b gets the sequence when a leaves, c still waits.
  await a.return?.();
  assert.is((await bFirst).value?.type, 'text');
  assert.is((await load(local)).queued, 1);
  await b.return?.();
  assert.is((await cFirst).value?.type, 'text');
  await c.return?.();

  // On `engine`, a request that arrives while another is mid-reply is decoded beside it: the first is not finished yet.
  const first = open(engine, 4);
  for (let i = 0; i < 20; i++) assert.is((await first.next()).value?.type, 'text');
  const second = open(engine, 5);
  assert.is((await second.next()).value?.type, 'text');
  assert.is((await load(engine)).active, 2);
  assert.is((await first.next()).value?.type, 'text', 'the first request is still generating');
  await first.return?.();
  await second.return?.();
  await until('both workers to be idle', async () => (await load(local)).active === 0 && (await load(engine)).active === 0);
});

test('a caller that leaves the stream stops the generation, also while its request waits in the queue', async () => {
  const before = await load(engine);
  let chunks = 0;
  for await (const chunk of engine.stream<GenerateChunk>('generateStream', [{ prompt: 'The', ...GREEDY, max_tokens: 1500 }])) {
    if (chunk.type === 'text' && ++chunks === 3) break;
  }
  const after = await until('the generation to stop', async () => {
    const report = await load(engine);
    return report.active === 0 && report.cancelled === before.cancelled + 1 && report;
  });
  await new Promise((r) => setTimeout(r, 100));
  const later = await load(engine);
  assert.is(later.generated_tokens, after.generated_tokens, 'no token is generated after the stop');
  assert.ok(after.generated_tokens - before.generated_tokens < 100, `${after.generated_tokens - before.generated_tokens} tokens for a reply of 1500 left after 3`);

  // LocalModelWorker: one sequence; the second request waits, and a caller who gives up takes it out of
  // the queue. Called from another node, as the Router calls: the abort resets the call's HTTP/2 stream.
  const client = await ActorSystem.start({ seeds: [system.addr], log: () => {} });
  try {
    await until('the client to see the worker', async () => client.instances('local').length === 1);
    const remote = client.resolve('local');
    const holder = remote.stream<GenerateChunk>('generateStream', [{ prompt: 'The', ...GREEDY, max_tokens: 1000 }])[Symbol.asyncIterator]();
    await holder.next();
    const giveUp = new AbortController();
    const queued = remote.stream<GenerateChunk>('generateStream', [{ prompt: 'The', ...GREEDY, max_tokens: 1000 }], { signal: giveUp.signal })[Symbol.asyncIterator]();
    const pending = queued.next().catch(() => undefined);
    await until('a queued request', async () => (await load(local)).queued === 1);
    const cancelledBefore = (await load(local)).cancelled;
    giveUp.abort();
    await pending;
    const report = await until('the queue to empty', async () => {
      const r = await load(local);
      return r.queued === 0 && r;
    });
    assert.is(report.active, 1, 'the first request still holds the one sequence');
    assert.is(report.sequences, 1);
    assert.is(report.cancelled, cancelledBefore + 1);
    await holder.return?.();
    await until('the worker to be idle', async () => (await load(local)).active === 0);
  } finally {
    await client.shutdown();
  }
});

test.run();
