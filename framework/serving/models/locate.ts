/**
 * Where models are: a model is a GGUF file given by path, or by name (`<name>.gguf`) in the models
 * directory, `$ACTORCTL_MODELS_DIR` (default `$XDG_DATA_HOME/actorctl/models`, that is
 * `~/.local/share/actorctl/models`), then in the models the build made itself (`dist/models`: the
 * tiny model). A model that is in none of them is invalid input naming every place looked at.
 */
import { existsSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { InvalidInputError } from '../../../lib/errors.js';
import { distPath } from '../../../lib/install.js';

export const MODELS_DIR_ENV = 'ACTORCTL_MODELS_DIR';
export const TINY_MODEL = 'tiny';

/** The user's models directory. */
export function modelsDirectory(env: NodeJS.ProcessEnv = process.env): string {
  const set = env[MODELS_DIR_ENV];
  if (set) return resolve(set);
  const data = env.XDG_DATA_HOME && isAbsolute(env.XDG_DATA_HOME) ? env.XDG_DATA_HOME : join(homedir(), '.local', 'share');
  return join(data, 'actorctl', 'models');
}

/** The models this build generated (scripts/tiny-model.ts writes the tiny one here). */
export function builtinModelsDirectory(): string {
  return distPath('models');
}

/** A value that names a file rather than a model in the models directory. */
const isPath = (model: string): boolean => model.includes('/') || model.endsWith('.gguf');
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** The GGUF file of a model given by path or name. */
export function locateModel(model: string, env: NodeJS.ProcessEnv = process.env): string {
  if (isPath(model)) {
    const path = resolve(model);
    if (existsSync(path) && statSync(path).isFile()) return path;
    throw new InvalidInputError(`model file ${path} does not exist`);
  }
  if (!NAME.test(model)) throw new InvalidInputError(`model name '${model}' must be letters, digits, '.', '_' or '-' (or give a path to a .gguf file)`);
  const tried = [modelsDirectory(env), builtinModelsDirectory()].map((dir) => join(dir, `${model}.gguf`));
  const found = tried.find((path) => existsSync(path));
  if (found) return found;
  const how = model === TINY_MODEL ? 'the build makes it: node dist/scripts/tiny-model.js' : `put ${model}.gguf in $${MODELS_DIR_ENV} (default ~/.local/share/actorctl/models), or give a path to a .gguf file`;
  throw new InvalidInputError(`model '${model}' not found: looked for ${tried.join(' and ')} (${how})`);
}
