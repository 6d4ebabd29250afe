/**
 * A preload (`node --import`) that, when the process exits, writes its peak resident set size
 * (kilobytes) and CPU time (user + system microseconds, all threads) to $BENCH_RSS_FILE as JSON:
 * the benchmarks measure the real command, threads and all, without changing it.
 */
import { writeFileSync } from 'node:fs';

const rssFile = process.env.BENCH_RSS_FILE;
if (rssFile) {
  process.on('exit', () => {
    const usage = process.resourceUsage();
    writeFileSync(rssFile, JSON.stringify({ maxRssKb: usage.maxRSS, cpuMicros: usage.userCPUTime + usage.systemCPUTime }));
  });
}
