/**
 * What a page of runs is chosen by, for one snapshot, in memory: each run's sort keys, filter
 * columns and parent session, read once (one pass over the runs relation, the first time a list or
 * a run is asked of that snapshot) and kept while the snapshot is served. The index has no index on
 * the sort columns, so without this every page would sort all runs; with it, a page is a binary
 * search to the cursor and a walk in sort order until the page is full, and a run's subagents are a
 * lookup. About 150 bytes a run (7.5 MB for 50,000 runs).
 */
import { InvalidInputError } from '../../lib/errors.js';
import type { OpenDataset } from '../dataset/open.js';

export const RUN_SORTS = ['started_at', 'cost_usd', 'step_count', 'tool_call_count'] as const;
export type RunSort = (typeof RUN_SORTS)[number];

export interface RunFilters {
  agent?: string;
  model?: string;
  /** started_at >= since (RFC 3339 text, compared as text like the stored timestamps). */
  since?: string;
  /** started_at < until. */
  until?: string;
  /** source_path equal to this, or under it (a directory prefix). */
  source?: string;
  minCost?: number;
  maxCost?: number;
}

export interface PageRequest extends RunFilters {
  sort: RunSort;
  order: 'asc' | 'desc';
  limit: number;
  cursor?: string;
}

interface Entry {
  rowid: number;
  /** Sort keys with NULL made comparable: '' for no start, -1 for no cost. */
  started_at: string;
  cost_usd: number;
  step_count: number;
  tool_call_count: number;
  agent_name: string | null;
  agent_id: string;
  model: string | null;
  source_path: string;
  parent_session_id: string | null;
}

type Key = string | number;

const compare = (a: Key, b: Key): number => (a < b ? -1 : a > b ? 1 : 0);

function matches(e: Entry, f: RunFilters, sourcePrefix: string | undefined): boolean {
  if (f.agent !== undefined && e.agent_name !== f.agent && e.agent_id !== f.agent) return false;
  if (f.model !== undefined && e.model !== f.model) return false;
  if (f.since !== undefined && !(e.started_at !== '' && e.started_at >= f.since)) return false;
  if (f.until !== undefined && !(e.started_at !== '' && e.started_at < f.until)) return false;
  if (sourcePrefix !== undefined && e.source_path !== sourcePrefix && !e.source_path.startsWith(`${sourcePrefix}/`)) return false;
  if (f.minCost !== undefined && !(e.cost_usd >= 0 && e.cost_usd >= f.minCost)) return false;
  if (f.maxCost !== undefined && !(e.cost_usd >= 0 && e.cost_usd <= f.maxCost)) return false;
  return true;
}

const encodeCursor = (key: Key, rowid: number): string => Buffer.from(JSON.stringify([key, rowid])).toString('base64url');

function decodeCursor(cursor: string): [Key, number] {
  try {
    const value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(value) && value.length === 2 && (typeof value[0] === 'string' || typeof value[0] === 'number') && Number.isInteger(value[1])) return value as [Key, number];
  } catch {
    // Reported below.
  }
  throw invalidCursor();
}

const invalidCursor = (): InvalidInputError => new InvalidInputError('invalid cursor: pass back the next_cursor of the previous page unchanged, with the same sort');

class RunCatalog {
  private readonly orders = new Map<RunSort, Int32Array>();
  private children: Map<string, number[]> | undefined;

  private constructor(private readonly entries: Entry[]) {}

  static load(dataset: OpenDataset): RunCatalog {
    const rows = dataset.db
      .prepare(
        `SELECT rowid, ifnull(started_at, '') AS started_at, ifnull(cost_usd, -1) AS cost_usd, step_count, tool_call_count,
           agent_name, agent_id, agent_model_name AS model, source_path, parent_session_id
         FROM runs_stored`,
      )
      .all() as Entry[];
    return new RunCatalog(rows.map((r) => ({ ...r, step_count: Number(r.step_count), tool_call_count: Number(r.tool_call_count), cost_usd: Number(r.cost_usd) })));
  }

  /** Positions of the entries in ascending (key, rowid) order, sorted on first use. */
  private order(sort: RunSort): Int32Array {
    let order = this.orders.get(sort);
    if (!order) {
      const e = this.entries;
      order = Int32Array.from(e.keys()).sort((a, b) => compare((e[a] as Entry)[sort], (e[b] as Entry)[sort]) || (e[a] as Entry).rowid - (e[b] as Entry).rowid);
      this.orders.set(sort, order);
    }
    return order;
  }

  /**
   * The rowids of one page in order, the cursor of the next page (null on the last), and the cursor
   * that goes on after any run of the page (for a page its reader cuts short).
   */
  page(request: PageRequest): { rowids: number[]; next_cursor: string | null; cursorAfter(rowid: number): string } {
    const order = this.order(request.sort);
    const entry = (i: number): Entry => this.entries[order[i] as number] as Entry;
    const desc = request.order === 'desc';
    // Where the walk starts: the first entry past the cursor, in the walk's direction.
    let at = desc ? order.length - 1 : 0;
    if (request.cursor !== undefined) {
      const [key, rowid] = decodeCursor(request.cursor);
      // A cursor of another sort (a date where a cost belongs) would compare as no real key does.
      if (typeof key !== (request.sort === 'started_at' ? 'string' : 'number')) throw invalidCursor();
      let lo = 0;
      let hi = order.length;
      // The first position whose (key, rowid) is greater than the cursor's.
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        const e = entry(mid);
        if ((compare(e[request.sort], key) || e.rowid - rowid) <= 0) lo = mid + 1;
        else hi = mid;
      }
      at = desc ? lo - 1 : lo;
      if (desc && at >= 0 && entry(at).rowid === rowid && compare(entry(at)[request.sort], key) === 0) at--;
    }
    const prefix = request.source === undefined ? undefined : withoutTrailingSlashes(request.source);
    const picked: Entry[] = [];
    for (let i = at; i >= 0 && i < order.length && picked.length <= request.limit; i += desc ? -1 : 1) {
      const e = entry(i);
      if (matches(e, request, prefix)) picked.push(e);
    }
    const more = picked.length > request.limit;
    const page = picked.slice(0, request.limit);
    const last = page[page.length - 1];
    const cursorOf = (e: Entry): string => encodeCursor(e[request.sort], e.rowid);
    return {
      rowids: page.map((e) => e.rowid),
      next_cursor: more && last ? cursorOf(last) : null,
      cursorAfter: (rowid) => cursorOf(page.find((e) => e.rowid === rowid) as Entry),
    };
  }

  /** The rowids of the runs whose parent session is `sessionId` (its subagent runs). */
  childrenOf(sessionId: string): number[] {
    if (!this.children) {
      this.children = new Map();
      for (const e of this.entries) {
        if (e.parent_session_id === null) continue;
        const list = this.children.get(e.parent_session_id) ?? [];
        list.push(e.rowid);
        this.children.set(e.parent_session_id, list);
      }
    }
    return this.children.get(sessionId) ?? [];
  }
}

const catalogs = new WeakMap<OpenDataset, RunCatalog>();

/** The catalog of an open snapshot, loaded on first use and dropped with the snapshot. */
export function runCatalog(dataset: OpenDataset): RunCatalog {
  let catalog = catalogs.get(dataset);
  if (!catalog) {
    catalog = RunCatalog.load(dataset);
    catalogs.set(dataset, catalog);
  }
  return catalog;
}

/** `source` without its trailing slashes (a loop: the regex /\/+$/ takes quadratic time on a run of slashes that ends before the end). */
function withoutTrailingSlashes(source: string): string {
  let end = source.length;
  while (end > 0 && source[end - 1] === '/') end--;
  return source.slice(0, end);
}
