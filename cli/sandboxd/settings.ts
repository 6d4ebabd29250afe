/**
 * sandboxd's configuration file (README, "sandboxd", "Configuration file"): its keys, and the
 * paths a command takes from its flag, else from the file, each named as its messages name it.
 */
import { InvalidInputError } from '../../lib/errors.js';
import type { PathInput } from '../../daemon/index.js';
import type { ConfigSchema, Settings } from '../kit/config-file.js';

/** Top-level keys only; relative paths are relative to the file. */
export const SANDBOXD_CONFIG: ConfigSchema = { '': { images_dir: 'path', library_dir: 'path' } };

/** The flag's path, else the configuration's `key` (named by its file and line); undefined when neither is set. */
export function pathSetting(flag: string, value: string | undefined, settings: Settings, key: string): PathInput | undefined {
  if (value !== undefined) return { path: value, input: flag };
  const configured = settings.get<string>(key);
  return configured === undefined ? undefined : { path: configured, input: settings.source(key) };
}

/** `--images-dir`, else `images_dir` of the configuration: one of them is required. */
export function imagesDirSetting(value: string | undefined, settings: Settings): PathInput {
  const dir = pathSetting('--images-dir', value, settings, 'images_dir');
  if (dir === undefined) throw new InvalidInputError('--images-dir is required', { hint: 'or set images_dir in the configuration file' });
  return dir;
}
