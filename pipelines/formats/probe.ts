/**
 * What detection sees of a file: a skeleton of its first JSON value (the whole document of a `.json`
 * file, the first line of a JSONL file), read in one pass over the bytes without building the value.
 * Formats are told apart by the keys at the root (and a little below it), wherever in the file they
 * are: a Storyline whose `origin.schema_version` names ATIF is a Storyline by its own
 * `schema_version`, however large the document and whatever comes first.
 *
 * The skeleton keeps every root key (up to MAX_ROOT_KEYS), the first MAX_KEYS members of objects
 * below it, the first element of every array, containers down to MAX_DEPTH (deeper ones are kept
 * empty, so their type still shows) and the first MAX_STRING_BYTES of strings. Strings are skipped
 * with `indexOf`, so a scan costs little more than reading the file. A syntax error or the end of
 * the input stops the scan; what was seen until then is still the skeleton (a truncated ATIF file
 * is still ATIF, and its decoder names the syntax error).
 */
import type { DetectProbe } from './types.js';

const MAX_DEPTH = 4;
const MAX_ROOT_KEYS = 4096;
const MAX_KEYS = 64;
const MAX_STRING_BYTES = 4096;
const MAX_NODES = 20_000;
const MAX_NESTING = 10_000;

const UTF8_BOM = Buffer.from([0xef, 0xbb, 0xbf]);
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const endsScalar = (c: number): boolean => isSpace(c) || c === 0x2c || c === 0x5d || c === 0x7d;

type Container = Record<string, unknown> | unknown[];

interface Frame {
  /** The kept container, or undefined while a container is skipped. */
  node: Container | undefined;
  isObject: boolean;
  /** Members of an object kept so far; elements of an array seen so far. */
  count: number;
  /** The current member's key (objects) and whether its value is kept. */
  key: string;
  keepValue: boolean;
}

const enum Expect {
  Value,
  ValueOrClose,
  KeyOrClose,
  Key,
  Colon,
  CommaOrClose,
}

/** Builds the skeleton from chunks pushed in order; `feed` returns true once the first value is over. */
export class SkeletonBuilder {
  value: unknown = undefined;
  private done = false;
  /** Bytes fed so far. */
  private fed = 0;
  private readonly stack: Frame[] = [];
  private expect = Expect.Value;
  private nodes = 0;
  /** The string being read: its kept bytes (undefined when skipped), whether it is a key. */
  private inString = false;
  private stringBytes: Buffer[] | undefined;
  private stringLength = 0;
  private stringIsKey = false;
  /** Backslashes that ended the previous chunk's part of the current string. */
  private backslashes = 0;
  /** The scalar (number, true, false, null) being read, when it is kept; `keepScalar` says so. */
  private scalar: string | undefined;
  private keepScalar = false;

  feed(chunk: Buffer): boolean {
    // A UTF-8 byte order mark before the value (Windows editors write one) is not part of it; the
    // decoders' UTF-8 decoding drops it too.
    let i = this.fed === 0 && chunk.subarray(0, 3).equals(UTF8_BOM) ? 3 : 0;
    this.fed += chunk.length;
    while (i < chunk.length && !this.done) {
      if (this.inString) i = this.readString(chunk, i);
      else if (this.scalar !== undefined) i = this.readScalar(chunk, i);
      else i = this.step(chunk, i);
    }
    return this.done;
  }

  /** The input ended: a top-level scalar that ran to the end is over; what else is open stays as seen. */
  end(): unknown {
    if (!this.done && this.scalar !== undefined && this.stack.length === 0) this.finishScalar();
    this.done = true;
    return this.value;
  }

  private fail(): number {
    this.done = true;
    return Number.MAX_SAFE_INTEGER;
  }

  private step(chunk: Buffer, i: number): number {
    const c = chunk[i] as number;
    if (isSpace(c)) return i + 1;
    switch (this.expect) {
      case Expect.Value:
      case Expect.ValueOrClose:
        if (c === 0x5d && this.expect === Expect.ValueOrClose) return this.close(false, i);
        return this.beginValue(c, i);
      case Expect.KeyOrClose:
      case Expect.Key:
        if (c === 0x7d && this.expect === Expect.KeyOrClose) return this.close(true, i);
        if (c !== QUOTE) return this.fail();
        this.beginString(true, true);
        return i + 1;
      case Expect.Colon:
        if (c !== 0x3a) return this.fail();
        this.expect = Expect.Value;
        return i + 1;
      case Expect.CommaOrClose: {
        const frame = this.stack[this.stack.length - 1] as Frame;
        if (c === 0x2c) {
          this.expect = frame.isObject ? Expect.Key : Expect.Value;
          return i + 1;
        }
        if (c === (frame.isObject ? 0x7d : 0x5d)) return this.close(frame.isObject, i);
        return this.fail();
      }
    }
  }

  /** Whether the value about to start has a place in the skeleton. */
  private slotKept(): boolean {
    const parent = this.stack[this.stack.length - 1];
    if (!parent) return true;
    if (parent.node === undefined || this.nodes >= MAX_NODES) return false;
    return parent.isObject ? parent.keepValue : parent.count === 0;
  }

  private place(value: unknown): void {
    this.nodes += 1;
    const parent = this.stack[this.stack.length - 1];
    if (!parent) this.value = value;
    else if (parent.isObject) (parent.node as Record<string, unknown>)[parent.key] = value;
    else (parent.node as unknown[]).push(value);
  }

  private beginValue(c: number, i: number): number {
    const kept = this.slotKept();
    if (c === 0x7b || c === 0x5b) {
      if (this.stack.length >= MAX_NESTING) return this.fail();
      const isObject = c === 0x7b;
      let node: Container | undefined;
      if (kept) {
        const container: Container = isObject ? {} : [];
        this.place(container);
        // Too deep: the empty container stays as a placeholder and its contents are skipped.
        if (this.stack.length < MAX_DEPTH) node = container;
      }
      this.stack.push({ node, isObject, count: 0, key: '', keepValue: false });
      this.expect = isObject ? Expect.KeyOrClose : Expect.ValueOrClose;
      return i + 1;
    }
    if (c === QUOTE) {
      this.beginString(false, kept);
      return i + 1;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39) || c === 0x74 || c === 0x66 || c === 0x6e) {
      this.scalar = '';
      this.keepScalar = kept;
      return i;
    }
    return this.fail();
  }

  private close(isObject: boolean, i: number): number {
    const frame = this.stack.pop() as Frame;
    if (frame.isObject !== isObject) return this.fail();
    this.valueEnded();
    return i + 1;
  }

  private valueEnded(): void {
    const parent = this.stack[this.stack.length - 1];
    if (!parent) {
      this.done = true;
      return;
    }
    if (!parent.isObject) parent.count += 1;
    this.expect = Expect.CommaOrClose;
  }

  private beginString(isKey: boolean, kept: boolean): void {
    this.inString = true;
    this.stringIsKey = isKey;
    this.stringBytes = kept ? [] : undefined;
    this.stringLength = 0;
    this.backslashes = 0;
  }

  private readString(chunk: Buffer, start: number): number {
    for (let from = start; ; ) {
      const quote = chunk.indexOf(QUOTE, from);
      if (quote === -1) {
        this.keep(chunk, start, chunk.length);
        let run = 0;
        while (run < chunk.length - start && chunk[chunk.length - 1 - run] === BACKSLASH) run += 1;
        this.backslashes = run === chunk.length - start ? this.backslashes + run : run;
        return chunk.length;
      }
      // A quote after an odd number of backslashes is part of the string.
      let run = 0;
      while (quote - 1 - run >= start && chunk[quote - 1 - run] === BACKSLASH) run += 1;
      if (quote - run === start) run += this.backslashes;
      if (run % 2 === 0) {
        this.keep(chunk, start, quote);
        this.finishString();
        return quote + 1;
      }
      from = quote + 1;
    }
  }

  private keep(chunk: Buffer, from: number, to: number): void {
    if (this.stringBytes === undefined || this.stringLength >= MAX_STRING_BYTES) return;
    const end = Math.min(to, from + MAX_STRING_BYTES - this.stringLength);
    this.stringBytes.push(chunk.subarray(from, end));
    this.stringLength += end - from;
  }

  private finishString(): void {
    this.inString = false;
    const bytes = this.stringBytes;
    let text: string | undefined = '';
    if (bytes !== undefined) {
      const raw = Buffer.concat(bytes).toString('utf8');
      // A string cut at MAX_STRING_BYTES may end inside an escape: drop characters until it parses.
      const least = this.stringLength >= MAX_STRING_BYTES ? Math.max(0, raw.length - 6) : raw.length;
      text = undefined;
      for (let cut = raw.length; text === undefined && cut >= least; cut -= 1) {
        try {
          text = JSON.parse(`"${raw.slice(0, cut)}"`) as string;
        } catch {
          // a bad escape: try a shorter cut, or fail below
        }
      }
      if (text === undefined) {
        this.fail();
        return;
      }
    }
    if (this.stringIsKey) {
      const frame = this.stack[this.stack.length - 1] as Frame;
      frame.key = text;
      frame.keepValue = frame.node !== undefined && frame.count < (this.stack.length === 1 ? MAX_ROOT_KEYS : MAX_KEYS);
      if (frame.keepValue) frame.count += 1;
      this.expect = Expect.Colon;
      return;
    }
    if (bytes !== undefined) this.place(text);
    this.valueEnded();
  }

  private readScalar(chunk: Buffer, start: number): number {
    let i = start;
    while (i < chunk.length && !endsScalar(chunk[i] as number)) i += 1;
    if (this.keepScalar) this.scalar += chunk.toString('latin1', start, Math.min(i, start + 64));
    if (i < chunk.length) this.finishScalar();
    return i;
  }

  private finishScalar(): void {
    const text = this.scalar as string;
    this.scalar = undefined;
    if (this.keepScalar) {
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        this.fail();
        return;
      }
      this.place(value);
    }
    this.valueEnded();
  }
}

/** The probe of a file from its bytes (chunks in order), reading no further than the end of its first JSON value. */
export function probeOf(relPath: string, chunks: Iterable<Buffer>): DetectProbe {
  const builder = new SkeletonBuilder();
  for (const chunk of chunks) if (builder.feed(chunk)) break;
  const value = builder.end();
  return value === undefined ? { relPath } : { relPath, value };
}
