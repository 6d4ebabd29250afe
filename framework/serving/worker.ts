/**
 * The serving workers' actor side: `ModelWorker` holds a ModelRunner and answers the worker contract
 * (contract.ts) with it; `framework.serving.LocalModelWorker(model_name)` is the simplest worker,
 * one sequence at a time. EngineWorker (engine/) is the same with many sequences decoded together.
 */
import { Type, type Static } from '@sinclair/typebox';
import { remote } from '../core/actor.js';
import type { ActorContext, ActorMetadata } from '../core/context.js';
import type { GenerateChunk, LoadReport } from './contract.js';
import { ModelRunner, type RunnerOptions } from './runner.js';

/** Constructor parameters every worker takes besides its model. */
export const RUNTIME_PARAMS = {
  threads: Type.Integer({ default: 1, minimum: 1, maximum: 64, description: 'CPU threads for decoding' }),
  context_size: Type.Integer({ default: 2048, minimum: 16, maximum: 1 << 20, description: "tokens per sequence, prompt and reply together (at most the model's context length)" }),
  max_queued: Type.Integer({ default: 256, minimum: 0, description: 'requests that may wait for a free sequence; more are refused (the Router tries another worker)' }),
};
export const MODEL_DESCRIPTION = 'a model name (<name>.gguf in $ACTORCTL_MODELS_DIR, else a built-in model such as tiny) or a path to a .gguf file';

/** A worker: loads its model when it starts, frees it when it stops. */
export class ModelWorker {
  /** Set by the system after construction. */
  context?: ActorContext;
  private runner: ModelRunner | undefined;

  constructor(private readonly options: RunnerOptions) {}

  async onStart(): Promise<void> {
    this.runner = await ModelRunner.start(this.options);
  }

  async onStop(): Promise<void> {
    await this.runner?.close();
    this.runner = undefined;
  }

  /** Streams the chunks of one request: text, then an `end` (finish reason, usage) or `error` chunk. */
  generateStream(request: unknown): AsyncIterableIterator<GenerateChunk> {
    return this.running.generate(request);
  }

  /** Active and queued requests, sequences, tokens per second and totals. */
  load(): LoadReport {
    return this.running.load();
  }

  /** The load report (what `inspect actors --endpoint` shows of a worker) and the chat template in use. */
  metadata(): ActorMetadata {
    if (!this.runner) return {};
    return { ...this.runner.load(), chat_template: this.runner.model.chatTemplate };
  }

  private get running(): ModelRunner {
    if (!this.runner) throw new Error('the worker has not loaded its model');
    return this.runner;
  }
}

const LocalModelWorkerParams = Type.Object({
  model_name: Type.String({ minLength: 1, description: `the model to load, ${MODEL_DESCRIPTION}` }),
  ...RUNTIME_PARAMS,
});
type LocalModelWorkerParams = Static<typeof LocalModelWorkerParams>;

/** One sequence: requests take turns, each streamed as it is generated. */
class LocalModelWorker extends ModelWorker {
  constructor(params: LocalModelWorkerParams) {
    super({ model: params.model_name, threads: params.threads, contextSize: params.context_size, sequences: 1, maxQueued: params.max_queued });
  }
}

const RemoteLocalModelWorker = remote(LocalModelWorker, { params: LocalModelWorkerParams });
export { RemoteLocalModelWorker as LocalModelWorker };
