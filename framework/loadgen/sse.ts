/**
 * Incremental server-sent-events parser: fed the body's bytes as they arrive (split anywhere,
 * even inside a line or a UTF-8 character), it hands out each event's data when the blank line
 * that ends the event arrives. Only `data:` fields matter for chat completions; comments and
 * other fields are skipped without being decoded, and a data line is decoded once, whole, so a
 * character split between chunks is never mangled.
 */
const LF = 10;
const CR = 13;
const SPACE = 32;
const DATA = Buffer.from('data:');

/** An event (its data lines so far, and a line not yet ended) grew past the parser's limit. */
export class SseLimitError extends Error {}

export class SseParser {
  /**
   * The start of a line whose end has not arrived yet, copied (the caller may reuse its buffer) into
   * room that doubles as it fills: joining the pieces on every read would copy a long line over and
   * over, quadratic in its length, and keeping each read's piece would cost an object per read.
   */
  private partial = Buffer.alloc(0);
  private partialBytes = 0;
  private data: string[] = [];
  /** Bytes of the data lines of the event being read. */
  private dataBytes = 0;

  /** `maxEventBytes`: the most an event may hold while it arrives; past it `push` throws SseLimitError. */
  constructor(
    private readonly onData: (data: string) => void,
    private readonly maxEventBytes = Infinity,
  ) {}

  /** Bytes of the stream; a string is taken as its UTF-8 encoding. */
  push(chunk: Buffer | string): void {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let start = 0;
    for (;;) {
      const nl = buf.indexOf(LF, start);
      if (nl < 0) break;
      if (this.partialBytes > 0) {
        this.append(buf, start, nl);
        const length = this.partialBytes;
        this.partialBytes = 0;
        this.line(this.partial, 0, length);
      } else {
        this.line(buf, start, nl);
      }
      start = nl + 1;
    }
    if (start < buf.length) this.append(buf, start, buf.length);
    if (this.dataBytes + this.partialBytes > this.maxEventBytes) {
      throw new SseLimitError(`an event is over ${this.maxEventBytes} bytes`);
    }
  }

  private append(buf: Buffer, start: number, end: number): void {
    const needed = this.partialBytes + end - start;
    if (needed > this.partial.length) {
      // Doubling stops at the limit: a line past it fails anyway.
      const room = Buffer.allocUnsafe(Math.max(needed, Math.min(this.partial.length * 2, this.maxEventBytes + 1)));
      this.partial.copy(room, 0, 0, this.partialBytes);
      this.partial = room;
    }
    buf.copy(this.partial, this.partialBytes, start, end);
    this.partialBytes = needed;
  }

  private line(buf: Buffer, start: number, end: number): void {
    if (end > start && buf[end - 1] === CR) end--;
    if (end === start) {
      if (this.data.length > 0) {
        const data = this.data.length === 1 ? (this.data[0] as string) : this.data.join('\n');
        this.data = [];
        this.dataBytes = 0;
        this.onData(data);
      }
      return;
    }
    // A comment (`:`), `event:`, `id:` or `retry:` line: skipped.
    if (end - start < 5 || buf.compare(DATA, 0, 5, start, start + 5) !== 0) return;
    const value = buf[start + 5] === SPACE ? start + 6 : start + 5;
    this.data.push(buf.toString('utf8', value, end));
    this.dataBytes += end - value;
  }
}
