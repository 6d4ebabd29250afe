/**
 * A test actor whose replies JSON cannot carry, or whose failures are hard to print: each must come
 * back to its caller as an error reply and leave the node serving. Loaded by node processes as
 * `framework.test.helpers.awkward.Awkward`.
 */
import { remote } from '../../core/actor.js';

class AwkwardActor {
  /** An object that refers to itself. */
  cyclic(): unknown {
    const value: Record<string, unknown> = {};
    value.self = value;
    return value;
  }

  /** A BigInt, which JSON has no form for. */
  big(): unknown {
    return { n: 10n };
  }

  /** An object whose getter throws when it is serialised. */
  getter(): unknown {
    return {
      get boom(): never {
        throw new Error('getter refused');
      },
    };
  }

  /** An array nested `depth` levels deep. */
  deep(depth: number): unknown {
    let value: unknown = [];
    for (let i = 0; i < depth; i++) value = [value];
    return value;
  }

  /** Throws something that is not an Error and cannot be turned into text. */
  symbol(): never {
    throw Symbol('odd');
  }

  /** Streams one item, then fails with a message of `length` characters. */
  async *failLoud(length: number): AsyncGenerator<number> {
    yield 1;
    throw new Error('x'.repeat(length));
  }

  /** Streams a cyclic item. */
  async *streamCyclic(): AsyncGenerator<unknown> {
    yield this.cyclic();
  }
}

export const Awkward = remote(AwkwardActor);
