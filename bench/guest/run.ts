/**
 * Guest execution service benchmark: command start to first output byte, and upload and
 * download throughput through the official SDK, each against a baseline measured in the same
 * run (a direct local process spawn; a plain streamed file copy).
 *
 *   node dist/bench/guest/run.js [--size-mb 256] [--iterations 30] [--bin PATH]
 *
 * Times vmm-rs/target/debug/sandbox-guest (the build the tests use) unless --bin names another,
 * e.g. vmm-rs/target/release/sandbox-guest (cargo build --release -p sandbox-guest).
 */
import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { execdClient, startGuestService } from '../../daemon/test/guest-process.js';
import { positiveIntFlag as flag } from '../lib/int-flag.js';
import { percentile } from '../lib/percentile.js';

const sizeMb = flag('size-mb', 256);
const binAt = process.argv.indexOf('--bin');
const bin = binAt >= 0 ? process.argv[binAt + 1] : undefined;
const iterations = flag('iterations', 30);

function summary(samples: number[]): { p50: number; p95: number } {
  return { p50: percentile(samples, 50), p95: percentile(samples, 95) };
}

/** Baseline: spawn the same shell command locally and wait for its first stdout byte. */
function localFirstByteMs(): Promise<number> {
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint();
    const child = spawn('/bin/bash', ['-c', 'echo first'], { stdio: ['ignore', 'pipe', 'ignore'] });
    child.stdout.once('data', () => resolve(Number(process.hrtime.bigint() - start) / 1e6));
    child.once('error', reject);
  });
}

async function main(): Promise<void> {
  const svc = await startGuestService('execd', { bin });
  const sdk = execdClient(svc.addr, svc.headers);
  const dir = mkdtempSync(join(tmpdir(), 'bench-guest-'));
  try {
    // Warm both paths once so neither pays first-use costs in the samples.
    await sdk.commands.run('true');
    await localFirstByteMs();
    const viaService: number[] = [];
    const local: number[] = [];
    for (let i = 0; i < iterations; i++) {
      const start = process.hrtime.bigint();
      let first = 0;
      for await (const ev of sdk.commands.runStream('echo first')) {
        if (ev.type === 'stdout' && first === 0) first = Number(process.hrtime.bigint() - start) / 1e6;
      }
      viaService.push(first);
      local.push(await localFirstByteMs());
    }
    const svcFirst = summary(viaService);
    const localFirst = summary(local);

    const source = join(dir, 'source.bin');
    const block = Buffer.alloc(1 << 20);
    for (let i = 0; i < block.length; i++) block[i] = (i * 7 + 3) & 0xff;
    const out = createWriteStream(source);
    for (let i = 0; i < sizeMb; i++) if (!out.write(block)) await new Promise<void>((r) => out.once('drain', () => r()));
    await new Promise<void>((r) => out.end(() => r()));
    const bytes = statSync(source).size;

    const timed = async (fn: () => Promise<void>): Promise<number> => {
      const start = process.hrtime.bigint();
      await fn();
      return Number(process.hrtime.bigint() - start) / 1e9;
    };
    const copySeconds = await timed(() => pipeline(createReadStream(source), createWriteStream(join(dir, 'copy.bin'))));
    const uploadSeconds = await timed(() => sdk.files.writeFiles([{ path: join(dir, 'uploaded.bin'), data: Readable.from(createReadStream(source)) }]));
    const downloadSeconds = await timed(() => pipeline(Readable.from(sdk.files.readBytesStream(source)), createWriteStream(join(dir, 'downloaded.bin'))));
    if (statSync(join(dir, 'uploaded.bin')).size !== bytes || statSync(join(dir, 'downloaded.bin')).size !== bytes) {
      throw new Error('a transfer came out with the wrong size');
    }
    const mbps = (s: number) => bytes / (1 << 20) / s;
    const result = {
      first_output_ms: { service_p50: svcFirst.p50, service_p95: svcFirst.p95, local_spawn_p50: localFirst.p50, local_spawn_p95: localFirst.p95, ratio_p50: svcFirst.p50 / localFirst.p50 },
      upload: { mib_per_s: mbps(uploadSeconds), baseline_copy_mib_per_s: mbps(copySeconds), ratio: copySeconds / uploadSeconds },
      download: { mib_per_s: mbps(downloadSeconds), baseline_copy_mib_per_s: mbps(copySeconds), ratio: copySeconds / downloadSeconds },
      size_mib: sizeMb,
      iterations,
      service_peak_rss_kib: svc.peakRssKiB(),
    };
    const f = (n: number) => n.toFixed(2);
    console.log(`command start → first output byte (${iterations} runs): service p50 ${f(svcFirst.p50)} ms, p95 ${f(svcFirst.p95)} ms; local spawn p50 ${f(localFirst.p50)} ms, p95 ${f(localFirst.p95)} ms; ratio ${f(result.first_output_ms.ratio_p50)}x`);
    console.log(`upload   ${sizeMb} MiB: ${f(result.upload.mib_per_s)} MiB/s vs plain copy ${f(result.upload.baseline_copy_mib_per_s)} MiB/s (${f(result.upload.ratio)} of baseline)`);
    console.log(`download ${sizeMb} MiB: ${f(result.download.mib_per_s)} MiB/s vs plain copy ${f(result.download.baseline_copy_mib_per_s)} MiB/s (${f(result.download.ratio)} of baseline)`);
    console.log(`service peak RSS ${result.service_peak_rss_kib} KiB`);
    console.log(JSON.stringify(result));
  } finally {
    await sdk.close();
    await svc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
