/**
 * The sending side of a streamed reply, whatever carries it: an HTTP/2 stream of its own (external
 * callers) or a call channel's stream (node to node). The producer's items go out as frames while
 * the reader has room, then END; an item JSON cannot carry ends the stream with an ERROR frame.
 * The carrier says what "room" and "gone" mean: HTTP/2 flow control or the channel's credit, a
 * reset stream or a cancelled call.
 */
import { END_FRAME, errorFrame, jsonFrame } from './codec.js';
import { errorMessage } from './errors.js';

/** Where a streamed reply's frames go. */
export interface FrameSink {
  /** The reader has gone (reset, cancelled, its channel closed): nothing more is sent. */
  readonly gone: boolean;
  /** Resolves when the reader may have room, or has gone; undefined when it has room now. */
  room(): Promise<void> | undefined;
  send(frame: Buffer): void;
  /** The stream's last frame: END, or the ERROR that failed it. */
  last(frame: Buffer): void;
}

/**
 * Sends the producer's items until it is done, the reader goes, or an item fails. The carrier
 * stops the producer when its reader goes (a producer waiting for its next item may wait long).
 */
export async function sendItems(iterator: AsyncIterator<unknown>, sink: FrameSink): Promise<void> {
  try {
    for (;;) {
      for (let wait = sink.room(); wait; wait = sink.room()) await wait;
      if (sink.gone) return;
      const next = await iterator.next();
      if (sink.gone) return;
      if (next.done) return sink.last(END_FRAME);
      sink.send(jsonFrame(next.value));
    }
  } catch (error) {
    if (sink.gone) return;
    // An item JSON cannot carry fails the stream: its producer stops too.
    stopProducer(iterator);
    sink.last(errorFrame(errorMessage(error)));
  }
}

/** Stops a producer whose reader went away; a producer that fails while stopping has nobody left to tell. */
export function stopProducer(iterator: AsyncIterator<unknown>): void {
  iterator.return?.().catch(() => {});
}
