/**
 * The README's example configuration file of actorctl is one the tool takes: every key is in its
 * schema (parsed as `-c FILE` parses it), and its `[limits]` table lists every limit at its default,
 * so a limit added or changed in framework/core/limits.ts cannot go undocumented.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DEFAULT_LIMITS, LIMIT_SETTING_KEYS } from '../../framework/index.js';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { ACTORCTL_CONFIG } from '../actorctl/settings.js';
import { parseSettingsFile } from '../kit/config-toml.js';

const readme = readFileSync(join(DIST_ROOT, '..', 'README.md'), 'utf8');
const example = [...readme.matchAll(/```toml\n([\s\S]*?)```/g)].map((m) => m[1]!).find((block) => /^\[limits\]/m.test(block));

test('the README shows an actorctl configuration file with a [limits] table', () => {
  assert.ok(example, 'no ```toml block with a [limits] table in README.md');
});

test('every key of it is one actorctl takes, of the right kind', () => {
  const entries = parseSettingsFile('/etc/actorctl/config.toml', example!, ACTORCTL_CONFIG);
  assert.ok(entries.some((e) => e.key === 'cluster.name'));
});

test('its [limits] are every limit, each at its default', () => {
  const entries = parseSettingsFile('/etc/actorctl/config.toml', example!, ACTORCTL_CONFIG);
  const shown = new Map(entries.filter((e) => e.key.startsWith('limits.')).map((e) => [e.key, e.value]));
  assert.equal([...shown.keys()].sort(), [...LIMIT_SETTING_KEYS.keys()].sort(), 'the limits shown are the limits there are');
  for (const [key, limit] of LIMIT_SETTING_KEYS) assert.is(shown.get(key), DEFAULT_LIMITS[limit], `${key} in the README is its default`);
});

test.run();
