/**
 * The serving deployment as the spec starts it: a Router and two EngineWorkers, each its own
 * `actorctl actor` process, joined through seeds, on the real tiny model; requests from the official
 * `openai` client (and raw HTTP for what a client library would not send). The workers' load
 * reports, asked from a node that joins the cluster, show what happened on the workers.
 */
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { finalAnswer, rawRequest, requestWithHost } from '../../lib/testing/host-header.js';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { freePort } from '../../bench/lib/free-port.js';
import { runTool } from '../../lib/testing/run-tool.js';
import type { ActorHandle } from '../core/context.js';
import { ActorSystem } from '../core/system.js';
import type { LoadReport } from '../serving/contract.js';
import { FAST_CLIENT_TIMERS, killAll, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

let router: NodeProcess;
let workers: NodeProcess[];
let observer: ActorSystem;
let base: string;
let openai: OpenAI;

const MESSAGES = [{ role: 'user' as const, content: 'Tell me about the town.' }];
/** A chat request body with `extra` fields. */
const chat = (extra: Record<string, unknown>): Record<string, unknown> => ({ model: 'tiny', messages: MESSAGES, ...extra });
/** Greedy decoding of the tiny model never ends by itself: a reply is as long as max_tokens. */
const LONG = { temperature: 0, max_tokens: 2000 };

const workerRef = (w: NodeProcess): ActorHandle => observer.resolve('worker', { nodeId: w.nodeId });
const load = (w: NodeProcess): Promise<LoadReport> => workerRef(w).ask<LoadReport>('load');
const loads = (): Promise<LoadReport[]> => Promise.all(workers.map(load));
const sum = (reports: LoadReport[], key: 'completed' | 'cancelled' | 'generated_tokens' | 'active'): number => reports.reduce((a, r) => a + r[key], 0);

async function post(path: string, body: unknown, headers: Record<string, string> = { 'content-type': 'application/json' }): Promise<{ status: number; json: { error?: { message: string; type: string; param: string | null; code: string | null } } & Record<string, unknown> }> {
  const response = await fetch(`${base}${path}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: response.status, json: (await response.json()) as never };
}

test.before(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  router = await startNode({ classPath: 'framework.serving.Router', name: 'router', params: ['--http_port', String(port), '--model_name', 'tiny', '--worker_name', 'worker'] });
  workers = await Promise.all(
    // A worker node takes 10 stream resets at once, then one a second (the default is 10,000, then
    // 1,000/s): the Router's worker streams must stay on the call channel, where leaving one is a
    // CANCEL record, not a reset.
    [0, 1].map(() =>
      startNode({ classPath: 'framework.serving.engine.EngineWorker', name: 'worker', seeds: [router.addr], extraArgs: ['-D', 'limits.max_resets_per_second=1'], params: ['--model', 'tiny', '--role', 'aggregated', '--max_new_tokens', '2000', '--sequences', '4'] }),
    ),
  );
  observer = await ActorSystem.start({ seeds: [router.addr], timers: FAST_CLIENT_TIMERS, log: () => {} });
  openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 20_000 });
  await waitFor('the router to know both workers and their loads', async () => {
    const health = (await (await fetch(`${base}/health`)).json()) as { workers: Array<{ active?: number }> };
    return health.workers.length === 2 && health.workers.every((w) => w.active !== undefined);
  });
  await waitFor('the observer to see both workers', () => observer.instances('worker').length === 2);
});

test.after(async () => {
  await observer?.shutdown();
  await killAll();
});

test('GET /v1/models and /health', async () => {
  const models = await openai.models.list();
  assert.equal(
    models.data.map((m) => [m.id, m.object]),
    [['tiny', 'model']],
  );
  const health = (await (await fetch(`${base}/health`)).json()) as { status: string; model: string; workers: Array<{ addr: string }> };
  assert.is(health.status, 'ok');
  assert.equal(health.workers.map((w) => w.addr).sort(), workers.map((w) => w.addr).sort());
});

test('inspect actors --endpoint shows a worker its load report and the Router its counts, numbers as numbers in JSON', async () => {
  const inspect = async (node: NodeProcess): Promise<Record<string, unknown>> => {
    const r = await runTool('actorctl', ['inspect', 'actors', '--endpoint', node.addr, '--format', 'json']);
    assert.is(r.code, 0, r.stderr);
    return (JSON.parse(r.stdout) as Array<Record<string, unknown>>)[0]!;
  };
  const worker = await inspect(workers[0]!);
  assert.equal(Object.keys(worker), ['name', 'type', 'actor_id', 'class', 'status', 'module', 'model', 'active', 'queued', 'sequences', 'tokens_per_s', 'generated_tokens', 'completed', 'cancelled', 'chat_template']);
  assert.is(worker.sequences, 4);
  for (const key of ['active', 'queued', 'tokens_per_s', 'generated_tokens', 'completed', 'cancelled']) assert.is(typeof worker[key], 'number', key);
  const routed = await inspect(router);
  assert.is(routed.workers, 2);
  for (const key of ['requests', 'failed', 'cancelled']) assert.is(typeof routed[key], 'number', key);
  const table = await runTool('actorctl', ['inspect', 'actors', '--endpoint', workers[0]!.addr]);
  assert.match(table.stdout, /^NAME\s+TYPE\s+ACTOR_ID\s+CLASS\s+STATUS\s+MODULE\s+MODEL\s+ACTIVE\s+QUEUED\s+SEQUENCES\s+TOKENS_PER_S\s+GENERATED_TOKENS\s+COMPLETED\s+CANCELLED\s+CHAT_TEMPLATE\n/);
});

test('chat completions, non-streaming and streaming: the same reply for a seed, the role first, finish_reason, usage, [DONE]', async () => {
  const whole = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed: 7, max_tokens: 30 });
  const reply = whole.choices[0]!;
  assert.is(whole.object, 'chat.completion');
  assert.is(reply.message.role, 'assistant');
  assert.ok(reply.message.content!.length > 0);
  assert.ok(reply.finish_reason === 'stop' || reply.finish_reason === 'length');
  assert.ok(whole.usage!.completion_tokens <= 30 && whole.usage!.prompt_tokens > 0);

  const stream = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed: 7, max_tokens: 30, stream: true, stream_options: { include_usage: true } });
  const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.is(chunks[0]!.choices[0]!.delta.role, 'assistant');
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0]!.id));
  assert.is(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), reply.message.content);
  const last = chunks[chunks.length - 1]!;
  assert.equal(last.choices, []);
  assert.equal(last.usage, whole.usage);
  assert.is(chunks[chunks.length - 2]!.choices[0]!.finish_reason, reply.finish_reason);

  // The raw stream: server-sent events ending with data: [DONE].
  const raw = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: MESSAGES, max_tokens: 3, stream: true }) });
  assert.match(raw.headers.get('content-type') ?? '', 'text/event-stream');
  const text = await raw.text();
  assert.ok(text.endsWith('data: [DONE]\n\n'), text);
  assert.not.match(text, '"usage"', 'no usage unless include_usage');
});

test('every answer carries its own x-request-id, which the openai client exposes: replies, streams, errors', async () => {
  const REQUEST_ID = /^req_[0-9a-f]{32}$/;
  const whole = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, max_tokens: 2 }).withResponse();
  assert.match(whole.request_id ?? '', REQUEST_ID);
  const direct = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, max_tokens: 2 });
  assert.match(direct._request_id ?? '', REQUEST_ID);
  const streamed = await openai.completions.create({ model: 'tiny', prompt: 'The', max_tokens: 2, stream: true }).withResponse();
  assert.match(streamed.request_id ?? '', REQUEST_ID);
  for await (const chunk of streamed.data) assert.ok(chunk.object === 'text_completion');
  const refused = await openai.chat.completions.create({ model: 'tiny', messages: [], max_tokens: 2 }).then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.instance(refused, OpenAI.BadRequestError);
  assert.match((refused as InstanceType<typeof OpenAI.BadRequestError>).requestID ?? '', REQUEST_ID);
  // Answers before any route (an unknown URL, a missing model) and the health probe carry one too.
  const others = await Promise.all([fetch(`${base}/v1/engines`), fetch(`${base}/v1/models/gpt-4`), fetch(`${base}/health`)]);
  // So do a request with two Host headers and one that is not HTTP.
  const port = Number(new URL(base).port);
  const raw = await Promise.all([rawRequest(port, 'GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'), rawRequest(port, 'BOGUS\r\n\r\n')]);
  assert.equal(raw.map((r) => r.status), [400, 400]);
  const rawIds = raw.map((r) => /^x-request-id: (.*)$/im.exec(finalAnswer(r.text).head)?.[1]);
  const ids = [whole.request_id, direct._request_id, streamed.request_id, (refused as InstanceType<typeof OpenAI.BadRequestError>).requestID, ...others.map((r) => r.headers.get('x-request-id')), ...rawIds];
  for (const id of ids) assert.match(id ?? '', REQUEST_ID);
  assert.is(new Set(ids).size, ids.length, 'one id per request');
});

test('a message of text parts is read as their texts one per line, as vLLM joins them: the same prompt as that string', async () => {
  const promptTokens = async (content: OpenAI.Chat.ChatCompletionUserMessageParam['content']): Promise<number> =>
    (await openai.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 1 })).usage!.prompt_tokens;
  const parts = await promptTokens([{ type: 'text', text: 'Hello' }, { type: 'text', text: 'world' }]);
  assert.is(parts, await promptTokens('Hello\nworld'));
  assert.is.not(parts, await promptTokens('Helloworld'));
});

test('completions: max_tokens, stop, temperature 0; streaming gives the same text', async () => {
  const whole = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 12 });
  assert.is(whole.object, 'text_completion');
  assert.is(whole.choices[0]!.finish_reason, 'length');
  assert.is(whole.usage!.completion_tokens, 12);
  const text = whole.choices[0]!.text;
  assert.ok(text.startsWith(' '), 'a completion continues its prompt');
  const streamed = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 12, stream: true });
  let joined = '';
  for await (const chunk of streamed) joined += chunk.choices[0]?.text ?? '';
  assert.is(joined, text);
  const word = text.trim().split(' ')[2]!;
  const stopped = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 12, stop: [word] });
  assert.is(stopped.choices[0]!.text, text.slice(0, text.indexOf(word)));
  assert.is(stopped.choices[0]!.finish_reason, 'stop');
  // top_p 0 keeps only the most likely token: greedy at any temperature and seed.
  for (const seed of [1, 2, 3]) {
    const nucleus = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 1.5, top_p: 0, seed, max_tokens: 12 });
    assert.is(nucleus.choices[0]!.text, text, `seed ${seed}`);
  }
});

test('presence and frequency penalties are honoured; without top_p, the whole distribution is sampled', async () => {
  const complete = (extra: Record<string, number>) => openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 48, ...extra }).then((r) => r.choices[0]!.text);
  const repeats = (text: string): number => {
    const words = text.trim().split(/\s+/);
    return words.length - new Set(words).size;
  };
  // Greedy decoding loops on a phrase; penalized, it must leave the loop.
  const plain = await complete({});
  for (const penalty of [{ presence_penalty: 2 }, { frequency_penalty: 2 }, { repetition_penalty: 3 }] as Array<Record<string, number>>) {
    const penalized = await complete(penalty);
    assert.ok(repeats(penalized) < repeats(plain), `${JSON.stringify(penalty)}: ${JSON.stringify(penalized)} repeats no less than ${JSON.stringify(plain)}`);
  }
  // A penalty of 0 is no penalty; a negative one makes repeating likelier: the loop gets tighter.
  assert.is(await complete({ presence_penalty: 0, frequency_penalty: 0 }), plain);
  const variety = (text: string): number => {
    const trigrams = Array.from({ length: Math.max(0, text.length - 2) }, (_, i) => text.slice(i, i + 3));
    return new Set(trigrams).size / trigrams.length;
  };
  const encouraged = await complete({ presence_penalty: -2, frequency_penalty: -2 });
  assert.not.equal(encouraged, plain);
  assert.ok(variety(encouraged) <= variety(plain), `${JSON.stringify(encouraged)} varies more than ${JSON.stringify(plain)}`);
  for (const bad of [{ presence_penalty: 2.5 }, { frequency_penalty: -3 }]) {
    const refused = await post('/v1/completions', { model: 'tiny', prompt: 'The', ...bad });
    assert.equal([refused.status, refused.json.error?.param], [400, Object.keys(bad)[0]]);
  }
  // vLLM's top_k: 1 keeps only the likeliest token, so any seed gives the greedy reply; min_p 1 does the same.
  for (const seed of [1, 2, 3]) {
    for (const narrow of [{ top_k: 1 }, { min_p: 1 }]) {
      const reply = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 1.5, seed, max_tokens: 48, ...narrow });
      assert.is(reply.choices[0]!.text, plain, `${JSON.stringify(narrow)}, seed ${seed}`);
    }
  }
  // OpenAI's default top_p is 1: the same seed gives the same reply with top_p left out and with top_p 1.
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const ask = (extra: Record<string, number>) => openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 2, seed, max_tokens: 24, ...extra }).then((r) => r.choices[0]!.text);
    assert.is(await ask({}), await ask({ top_p: 1 }), `seed ${seed}`);
  }
});

test('structured output: a reply held to a JSON Schema parses and matches it; json_object replies are JSON; schemas it cannot hold are 400', async () => {
  const schema = {
    type: 'object',
    // As zod writes them: an enum with its type, an integer between the safe integers.
    properties: {
      open: { type: 'boolean' },
      stalls: { type: 'integer', minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
      mood: { type: 'string', enum: ['calm', 'busy'] },
      day: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/day' }] },
    },
    required: ['open', 'stalls', 'mood', 'day'],
    additionalProperties: false,
    $defs: { day: { type: 'string', format: 'date' } },
  };
  const response_format = { type: 'json_schema' as const, json_schema: { name: 'market', schema, strict: true } };
  for (const seed of [1, 2, 3]) {
    const reply = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed, max_tokens: 200, response_format });
    const content = reply.choices[0]!.message.content!;
    assert.is(reply.choices[0]!.finish_reason, 'stop', content);
    const value = JSON.parse(content) as Record<string, unknown>;
    assert.equal(Object.keys(value), ['open', 'stalls', 'mood', 'day'], content);
    assert.type(value['open'], 'boolean');
    assert.ok(Number.isInteger(value['stalls']), content);
    assert.ok(['calm', 'busy'].includes(value['mood'] as string), content);
    assert.ok(value['day'] === null || /^\d{4}-\d{2}-\d{2}$/.test(value['day'] as string), content);
    // Streamed, the same seed gives the same JSON.
    let streamed = '';
    for await (const chunk of await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed, max_tokens: 200, response_format, stream: true })) streamed += chunk.choices[0]?.delta.content ?? '';
    assert.is(streamed, content);
  }
  // Any JSON object: it opens as one, and is whole unless max_tokens cut it.
  const object = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed: 4, max_tokens: 64, response_format: { type: 'json_object' } });
  const text = object.choices[0]!.message.content!;
  assert.ok(text.startsWith('{'), text);
  if (object.choices[0]!.finish_reason === 'stop') assert.type(JSON.parse(text), 'object');
  // What a grammar would not hold the reply to is refused by its place in the schema, not generated to another shape.
  const refusals: Array<[object, RegExp]> = [
    [{ type: 'string', pattern: 'a+' }, /\/pattern: 'pattern' is not taken for a schema of type 'string'/],
    [{ type: 'object', properties: { n: { type: 'integer', minimum: 3 } } }, /\/properties\/n\/minimum: 'minimum' is not taken/],
    [{}, /\(the root\): a schema that allows any value is not taken/],
    [{ type: 'object', properties: { a: { $ref: '#/$defs/missing' } } }, /\/properties\/a\/\$ref: only '#\/\$defs\/<name>'/],
    [{ type: 'object', required: ['ghost'] }, /\/required: names 'ghost', which is not among the properties/],
    [{ allOf: [{ type: 'string' }] }, /\(the root\): 'allOf' is not taken here/],
    [{ type: 'string', format: 'email' }, /\/format: only date-time, date, time are taken/],
    [{ type: 'string', maxLength: 1000 }, /\/maxLength: at most 500 is taken/],
    [{ type: 'array', items: { enum: Array.from({ length: 6000 }, (_, i) => `v${i}`) } }, /\/items\/enum: the schema has more than 256 enum values/],
    [{ type: 'object', properties: { a: { $ref: '#/$defs/a' } }, $defs: { a: { $ref: '#/$defs/b' }, b: { $ref: '#/$defs/a' } } }, /llama\.cpp refused the grammar made from the JSON Schema/],
  ];
  for (const [bad, message] of refusals) {
    const refused = await post('/v1/chat/completions', chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } } }));
    assert.equal([refused.status, refused.json.error?.param], [400, 'response_format'], JSON.stringify(refused.json).slice(0, 500));
    assert.match(refused.json.error!.message, message, JSON.stringify(refused.json).slice(0, 500));
  }
  // A body nested deeper than an actor call may carry is refused as the client's (it could reach no worker).
  let deep: unknown = 'bottom';
  for (let i = 0; i < 600; i++) deep = { description: deep };
  const nested = await post('/v1/chat/completions', chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', description: deep } } } }));
  assert.equal([nested.status, nested.json.error?.message], [400, 'the body nests arrays and objects deeper than 512 levels']);
});

test('completions echo their prompt; a model is retrieved by name; an unknown URL names what is served', async () => {
  const plain = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 8 });
  const echoed = await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 8, echo: true });
  assert.is(echoed.choices[0]!.text, `The${plain.choices[0]!.text}`);
  let streamed = '';
  for await (const chunk of await openai.completions.create({ model: 'tiny', prompt: 'The', temperature: 0, max_tokens: 8, echo: true, stream: true })) streamed += chunk.choices[0]?.text ?? '';
  assert.is(streamed, echoed.choices[0]!.text);
  const model = await openai.models.retrieve('tiny');
  assert.equal([model.id, model.object], ['tiny', 'model']);
  const other = await fetch(`${base}/v1/models/gpt-4`);
  assert.is(other.status, 404);
  assert.is(((await other.json()) as { error: { code: string } }).error.code, 'model_not_found');
  const responses = await post('/v1/responses', { model: 'tiny', input: 'hi' });
  assert.is(responses.status, 404);
  assert.match(responses.json.error!.message, 'Unknown request URL: POST /v1/responses. This server serves POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /v1/models/{model} and GET /health.');
});

test('concurrent requests are spread over both workers; a fixed seed gives the same reply whatever else runs', async () => {
  const seeds = Array.from({ length: 16 }, (_, i) => 100 + i);
  const ask = (seed: number) => openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed, max_tokens: 24 }).then((r) => r.choices[0]!.message.content);
  const alone: string[] = [];
  for (const seed of seeds.slice(0, 4)) alone.push((await ask(seed))!);
  const before = await loads();
  const together = await Promise.all(
    seeds.map(async (seed) => {
      const stream = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, seed, max_tokens: 24, stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      return text;
    }),
  );
  assert.equal(together.slice(0, 4), alone);
  assert.ok(new Set(together).size > 8, 'seeds give different replies');
  const after = await loads();
  const served = after.map((r, i) => r.completed - before[i]!.completed);
  assert.is(served[0]! + served[1]!, 16);
  assert.ok(served.every((n) => n > 0), `both workers served: ${served.join(' + ')}`);
});

test('the Router lets go of a worker stream at its end chunk without costing the worker node its connection: 40 streamed requests, 4 at a time, to a worker that ends 50 ms after its end chunk', async () => {
  // The Router leaves each stream at its end chunk, before this worker has ended it. On the call
  // channel that is a CANCEL record; were it an HTTP/2 stream, it would be a reset, spending the
  // worker node's reset budget (here 10, then 1 a second), and past it the node would close the
  // Router's connection and fail the requests on it.
  const port = await freePort();
  const slowRouter = await startNode({ classPath: 'framework.serving.Router', name: 'slow-router', seeds: [router.addr], params: ['--http_port', String(port), '--model_name', 'tiny', '--worker_name', 'slow-worker'] });
  const worker = await startNode({ classPath: 'framework.test.helpers.slow-closing-worker.SlowClosingWorker', name: 'slow-worker', seeds: [slowRouter.addr], extraArgs: ['-D', 'limits.max_resets_per_second=1'] });
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 20_000 });
  try {
    await waitFor('the slow router to know its worker', async () => ((await (await fetch(`http://127.0.0.1:${port}/health`)).json()) as { workers: unknown[] }).workers.length === 1);
    // Four at a time, so that a connection closed for its resets takes requests in flight with it.
    const requests = async (loop: number): Promise<void> => {
      for (let i = 0; i < 10; i++) {
        let text = '';
        for await (const chunk of await client.completions.create({ model: 'tiny', prompt: 'The', max_tokens: 1, stream: true })) text += chunk.choices[0]?.text ?? '';
        assert.is(text, 'hi', `request ${loop}.${i}`);
      }
    };
    await Promise.all([0, 1, 2, 3].map(requests));
  } finally {
    worker.proc.kill('SIGKILL');
    slowRouter.proc.kill('SIGKILL');
  }
});

test('bad requests get 400 with an OpenAI error body naming the parameter; the router keeps serving', async () => {
  const cases: Array<[unknown, string | null, RegExp]> = [
    ['{"model": "tiny", "messages": [', null, /not valid JSON/],
    ['', null, /not valid JSON/],
    [[], null, /Invalid request body/],
    [{ model: 'tiny' }, 'messages', /Missing required parameter: 'messages'/],
    [chat({ messages: [] }), 'messages', /fewer than 1 items/],
    [chat({ max_tokens: 10 ** 12 }), 'max_tokens', /Invalid value for 'max_tokens'/],
    [chat({ max_tokens: '5' }), 'max_tokens', /must be integer/],
    [chat({ max_tokens: 0 }), 'max_tokens', />= 1/],
    [chat({ temperature: 3 }), 'temperature', /<= 2/],
    [chat({ top_p: -1 }), 'top_p', />= 0/],
    [chat({ n: 2 }), 'n', /<= 1/],
    [chat({ stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop', /Invalid value for 'stop': must NOT have more than 4 items/],
    [chat({ messages: [{ role: 'user', content: [] }] }), 'messages[0].content', /must NOT have fewer than 1 items/],
    [chat({ messages: [{ role: 'user', content: [{ type: 'text' }] }] }), 'messages[0].content[0].text', /Missing required parameter: 'messages\[0\]\.content\[0\]\.text'/],
    [chat({ frobnicate: true }), 'frobnicate', /Unrecognized request argument supplied: frobnicate/],
    // A value not among those allowed is named with them, as OpenAI answers; a form whose `type` is given is checked as that form.
    [chat({ messages: [{ role: 'robot', content: 'hi' }] }), 'messages[0].role', /^Invalid value: 'robot'\. Supported values are: 'system', 'developer', 'user', and 'assistant'\.$/],
    [chat({ service_tier: 'x' }), 'service_tier', /^Invalid value: 'x'\. Supported values are: 'auto' and 'default'\.$/],
    [chat({ modalities: ['audio'] }), 'modalities[0]', /^Invalid value: 'audio'\. Supported values are: 'text'\.$/],
    [chat({ response_format: { type: 'json_schema' } }), 'response_format.json_schema', /^Missing required parameter: 'response_format\.json_schema'\.$/],
    [chat({ response_format: { type: 'json_schema', json_schema: { strict: true } } }), 'response_format.json_schema.name', /^Missing required parameter: 'response_format\.json_schema\.name'\.$/],
    [chat({ response_format: {} }), 'response_format.type', /^Missing required parameter: 'response_format\.type'\.$/],
    [chat({ response_format: { type: 'json_object', json_schema: { name: 'x' } } }), 'response_format.json_schema', /Unrecognized request argument supplied: response_format\.json_schema/],
    [chat({ messages: [{ role: 'user', content: 5 }] }), 'messages[0].content', /Invalid value for 'messages\[0\]\.content'/],
    [chat({ messages: [{ role: 'user', content: 'hi', extra: 1 }] }), 'messages[0].extra', /Unrecognized request argument supplied: messages\[0\]\.extra/],
    [chat({ stream: 'yes' }), 'stream', /Invalid value for 'stream'/],
    [chat({ seed: 1.5 }), 'seed', /must be integer/],
  ];
  for (const [body, param, message] of cases) {
    const { status, json } = await post('/v1/chat/completions', body);
    assert.is(status, 400, JSON.stringify(body));
    assert.is(json.error?.type, 'invalid_request_error', JSON.stringify(json));
    assert.is(json.error?.param, param, JSON.stringify(body));
    assert.match(json.error!.message, message, JSON.stringify(json));
    assert.equal(Object.keys(json.error!).sort(), ['code', 'message', 'param', 'type']);
  }
  // A JSON body sent as anything but JSON (curl -d sends a form) is named for what it is, not parsed as something else.
  for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', undefined]) {
    // A Blob without a type is the one body fetch sends with no Content-Type at all.
    const body = new Blob([JSON.stringify(chat({ max_tokens: 2 }))]);
    const response = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: contentType ? { 'content-type': contentType } : {}, body });
    const json = (await response.json()) as { error: { message: string; type: string } };
    assert.is(response.status, 415, String(contentType));
    assert.is(json.error.type, 'invalid_request_error');
    assert.match(json.error.message, `Content-Type: application/json (this request's Content-Type: ${contentType ? `'${contentType}'` : 'none'})`);
  }
  // A compressed body is read decoded; a coding not known here is named for what it is, not refused as broken JSON.
  const compressed = (encoding: string, body: Buffer) => fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': encoding }, body: new Uint8Array(body) });
  const gzipped = await compressed('gzip', gzipSync(JSON.stringify(chat({ max_tokens: 2 }))));
  assert.is(gzipped.status, 200, await gzipped.clone().text());
  assert.is(((await gzipped.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens, 2);
  const zstd = await compressed('zstd', Buffer.from([0x28, 0xb5, 0x2f, 0xfd])); // zstd's magic number
  assert.is(zstd.status, 415);
  assert.match(((await zstd.json()) as { error: { message: string } }).error.message, "Content-Encoding 'zstd' is not supported");
  const broken = await compressed('gzip', Buffer.from(JSON.stringify(chat({ max_tokens: 2 }))));
  assert.is(broken.status, 400);
  assert.match(((await broken.json()) as { error: { message: string } }).error.message, 'the body is not valid gzip');
  assert.is((await post('/v1/chat/completions', chat({ max_tokens: 2 }), { 'content-type': 'application/json', 'content-encoding': 'identity' })).status, 200);
  // What OpenAI's API has and this server does not do is named as such, not by the schema's first complaint.
  const unsupported: Array<[string, object, string, RegExp]> = [
    ['/v1/completions', { model: 'tiny', prompt: ['a', 'b'] }, 'prompt', /one prompt per request .*this list has 2/],
    ['/v1/completions', { model: 'tiny', prompt: [1, 2, 3] }, 'prompt', /token ids are not supported/],
    ['/v1/completions', { model: 'tiny', prompt: [[1, 2]] }, 'prompt', /token ids are not supported/],
    ['/v1/completions', { model: 'tiny', prompt: 'a', logprobs: 2 }, 'logprobs', /log probabilities are not returned/],
    ['/v1/completions', { model: 'tiny', prompt: 'a', suffix: 'end' }, 'suffix', /does not fill in before a suffix/],
    ['/v1/chat/completions', chat({ messages: [...MESSAGES, { role: 'tool', tool_call_id: 'call_1', content: '42' }] }), `messages[${MESSAGES.length}].role`, /'tool' messages are not supported: this server does not call tools/],
    ['/v1/chat/completions', chat({ messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }] }), 'messages[0].tool_calls', /Unsupported parameter 'messages\[0\]\.tool_calls'/],
    ['/v1/chat/completions', chat({ tools: [{ type: 'function', function: { name: 'f' } }] }), 'tools', /this server does not call tools/],
    ['/v1/chat/completions', chat({ tool_choice: 'required' }), 'tool_choice', /this server does not call tools/],
    ['/v1/chat/completions', chat({ top_logprobs: 3 }), 'top_logprobs', /log probabilities are not returned/],
    ['/v1/chat/completions', chat({ response_format: { type: 'regex', regex: 'a+' } }), 'response_format', /the types served here are text, json_object and json_schema, not "regex"/],
    ['/v1/chat/completions', chat({ store: true }), 'store', /not stored/],
    ['/v1/chat/completions', chat({ reasoning_effort: 'low' }), 'reasoning_effort', /does not reason/],
    ['/v1/chat/completions', chat({ logit_bias: { '50256': -100 } }), 'logit_bias', /token biases are not applied/],
    ['/v1/chat/completions', chat({ messages: [{ role: 'user', content: null }] }), 'messages[0].content', /only an assistant's message may have null content/],
    ['/v1/chat/completions', chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'see' }, { type: 'image_url', image_url: { url: 'x' } }] }] }), 'messages[0].content[1].type', /parts of type "image_url" are not read by this server/],
  ];
  for (const [path, body, param, message] of unsupported) {
    const { status, json } = await post(path, body);
    assert.equal([status, json.error?.param, json.error?.type], [400, param, 'invalid_request_error'], JSON.stringify(json));
    assert.match(json.error!.message, message, JSON.stringify(json));
  }
  // What clients send by default, asking for nothing this server lacks, is served: LangChain's
  // completions defaults, a reply sent back as history as openai-python's model_dump() and
  // openai-node's stream helper keep it, empty tools, vLLM's sampling fields.
  const history = { role: 'assistant', content: 'It is quiet.', refusal: null, annotations: null, audio: null, function_call: null, tool_calls: null, parsed: null };
  const accepted: Array<[string, object]> = [
    ['/v1/completions', { model: 'tiny', prompt: ['The town'], frequency_penalty: 0, presence_penalty: 0, logprobs: null, max_tokens: 2, n: 1, seed: null, temperature: 0.7, top_p: 1, best_of: 1, echo: false, suffix: null }],
    ['/v1/chat/completions', chat({ messages: [...MESSAGES, history, { role: 'assistant', content: null, refusal: 'I would rather not.' }, { role: 'user', content: 'Go on.' }], max_tokens: 2 })],
    ['/v1/chat/completions', chat({ tools: [], tool_choice: 'none', parallel_tool_calls: false, logit_bias: {}, logprobs: false, top_logprobs: null, store: false, metadata: { run: 'a' }, service_tier: 'auto', modalities: ['text'], response_format: { type: 'text' }, reasoning_effort: null, max_tokens: 2 })],
    ['/v1/chat/completions', chat({ top_k: 5, min_p: 0.05, repetition_penalty: 1.1, max_tokens: 2 })],
    // openai-python's replacements for the deprecated `user`, which is taken: labels, with no effect here either.
    ['/v1/chat/completions', chat({ safety_identifier: 'user-1', prompt_cache_key: 'town', user: null, max_tokens: 2 })],
  ];
  for (const [path, body] of accepted) {
    const { status, json } = await post(path, body);
    assert.is(status, 200, `${JSON.stringify(body)}: ${JSON.stringify(json)}`);
  }
  for (const off of [false, null]) assert.is((await post('/v1/chat/completions', chat({ logprobs: off, max_tokens: 2 }))).status, 200);
  for (const on of [true, 'yes']) {
    const logprobs = await post('/v1/chat/completions', chat({ logprobs: on }));
    assert.equal([logprobs.status, logprobs.json.error?.param, logprobs.json.error?.code], [400, 'logprobs', 'invalid_value']);
    assert.is(logprobs.json.error?.message, "Invalid value for 'logprobs': log probabilities are not returned by this server, so only false (or null) is accepted.");
  }
  // openai-python sends stream_options.include_obfuscation as the caller sets it: false asks for no
  // padding, which no chunk here has; true asks for padding that this server does not add.
  for (const path of ['/v1/chat/completions', '/v1/completions']) {
    const body = { ...(path.includes('chat') ? chat({}) : { model: 'tiny', prompt: 'The' }), max_tokens: 2, stream: true, stream_options: { include_usage: true, include_obfuscation: false } };
    const streamed = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await streamed.text();
    assert.is(streamed.status, 200, text);
    assert.ok(text.endsWith('data: [DONE]\n\n') && text.includes('"completion_tokens":2'), text);
    const padded = await post(path, { ...body, stream_options: { include_obfuscation: true } });
    assert.equal([padded.status, padded.json.error?.param], [400, 'stream_options.include_obfuscation'], JSON.stringify(padded.json));
    assert.match(padded.json.error!.message, /Unsupported parameter 'stream_options\.include_obfuscation': stream chunks are not padded by this server/);
  }
  // As OpenAI answers: stream_options belongs to a streamed request.
  const unstreamed = await post('/v1/chat/completions', chat({ stream_options: { include_usage: true } }));
  assert.equal([unstreamed.status, unstreamed.json.error?.param], [400, 'stream_options']);
  const model = await post('/v1/chat/completions', chat({ model: 'gpt-4' }));
  assert.equal([model.status, model.json.error?.code, model.json.error?.param], [404, 'model_not_found', 'model']);
  const tooLong = await post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'the harbor is quiet '.repeat(600) }] }));
  assert.equal([tooLong.status, tooLong.json.error?.code], [400, 'context_length_exceeded']);
  const huge = await post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'x'.repeat(2 * 1024 * 1024) }] }));
  assert.is(huge.status, 413);
  assert.is(huge.json.error?.type, 'invalid_request_error');
  const unknown = await fetch(`${base}/v1/engines`);
  assert.is(unknown.status, 404);
  assert.is(((await unknown.json()) as { error: { code: string } }).error.code, 'unknown_url');
  assert.is((await fetch(`${base}/health`)).status, 200);
  assert.ok((await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, max_tokens: 2 })).choices[0]!.message.content);
});

test('safe by default: another HTTP host needs an API key or --http_insecure; with a key, /v1 needs it', async () => {
  const refused = await runTool('actorctl', ['actor', 'framework.serving.Router', '--addr', '127.0.0.1:0', '--', '--http_host', '0.0.0.0', '--http_port', '0', '--model_name', 'tiny'], { env: { ACTORCTL_ROUTER_API_KEY: '' }, timeoutMs: 20_000 });
  assert.is(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, 'http_host 0.0.0.0 is reachable from other machines, and without an API key anyone who reaches it can use the model');
  const port = await freePort();
  const keyed = await startNode({ classPath: 'framework.serving.Router', name: 'keyed', seeds: [router.addr], params: ['--http_port', String(port), '--model_name', 'tiny'], env: { ACTORCTL_ROUTER_API_KEY: 'sesame' } });
  const url = `http://127.0.0.1:${port}`;
  const denied = await fetch(`${url}/v1/models`, { headers: { authorization: 'Bearer wrong' } });
  assert.is(denied.status, 401);
  assert.is(((await denied.json()) as { error: { code: string } }).error.code, 'invalid_api_key');
  assert.is((await fetch(`${url}/v1/models`)).status, 401);
  assert.is((await fetch(`${url}/v1/models`, { headers: { authorization: 'Bearer sesame' } })).status, 200);
  // The route decides, not the spelling of the URL: a percent-encoded path and a target in absolute form reach /v1 too.
  const body = JSON.stringify({ model: 'tiny', messages: MESSAGES, max_tokens: 2 });
  const head = (target: string, auth = ''): string => `POST ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${auth}Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  for (const target of ['/%761/chat/completions', '/v%31/chat/completions', `http://127.0.0.1:${port}/v1/chat/completions`, '/no/such/route']) {
    const sneaked = await rawRequest(port, head(target), body);
    assert.is(sneaked.status, 401, `${target}: ${sneaked.text}`);
    assert.match(sneaked.text, 'invalid_api_key');
  }
  // /health stays open to probes, but says where and how loaded the workers are only to a client with the key.
  // (Once this new Router's membership knows the workers: until then it is 503, no worker.)
  const open = await waitFor('the keyed Router to know its workers', async () => {
    const probe = await fetch(`${url}/health`);
    return probe.status === 200 && ((await probe.json()) as { workers: Array<Record<string, unknown>> });
  });
  assert.ok(open.workers.length > 0 && open.workers.every((w) => Object.keys(w).join() === 'node_id'), JSON.stringify(open));
  const full = (await (await fetch(`${url}/health`, { headers: { authorization: 'Bearer sesame' } })).json()) as { workers: Array<{ addr?: string }> };
  assert.ok(full.workers.every((w) => typeof w.addr === 'string'), JSON.stringify(full));
  // With the key, the same spelling is served (once the Router knows its workers, as above).
  assert.is((await rawRequest(port, head('/%761/chat/completions', 'Authorization: Bearer sesame\r\n'), body)).status, 200);
  // A loopback API without a key answers only requests for a loopback name: a page re-pointing its own name (DNS rebinding) sends that name.
  const rebound = await requestWithHost(`${base}/v1/chat/completions`, 'evil.example', 'POST', { model: 'tiny', messages: MESSAGES, max_tokens: 2 });
  assert.equal([rebound.status, rebound.body.error.code], [403, 'forbidden_host']);
  assert.is((await requestWithHost(`${base}/v1/models`, `localhost:${new URL(base).port}`)).status, 200);
  // The host a request names is also the authority of a target in absolute form; two Host headers are refused.
  const basePort = Number(new URL(base).port);
  const absolute = await rawRequest(basePort, `GET http://evil.example/v1/models HTTP/1.1\r\nHost: 127.0.0.1:${basePort}\r\nConnection: close\r\n\r\n`);
  assert.is(absolute.status, 403, absolute.text);
  assert.match(absolute.text, 'forbidden_host');
  assert.is((await rawRequest(basePort, `GET http://localhost:${basePort}/v1/models HTTP/1.1\r\nHost: 127.0.0.1:${basePort}\r\nConnection: close\r\n\r\n`)).status, 200);
  // HTTP/1.1 requires Host: without it, the answer is 400 in OpenAI's shape (Node's own was empty).
  const hostless = await rawRequest(basePort, 'GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n');
  assert.is(hostless.status, 400, hostless.text);
  assert.match(hostless.text, '{"error":{"message":"the request has no Host header, which HTTP/1.1 requires","type":"invalid_request_error","param":null,"code":"bad_request"}}');
  const twice = await rawRequest(basePort, `GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:${basePort}\r\nHost: evil.example\r\nConnection: close\r\n\r\n`);
  assert.is(twice.status, 400, twice.text);
  assert.match(twice.text, '2 Host headers');
  // With a key the name does not matter (a page cannot send the key), so a reverse proxy's Host passes.
  assert.is((await requestWithHost(`${url}/v1/models`, 'models.example', 'GET', undefined, { authorization: 'Bearer sesame' })).status, 200);
  keyed.proc.kill('SIGKILL');
  await keyed.exited;
});

test('a client that disconnects cancels the generation on its worker, streaming or not', async () => {
  const before = await loads();
  const stream = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, ...LONG, stream: true });
  let chunks = 0;
  for await (const chunk of stream) if (chunk.choices[0]?.delta.content && ++chunks === 3) break;
  const afterStream = await waitFor('the streamed generation to stop', async () => {
    const reports = await loads();
    return sum(reports, 'active') === 0 && sum(reports, 'cancelled') === sum(before, 'cancelled') + 1 && reports;
  });
  assert.ok(sum(afterStream, 'generated_tokens') - sum(before, 'generated_tokens') < 1000, 'stopped long before max_tokens');

  const leave = new AbortController();
  const request = fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny', messages: MESSAGES, ...LONG }), signal: leave.signal });
  await waitFor('the request to be generating', async () => sum(await loads(), 'active') === 1, 5_000, 5);
  leave.abort();
  await request.catch(() => undefined);
  const afterWhole = await waitFor('the non-streamed generation to stop', async () => {
    const reports = await loads();
    return sum(reports, 'active') === 0 && sum(reports, 'cancelled') === sum(before, 'cancelled') + 2 && reports;
  });
  assert.ok(sum(afterWhole, 'completed') === sum(before, 'completed'), 'neither request ran to its end');
});

test('a client that half-closes once its request is sent gets its reply, streamed or not; one that then leaves cancels it', async () => {
  const port = Number(new URL(base).port);
  const request = (body: object): [string, string] => {
    const text = JSON.stringify(body);
    return [`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n`, text];
  };
  // Long enough (hundreds of tokens) that the reply is not ready when the half-close arrives.
  const whole = await rawRequest(port, ...request(chat({ temperature: 0, max_tokens: 300 })), { halfClose: true });
  assert.is(whole.status, 200, whole.text.slice(0, 300));
  const reply = JSON.parse(finalAnswer(whole.text).body) as { choices: Array<{ finish_reason: string }>; usage: { completion_tokens: number } };
  assert.is(reply.usage.completion_tokens, 300);
  const streamed = await rawRequest(port, ...request(chat({ temperature: 0, max_tokens: 300, stream: true })), { halfClose: true });
  assert.is(streamed.status, 200, streamed.text.slice(0, 300));
  assert.match(streamed.text, '"finish_reason":"length"');
  assert.match(streamed.text, 'data: [DONE]');

  const before = await loads();
  const socket = connect(port, '127.0.0.1');
  const [head, body] = request(chat(LONG));
  socket.end(head + body);
  socket.on('error', () => {});
  await waitFor('the request to be generating', async () => sum(await loads(), 'active') === 1, 5_000, 5);
  socket.destroy();
  await waitFor('the generation to stop once its client left', async () => {
    const reports = await loads();
    return sum(reports, 'active') === 0 && sum(reports, 'cancelled') === sum(before, 'cancelled') + 1;
  });
});

test('a worker killed mid-stream ends the stream with an error; later requests go to the other worker; none alive: 503', async () => {
  const stream = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, ...LONG, stream: true });
  const chunks = stream[Symbol.asyncIterator]();
  for (let i = 0; i < 3; i++) await chunks.next();
  const reports = await loads();
  const index = reports.findIndex((r) => r.active === 1);
  assert.ok(index >= 0, 'one worker generates');
  const [victim, survivor] = [workers[index]!, workers[1 - index]!];
  victim.proc.kill('SIGKILL');
  await victim.exited;
  const failure = await (async () => {
    for (;;) if ((await chunks.next()).done) return undefined;
  })().then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.instance(failure, OpenAI.APIError, 'the stream ends with an error event, not as if complete');
  // Workers are named by node id: their addresses are the cluster's business, not the API client's.
  assert.match((failure as Error).message, `The worker ${victim.nodeId} failed during generation: it could not be reached`);
  assert.not.match((failure as Error).message, victim.addr);

  const before = await load(survivor);
  for (let i = 0; i < 3; i++) {
    const reply = await openai.chat.completions.create({ model: 'tiny', messages: MESSAGES, max_tokens: 4 });
    assert.ok(reply.choices[0]!.message.content);
  }
  assert.is((await load(survivor)).completed, before.completed + 3);

  survivor.proc.kill('SIGKILL');
  await survivor.exited;
  const none = await post('/v1/chat/completions', { model: 'tiny', messages: MESSAGES, max_tokens: 4 });
  assert.is(none.status, 503);
  assert.is(none.json.error?.type, 'server_error');
  const health = await waitFor('membership to find no worker', async () => {
    const response = await fetch(`${base}/health`);
    return response.status === 503 && ((await response.json()) as { status: string });
  });
  assert.is(health.status, 'unavailable');
  const alone = await post('/v1/chat/completions', { model: 'tiny', messages: MESSAGES, max_tokens: 4 });
  assert.equal([alone.status, alone.json.error?.code], [503, 'no_worker']);
});

test.run();
