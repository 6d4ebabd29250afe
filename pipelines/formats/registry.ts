/**
 * The format modules, in detection-tie order. Each format lives in its own folder
 * `pipelines/formats/<name>/` and is added here with one import and one entry.
 */
import type { FormatModule, InputFormat } from './types.js';

export const FORMATS: readonly FormatModule[] = [];

export function formatNamed(name: InputFormat): FormatModule | undefined {
  return FORMATS.find((f) => f.name === name);
}
