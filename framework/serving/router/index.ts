/**
 * `framework.serving.Router(http_port, model_name, worker_name)`: an OpenAI-compatible HTTP API
 * (http.ts) in front of the worker actors named `worker_name` anywhere in the cluster (pool.ts).
 *
 *   actorctl actor framework.serving.Router --addr 127.0.0.1:8000 --name router -- --http_port 8080 --model_name tiny --worker_name worker
 *
 * Safe by default, as nodes are: the API listens on 127.0.0.1. Another host needs an API key
 * (`$ACTORCTL_ROUTER_API_KEY`, from the environment, never the command line; clients then send it as
 * `Authorization: Bearer <key>`), or `--http_insecure`, which warns: anyone who reaches the port can
 * use the model.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { remote } from '../../core/actor.js';
import { listenFailure } from '../../../lib/errors.js';
import { capConnections } from '../../../lib/http-limits.js';
import { isLoopbackHost } from '../../../lib/loopback.js';
import { Logger } from '../../../lib/log.js';
import type { ActorContext, ActorMetadata } from '../../core/context.js';
import { apiServer, type ApiOptions } from './http.js';
import { WorkerPool } from './pool.js';

export const API_KEY_ENV = 'ACTORCTL_ROUTER_API_KEY';

const RouterParams = Type.Object({
  http_port: Type.Integer({ default: 8080, minimum: 0, maximum: 65535, description: 'port of the HTTP API (0 picks a free one; /actors shows it)' }),
  model_name: Type.String({ minLength: 1, description: 'the model name clients send' }),
  worker_name: Type.String({ default: 'worker', minLength: 1, description: 'name of the worker actors to send requests to' }),
  http_host: Type.String({ default: '127.0.0.1', minLength: 1, description: `address the HTTP API listens on; other than loopback needs $${API_KEY_ENV} or --http_insecure` }),
  http_insecure: Type.Boolean({ default: false, description: 'allow an HTTP host other than loopback without an API key' }),
});
type RouterParams = Static<typeof RouterParams>;

class Router {
  /** Set by the system after construction. */
  context?: ActorContext;
  private app: FastifyInstance | undefined;
  private pool: WorkerPool | undefined;
  private address = '';
  private readonly counters: ApiOptions['counters'] = { requests: 0, failed: 0, cancelled: 0 };

  constructor(private readonly params: RouterParams) {}

  async onStart(): Promise<void> {
    const { http_host: host, http_port: port } = this.params;
    const apiKey = process.env[API_KEY_ENV] || undefined;
    if (!isLoopbackHost(host) && apiKey === undefined) {
      if (!this.params.http_insecure) {
        throw new Error(`http_host ${host} is reachable from other machines, and without an API key anyone who reaches it can use the model: set $${API_KEY_ENV}, listen on 127.0.0.1, or accept the risk with --http_insecure`);
      }
      process.stderr.write(`warn: the HTTP API listens on ${host}:${port} without an API key (--http_insecure): anyone who reaches it can use the model\n`);
    }
    this.pool = new WorkerPool(this.context!.system, this.params.worker_name);
    // Its lines quote workers' messages and stacks: the Logger keeps each on one line, with no control character.
    const failures = new Logger('error');
    this.app = apiServer({ modelName: this.params.model_name, pool: this.pool, apiKey, loopbackHostsOnly: isLoopbackHost(host) && apiKey === undefined, counters: this.counters, log: (line) => failures.error(line) });
    // One descriptor per client: its requests reach the workers over the node's shared cluster sessions.
    capConnections([{ name: 'Router HTTP API', server: this.app.server, descriptorsPerConnection: 1 }], (message) => process.stderr.write(`warn: ${message}\n`));
    try {
      await this.app.listen({ host, port });
    } catch (error) {
      await this.onStop();
      throw listenFailure(`http_port ${port}: ${host}:${port}`, error);
    }
    const bound = this.app.server.address();
    this.address = typeof bound === 'object' && bound ? `${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}` : String(bound);
  }

  async onStop(): Promise<void> {
    this.pool?.close();
    await this.app?.close();
    this.app = undefined;
  }

  metadata(): ActorMetadata {
    return {
      http: this.address,
      model: this.params.model_name,
      worker_name: this.params.worker_name,
      workers: this.pool?.alive().length ?? 0,
      requests: this.counters.requests,
      failed: this.counters.failed,
      cancelled: this.counters.cancelled,
    };
  }
}

const RemoteRouter = remote(Router, { params: RouterParams });
export { RemoteRouter as Router };
