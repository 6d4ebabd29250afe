/**
 * A stand-in model worker for the Router's tests that reports itself idle and, given a request,
 * holds its event loop for BLOCK_MS before it answers anything, as a worker tokenizing a huge
 * prompt on its main thread did: even the start of the reply waits. Loaded by node processes as
 * `framework.test.helpers.stuck-worker.StuckWorker`.
 */
import { remote } from '../../core/actor.js';
import type { GenerateChunk, LoadReport } from '../../serving/contract.js';

const BLOCK_MS = 12_000;

class StuckWorkerActor {
  generateStream(): AsyncIterableIterator<GenerateChunk> {
    const until = Date.now() + BLOCK_MS;
    while (Date.now() < until) {
      // busy, as a native call on the main thread is
    }
    return (async function* () {
      yield { type: 'end', finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 } } as GenerateChunk;
    })();
  }

  load(): LoadReport {
    return { model: 'tiny', active: 0, queued: 0, sequences: 1, tokens_per_s: 0, generated_tokens: 0, completed: 0, cancelled: 0 };
  }
}

export const StuckWorker = remote(StuckWorkerActor);
