/**
 * A stand-in model worker for the Router's tests: it answers a request with one text chunk and its
 * end, and closes the stream CLOSE_AFTER_MS later, so that the close travels apart from the end (as
 * a busy real worker's may). Loaded by node processes as
 * `framework.test.helpers.slow-closing-worker.SlowClosingWorker`.
 */
import { remote } from '../../core/actor.js';
import type { GenerateChunk, LoadReport } from '../../serving/contract.js';

const CLOSE_AFTER_MS = 50;

class SlowClosingWorkerActor {
  async *generateStream(): AsyncGenerator<GenerateChunk> {
    yield { type: 'text', text: 'hi', tokens: 1 };
    yield { type: 'end', finish_reason: 'length', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
    await new Promise((resolve) => setTimeout(resolve, CLOSE_AFTER_MS));
  }

  load(): LoadReport {
    return { model: 'tiny', active: 0, queued: 0, sequences: 1, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: 0 };
  }
}

export const SlowClosingWorker = remote(SlowClosingWorkerActor);
