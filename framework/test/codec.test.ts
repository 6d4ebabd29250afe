import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { END_FRAME, FLAG_END, FLAG_ERROR, FrameDecoder, FrameError, encodeFrame, errorFrame, frameValue, jsonFrame, parseCallBody } from '../core/codec.js';

test('frames round-trip, whole and one byte at a time', () => {
  const bytes = Buffer.concat([jsonFrame({ a: 1 }), jsonFrame('two'), errorFrame('bad thing'), END_FRAME]);
  for (const step of [bytes.length, 1, 3]) {
    const decoder = new FrameDecoder();
    const frames = [];
    for (let i = 0; i < bytes.length; i += step) frames.push(...decoder.push(bytes.subarray(i, i + step)));
    assert.is(frames.length, 4);
    assert.equal(frameValue(frames[0]!), { a: 1 });
    assert.is(frameValue(frames[1]!), 'two');
    assert.is(frames[2]!.flags, FLAG_ERROR | FLAG_END);
    assert.is(frames[2]!.error, 'bad thing');
    assert.is(frames[3]!.flags, FLAG_END);
    assert.not.ok(decoder.pending);
  }
});

test('a large frame split into many chunks comes out whole, with its neighbours', () => {
  const big = 'x'.repeat(3 * 1024 * 1024);
  const bytes = Buffer.concat([jsonFrame(1), jsonFrame(big), jsonFrame(2)]);
  const decoder = new FrameDecoder();
  const frames = [];
  for (let i = 0; i < bytes.length; i += 16 * 1024 + 3) frames.push(...decoder.push(bytes.subarray(i, i + 16 * 1024 + 3)));
  assert.equal(frames.map(frameValue), [1, big, 2]);
  assert.not.ok(decoder.pending);
});

test('the layout is u32 length, u8 flags, u16+type, u32+data', () => {
  const f = encodeFrame({ flags: 0, type: 'json', data: Buffer.from('1') });
  assert.equal([...f], [0, 0, 0, 12, 0, 0, 4, ...Buffer.from('json'), 0, 0, 0, 1, 0x31]);
});

test('malformed frames are refused with a reason', () => {
  const cases: Array<[Buffer, RegExp]> = [
    [Buffer.from([0xff, 0xff, 0xff, 0xff]), /exceeds/],
    [Buffer.from([0, 0, 0, 2, 0, 0]), /truncated/],
    [Buffer.from([0, 0, 0, 3, 0x80, 0, 0]), /flags/],
    [Buffer.from([0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 9, 1, 2]), /truncated in data/],
    [Buffer.concat([Buffer.from([0, 0, 0, 8]), Buffer.from([0, 0, 0, 0, 0, 0, 0, 7])]), /trailing/],
  ];
  for (const [bytes, reason] of cases) assert.throws(() => new FrameDecoder().push(bytes), (e: unknown) => e instanceof FrameError && reason.test((e as Error).message));
  assert.throws(() => frameValue({ flags: 0, type: 'pickle', data: Buffer.alloc(0) }), /unsupported frame type/);
});

test('call bodies are checked field by field', () => {
  assert.equal(parseCallBody(Buffer.from('{"method":"m","args":[1]}')), { method: 'm', args: [1] });
  assert.equal(parseCallBody(Buffer.from('{"method":"m"}')), { method: 'm', args: [] });
  assert.throws(() => parseCallBody(Buffer.from('{')), /not JSON/);
  assert.throws(() => parseCallBody(Buffer.from('[1]')), /JSON object/);
  assert.throws(() => parseCallBody(Buffer.from('{"method":""}')), /`method`/);
  assert.throws(() => parseCallBody(Buffer.from('{"method":"m","args":{}}')), /`args`/);
  // Arguments are spread into a call: 500,000 of them would overflow the stack in the actor, and count as its failure.
  assert.is(parseCallBody(Buffer.from(JSON.stringify({ method: 'm', args: Array(1024).fill(0) }))).args.length, 1024);
  assert.throws(() => parseCallBody(Buffer.from(JSON.stringify({ method: 'm', args: Array(500_000).fill(0) }))), /holds 500000 arguments; at most 1024/);
  // Nesting is counted before parsing; brackets inside strings do not count.
  const nested = (n: number): string => `{"method":"m","args":[${'['.repeat(n - 2)}${']'.repeat(n - 2)}]}`;
  assert.equal(parseCallBody(Buffer.from(nested(512))).method, 'm');
  assert.throws(() => parseCallBody(Buffer.from(nested(513))), /deeper than 512 levels/);
  assert.equal(parseCallBody(Buffer.from(`{"method":"m","args":["${'['.repeat(2000)}\\"["]}`)).args.length, 1);
});

test.run();
