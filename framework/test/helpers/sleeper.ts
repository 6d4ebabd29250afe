/**
 * A test actor that shows whether a call's cancellation reached it: `sleep` waits until its time is
 * up or its call's signal (`context.signal`) aborts, and `counts` says how many of each happened.
 * Loaded by node processes as `framework.test.helpers.sleeper.Sleeper`.
 */
import { remote } from '../../core/actor.js';
import type { ActorContext } from '../../core/context.js';

class SleeperActor {
  context?: ActorContext;
  private aborted = 0;
  private finished = 0;

  sleep(ms: number): Promise<string> {
    const signal = this.context!.signal;
    return new Promise((resolve) => {
      const onAbort = (): void => {
        clearTimeout(timer);
        this.aborted++;
        resolve('aborted');
      };
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        this.finished++;
        resolve('slept');
      }, ms);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  counts(): { aborted: number; finished: number } {
    return { aborted: this.aborted, finished: this.finished };
  }
}

export const Sleeper = remote(SleeperActor);
