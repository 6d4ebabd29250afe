/**
 * Values of the content store read from an index's `contents` table. Values recur across a
 * dataset (a tool's output is the observation, the call's result and the source's record of the
 * call; a Codex session repeats its base instructions in every rollout), so the most recently used
 * ones are kept, up to a budget of characters.
 */
import { UnavailableError } from '../../lib/errors.js';
import type { ContentLookup } from './contents.js';
import type { SqliteDatabase } from './sqlite.js';

/** Characters of values kept at hand by a lookup, and read ahead by a reading-order one. */
const RECENT_CHARS = 4 * 1024 * 1024;
const AHEAD_CHARS = 4 * 1024 * 1024;
const AHEAD_ROWS = 64;
/** A reading-order lookup stops reading ahead once fewer than half its misses were found there. */
const AHEAD_TRIAL = 256;

/** Looks values up one by one, by hash: for readers that want a few documents. */
export function indexLookup(db: SqliteDatabase, where: string): ContentLookup {
  const byHash = hashSelect(db, where);
  const recent = new Recent();
  return (hash) => recent.get(hash) ?? recent.keep(hash, byHash(hash));
}

/**
 * A lookup for a reader that goes through documents in the order they were written (export): the
 * store's rows are in the order values were first referred to, so reading them in sequence, a
 * page at a time, finds most values for a fraction of the cost of a search by hash each. Values
 * read ahead and not asked for yet wait, up to a budget; anything else is searched by hash, and
 * where the orders part (documents dropped, appends that refer back) reading ahead stops paying
 * and stops.
 */
export function readingOrderLookup(db: SqliteDatabase, where: string): ContentLookup {
  const byHash = hashSelect(db, where);
  const page = db.prepare('SELECT rowid, hash, value FROM contents WHERE rowid > ? ORDER BY rowid LIMIT ?').raw();
  const recent = new Recent();
  const ahead = new Map<string, string>();
  let aheadChars = 0;
  let lastRowid = 0;
  let exhausted = false;
  let misses = 0;
  let foundAhead = 0;

  const readPage = (): void => {
    const rows = page.all(lastRowid, AHEAD_ROWS) as [number, string, string][];
    if (rows.length < AHEAD_ROWS) exhausted = true;
    for (const [rowid, hash, value] of rows) {
      lastRowid = rowid;
      ahead.set(hash, value);
      aheadChars += value.length;
    }
    for (const [hash, value] of ahead) {
      if (aheadChars <= AHEAD_CHARS) break;
      ahead.delete(hash);
      aheadChars -= value.length;
    }
  };
  const takeAhead = (hash: string): string | undefined => {
    const value = ahead.get(hash);
    if (value !== undefined) {
      ahead.delete(hash);
      aheadChars -= value.length;
    }
    return value;
  };
  const fromAhead = (hash: string): string | undefined => {
    misses++;
    let value = takeAhead(hash);
    // Read on only while the window has room: a value far ahead means the orders have parted.
    while (value === undefined && !exhausted && aheadChars < AHEAD_CHARS) {
      readPage();
      value = takeAhead(hash);
    }
    if (value !== undefined) foundAhead++;
    else if (misses >= AHEAD_TRIAL && foundAhead * 2 < misses) exhausted = true;
    return value;
  };

  return (hash) => recent.get(hash) ?? recent.keep(hash, fromAhead(hash) ?? byHash(hash));
}

function hashSelect(db: SqliteDatabase, where: string): (hash: string) => string {
  const select = db.prepare('SELECT value FROM contents WHERE hash = ?').pluck();
  return (hash) => {
    const value = select.get(hash) as string | undefined;
    if (value === undefined) throw new UnavailableError(`${where}: the content store has no value ${hash}; the dataset is damaged`);
    return value;
  };
}

/** The most recently used values, up to RECENT_CHARS characters; a longer value is not kept. */
class Recent {
  private readonly values = new Map<string, string>();
  private chars = 0;

  get(hash: string): string | undefined {
    const value = this.values.get(hash);
    if (value !== undefined) {
      this.values.delete(hash);
      this.values.set(hash, value);
    }
    return value;
  }

  keep(hash: string, value: string): string {
    if (value.length > RECENT_CHARS) return value;
    for (const [oldest, old] of this.values) {
      if (this.chars + value.length <= RECENT_CHARS) break;
      this.values.delete(oldest);
      this.chars -= old.length;
    }
    this.values.set(hash, value);
    this.chars += value.length;
    return value;
  }
}
