/**
 * TOML files people write (configuration, access lists): parsed with errors that name the line and
 * column but never quote the line (it may hold a secret), and the line each key is on, for messages.
 */
import { parse, TomlError } from 'smol-toml';

/** The document of `text`; a syntax error goes to `fail` with its line and column, without the line's text. */
export function parseToml(text: string, fail: (message: string, line?: number) => never): Record<string, unknown> {
  try {
    return parse(text) as Record<string, unknown>;
  } catch (error) {
    if (!(error instanceof TomlError)) throw error;
    // smol-toml appends the offending line to its message; only its first line (the reason) is kept.
    const reason = error.message.split('\n')[0]?.replace(/^Invalid TOML document: /, '') ?? 'syntax error';
    return fail(`invalid TOML at column ${error.column}: ${reason}`, error.line);
  }
}

/** A TOML table (smol-toml gives dates as Date objects, which are not). */
export function isPlainTable(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/**
 * Line numbers of keys, for messages. A light scan of table headers and `key =` lines that
 * covers the layouts people write (`[pins.x]` then `uri = ...`, dotted keys, `[[datasets]]`);
 * when it cannot tell, the message goes without a line.
 */
export class KeyLines {
  private readonly found = new Map<string, number>();
  constructor(text: string) {
    let table: string[] = [];
    text.split(/\r?\n/).forEach((raw, i) => {
      const line = raw.trim();
      const header = /^\[\[?\s*(.+?)\s*\]\]?\s*(#.*)?$/.exec(line);
      if (header?.[1]) {
        table = splitKey(header[1]);
        for (let n = 1; n <= table.length; n++) this.note(table.slice(0, n), i + 1);
        return;
      }
      const assignment = /^((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\-\s])+?)\s*=/.exec(line);
      if (assignment?.[1]) {
        const key = [...table, ...splitKey(assignment[1])];
        for (let n = table.length + 1; n <= key.length; n++) this.note(key.slice(0, n), i + 1);
      }
    });
  }
  private note(path: string[], line: number): void {
    const id = JSON.stringify(path);
    if (!this.found.has(id)) this.found.set(id, line);
  }
  find(table: string[], key: string): number | undefined {
    return this.found.get(JSON.stringify([...table, key]));
  }
}

/** `pins."a.b".uri` -> ['pins', 'a.b', 'uri']. */
function splitKey(dotted: string): string[] {
  const parts: string[] = [];
  const re = /\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*(?:\.|$)/gy;
  for (let m = re.exec(dotted); m && m[0] !== ''; m = re.exec(dotted)) {
    parts.push(m[1] !== undefined ? (JSON.parse(`"${m[1]}"`) as string) : (m[2] ?? m[3] ?? ''));
  }
  return parts;
}
