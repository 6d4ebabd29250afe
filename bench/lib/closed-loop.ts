/** What a closed-loop run measured: calls per second and latency percentiles in ms. */
export interface LoopResult {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  calls: number;
}

/**
 * Runs `call` in `inFlight` concurrent loops for `seconds`, each loop starting its next call when
 * the last one settles (a closed loop: the load follows what the server can answer).
 */
export async function closedLoop(inFlight: number, call: () => Promise<unknown>, seconds: number): Promise<LoopResult> {
  const latencies: number[] = [];
  const end = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        await call();
        latencies.push(performance.now() - t);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => latencies[Math.min(latencies.length - 1, Math.round((p / 100) * (latencies.length - 1)))] ?? NaN;
  return { perSecond: latencies.length / elapsed, p50Ms: pct(50), p99Ms: pct(99), calls: latencies.length };
}
