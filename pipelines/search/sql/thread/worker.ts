/**
 * The SQL thread: runs each statement it is sent with the runner (watchdog included) and sends
 * back its columns, rows and outcome or failure (client.ts says why it is a thread of its own).
 * The runner is synchronous, so statements run one after another in the order they came.
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { runReadOnlySql } from '../runner.js';
import { SQL_THREAD_ROLE, failureOf, type SqlJob, type SqlReply, type SqlThreadData } from './protocol.js';

if (!isMainThread && (workerData as Partial<SqlThreadData> | undefined)?.role === SQL_THREAD_ROLE && parentPort) {
  const port = parentPort;
  port.on('message', ({ id, statement }: SqlJob) => {
    let columns: string[] | undefined;
    const rows: unknown[][] = [];
    let reply: SqlReply;
    try {
      const outcome = runReadOnlySql({ ...statement, onColumns: (names) => (columns = names), onRow: (row) => rows.push(row) });
      reply = { id, columns, rows, outcome };
    } catch (error) {
      reply = { id, columns, rows, failure: failureOf(error) };
    }
    port.postMessage(reply);
  });
}
