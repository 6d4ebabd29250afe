/**
 * Writing GGUF (version 3), the file format of llama.cpp models: a header of typed key/values and
 * tensor descriptions, then the tensors' data at aligned offsets. Little-endian throughout:
 *
 *   "GGUF" u32 version, u64 tensor count, u64 key/value count,
 *   key/values: key (u64 length + UTF-8), u32 value type, value (arrays: u32 item type, u64 count, items),
 *   tensor infos: name, u32 dimensions, u64 ne[] (ne[0] is the contiguous axis), u32 ggml type, u64 offset,
 *   padding to the alignment, tensor data (each at a multiple of the alignment).
 *
 * Only what the project's own models need: scalar, string and array values, F32 tensors.
 */

/** GGUF value types. */
const VALUE = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const;
const GGML_F32 = 0;
const ALIGNMENT = 32;

export type GgufValue =
  | { type: 'u32' | 'i32' | 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'u32[]' | 'i32[]' | 'f32[]'; value: ArrayLike<number> }
  | { type: 'string[]'; value: readonly string[] };

export interface GgufTensor {
  name: string;
  /** ne[]: the first dimension is the contiguous one (a matrix's input axis). */
  dims: readonly number[];
  data: Float32Array;
}

/** Grows as values are written; `bytes()` is what was written. */
class ByteWriter {
  private buffer = Buffer.alloc(1 << 16);
  private length = 0;

  private room(n: number): void {
    if (this.length + n <= this.buffer.length) return;
    const bigger = Buffer.alloc(Math.max(this.buffer.length * 2, this.length + n));
    this.buffer.copy(bigger, 0, 0, this.length);
    this.buffer = bigger;
  }
  u32(v: number): void {
    this.room(4);
    this.length = this.buffer.writeUInt32LE(v, this.length);
  }
  i32(v: number): void {
    this.room(4);
    this.length = this.buffer.writeInt32LE(v, this.length);
  }
  u64(v: number): void {
    this.room(8);
    this.length = this.buffer.writeBigUInt64LE(BigInt(v), this.length);
  }
  f32(v: number): void {
    this.room(4);
    this.length = this.buffer.writeFloatLE(v, this.length);
  }
  u8(v: number): void {
    this.room(1);
    this.length = this.buffer.writeUInt8(v, this.length);
  }
  string(text: string): void {
    const bytes = Buffer.from(text, 'utf8');
    this.u64(bytes.length);
    this.room(bytes.length);
    this.length += bytes.copy(this.buffer, this.length);
  }
  padTo(alignment: number): void {
    while (this.length % alignment !== 0) this.u8(0);
  }
  get size(): number {
    return this.length;
  }
  bytes(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}

function writeValue(out: ByteWriter, value: GgufValue): void {
  const items = <T>(type: number, list: ArrayLike<T>, write: (v: T) => void): void => {
    out.u32(VALUE.array);
    out.u32(type);
    out.u64(list.length);
    for (let i = 0; i < list.length; i++) write(list[i] as T);
  };
  switch (value.type) {
    case 'u32':
    case 'i32':
    case 'f32':
      out.u32(VALUE[value.type]);
      out[value.type](value.value);
      return;
    case 'bool':
      out.u32(VALUE.bool);
      out.u8(value.value ? 1 : 0);
      return;
    case 'string':
      out.u32(VALUE.string);
      out.string(value.value);
      return;
    case 'u32[]':
      return items(VALUE.u32, value.value, (v) => out.u32(v));
    case 'i32[]':
      return items(VALUE.i32, value.value, (v) => out.i32(v));
    case 'f32[]':
      return items(VALUE.f32, value.value, (v) => out.f32(v));
    case 'string[]':
      return items(VALUE.string, value.value, (v) => out.string(v));
  }
}

/**
 * A GGUF file as the pieces to write in order: the header (with the padding after it), then each
 * tensor's data and its padding. Nothing is copied: the tensors' own buffers are among the pieces.
 */
export function ggufPieces(metadata: ReadonlyMap<string, GgufValue>, tensors: readonly GgufTensor[]): Uint8Array[] {
  const header = new ByteWriter();
  for (const c of 'GGUF') header.u8(c.charCodeAt(0));
  header.u32(3);
  header.u64(tensors.length);
  const kv = new Map(metadata);
  kv.set('general.alignment', { type: 'u32', value: ALIGNMENT });
  header.u64(kv.size);
  for (const [key, value] of kv) {
    header.string(key);
    writeValue(header, value);
  }
  const padded = (n: number): number => Math.ceil(n / ALIGNMENT) * ALIGNMENT;
  let offset = 0;
  for (const tensor of tensors) {
    const count = tensor.dims.reduce((a, b) => a * b, 1);
    if (count !== tensor.data.length) throw new Error(`tensor ${tensor.name}: dims ${tensor.dims.join('x')} hold ${count} values, data has ${tensor.data.length}`);
    header.string(tensor.name);
    header.u32(tensor.dims.length);
    for (const d of tensor.dims) header.u64(d);
    header.u32(GGML_F32);
    header.u64(offset);
    offset = padded(offset + tensor.data.byteLength);
  }
  header.padTo(ALIGNMENT);
  const pieces: Uint8Array[] = [header.bytes()];
  for (const tensor of tensors) {
    pieces.push(new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength));
    const gap = padded(tensor.data.byteLength) - tensor.data.byteLength;
    if (gap) pieces.push(new Uint8Array(gap));
  }
  return pieces;
}
