/**
 * The dataset writer lock: every command that changes a dataset (import in each mode, drop, and a
 * reader that puts an index or an interrupted replace right) holds it, so that no two of them
 * interleave; readers that only read never take it and never wait for it.
 *
 * Where: a directory `.<name>.lock` beside the dataset, in its parent directory, keyed by the
 * dataset's name. Not inside the dataset: a create has no directory yet, a replace and a drop
 * rename the dataset's directory away, and all of them must exclude each other and an append to the
 * same path. Paths are taken as canonical (recover.ts `canonicalPath`), so one dataset has one lock.
 *
 * How: the lock is held while `.<name>.lock` holds a file `owner-<nonce>`, the holder's identity
 * (lib/process.ts: pid, host, boot id, start time) and purpose as JSON. A writer prepares that file
 * in a candidate directory `.<name>.lock-<hex>` and renames the candidate to `.<name>.lock`; rename
 * replaces an empty directory but never a non-empty one, so exactly one of several writers wins.
 * Release removes the owner file (an empty `.<name>.lock` is a free lock) and then the directory.
 *
 * A holder that is gone (killed: its pid is not running, or runs another process, or belongs to an
 * earlier boot) stops blocking at once: a waiter removes its owner file, by its nonce, and tries
 * again. Two waiters that found the same dead holder both remove `owner-<that nonce>`; the second
 * removal finds nothing, and never a newer holder's file, whose nonce differs, so a takeover
 * cannot free a live lock. A holder on another machine (a shared filesystem) cannot be asked and is
 * waited for. Node has no flock(2), and this needs none: rename, unlink and rmdir are atomic.
 *
 * The lock is not reentrant: a process that holds it and asks again waits for itself.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isRandomSuffix, randomSuffix } from '../../lib/durable.js';
import { ConflictError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import { currentProcess, processState, type ProcessIdentity } from '../../lib/process.js';
import { WRITE_DEFAULTS } from './defaults.js';

export interface LockHolder extends ProcessIdentity {
  /** What the holder is doing, for the messages of those waiting (`import --mode append`). */
  purpose: string;
  /** The lock directory, so that a candidate left by a killed waiter is known for ours. */
  lock: string;
}

export interface WriterLock {
  readonly holder: LockHolder;
  /** Gives the lock up; the second and later calls do nothing. */
  release(): void;
}

export interface LockOptions {
  purpose: string;
  /** How long to wait for a live holder (0: not at all); then ConflictError (exit 4) naming it. */
  timeoutMs: number;
  /** Stops the wait (throwing the signal's reason). */
  signal?: AbortSignal;
  /** Told once, when the lock is held by someone else and waiting begins. */
  onWait?: (message: string) => void;
  /** What the lock guards, as its messages name it (default `dataset`; sync's mirror: `mirror`). */
  guards?: string;
}

/** How a writer command waits for the lock, as its callers say it. */
export interface LockWait {
  /** How long to wait for another writer of the dataset (default WRITE_DEFAULTS.lockTimeoutMs). */
  lockTimeoutMs?: number;
  /** Stops the wait. */
  signal?: AbortSignal;
  /** Told that the writer waits (warn) and, by the writer, what it reclaimed of killed ones (info). */
  log?: Logger;
}

/** The lock options of a writer command doing `purpose`. */
export function lockOptions(purpose: string, wait: LockWait): LockOptions {
  return {
    purpose,
    timeoutMs: wait.lockTimeoutMs ?? WRITE_DEFAULTS.lockTimeoutMs,
    ...(wait.signal ? { signal: wait.signal } : {}),
    onWait: (message) => wait.log?.warn(message),
  };
}

const OWNER_PREFIX = 'owner-';
/** Polls while waiting start at this and double up to the next, so a short hold costs little and a long one little CPU. */
const FIRST_POLL_MS = 5;
const MAX_POLL_MS = 100;

/** The lock directory of the dataset at (canonical) `path`. */
export function lockPathOf(path: string): string {
  return join(dirname(path), `.${basename(path)}.lock`);
}

/** Candidates are `.<name>.lock-<random>`: never the name of another dataset's build, aside or lock (recover.ts). */
function isCandidate(path: string, name: string): boolean {
  const prefix = `.${basename(path)}.lock-`;
  return name.startsWith(prefix) && isRandomSuffix(name.slice(prefix.length));
}

export function describeHolder(holder: LockHolder): string {
  const where = processState(holder) === 'unknown' ? ` on ${holder.hostname}` : '';
  return `pid ${holder.pid}${where} (${holder.purpose})`;
}

/** `holder` is undefined for an owner file that does not parse: one written before a power cut reached the disk. */
type Owner = { file: string; holder: LockHolder | undefined } | 'free' | 'unknown';

/** Who holds the lock at `lockPath` now: an owner, `free` (nothing there, or an empty directory), or `unknown` (something else). */
function ownerOf(lockPath: string): Owner {
  let entries: string[];
  try {
    entries = readdirSync(lockPath);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return 'free';
    if (code === 'ENOTDIR') return 'unknown';
    throw error;
  }
  const [file, ...more] = entries;
  if (file === undefined) return 'free';
  if (more.length > 0 || !file.startsWith(OWNER_PREFIX)) return 'unknown';
  let text;
  try {
    text = readFileSync(join(lockPath, file), 'utf8');
  } catch (error) {
    // Released between the listing and the read.
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'free';
    throw error;
  }
  try {
    return { file, holder: JSON.parse(text) as LockHolder };
  } catch {
    // Written whole before the rename that made it the lock's, so not half-written by a live holder.
    return { file, holder: undefined };
  }
}

/** Whether an owner is certainly gone. */
const gone = (holder: LockHolder | undefined): boolean => holder === undefined || processState(holder) === 'gone';

/** A candidate directory holding this process's owner file, ready to be renamed into place. */
function makeCandidate(path: string, holder: LockHolder): { dir: string; file: string } {
  const dir = join(dirname(path), `.${basename(path)}.lock-${randomSuffix()}`);
  const file = `${OWNER_PREFIX}${randomSuffix()}`;
  mkdirSync(dir);
  try {
    writeFileSync(join(dir, file), `${JSON.stringify(holder)}\n`, { flag: 'wx' });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return { dir, file };
}

/**
 * One try: `acquired`; `again` when the lock changed under us or a dead holder was removed (try
 * again at once); else the live (or unidentifiable) holder.
 */
function attempt(candidate: string, lockPath: string): 'acquired' | 'again' | { holder: LockHolder | undefined } {
  try {
    renameSync(candidate, lockPath);
    return 'acquired';
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST' && code !== 'ENOTDIR') throw error;
  }
  const owner = ownerOf(lockPath);
  if (owner === 'free') return 'again';
  if (owner === 'unknown') return { holder: undefined };
  if (!gone(owner.holder)) return { holder: owner.holder };
  // Only this dead holder's file: a live one that took its place has another nonce (see above).
  rmSync(join(lockPath, owner.file), { force: true });
  return 'again';
}

/** Removes the candidates of waiters that were killed; runs while holding the lock. */
function sweepCandidates(path: string, lockPath: string): void {
  for (const name of readdirSync(dirname(path))) {
    if (!isCandidate(path, name)) continue;
    const dir = join(dirname(path), name);
    const owner = ownerOf(dir);
    // A waiter whose candidate is removed under it makes another (candidateFor), so an empty or
    // half-written one (its waiter died, or is writing it just now) can go; a whole one is left to a live waiter.
    if (owner === 'unknown') continue;
    if (owner === 'free' || owner.holder === undefined || (owner.holder.lock === lockPath && gone(owner.holder))) rmSync(dir, { recursive: true, force: true });
  }
}

/** The lock just renamed into place; candidates that killed waiters left are removed first. */
function held(path: string, lockPath: string, file: string, holder: LockHolder): WriterLock {
  let released = false;
  const lock: WriterLock = {
    holder,
    release() {
      if (released) return;
      released = true;
      rmSync(join(lockPath, file), { force: true });
      try {
        rmdirSync(lockPath);
      } catch {
        // Taken by the next writer already (not empty), or gone: either way no longer ours.
      }
    },
  };
  try {
    sweepCandidates(path, lockPath);
  } catch (error) {
    lock.release();
    throw error;
  }
  return lock;
}

/** Candidate creation fails with ENOENT when a holder's sweep removed it half-made; make another. */
function candidateFor(path: string, holder: LockHolder): { dir: string; file: string } {
  for (let tries = 1; ; tries++) {
    try {
      return makeCandidate(path, holder);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || tries >= 3) throw error;
    }
  }
}

function identity(path: string, purpose: string): LockHolder {
  return { ...currentProcess(), purpose, lock: lockPathOf(path) };
}

/** Takes the writer lock of the dataset at `path` (its parent directory must exist), waiting for a live holder up to `timeoutMs`. */
export async function acquireWriterLock(path: string, options: LockOptions): Promise<WriterLock> {
  const lockPath = lockPathOf(path);
  const holder = identity(path, options.purpose);
  let candidate = candidateFor(path, holder);
  const deadline = Date.now() + options.timeoutMs;
  let poll = FIRST_POLL_MS;
  let told = false;
  try {
    for (;;) {
      options.signal?.throwIfAborted();
      let outcome;
      try {
        outcome = attempt(candidate.dir, lockPath);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
        candidate = candidateFor(path, holder);
        continue;
      }
      if (outcome === 'acquired') return held(path, lockPath, candidate.file, holder);
      if (outcome === 'again') continue;
      const who = outcome.holder ? describeHolder(outcome.holder) : `something that is not a trajstore lock (${lockPath})`;
      const left = deadline - Date.now();
      const guards = options.guards ?? 'dataset';
      if (left <= 0) {
        throw new ConflictError(`${path}: another writer holds the ${guards}'s lock: ${who}`, {
          hint: outcome.holder
            ? `try again when it has finished, or wait longer with --lock-timeout (it waited ${Math.round(options.timeoutMs / 1000)} s)`
            : `remove ${lockPath} if no trajstore command is writing this ${guards}`,
        });
      }
      if (!told) options.onWait?.(`${path}: waiting for ${who} to finish writing the ${guards}`);
      told = true;
      await sleep(Math.min(poll, left), undefined, options.signal ? { signal: options.signal } : {}).catch((error: unknown) => {
        throw options.signal?.aborted ? options.signal.reason : error;
      });
      poll = Math.min(poll * 2, MAX_POLL_MS);
    }
  } catch (error) {
    rmSync(candidate.dir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * The writer lock if it can be had at once (a dead holder is taken over), else undefined: held by
 * someone alive, or not ours to take (a read-only parent directory). For readers, which never wait.
 */
export function tryWriterLock(path: string, purpose: string): WriterLock | undefined {
  const lockPath = lockPathOf(path);
  const holder = identity(path, purpose);
  let candidate;
  try {
    candidate = candidateFor(path, holder);
  } catch {
    return undefined;
  }
  try {
    // A bounded number of tries: each `again` is a change that another process made meanwhile.
    for (let tries = 0; tries < 5; tries++) {
      const outcome = attempt(candidate.dir, lockPath);
      if (outcome === 'acquired') return held(path, lockPath, candidate.file, holder);
      if (outcome !== 'again') break;
    }
  } catch {
    // Not ours to take (permissions, a vanished parent): the reader goes on without it.
  }
  rmSync(candidate.dir, { recursive: true, force: true });
  return undefined;
}

/** Runs `fn` holding the writer lock of the dataset at `path`; the lock is released however `fn` ends. */
export async function withWriterLock<T>(path: string, options: LockOptions, fn: (lock: WriterLock) => Promise<T>): Promise<T> {
  const lock = await acquireWriterLock(path, options);
  try {
    return await fn(lock);
  } finally {
    lock.release();
  }
}
