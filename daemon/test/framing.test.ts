import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FrameDecoder, FrameError, encodeFrame, frameDecoderStream } from '../framing.js';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';

interface Vector {
  name: string;
  hex: string;
  frames: unknown[];
  error?: string;
  encode?: boolean;
}
const { max_frame_size: max, vectors } = JSON.parse(
  readFileSync(new URL('testdata/framing/vectors.json', new URL(`file://${DIST_ROOT}/../`)), 'utf8'),
) as { max_frame_size: number; vectors: Vector[] };

function decodeInChunks(bytes: Buffer, size: number): { frames: unknown[]; error: string | undefined } {
  const decoder = new FrameDecoder(max);
  const frames: unknown[] = [];
  try {
    for (let at = 0; at < bytes.length; at += size) {
      decoder.push(bytes.subarray(at, at + size));
      for (let f = decoder.next(); f; f = decoder.next()) frames.push(f.value);
    }
    decoder.finish();
    return { frames, error: undefined };
  } catch (error) {
    if (!(error instanceof FrameError)) throw error;
    return { frames, error: error.kind };
  }
}

test('the vectors file is there and covers every error kind', () => {
  assert.ok(vectors.length >= 15);
  assert.equal(new Set(vectors.map((v) => v.error).filter(Boolean)), new Set(['truncated', 'oversized', 'not_json', 'not_utf8']));
});

for (const v of vectors) {
  test(`decode: ${v.name}`, () => {
    const bytes = Buffer.from(v.hex, 'hex');
    for (const size of [1, 3, 7, 4096]) {
      const { frames, error } = decodeInChunks(bytes, size);
      assert.equal(frames, v.frames, `frames with chunks of ${size}`);
      assert.is(error, v.error, `error with chunks of ${size}`);
    }
  });
}

test('encode: produces the vectors byte for byte', () => {
  const encodable = vectors.filter((v) => v.encode);
  assert.ok(encodable.length >= 5);
  for (const v of encodable) {
    assert.is(Buffer.concat(v.frames.map((f) => encodeFrame(f, max))).toString('hex'), v.hex, v.name);
  }
  assert.throws(() => encodeFrame('x'.repeat(max), max), (e: unknown) => e instanceof FrameError && e.kind === 'oversized');
});

test('stream stage: frames out of a byte stream, and the error kind on bad input', async () => {
  const good = vectors.find((v) => v.name === 'three frames back to back');
  assert.ok(good);
  const bytes = Buffer.from(good.hex, 'hex');
  const pieces = Array.from({ length: bytes.length }, (_, i) => bytes.subarray(i, i + 1));
  const out: unknown[] = [];
  for await (const value of Readable.from(pieces).pipe(frameDecoderStream(max))) out.push(value);
  assert.equal(out, good.frames);

  const bad = vectors.find((v) => v.name === 'valid frame then truncated one');
  assert.ok(bad);
  try {
    for await (const _ of Readable.from([Buffer.from(bad.hex, 'hex')]).pipe(frameDecoderStream(max))) continue;
    assert.unreachable('a truncated stream must fail');
  } catch (error) {
    assert.instance(error, FrameError);
    assert.is((error as FrameError).kind, 'truncated');
  }
});

test.run();
