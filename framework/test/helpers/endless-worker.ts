/**
 * A stand-in model worker for the Router's tests whose replies never end: a text chunk every
 * TICK_MS (as a real worker hands out text) until the caller leaves the stream. A chunk has as
 * many characters as the request's `max_tokens` (CHUNK_CHARS without it: soon far more than socket
 * buffers hold). Its load report counts the replies under way (`active`) and those left by their
 * caller (`cancelled`), as a real worker's does. Loaded by node processes as
 * `framework.test.helpers.endless-worker.EndlessWorker`.
 */
import { remote } from '../../core/actor.js';
import type { GenerateChunk, GenerateRequest, LoadReport } from '../../serving/contract.js';

const CHUNK_CHARS = 16 * 1024;
const TICK_MS = 10;

class EndlessWorkerActor {
  private active = 0;
  private cancelled = 0;

  async *generateStream(request: GenerateRequest): AsyncGenerator<GenerateChunk> {
    const text = 'x'.repeat(request.max_tokens ?? CHUNK_CHARS);
    this.active++;
    try {
      for (;;) {
        yield { type: 'text', text, tokens: 1 };
        await new Promise((resolve) => setTimeout(resolve, TICK_MS));
      }
    } finally {
      this.active--;
      this.cancelled++;
    }
  }

  load(): LoadReport {
    return { model: 'tiny', active: this.active, queued: 0, sequences: 1, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: this.cancelled };
  }
}

export const EndlessWorker = remote(EndlessWorkerActor);
