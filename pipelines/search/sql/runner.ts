/**
 * Runs one SQL statement in a child process (worker.ts) and streams its rows back, killing the
 * child when the timeout passes or the command is interrupted. Used by `query` for user SQL and
 * by `find` for the SQL its planner generates, so both honour `--timeout`.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { InvalidInputError, UnavailableError } from '../../../cli/kit/errors.js';
import type { SqlRequest, WorkerMessage } from './protocol.js';

const WORKER = fileURLToPath(new URL('./worker.js', import.meta.url));

export interface RunOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  /** Called once with the column names, before any rows. */
  onColumns?(columns: string[]): void;
  /** Called with each batch of rows as they arrive. */
  onRows(rows: unknown[][]): void;
}

export interface RunOutcome {
  columns: string[];
  rowCount: number;
  truncated: 'rows' | 'bytes' | null;
}

/** Thrown when the statement ran out of time; rows sent before it have already been delivered. */
export class SqlTimeoutError extends UnavailableError {
  constructor(
    readonly timeoutMs: number,
    readonly rowsDelivered: number,
  ) {
    super(`the statement did not finish within ${timeoutMs / 1000} s and was stopped (${rowsDelivered} rows delivered before that)`, {
      hint: 'narrow the statement, or give more time with --timeout',
    });
  }
}

function refusal(kind: 'invalid' | 'not-read-only' | 'internal', message: string): Error {
  if (kind === 'internal') return new Error(message);
  if (kind === 'invalid') return new InvalidInputError(`SQL error: ${message}`);
  return new InvalidInputError(`refused: ${message}`, {
    hint: 'query runs exactly one read-only statement that returns rows (SELECT, WITH, VALUES, EXPLAIN, read-only PRAGMA); writes, ATTACH, VACUUM INTO, temp tables and PRAGMA assignments are refused',
  });
}

/**
 * A started SQL child, waiting for its one statement. Commands start it before they load their
 * own modules and open the dataset, so the child's Node start-up runs beside that work on the
 * other core instead of after it. Whoever starts one disposes of it.
 */
export class SqlWorker {
  readonly child: ChildProcess;
  private errors = '';

  constructor() {
    this.child = fork(WORKER, [], { serialization: 'advanced', stdio: ['ignore', 'ignore', 'pipe', 'ipc'], execArgv: [] });
    this.child.stderr?.on('data', (chunk: Buffer) => (this.errors += chunk.toString('utf8')));
  }

  /** What the child wrote to stderr so far. */
  get stderr(): string {
    return this.errors;
  }

  /** Kills the child unless it has already ended. */
  dispose(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/** Starts a SQL child, runs `work` with it, and kills it afterwards whatever `work` did with it. */
export async function withSqlWorker<T>(work: (worker: SqlWorker) => Promise<T>): Promise<T> {
  const worker = new SqlWorker();
  try {
    return await work(worker);
  } finally {
    worker.dispose();
  }
}

/** Runs one statement in `worker` (a new one unless given), which is used up and killed afterwards. */
export function runReadOnlySql(request: SqlRequest, options: RunOptions, worker: SqlWorker = new SqlWorker()): Promise<RunOutcome> {
  return new Promise((resolve, reject) => {
    const { child } = worker;
    if (child.exitCode !== null || child.signalCode !== null) {
      reject(new Error(`the SQL worker ended before it was given a statement (${child.signalCode ?? `exit ${child.exitCode}`})${worker.stderr ? `: ${worker.stderr.trim()}` : ''}`));
      return;
    }
    let columns: string[] = [];
    let delivered = 0;
    let settled = false;

    const finish = (error: Error | null, outcome?: RunOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      worker.dispose();
      if (error) reject(error);
      else resolve(outcome as RunOutcome);
    };
    const timer = setTimeout(() => finish(new SqlTimeoutError(options.timeoutMs, delivered)), options.timeoutMs);
    const onAbort = (): void => finish(options.signal?.reason instanceof Error ? options.signal.reason : new UnavailableError('interrupted'));
    options.signal?.addEventListener('abort', onAbort, { once: true });

    child.on('message', (message: WorkerMessage) => {
      if (settled) return;
      try {
        switch (message.type) {
          case 'columns':
            columns = message.columns;
            options.onColumns?.(columns);
            break;
          case 'rows':
            delivered += message.rows.length;
            options.onRows(message.rows);
            break;
          case 'end':
            finish(null, { columns, rowCount: message.rowCount, truncated: message.truncated });
            break;
          case 'error':
            finish(refusal(message.kind, message.message));
            break;
        }
      } catch (error) {
        finish(error as Error);
      }
    });
    child.on('error', (error) => finish(error));
    child.on('close', (code, signal) => finish(new Error(`the SQL worker ended without an answer (${signal ?? `exit ${code}`})${worker.stderr ? `: ${worker.stderr.trim()}` : ''}`)));
    child.send(request);
  });
}
