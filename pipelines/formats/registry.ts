/**
 * The one list of trajectory formats, in detection-tie order (on a tie, the earlier entry wins).
 * Each format lives in its own folder `pipelines/formats/<name>/` and is added here with one entry.
 * The entries are light (a name, whether the format encodes); a format's module is loaded when an
 * import, export or listing needs it, so naming the formats (`--help`, flag checks) costs nothing.
 */
import type { FormatModule } from './types.js';

const ENTRIES = [
  { name: 'storyline', encodes: true, load: async () => (await import('./storyline/index.js')).storyline },
  { name: 'atif', encodes: true, load: async () => (await import('./atif/index.js')).atif },
  { name: 'actf', encodes: true, load: async () => (await import('./actf/index.js')).actf },
  { name: 'chat-messages', encodes: true, load: async () => (await import('./chat-messages/index.js')).chatMessages },
  { name: 'agenta', encodes: false, load: async () => (await import('./agenta/index.js')).agenta },
  { name: 'agentb-code', encodes: false, load: async () => (await import('./agentb-code/index.js')).agentbCode },
] as const;

/** Formats that decode to Storyline (`import -i`). */
export type InputFormat = (typeof ENTRIES)[number]['name'];
/** Formats that also encode from Storyline (`export -o`). */
export type OutputFormat = Extract<(typeof ENTRIES)[number], { encodes: true }>['name'];

export const INPUT_FORMATS: readonly InputFormat[] = ENTRIES.map((e) => e.name);
export const OUTPUT_FORMATS: readonly OutputFormat[] = ENTRIES.filter((e): e is Extract<(typeof ENTRIES)[number], { encodes: true }> => e.encodes).map((e) => e.name);

export async function loadFormat(name: InputFormat): Promise<FormatModule> {
  const entry = ENTRIES.find((e) => e.name === name);
  if (!entry) throw new Error(`no format named ${name}`);
  return entry.load();
}

/** Every format module, in detection-tie order. */
export async function loadFormats(): Promise<readonly FormatModule[]> {
  return Promise.all(ENTRIES.map((e) => e.load()));
}
