/**
 * The capture gateway's runtime state, under `<state>/gateway/capture/`:
 * - `sessions.json`: the session index (per agent and session: calls, errors, models, first and
 *   last call), rewritten crash-safely at most once a second while calls come (RxJS auditTime) and
 *   when the gateway stops; it is what `/admin/sessions` answers;
 * - `debug.log` (`--gateway-debug`, or `debug = true`): one JSON line per call with its route,
 *   models, status, timing and sizes, and the first bytes of its request and answer;
 * - `markdown/<agent_id>/<session_id>.md` (`--gateway-stream-markdown`): each session as it goes,
 *   the user's text when a call starts and the assistant's when it ends.
 * Nothing here holds a credential: every text is passed through its call's `scrub` (the route's and
 * the client's credentials) whole, before it is cut, and the headers that carry them are never written.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { auditTime, Subject, type Subscription } from 'rxjs';
import { isJsonObject } from '../../../lib/json-object.js';
import type { Logger } from '../../../lib/log.js';
import { writeStateFile } from '../gateway/projection.js';

export interface SessionEntry {
  agent_id: string;
  session_id: string;
  calls: number;
  errors: number;
  models: string[];
  first_call_at: string;
  last_call_at: string;
}

/** Bytes of a request or answer body a debug line keeps. */
const DEBUG_HEAD_BYTES = 2048;
/** Characters of one turn the Markdown file keeps: a session's file must not grow by a whole endless answer. */
export const MARKDOWN_TURN_CHARS = 64 * 1024;

/** Replaces the credentials of a call in a text. */
export type Scrub = (text: string) => string;

/** Whether an entry read back from the index is a session's: a damaged or hand-edited index may hold anything, and one entry of another shape broke every later answer and save. */
function isSessionEntry(value: unknown): value is SessionEntry {
  if (!isJsonObject(value)) return false;
  const { agent_id, session_id, calls, errors, models, first_call_at, last_call_at } = value;
  return typeof agent_id === 'string' && typeof session_id === 'string' && Number.isSafeInteger(calls) && Number.isSafeInteger(errors) && Array.isArray(models) && models.every((m) => typeof m === 'string') && typeof first_call_at === 'string' && typeof last_call_at === 'string';
}

export class CaptureState {
  private readonly sessions = new Map<string, SessionEntry>();
  private readonly changed = new Subject<void>();
  private readonly saving: Subscription;
  readonly dir: string;

  constructor(
    gatewayDir: string,
    private readonly options: { debug: boolean; markdown: boolean; log: Logger },
  ) {
    this.dir = join(gatewayDir, 'capture');
    mkdirSync(this.dir, { recursive: true });
    const index = join(this.dir, 'sessions.json');
    if (existsSync(index)) {
      try {
        const entries = (JSON.parse(readFileSync(index, 'utf8')) as { sessions?: unknown } | null)?.sessions;
        if (!Array.isArray(entries)) throw new Error('it holds no "sessions" list');
        const kept = entries.filter(isSessionEntry);
        for (const entry of kept) this.sessions.set(`${entry.agent_id}/${entry.session_id}`, entry);
        if (kept.length < entries.length) options.log.warn(`${index}: ${entries.length - kept.length} entries that are not sessions are dropped`);
      } catch (error) {
        options.log.warn(`${index}: unreadable session index, starting a new one (${(error as Error).message})`);
      }
    }
    this.saving = this.changed.pipe(auditTime(1000)).subscribe(() => this.save());
  }

  list(): SessionEntry[] {
    return [...this.sessions.values()].sort((a, b) => b.last_call_at.localeCompare(a.last_call_at));
  }

  /** Counts a finished call in its session. */
  called(agentId: string, sessionId: string, model: string | undefined, failed: boolean, at: string): void {
    const key = `${agentId}/${sessionId}`;
    const entry = this.sessions.get(key) ?? { agent_id: agentId, session_id: sessionId, calls: 0, errors: 0, models: [], first_call_at: at, last_call_at: at };
    entry.calls += 1;
    if (failed) entry.errors += 1;
    if (model !== undefined && !entry.models.includes(model)) entry.models.push(model);
    entry.last_call_at = at;
    this.sessions.set(key, entry);
    this.changed.next();
  }

  private save(): void {
    try {
      writeStateFile(join(this.dir, 'sessions.json'), `${JSON.stringify({ sessions: this.list() }, null, 1)}\n`);
    } catch (error) {
      this.options.log.warn(`${this.dir}: could not write the session index: ${(error as Error).message}`);
    }
  }

  debug(scrub: Scrub, line: Record<string, unknown>, request?: Buffer, answer?: Buffer): void {
    if (!this.options.debug) return;
    // Scrubbed whole, then cut: a credential across the cut would be kept in part otherwise.
    const head = (bytes: Buffer | undefined): string | undefined => (bytes === undefined ? undefined : Buffer.from(scrub(bytes.toString('utf8'))).subarray(0, DEBUG_HEAD_BYTES).toString('utf8'));
    const text = JSON.stringify({ ...line, request_head: head(request), answer_head: head(answer) }, (_key, value: unknown) => (typeof value === 'string' ? scrub(value) : value));
    this.append(join(this.dir, 'debug.log'), `${text}\n`);
  }

  /** Appends a turn to its session's file; `body` (scrubbed, then cut to MARKDOWN_TURN_CHARS) after `heading`. */
  markdown(scrub: Scrub, agentId: string, sessionId: string, heading: string, body: string): void {
    if (!this.options.markdown) return;
    const clean = scrub(body);
    const kept = clean.length > MARKDOWN_TURN_CHARS ? `${clean.slice(0, MARKDOWN_TURN_CHARS)}\n\n[... ${clean.length - MARKDOWN_TURN_CHARS} more characters not shown]` : clean;
    this.append(join(this.dir, 'markdown', agentId, `${sessionId}.md`), `${scrub(heading)}\n\n${kept}\n\n`);
  }

  private append(path: string, text: string): void {
    try {
      mkdirSync(dirname(path), { recursive: true });
      appendFileSync(path, text);
    } catch (error) {
      this.options.log.warn(`${path}: ${(error as Error).message}`);
    }
  }

  close(): void {
    this.saving.unsubscribe();
    this.save();
  }
}
