/**
 * A test actor with a streamed reply that shows how far its reader's pace and cancellation reached
 * it: `items(count, bytes)` yields `count` items (forever when negative) of about `bytes` bytes
 * each, and `counts` says how many were produced and how many streams ended which way. Loaded by
 * node processes as `framework.test.helpers.producer.Producer`.
 */
import { remote } from '../../core/actor.js';

class ProducerActor {
  private produced = 0;
  private completed = 0;
  private stopped = 0;

  async *items(count: number, bytes: number): AsyncGenerator<{ i: number; pad: string }> {
    let finished = false;
    try {
      for (let i = 0; count < 0 || i < count; i++) {
        this.produced++;
        yield { i, pad: 'x'.repeat(bytes) };
      }
      finished = true;
    } finally {
      if (finished) this.completed++;
      else this.stopped++;
    }
  }

  counts(): { produced: number; completed: number; stopped: number } {
    return { produced: this.produced, completed: this.completed, stopped: this.stopped };
  }
}

export const Producer = remote(ProducerActor);
