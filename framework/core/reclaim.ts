/**
 * Gives memory back to the system after a surge of call bodies. Node frees the buffers of bodies a
 * node held (or dropped) only when V8 next collects their handles, and glibc's malloc then keeps
 * the freed pages in its heap: after 200 unfinished 15 MiB bodies a node stayed at twice its
 * starting size for good. So once the bytes held have gone above `surgeBytes` and come back to
 * none, and stayed so for `quietMs`, the node runs a full collection and `malloc_trim(0)`
 * (reclaim.c, built beside this file). Both are skipped quietly where unavailable (another libc,
 * a build without the native module).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { optionalNative } from '../../lib/native.js';
import type { NodeBudget } from './budget.js';

export interface ReclaimOptions {
  /** Held bytes above which a surge is remembered. */
  surgeBytes: number;
  /** How long the node must hold nothing before reclaiming. */
  quietMs: number;
}

export const DEFAULT_RECLAIM: ReclaimOptions = { surgeBytes: 8 * 1024 * 1024, quietMs: 1000 };

interface Native {
  trim(): boolean;
  mmapThreshold(bytes: number): boolean;
}

let collector: (() => void) | undefined | null;

/** malloc_trim and the mmap threshold (reclaim.c); undefined where unavailable. */
const nativeTools = (): Native | undefined => optionalNative<Native>('framework', 'core', 'reclaim.node');

/** The full collector, made once when first needed (a new context costs a few ms at start-up). */
function gcFunction(): (() => void) | undefined {
  if (collector === undefined) {
    try {
      // `--expose-gc` set at run time reaches contexts created afterwards.
      setFlagsFromString('--expose-gc');
      collector = runInNewContext('gc') as () => void;
    } catch {
      collector = null;
    }
  }
  return collector ?? undefined;
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

/**
 * Collects garbage and gives free malloc pages back, each where available. V8 frees the memory of
 * collected buffers on a background thread after the collection, and a first collection may leave
 * handles the second finds: so two, with pauses, before the trim.
 */
async function reclaimMemory(): Promise<void> {
  const gc = gcFunction();
  if (gc) {
    gc();
    await pause(100);
    gc();
    await pause(100);
  }
  nativeTools()?.trim();
}

/**
 * Allocations of 32 KiB or more are mapped on their own and unmapped when freed (glibc's default
 * threshold starts at 128 KiB and rises with use): the socket reads a flood of request bodies
 * leaves behind then go back to the system instead of staying in malloc's heap between live
 * objects. With it, a node flooded to 200+ MB comes back to within a few MB of where it started;
 * without, it stayed 50-100 MB above. Returns whether it could be set.
 */
export function tuneAllocator(): boolean {
  return nativeTools()?.mmapThreshold(32 * 1024) ?? false;
}

/**
 * Watches `budget`; after each surge has passed, reclaims, and twice more at doubling intervals
 * (what a connection being torn down still held is only garbage some time later). Returns a
 * function that stops watching.
 */
export function reclaimAfterSurges(budget: NodeBudget, options: ReclaimOptions = DEFAULT_RECLAIM, onReclaim?: (rssBefore: number, rssAfter: number) => void): () => void {
  let surged = false;
  let timer: NodeJS.Timeout | undefined;
  const round = (n: number): void => {
    timer = setTimeout(() => {
      if (budget.used > 0) return void (timer = undefined);
      surged = false;
      const before = process.memoryUsage.rss();
      void reclaimMemory().then(() => {
        timer = undefined;
        onReclaim?.(before, process.memoryUsage.rss());
        if (n < 3 && !surged) round(n + 1);
      });
    }, options.quietMs * 2 ** (n - 1));
    timer.unref();
  };
  const check = (): void => {
    if (budget.used > options.surgeBytes) surged = true;
    if (!surged || budget.used > 0) return;
    clearTimeout(timer);
    round(1);
  };
  budget.observe(check);
  return () => {
    budget.observe(undefined);
    clearTimeout(timer);
  };
}
