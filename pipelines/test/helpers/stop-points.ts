/**
 * Holding a real process at one step of its own, for race tests: the kill-point shim
 * (lib/testing/killpoint.c) sends it SIGSTOP right after the chosen call, and the test lets it go
 * on with SIGCONT once it has made another process run in between.
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DIST_ROOT } from '../../../lib/testing/run-tool.js';

export const SHIM = join(DIST_ROOT, 'lib', 'testing', 'killpoint.so');

/**
 * The environment that makes a process stop itself (SIGSTOP) right after the `nth` (default first)
 * of its calls that succeed, of kind `call` and naming `path` when given (every counted call when neither is).
 */
export const stopAfter = ({ call, path, nth = 1 }: { call?: string; path?: string; nth?: number }): NodeJS.ProcessEnv => ({
  LD_PRELOAD: SHIM,
  NODE_DISABLE_COMPILE_CACHE: '1',
  KILLPOINT_CALL: call ?? '',
  KILLPOINT_PATH: path ?? '',
  KILLPOINT_AT: String(nth),
  KILLPOINT_SIGNAL: 'STOP',
});

/** The environment that makes a process log its counted calls to `file` ("<n> <call> <path> [<path>]"). */
export const logCalls = (file: string): NodeJS.ProcessEnv => ({ LD_PRELOAD: SHIM, NODE_DISABLE_COMPILE_CACHE: '1', KILLPOINT_LOG: file });

/** Whether the process is stopped (SIGSTOP): its state in /proc is T. */
export const isStopped = (child: ChildProcess): boolean => / T /.test(readFileSync(`/proc/${child.pid}/stat`, 'utf8').replace(/^.*\)/, ')'));
