/**
 * How many bytes of call bodies a node holds at once: counted per connection and for the whole
 * node, from the first byte received until the call is answered (or given up), so that neither
 * one client nor many together can fill the node's memory with bodies they never finish or with
 * calls queued behind a slow actor.
 */

/** The node-wide count; waiters (paused call channels) are woken when bytes are given back. */
export class NodeBudget {
  used = 0;
  private readonly waiters = new Set<() => void>();
  private observer: (() => void) | undefined;

  constructor(readonly limit: number) {}

  /** Calls `observer` after every change of `used` (one observer: reclaim.ts). */
  observe(observer: (() => void) | undefined): void {
    this.observer = observer;
  }

  /** Bytes were taken (`ConnectionBudget.take`). */
  took(): void {
    this.observer?.();
  }

  /** Calls `wake` once after bytes are given back anywhere on the node. */
  waitForRoom(wake: () => void): void {
    this.waiters.add(wake);
  }

  released(): void {
    this.observer?.();
    if (!this.waiters.size) return;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const wake of waiters) wake();
  }
}

/** The count of one connection, drawing on the node's. */
export class ConnectionBudget {
  used = 0;
  /** Bytes ever taken: how much the connection has moved (connections.ts tells quiet clients by it). */
  taken = 0;

  constructor(
    readonly limit: number,
    readonly node: NodeBudget,
  ) {}

  /** Takes `n` bytes when both this connection and the node have room for them. */
  tryTake(n: number): boolean {
    if (this.used + n > this.limit || this.node.used + n > this.node.limit) return false;
    this.take(n);
    return true;
  }

  /** Takes `n` bytes whether or not they fit (the caller then waits with `full` until they do). */
  take(n: number): void {
    this.used += n;
    this.taken += n;
    this.node.used += n;
    this.node.took();
  }

  get full(): boolean {
    return this.used > this.limit || this.node.used > this.node.limit;
  }

  /**
   * Calls `resume` once neither this connection nor the node is full any more, unless `gone()` says
   * by then that the reader went away: how a paused stream waits for bytes given back anywhere.
   */
  whenRoom(resume: () => void, gone: () => boolean): void {
    const check = (): void => {
      if (gone()) return;
      if (this.full) this.node.waitForRoom(check);
      else resume();
    };
    this.node.waitForRoom(check);
  }

  give(n: number): void {
    this.used -= n;
    this.node.used -= n;
    this.node.released();
  }
}
