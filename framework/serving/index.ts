/**
 * The serving deployment's actor classes, by class path:
 * - `framework.serving.LocalModelWorker(model_name)`: a worker that generates one request at a time;
 * - `framework.serving.engine.EngineWorker(model, role, max_new_tokens)`: a worker with continuous batching (engine/).
 * Loading this module loads no model library: a worker imports node-llama-cpp when it starts.
 */
export { LocalModelWorker } from './worker.js';
