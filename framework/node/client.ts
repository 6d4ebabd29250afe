/**
 * A client of a cluster's nodes that does not join it (inspect, `actorctl call`): h2c, or mutual
 * TLS with the given certificate, naming the cluster on every request; JSON answers are checked
 * against the schemas the nodes answer with (observed.ts).
 */
import type { Static, TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { UnavailableError } from '../../lib/errors.js';
import { errorMessage } from '../core/errors.js';
import { clusterOfNode, loadTls } from '../core/tls.js';
import { Transport } from '../core/transport.js';
import type { InspectOptions } from './inspect-types.js';
import { MemberList, OBSERVER_PATHS, type MemberEntry } from './observed.js';

/** How to reach nodes that do not answer, for hints. */
export const REACH_HINT = 'check the addresses, that the nodes run, and TLS: a node with TLS needs --tls-ca/--tls-cert/--tls-key ([tls] in the configuration), one without refuses it';

/** What went wrong at `addr`, naming it once: most failures name it already (`127.0.0.1:8099: connection refused`). */
export function failureAt(addr: string, error: unknown): string {
  const message = errorMessage(error);
  return message.startsWith(addr) ? message : `${addr}: ${message}`;
}

export class Client {
  readonly transport: Transport;
  readonly timeoutMs: number;

  constructor(options: Pick<InspectOptions, 'timeoutMs' | 'cluster' | 'tls'>) {
    const material = options.tls ? loadTls(options.tls) : undefined;
    this.transport = new Transport({ cluster: clusterOfNode(options.cluster, material), tls: material });
    this.timeoutMs = options.timeoutMs;
  }

  async text(addr: string, path: string): Promise<string> {
    const reply = await this.transport.request(addr, path, { method: 'GET', timeoutMs: this.timeoutMs });
    if (reply.status !== 200) throw new Error(`${addr}${path} answered ${reply.status}`);
    return reply.body.toString('utf8');
  }

  /** A JSON answer, checked against the schema the node answers with. */
  async json<S extends TSchema>(addr: string, path: string, schema: S): Promise<Static<S>> {
    const text = await this.text(addr, path);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new Error(`${addr}${path} did not answer JSON`);
    }
    const problem = Value.Errors(schema, value).First();
    if (problem) throw new Error(`${addr}${path} answered an unexpected shape: ${problem.path || '/'}: ${problem.message}`);
    return value as Static<S>;
  }

  /** Members as seen by the first of `seeds` that answers; no seed answering is Unavailable. */
  async members(seeds: readonly string[]): Promise<{ seed: string; members: MemberEntry[] }> {
    const failures: string[] = [];
    for (const seed of seeds) {
      try {
        return { seed, members: await this.json(seed, OBSERVER_PATHS.members, MemberList) };
      } catch (error) {
        failures.push(failureAt(seed, error));
      }
    }
    throw new UnavailableError(`cannot connect to any seed node (${failures.join('; ')})`, { hint: REACH_HINT });
  }

  close(): void {
    this.transport.close();
  }
}

export async function withClient<T>(options: InspectOptions, fn: (c: Client) => Promise<T>): Promise<T> {
  const client = new Client(options);
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}

