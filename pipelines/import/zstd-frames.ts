/**
 * Where the frames of a zstd stream end, followed through their headers alone (no block is
 * decoded). Node's zstd decoder takes a stream cut short for a whole one: a truncated `.zst` file
 * decompresses, with no error, to the start of its content. A stream that does not end where a
 * frame ends is therefore told by this walk instead.
 *
 * The format (RFC 8878): frames one after another, each a zstd frame (magic 0xFD2FB528, a header
 * whose size its first byte gives, blocks each with a 3-byte header, then a 4-byte checksum when
 * the header says so) or a skippable frame (magic 0x184D2A5?, a 4-byte size, that many bytes).
 */

const ZSTD_MAGIC = 0xfd2fb528;
const SKIPPABLE_MAGIC = 0x184d2a50;
const SKIPPABLE_MASK = 0xfffffff0;
/** Bytes of the Dictionary_ID field for each value of its flag. */
const DICTIONARY_ID_BYTES = [0, 1, 2, 4];
/** Bytes of the Frame_Content_Size field for each value of its flag (flag 0: 1 byte with Single_Segment, else none). */
const CONTENT_SIZE_BYTES = [0, 2, 4, 8];
const BLOCK_RLE = 1;
const BLOCK_RESERVED = 3;

type Field = 'magic' | 'skippable-size' | 'descriptor' | 'frame-header' | 'block-header';

export class ZstdFrames {
  /** The field being read, the bytes it takes and those of it read so far. */
  private field: Field = 'magic';
  private want = 4;
  private readonly bytes = Buffer.alloc(8);
  private have = 0;
  /** Bytes to pass over before the next field (block content, a skippable frame, a checksum). */
  private skip = 0;
  private checksum = false;
  private frames = 0;
  /** Set when the bytes are not zstd frames: what is wrong. */
  private damage: string | undefined;
  /** Bytes followed so far. */
  private offset = 0;

  /** Follows the next bytes of the stream. */
  push(chunk: Uint8Array): void {
    let i = 0;
    while (i < chunk.length && !this.damage) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - i);
        this.skip -= n;
        this.offset += n;
        i += n;
        continue;
      }
      const n = Math.min(this.want - this.have, chunk.length - i);
      this.bytes.set(chunk.subarray(i, i + n), this.have);
      this.have += n;
      this.offset += n;
      i += n;
      if (this.have === this.want) this.read();
    }
  }

  /** Why the stream as followed so far is not whole zstd frames, or undefined when it is. */
  problem(): string | undefined {
    if (this.damage) return this.damage;
    if (this.frames === 0) return 'it holds no zstd frame';
    if (this.field !== 'magic' || this.have > 0 || this.skip > 0) return `it ends in the middle of a frame after ${this.offset} bytes (the file is cut short)`;
    return undefined;
  }

  /** The field in `bytes` is complete: take it and say what comes next. */
  private read(): void {
    const at = this.offset;
    this.have = 0;
    switch (this.field) {
      case 'magic': {
        const magic = this.bytes.readUInt32LE(0);
        if (magic === ZSTD_MAGIC) {
          this.frames++;
          this.expect('descriptor', 1);
        } else if ((magic & SKIPPABLE_MASK) >>> 0 === SKIPPABLE_MAGIC) {
          this.expect('skippable-size', 4);
        } else {
          this.damage = `no zstd frame starts where one should, near byte ${at}`;
        }
        return;
      }
      case 'skippable-size':
        this.skip = this.bytes.readUInt32LE(0);
        return this.expect('magic', 4);
      case 'descriptor': {
        const d = this.bytes[0]!;
        if (d & 0x08) {
          this.damage = `a zstd frame header has its reserved bit set, near byte ${at}`;
          return;
        }
        const singleSegment = (d >> 5) & 1;
        const contentSizeFlag = d >> 6;
        this.checksum = ((d >> 2) & 1) === 1;
        const rest = (singleSegment ? 0 : 1) + DICTIONARY_ID_BYTES[d & 3]! + (contentSizeFlag === 0 ? singleSegment : CONTENT_SIZE_BYTES[contentSizeFlag]!);
        // The rest of the header (window, dictionary, content size) says nothing the walk needs.
        if (rest === 0) return this.expect('block-header', 3);
        return this.expect('frame-header', rest);
      }
      case 'frame-header':
        return this.expect('block-header', 3);
      case 'block-header': {
        const header = this.bytes[0]! | (this.bytes[1]! << 8) | (this.bytes[2]! << 16);
        const last = header & 1;
        const type = (header >> 1) & 3;
        if (type === BLOCK_RESERVED) {
          this.damage = `a zstd block has the reserved type, near byte ${at}`;
          return;
        }
        // An RLE block holds one byte, repeated when decoded; the others hold their size in bytes.
        this.skip = type === BLOCK_RLE ? 1 : header >>> 3;
        if (!last) return this.expect('block-header', 3);
        if (this.checksum) this.skip += 4;
        return this.expect('magic', 4);
      }
    }
  }

  private expect(field: Field, bytes: number): void {
    this.field = field;
    this.want = bytes;
  }
}
