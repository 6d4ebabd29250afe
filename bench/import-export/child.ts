/**
 * Runs the trajstore CLI in this process and, on exit, writes the process's peak resident set size
 * (kilobytes) and CPU time (user + system microseconds, all threads) to $BENCH_RSS_FILE as JSON: the
 * benchmark measures the real command, child process and all.
 */
import { writeFileSync } from 'node:fs';

const rssFile = process.env.BENCH_RSS_FILE;
if (rssFile) {
  process.on('exit', () => {
    const usage = process.resourceUsage();
    writeFileSync(rssFile, JSON.stringify({ maxRssKb: usage.maxRSS, cpuMicros: usage.userCPUTime + usage.systemCPUTime }));
  });
}
await import('../../cli/trajstore.js');
