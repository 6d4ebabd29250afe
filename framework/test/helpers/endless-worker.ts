/**
 * A stand-in model worker for the Router's tests whose replies never end: text chunks of CHUNK_CHARS
 * until the caller leaves the stream, far more than socket buffers hold. Its load report counts the
 * replies under way (`active`) and those left by their caller (`cancelled`), as a real worker's does.
 * Loaded by node processes as `framework.test.helpers.endless-worker.EndlessWorker`.
 */
import { remote } from '../../core/actor.js';
import type { GenerateChunk, LoadReport } from '../../serving/contract.js';

const CHUNK_CHARS = 16 * 1024;

class EndlessWorkerActor {
  private active = 0;
  private cancelled = 0;

  async *generateStream(): AsyncGenerator<GenerateChunk> {
    this.active++;
    try {
      for (;;) yield { type: 'text', text: 'x'.repeat(CHUNK_CHARS), tokens: 1 };
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
