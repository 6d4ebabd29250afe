/**
 * Writes the records of one tick to an HTTP/2 stream as one DATA write: a call channel's records,
 * or the frames of a streamed reply. A write of its own per record (tens of bytes each) costs a JS
 * object and a native write request several times the record's size, which no byte count of a
 * stream's buffer sees: a reader that stops reading then made a node hold hundreds of KiB per stream.
 */
import type http2 from 'node:http2';
import { drained } from '../../lib/streams.js';

/** Records held behind backpressure are joined into one buffer this many at a time. */
const JOIN_RUN = 256;

/**
 * Bytes a writer may hold, queued or in the stream's buffer, before `room()` makes its producer
 * wait (an HTTP/2 stream buffers 64 KiB before it asks a writer to wait for 'drain').
 */
const ROOM_BYTES = 16 * 1024;

/**
 * The queue is flushed on process.nextTick, after the microtasks that produced the records; on
 * backpressure it holds records until 'drain', and tells `onBacklog` when it starts and stops holding.
 */
export class BatchWriter {
  private queue: Buffer[] = [];
  private size = 0;
  /** Leading entries of the queue that are already records joined together (see `write`). */
  private joined = 0;
  private scheduled = false;
  private waiting = false;
  private ending = false;
  /** Producers waiting in `room()`. */
  private roomWaiters: Array<() => void> = [];

  constructor(
    private readonly stream: http2.Http2Stream,
    private readonly onBacklog: (held: boolean) => void = () => {},
  ) {
    stream.once('close', this.wakeProducers);
  }

  write(record: Buffer): void {
    this.queue.push(record);
    this.size += record.length;
    // Held records are joined in runs: as Buffers of their own they would cost an object each.
    if (this.waiting && this.queue.length - this.joined >= JOIN_RUN) {
      this.queue.push(Buffer.concat(this.queue.splice(this.joined)));
      this.joined++;
    }
    if (this.scheduled || this.waiting) return;
    this.scheduled = true;
    process.nextTick(this.flush);
  }

  /**
   * For a producer not bounded otherwise (a streamed reply on a stream of its own): undefined while
   * it may write more, else resolves when some of what it holds has been written (or the stream
   * closed), to be asked again. A producer whose items come without waiting (microtasks only) would
   * otherwise fill the queue before the flush on the next tick ever runs.
   */
  room(): Promise<void> | undefined {
    if (!this.waiting && this.size + this.stream.writableLength < ROOM_BYTES) return undefined;
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  /** Ends the stream once the records queued so far are written. */
  end(): void {
    this.ending = true;
    if (!this.scheduled && !this.waiting) this.flush();
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.stream.destroyed || this.stream.closed || this.stream.writableEnded) return this.wakeProducers();
    if (this.queue.length) {
      const data = this.queue.length === 1 ? this.queue[0]! : Buffer.concat(this.queue, this.size);
      this.queue = [];
      this.size = 0;
      this.joined = 0;
      if (!this.stream.write(data, this.wakeProducers)) return this.waitForDrain();
    }
    if (this.ending) this.stream.end();
    this.wakeProducers();
  };

  private readonly wakeProducers = (): void => {
    if (!this.roomWaiters.length) return;
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const wake of waiters) wake();
  };

  private waitForDrain(): void {
    this.waiting = true;
    this.onBacklog(true);
    void drained(this.stream).then(() => {
      this.waiting = false;
      this.onBacklog(false);
      this.flush();
    });
  }
}
