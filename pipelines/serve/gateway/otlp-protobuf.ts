/**
 * OTLP/HTTP protobuf (`Content-Type: application/x-protobuf`), what OpenTelemetry SDKs export by
 * default: an ExportTraceServiceRequest decoded into the shape of its OTLP/JSON encoding (ids in
 * hex, 64-bit integers as decimal strings, bytes in base64), so that otlp.ts maps both alike.
 *
 * Only the fields otlp.ts reads are kept; any other field is skipped by its wire type, as protobuf
 * readers do. Field numbers are those of opentelemetry-proto (collector/trace/v1, trace/v1,
 * common/v1, resource/v1). A body that is not such a message (a length past its end, a known field
 * of the wrong wire type, a string that is not UTF-8, values nested past MAX_DEPTH) is an
 * OtlpProtobufError naming the field.
 */

export class OtlpProtobufError extends Error {}

/** AnyValue arrays and key-value lists nest; deeper than this is refused, not recursed into. */
const MAX_DEPTH = 32;

const VARINT = 0;
const FIXED64 = 1;
const LENGTH = 2;
const FIXED32 = 5;

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The fields of one message, read in order; `where` names it in errors. */
class Fields {
  private at: number;

  constructor(
    private readonly buf: Buffer,
    readonly where: string,
    start = 0,
    private readonly end = buf.length,
  ) {
    this.at = start;
  }

  /** The next field's number and wire type, or undefined at the message's end. */
  next(): { field: number; wire: number } | undefined {
    if (this.at >= this.end) return undefined;
    const key = this.varint();
    const field = Math.floor(key / 8);
    if (field === 0) throw this.error('field number 0');
    return { field, wire: key % 8 };
  }

  private varint(): number {
    return Number(this.varint64());
  }

  varint64(): bigint {
    let value = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.at >= this.end) throw this.error('a varint runs past the end');
      const byte = this.buf[this.at++]!;
      value |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return value;
    }
    throw this.error('a varint longer than 10 bytes');
  }

  fixed64(): Buffer {
    if (this.end - this.at < 8) throw this.error('a 64-bit value runs past the end');
    this.at += 8;
    return this.buf.subarray(this.at - 8, this.at);
  }

  /** A length-delimited field: its bytes, as a new reader's bounds. */
  length(): [number, number] {
    const length = this.varint();
    if (length > this.end - this.at) throw this.error(`a length of ${length} runs past the end`);
    this.at += length;
    return [this.at - length, this.at];
  }

  bytes(): Buffer {
    const [start, end] = this.length();
    return this.buf.subarray(start, end);
  }

  string(what: string): string {
    try {
      return utf8.decode(this.bytes());
    } catch {
      throw this.error(`${what} is not UTF-8`);
    }
  }

  message(where: string): Fields {
    const [start, end] = this.length();
    return new Fields(this.buf, `${this.where}.${where}`, start, end);
  }

  skip(wire: number): void {
    if (wire === VARINT) this.varint64();
    else if (wire === FIXED64) this.fixed64();
    else if (wire === LENGTH) this.length();
    else if (wire === FIXED32) {
      if (this.end - this.at < 4) throw this.error('a 32-bit value runs past the end');
      this.at += 4;
    } else throw this.error(`wire type ${wire}, which OTLP does not use`);
  }

  /** Throws unless `wire` is what field `field` (`name`) is encoded as. */
  expect(wire: number, expected: number, name: string): void {
    if (wire !== expected) throw this.error(`${name} has wire type ${wire}, not ${expected}`);
  }

  error(problem: string): OtlpProtobufError {
    return new OtlpProtobufError(`${this.where}: ${problem}`);
  }
}

type Json = Record<string, unknown>;

/** Reads a message's fields, handing each known one (by number) to its reader; others are skipped. */
function read(fields: Fields, readers: Record<number, [wire: number, name: string, read: (f: Fields) => void]>): void {
  for (let f = fields.next(); f; f = fields.next()) {
    const reader = readers[f.field];
    if (!reader) {
      fields.skip(f.wire);
      continue;
    }
    fields.expect(f.wire, reader[0], reader[1]);
    reader[2](fields);
  }
}

const unsigned64 = (bytes: Buffer): string => bytes.readBigUInt64LE(0).toString();
const signed64 = (value: bigint): string => BigInt.asIntN(64, value).toString();

function anyValue(fields: Fields, depth: number): Json {
  if (depth > MAX_DEPTH) throw fields.error(`values nested deeper than ${MAX_DEPTH}`);
  const out: Json = {};
  read(fields, {
    1: [LENGTH, 'string_value', (f) => (out.stringValue = f.string('string_value'))],
    2: [VARINT, 'bool_value', (f) => (out.boolValue = f.varint64() !== 0n)],
    3: [VARINT, 'int_value', (f) => (out.intValue = signed64(f.varint64()))],
    4: [FIXED64, 'double_value', (f) => (out.doubleValue = f.fixed64().readDoubleLE(0))],
    5: [LENGTH, 'array_value', (f) => (out.arrayValue = { values: repeated(f.message('array_value'), 'values', (v) => anyValue(v, depth + 1)) })],
    6: [LENGTH, 'kvlist_value', (f) => (out.kvlistValue = { values: repeated(f.message('kvlist_value'), 'values', (v) => keyValue(v, depth + 1)) })],
    7: [LENGTH, 'bytes_value', (f) => (out.bytesValue = f.bytes().toString('base64'))],
  });
  return out;
}

function keyValue(fields: Fields, depth: number): Json {
  const out: Json = { key: '' };
  read(fields, {
    1: [LENGTH, 'key', (f) => (out.key = f.string('key'))],
    2: [LENGTH, 'value', (f) => (out.value = anyValue(f.message('value'), depth))],
  });
  return out;
}

/** The messages of field 1, `name`, of a message that holds nothing else we read (ArrayValue, KeyValueList, Resource). */
function repeated<T>(fields: Fields, name: string, each: (f: Fields) => T): T[] {
  const out: T[] = [];
  read(fields, { 1: [LENGTH, name, (f) => out.push(each(f.message(`${name}[${out.length}]`)))] });
  return out;
}

const attributesOf = (f: Fields): Json => keyValue(f.message('attributes'), 0);

function span(fields: Fields): Json {
  const out: Json = { attributes: [], events: [] };
  const hex = (name: string) => (f: Fields) => (out[name] = f.bytes().toString('hex'));
  read(fields, {
    1: [LENGTH, 'trace_id', hex('traceId')],
    2: [LENGTH, 'span_id', hex('spanId')],
    4: [LENGTH, 'parent_span_id', hex('parentSpanId')],
    5: [LENGTH, 'name', (f) => (out.name = f.string('name'))],
    6: [VARINT, 'kind', (f) => (out.kind = Number(f.varint64()))],
    7: [FIXED64, 'start_time_unix_nano', (f) => (out.startTimeUnixNano = unsigned64(f.fixed64()))],
    8: [FIXED64, 'end_time_unix_nano', (f) => (out.endTimeUnixNano = unsigned64(f.fixed64()))],
    9: [LENGTH, 'attributes', (f) => (out.attributes as Json[]).push(attributesOf(f))],
    11: [LENGTH, 'events', (f) => (out.events as Json[]).push(spanEvent(f.message('events')))],
    15: [LENGTH, 'status', (f) => (out.status = status(f.message('status')))],
  });
  return out;
}

function spanEvent(fields: Fields): Json {
  const out: Json = { attributes: [] };
  read(fields, {
    1: [FIXED64, 'time_unix_nano', (f) => (out.timeUnixNano = unsigned64(f.fixed64()))],
    2: [LENGTH, 'name', (f) => (out.name = f.string('name'))],
    3: [LENGTH, 'attributes', (f) => (out.attributes as Json[]).push(attributesOf(f))],
  });
  return out;
}

function status(fields: Fields): Json {
  const out: Json = {};
  read(fields, {
    2: [LENGTH, 'message', (f) => (out.message = f.string('message'))],
    3: [VARINT, 'code', (f) => (out.code = Number(f.varint64()))],
  });
  return out;
}

function scopeSpans(fields: Fields): Json {
  const spans: Json[] = [];
  read(fields, { 2: [LENGTH, 'spans', (f) => spans.push(span(f.message(`spans[${spans.length}]`)))] });
  return { spans };
}

function resourceSpans(fields: Fields): Json {
  const out: Json = { scopeSpans: [] };
  read(fields, {
    1: [LENGTH, 'resource', (f) => (out.resource = { attributes: repeated(f.message('resource'), 'attributes', (kv) => keyValue(kv, 0)) })],
    2: [LENGTH, 'scope_spans', (f) => (out.scopeSpans as Json[]).push(scopeSpans(f.message(`scope_spans[${(out.scopeSpans as Json[]).length}]`)))],
  });
  return out;
}

/** An ExportTraceServiceRequest as its OTLP/JSON object. */
export function decodeTraceRequest(body: Buffer): Json {
  const resource: Json[] = [];
  read(new Fields(body, 'ExportTraceServiceRequest'), { 1: [LENGTH, 'resource_spans', (f) => resource.push(resourceSpans(f.message(`resource_spans[${resource.length}]`)))] });
  return { resourceSpans: resource };
}
