/** Kubernetes-style resource quantities of `resourceLimits`: CPU in millis, memory in bytes; exact values only (nothing is rounded). */
import { invalid } from './errors.js';

export function cpuMillis(text: string): number {
  const m = /^(\d+)m$/.exec(text);
  if (m) return check(Number(m[1]), text);
  if (!/^\d+(\.\d{1,3})?$/.test(text)) throw invalid(`resourceLimits.cpu: ${JSON.stringify(text)} is not a CPU quantity (e.g. "500m", "1.5")`);
  return check(Math.round(Number(text) * 1000), text);
}

/** The kernel's smallest CPU quota: 1 ms in each 100 ms period (cgroup cpu.max refuses less). */
const MIN_CPU_MILLIS = 10;
/** Memory below which no guest boots: its kernel and services alone take tens of MiB. */
const MIN_MEMORY_BYTES = 64 * 2 ** 20;

function check(millis: number, text: string): number {
  if (!Number.isSafeInteger(millis)) throw invalid(`resourceLimits.cpu: ${JSON.stringify(text)} is too large`);
  if (millis < MIN_CPU_MILLIS) throw invalid(`resourceLimits.cpu: ${JSON.stringify(text)} is below the smallest quota, ${MIN_CPU_MILLIS}m`);
  return millis;
}

/** Kubernetes' suffixes (decimal `k`, binary `Ki`...), and `K` as the OpenSandbox reference daemon spells kilo. */
const UNITS: Record<string, bigint> = { '': 1n, k: 10n ** 3n, K: 10n ** 3n, M: 10n ** 6n, G: 10n ** 9n, T: 10n ** 12n, Ki: 2n ** 10n, Mi: 2n ** 20n, Gi: 2n ** 30n, Ti: 2n ** 40n };

/** Bytes of a memory quantity; a fraction (`1.5Gi`) is taken when it comes to whole bytes, as Kubernetes writes them. */
export function memoryBytes(text: string): number {
  const m = /^(\d+)(?:\.(\d+))?(|k|K|M|G|T|Ki|Mi|Gi|Ti)$/.exec(text);
  if (!m) throw invalid(`resourceLimits.memory: ${JSON.stringify(text)} is not a memory quantity (e.g. "512Mi", "1.5Gi", "2G")`);
  const fraction = m[2] ?? '';
  const scaled = BigInt(m[1]! + fraction) * UNITS[m[3]!]!;
  const divisor = 10n ** BigInt(fraction.length);
  if (scaled % divisor !== 0n) throw invalid(`resourceLimits.memory: ${JSON.stringify(text)} is not a whole number of bytes`);
  const bytes = Number(scaled / divisor);
  if (!Number.isSafeInteger(bytes)) throw invalid(`resourceLimits.memory: ${JSON.stringify(text)} is too large`);
  if (bytes < MIN_MEMORY_BYTES) throw invalid(`resourceLimits.memory: ${JSON.stringify(text)} is below the smallest a sandbox runs in, 64Mi`);
  return bytes;
}
