/**
 * Runs the trajstore CLI in this process and, on exit, writes the process's peak resident set size
 * (kilobytes) to $BENCH_RSS_FILE: the benchmark measures the real command, child process and all.
 */
import { writeFileSync } from 'node:fs';

const rssFile = process.env.BENCH_RSS_FILE;
if (rssFile) process.on('exit', () => writeFileSync(rssFile, String(process.resourceUsage().maxRSS)));
await import('../../cli/trajstore.js');
