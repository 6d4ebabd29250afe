/**
 * The zstd frame walk (pipelines/import/zstd-frames.ts) that tells a truncated `.zst` source from a
 * whole one, on streams Node's own encoder writes: one frame or several, with and without a
 * checksum, with a known or unknown content size, with skippable frames. A stream is whole only at
 * its very end: fed a byte at a time, every shorter prefix is reported as cut short.
 */
import { randomBytes } from 'node:crypto';
import { constants, createZstdCompress, zstdCompressSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ZstdFrames } from '../import/zstd-frames.js';

/** Content with compressed, raw (random) and RLE (one repeated byte) blocks, over several blocks. */
const content = Buffer.concat([Buffer.from('{"step":1,"text":"hello"}\n'.repeat(4000)), randomBytes(150_000), Buffer.alloc(300_000, 0x61)]);

function streamed(bytes: Buffer): Promise<Buffer> {
  const out: Buffer[] = [];
  const z = createZstdCompress();
  z.on('data', (c: Buffer) => out.push(c));
  return new Promise((resolve, reject) => {
    z.on('end', () => resolve(Buffer.concat(out)));
    z.on('error', reject);
    // Written in pieces, so the encoder does not know the content size up front.
    for (let i = 0; i < bytes.length; i += 65_536) z.write(bytes.subarray(i, i + 65_536));
    z.end();
  });
}

function skippable(payload: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32LE(0x184d2a53, 0);
  head.writeUInt32LE(payload.length, 4);
  return Buffer.concat([head, payload]);
}

/** Each stream, and the points where a prefix of it is whole: the ends of its frames (a skippable frame alone is no zstd content). */
async function streams(): Promise<Array<[string, Buffer, number | undefined]>> {
  const checksummed = zstdCompressSync(content, { params: { [constants.ZSTD_c_checksumFlag]: 1 } });
  return [
    ['one frame', zstdCompressSync(content), 1],
    ['a checksum', checksummed, 1],
    // Node's streaming encoder may end with a frame of its own (it wrote two, as `zstd -l` counts).
    ['an unknown content size', await streamed(content), undefined],
    ['two frames and skippable ones', Buffer.concat([skippable(Buffer.from('meta')), zstdCompressSync(Buffer.from('a')), skippable(Buffer.alloc(0)), checksummed]), 3],
    ['an empty content', zstdCompressSync(Buffer.alloc(0)), 1],
  ];
}

test('whole streams are whole; every prefix of one, fed a byte at a time, is cut short', async () => {
  for (const [name, bytes, frames] of await streams()) {
    const whole = new ZstdFrames();
    whole.push(bytes);
    assert.is(whole.problem(), undefined, name);

    const walk = new ZstdFrames();
    const wholeAt: number[] = [];
    for (let i = 0; i < bytes.length; i++) {
      walk.push(bytes.subarray(i, i + 1));
      // The end of each frame is a whole stream; no point inside a frame is.
      if (walk.problem() === undefined) wholeAt.push(i + 1);
      else assert.match(walk.problem()!, /cut short|holds no zstd frame/, `${name} at ${i + 1}`);
    }
    if (frames !== undefined) assert.is(wholeAt.length, frames, name);
    assert.is(wholeAt.at(-1), bytes.length, name);
  }
});

test('a cut-short stream says where it ends; bytes that are not frames are damage', () => {
  const bytes = zstdCompressSync(content);
  const cut = new ZstdFrames();
  cut.push(bytes.subarray(0, 1000));
  assert.is(cut.problem(), 'it ends in the middle of a frame after 1000 bytes (the file is cut short)');

  const trailing = new ZstdFrames();
  trailing.push(Buffer.concat([bytes, Buffer.from('garbage!')]));
  assert.match(trailing.problem()!, `no zstd frame starts where one should, near byte ${bytes.length + 4}`);

  const reserved = Buffer.from(bytes);
  reserved[4]! |= 0x08;
  const walk = new ZstdFrames();
  walk.push(reserved);
  assert.match(walk.problem()!, 'reserved bit');

  const empty = new ZstdFrames();
  empty.push(Buffer.alloc(0));
  assert.is(empty.problem(), 'it holds no zstd frame');
});

test.run();
