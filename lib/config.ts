/**
 * Where a tool's configuration file is: `-c/--config FILE`, else the tool's environment
 * variable (e.g. TRAJSTORE_CONFIG), else `$XDG_CONFIG_HOME/<tool>/config.toml`
 * (`~/.config/<tool>/config.toml`). Reading and validating it belongs to each tool.
 */
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

export interface ConfigLocation {
  path: string;
  /** Where the path came from; an explicitly named file must exist, the default one need not. */
  source: 'flag' | 'env' | 'default';
}

export function configEnvVar(tool: string): string {
  return `${tool.toUpperCase().replace(/[^A-Z0-9]/g, '_')}_CONFIG`;
}

/** `$XDG_CACHE_HOME`, else `~/.cache`: where the tools keep what they can make again. */
export function cacheHome(env: NodeJS.ProcessEnv): string {
  return env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache');
}

export function locateConfig(tool: string, flag: unknown, env: NodeJS.ProcessEnv = process.env): ConfigLocation {
  if (typeof flag === 'string' && flag !== '') return { path: resolve(flag), source: 'flag' };
  const fromEnv = env[configEnvVar(tool)];
  if (fromEnv) return { path: resolve(fromEnv), source: 'env' };
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return { path: join(base, tool, 'config.toml'), source: 'default' };
}
