/**
 * The format modules, in detection-tie order. Each format lives in its own folder
 * `pipelines/formats/<name>/` and is added here with one import and one entry.
 */
import type { FormatModule, InputFormat } from './types.js';
import { storyline } from './storyline/index.js';
import { atif } from './atif/index.js';
import { actf } from './actf/index.js';
import { chatMessages } from './chat-messages/index.js';
import { agenta } from './agenta/index.js';
import { agentbCode } from './agentb-code/index.js';

export const FORMATS: readonly FormatModule[] = [
  storyline,
  atif,
  actf,
  chatMessages,
  agenta,
  agentbCode,
];

export function formatNamed(name: InputFormat): FormatModule | undefined {
  return FORMATS.find((f) => f.name === name);
}
