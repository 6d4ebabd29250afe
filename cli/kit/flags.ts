/**
 * What a command gets from the kit: its positional arguments, the arguments after `--`, and typed
 * readers of its options. Each command's `flags` function reads its options here into one typed
 * object, so every check of a flag value happens in one place and its error names the flag as the
 * user typed it (`-t/--to`). Values arrive as typed: `--session-id 0123` stays `0123`.
 */
import { InvalidInputError } from '../../lib/errors.js';

export interface OptionSpec {
  /** cac flag syntax: `-f, --from <source>`, `--yes`, `--column <name=path>`. */
  flags: string;
  description: string;
  /** Shown in --help and applied when the option is absent. */
  default?: string | number;
}

/** `--max-output-rows` -> `maxOutputRows`, the key cac files an option under. */
export function camelCase(name: string): string {
  return name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** The flags of a spec: `-t, --to <dataset>` -> [`-t`, `--to`]. */
export function flagsOf(option: OptionSpec): string[] {
  return option.flags.match(/(?<=^|[\s,])--?[\w-]+/g) ?? [];
}

export interface NumberRule {
  min?: number;
  /** `min` itself is not allowed. */
  exclusive?: boolean;
  integer?: boolean;
  /** The largest value allowed. */
  max?: number;
}

const SIZE_UNITS: Readonly<Record<string, number>> = { '': 1, b: 1, k: 1024, kb: 1024, kib: 1024, m: 1024 ** 2, mb: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3, gib: 1024 ** 3 };
const DURATION_UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000 };
/** The longest duration a flag or setting takes: Node's timers hold about 24.8 days, and fire at once past that. */
export const MAX_DURATION_MS = 24 * 3_600_000;

export class ParsedArgs {
  private readonly byLong = new Map<string, { display: string; key: string }>();

  constructor(
    private readonly positionals: ReadonlyArray<string | string[] | undefined>,
    private readonly values: Readonly<Record<string, unknown>>,
    /** Arguments after `--`. */
    readonly rest: readonly string[],
    declared: readonly OptionSpec[],
  ) {
    for (const option of declared) {
      const flags = flagsOf(option);
      const long = flags.find((f) => f.startsWith('--'));
      if (long) this.byLong.set(long, { display: flags.join('/'), key: camelCase(long.slice(2)) });
    }
  }

  /** The positional argument at `index`; a variadic one is joined back only by `variadic`. */
  positional(index: number): string | undefined {
    const value = this.positionals[index];
    return Array.isArray(value) ? value[0] : value;
  }

  requiredPositional(index: number, name: string): string {
    const value = this.positional(index);
    if (value === undefined || value === '') throw new InvalidInputError(`${name} is required`);
    return value;
  }

  /** Every argument of a variadic positional (`<names...>`). */
  variadic(index: number): string[] {
    const value = this.positionals[index];
    return value === undefined ? [] : Array.isArray(value) ? value : [value];
  }

  /** The number of positional arguments given. */
  get positionalCount(): number {
    return this.positionals.filter((p) => p !== undefined).length;
  }

  /** How a flag is named in messages: `-t/--to`. */
  display(long: string): string {
    return this.option(long).display;
  }

  /** A switch (`--yes`). */
  has(long: string): boolean {
    const value = this.raw(long);
    return value !== undefined && value !== false;
  }

  /** Whether an option was given at all (or has a default). */
  given(long: string): boolean {
    return this.raw(long) !== undefined;
  }

  /** Every value of a repeatable option, as typed; an empty one is refused (`-t "$UNSET"` names no dataset). */
  list(long: string): string[] {
    const value = this.raw(long);
    if (value === undefined || value === null || value === false) return [];
    const values = (Array.isArray(value) ? value : [value]).map((v) => String(v));
    if (values.includes('')) throw new InvalidInputError(`${this.display(long)} is empty`);
    return values;
  }

  /** The one value of an option that must not repeat; undefined when absent. */
  text(long: string): string | undefined {
    const values = this.list(long);
    if (values.length > 1) throw new InvalidInputError(`${this.display(long)} was given ${values.length} times; give it once`);
    return values[0];
  }

  required(long: string, hint?: string): string {
    const text = this.text(long);
    if (text === undefined || text === '') throw new InvalidInputError(`${this.display(long)} is required`, hint === undefined ? {} : { hint });
    return text;
  }

  choice<T extends string>(long: string, allowed: readonly T[], fallback?: T): T {
    const text = this.text(long) ?? fallback;
    if (text === undefined) throw new InvalidInputError(`${this.display(long)} is required`, { hint: `use one of: ${allowed.join(', ')}` });
    if ((allowed as readonly string[]).includes(text)) return text as T;
    throw new InvalidInputError(`invalid ${this.display(long)} ${JSON.stringify(String(text))}`, { hint: `use one of: ${allowed.join(', ')}` });
  }

  number(long: string, fallback: number, rule?: NumberRule): number;
  number(long: string, fallback: number | undefined, rule?: NumberRule): number | undefined;
  number(long: string, fallback: number | undefined, rule: NumberRule = {}): number | undefined {
    const text = this.text(long);
    return text === undefined ? fallback : parseNumber(this.display(long), text, rule);
  }

  /**
   * A bare number of seconds (`--timeout 2.5`), returned in milliseconds: at least `minSeconds`, at
   * most 24 h as durations are. Past about 24.8 days Node's timers fire after 1 ms instead.
   */
  seconds(long: string, fallbackSeconds: number, minSeconds: number): number {
    return this.number(long, fallbackSeconds, { min: minSeconds, max: MAX_DURATION_MS / 1000 }) * 1000;
  }

  /** A comma-separated list of numbers: `1,8,64`. */
  numbers(long: string, rule: NumberRule = {}): number[] {
    const text = this.text(long);
    return text === undefined ? [] : text.split(',').map((part) => parseNumber(this.display(long), part.trim(), rule));
  }

  /** A whole number of at least 1. */
  positiveInt(long: string, fallback: number): number {
    return this.number(long, fallback, { min: 1, integer: true });
  }

  /** A byte count: `4096`, `64k`, `8MiB` (units are powers of 1024). */
  byteSize(long: string, fallback: number): number {
    const text = this.text(long);
    if (text === undefined) return fallback;
    const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
    const unit = m ? SIZE_UNITS[(m[2] ?? '').toLowerCase()] : undefined;
    const bytes = m && unit ? Math.floor(Number(m[1]) * unit) : NaN;
    if (!Number.isSafeInteger(bytes) || bytes < 1) {
      throw new InvalidInputError(`invalid ${this.display(long)} ${JSON.stringify(text)}: expected a size such as 4096, 64KiB or 8MiB`);
    }
    return bytes;
  }

  /**
   * A duration in milliseconds: `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds; at most
   * 24 h. `min` (ms) defaults to 1; `min: 0` allows 0 (meaning "none" where a command says so).
   */
  duration(long: string, fallbackMs: number, rule?: { min?: 0 | 1 }): number;
  duration(long: string, fallbackMs: number | undefined, rule?: { min?: 0 | 1 }): number | undefined;
  duration(long: string, fallbackMs: number | undefined, { min = 1 as 0 | 1 } = {}): number | undefined {
    const text = this.text(long);
    return text === undefined ? fallbackMs : parseDuration(this.display(long), text, min);
  }

  /** `True`/`False` (and yes/no, on/off, 1/0), for options written in that style. */
  bool(long: string, fallback: boolean): boolean {
    const text = this.text(long);
    if (text === undefined) return fallback;
    const lower = text.toLowerCase();
    if (['true', '1', 'yes', 'y', 'on', 't'].includes(lower)) return true;
    if (['false', '0', 'no', 'n', 'off', 'f'].includes(lower)) return false;
    throw new InvalidInputError(`invalid ${this.display(long)} ${JSON.stringify(text)}: expected True or False (or yes/no, on/off, 1/0)`);
  }

  private option(long: string): { display: string; key: string } {
    const option = this.byLong.get(long);
    if (!option) throw new Error(`the command reads ${long}, which it does not declare`);
    return option;
  }

  private raw(long: string): unknown {
    return this.values[this.option(long).key];
  }
}

/** A number, for values that are not flags of their own (`-D key=value`); `what` names it in the error. */
/** Decimal numbers only: `Number()` would also take `0x10`, `0b11` and `Infinity`, and `1e3` as a whole number. */
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const WHOLE = /^[+-]?\d+$/;

export function parseNumber(what: string, text: string, { min, exclusive = false, integer = false, max }: NumberRule = {}): number {
  const n = (integer ? WHOLE : DECIMAL).test(text.trim()) ? Number(text) : NaN;
  const ok = Number.isFinite(n) && (min === undefined || (exclusive ? n > min : n >= min)) && (max === undefined || n <= max) && (!integer || Number.isSafeInteger(n));
  if (!ok) {
    const bounds = [min === undefined ? '' : `${exclusive ? '>' : '>='} ${min}`, max === undefined ? '' : `<= ${max}`].filter(Boolean);
    const bound = bounds.length ? ` ${bounds.join(' and ')}` : '';
    throw new InvalidInputError(`invalid ${what} ${JSON.stringify(text)}: expected ${integer ? 'a whole number' : 'a number'}${bound}`);
  }
  return n;
}

/**
 * A duration in milliseconds, for values that are not flags of their own (`--slo ttft=200ms`).
 * `min` is 1 (ms, the default: it must be greater than 0) or 0 (0 allowed).
 */
export function parseDuration(what: string, text: string, min: 0 | 1 = 1): number {
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = m ? (m[2] === '' ? 1000 : DURATION_UNITS[(m[2] ?? '').toLowerCase()]) : undefined;
  const ms = m && unit ? Math.round(Number(m[1]) * unit) : NaN;
  // A duration that is well written but out of range says which bound it passes, not how to write one.
  const problem = !Number.isFinite(ms)
    ? 'expected a duration such as 30s, 500ms or 2m (at most 24h)'
    : ms < min
      ? 'must be greater than 0'
      : ms > MAX_DURATION_MS
        ? 'must be at most 24h'
        : undefined;
  if (problem) throw new InvalidInputError(`invalid ${what} ${JSON.stringify(text)}: ${problem}`);
  return ms;
}
