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
  /** The start of a line whose end has not arrived yet, copied (the caller may reuse its buffer). */
  private partial: Buffer | undefined;
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
      if (this.partial) {
        const line = Buffer.concat([this.partial, buf.subarray(start, nl)]);
        this.partial = undefined;
        this.line(line, 0, line.length);
      } else {
        this.line(buf, start, nl);
      }
      start = nl + 1;
    }
    if (start < buf.length) {
      const rest = buf.subarray(start);
      this.partial = this.partial ? Buffer.concat([this.partial, rest]) : Buffer.from(rest);
    }
    if (this.dataBytes + (this.partial?.length ?? 0) > this.maxEventBytes) {
      throw new SseLimitError(`an event is over ${this.maxEventBytes} bytes`);
    }
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
