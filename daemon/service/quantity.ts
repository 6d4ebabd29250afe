/** Kubernetes-style resource quantities of `resourceLimits`: CPU in millis, memory in bytes; exact values only. */
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

const UNITS: Record<string, number> = { '': 1, K: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };

export function memoryBytes(text: string): number {
  const m = /^(\d+)(|K|M|G|T|Ki|Mi|Gi|Ti)$/.exec(text);
  const bytes = m ? Number(m[1]) * UNITS[m[2]!]! : NaN;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw invalid(`resourceLimits.memory: ${JSON.stringify(text)} is not a memory quantity (e.g. "512Mi", "2Gi")`);
  if (bytes < MIN_MEMORY_BYTES) throw invalid(`resourceLimits.memory: ${JSON.stringify(text)} is below the smallest a sandbox runs in, 64Mi`);
  return bytes;
}
