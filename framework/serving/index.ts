/**
 * The serving deployment's actor classes, by class path:
 * - `framework.serving.Router(http_port, model_name, worker_name)`: the OpenAI-compatible HTTP API in front of the workers (router/);
 * - `framework.serving.LocalModelWorker(model_name)`: a worker that generates one request at a time;
 * - `framework.serving.engine.EngineWorker(model, role, max_new_tokens)`: a worker with continuous batching (engine/).
 * Loading this module loads no model library: a worker imports node-llama-cpp when it starts.
 */
export { Router } from './router/index.js';
export { LocalModelWorker } from './worker.js';
