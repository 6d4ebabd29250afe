/**
 * `framework.serving.engine.EngineWorker(model, role, max_new_tokens)`: continuous batching. Many
 * requests share one loaded model as separate sequences of one context; a request that arrives
 * while others generate joins them between two decoding steps (runner.ts), and `max_new_tokens`
 * caps the reply of every request. Its load report gives active and queued sequences and tokens/s.
 *
 *   actorctl actor framework.serving.engine.EngineWorker --name worker --seeds 127.0.0.1:8000 -- --model tiny --role aggregated --max_new_tokens 64
 */
import { Type, type Static } from '@sinclair/typebox';
import { remote } from '../../core/actor.js';
import { MODEL_DESCRIPTION, ModelWorker, RUNTIME_PARAMS } from '../worker.js';

/** Roles a worker may take in a disaggregated deployment; this build runs prefill and decode together. */
const SUPPORTED_ROLES = ['aggregated'];

const EngineWorkerParams = Type.Object({
  model: Type.String({ minLength: 1, description: `the model to load, ${MODEL_DESCRIPTION}` }),
  role: Type.String({ default: 'aggregated', description: 'aggregated: prefill and decode in this worker (the only role so far)' }),
  max_new_tokens: Type.Integer({ default: 256, minimum: 1, description: 'cap on the generated tokens of every request' }),
  sequences: Type.Integer({ default: 8, minimum: 1, maximum: 256, description: 'requests decoded together (sequences of the one context)' }),
  ...RUNTIME_PARAMS,
});
type EngineWorkerParams = Static<typeof EngineWorkerParams>;

class EngineWorker extends ModelWorker {
  constructor(params: EngineWorkerParams) {
    if (!SUPPORTED_ROLES.includes(params.role)) {
      throw new Error(`role '${params.role}' is not supported yet: EngineWorker runs the role 'aggregated' only (prefill and decode in one worker)`);
    }
    super({
      model: params.model,
      threads: params.threads,
      contextSize: params.context_size,
      sequences: params.sequences,
      maxQueued: params.max_queued,
      maxNewTokens: params.max_new_tokens,
    });
  }
}

const RemoteEngineWorker = remote(EngineWorker, { params: EngineWorkerParams });
export { RemoteEngineWorker as EngineWorker };
