/**
 * Example actors. `framework.examples.Echo` is the actor of the README's quick start:
 *   actorctl actor framework.examples.Echo --name echo -- --prefix "re: "
 */
import { Type, type Static } from '@sinclair/typebox';
import { remote } from '../core/actor.js';
import type { ActorContext, ActorMetadata } from '../core/context.js';

const EchoParams = Type.Object({
  prefix: Type.String({ default: '', description: 'prepended to string arguments of echo' }),
  start: Type.Integer({ default: 0, description: 'first value of the call counter' }),
  delay_ms: Type.Number({ default: 0, minimum: 0, description: 'wait this long before each echo reply' }),
  upper: Type.Boolean({ default: false, description: 'upper-case string replies of echo' }),
  fail_on: Type.String({ default: '', description: 'echo throws when its argument equals this (to exercise supervision)' }),
});
export type EchoParams = Static<typeof EchoParams>;

class Echo {
  /** Set by the system after construction. */
  context?: ActorContext;
  private calls: number;
  /** Streams being produced now; a cancelled stream must bring this back down. */
  private activeStreams = 0;
  constructor(private readonly params: EchoParams) {
    this.calls = params.start;
  }

  /** Returns its argument (strings get the prefix). */
  async echo(value: unknown): Promise<unknown> {
    if (this.params.fail_on !== '' && value === this.params.fail_on) throw new Error(`echo refused '${value}'`);
    if (this.params.delay_ms > 0) await new Promise((r) => setTimeout(r, this.params.delay_ms));
    if (typeof value !== 'string') return value;
    const text = this.params.prefix + value;
    return this.params.upper ? text.toUpperCase() : text;
  }

  /** Counts the calls of this method; the result is the count after this call. */
  count(): number {
    return ++this.calls;
  }

  /** Streams `n` items {index, of} with `intervalMs` between them. */
  async *stream(n: number, intervalMs = 0): AsyncGenerator<{ index: number; of: number }> {
    this.activeStreams++;
    try {
      for (let index = 0; index < n; index++) {
        if (intervalMs > 0) await new Promise((r) => setTimeout(r, intervalMs));
        yield { index, of: n };
      }
    } finally {
      this.activeStreams--;
    }
  }

  /** The id of the node this instance runs on (shows which instance a resolved call reached). */
  node(): string {
    return this.context?.system.nodeId ?? '';
  }

  metadata(): ActorMetadata {
    return { calls: this.calls, active_streams: this.activeStreams };
  }
}

const RemoteEcho = remote(Echo, { params: EchoParams, restart: 'on-failure', minBackoffMs: 50, maxRestarts: 5 });
export { RemoteEcho as Echo };
