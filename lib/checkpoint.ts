/**
 * Stopping points for long loops. A loop whose awaits all settle at once (synchronous reads behind
 * async interfaces, as the dataset readers have) never lets Node's event loop turn, so a SIGINT
 * handler or a thread's "stop" message would only run after the loop had finished its work. A
 * checkpoint lets the event loop turn every few tens of milliseconds, then throws the abort
 * reason if the signal fired.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';

const TURN_EVERY_MS = 50;

export class Checkpoint {
  private last = performance.now();

  constructor(private readonly signal: AbortSignal) {}

  /** Resolves at once most of the time; rejects with the abort reason once the signal has fired. */
  async check(): Promise<void> {
    if (performance.now() - this.last >= TURN_EVERY_MS) {
      await nextTurn();
      this.last = performance.now();
    }
    if (this.signal.aborted) throw this.signal.reason;
  }
}
