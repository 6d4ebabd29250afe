/**
 * The README's example configuration file of sandboxd is one the tool takes and shows every key
 * the tool takes, so a key added to cli/sandboxd/settings.ts cannot go undocumented.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { settingKeys } from '../kit/config-schema.js';
import { parseSettingsFile } from '../kit/config-toml.js';
import { SANDBOXD_CONFIG } from '../sandboxd/settings.js';

const readme = readFileSync(join(DIST_ROOT, '..', 'README.md'), 'utf8');
const example = [...readme.matchAll(/```toml\n([\s\S]*?)```/g)].map((m) => m[1]!).find((block) => /^images_dir = /m.test(block));

test('the README shows a sandboxd configuration file with every key sandboxd takes', () => {
  assert.ok(example, 'no ```toml block with images_dir in README.md');
  const entries = parseSettingsFile('/etc/sandboxd/config.toml', example, SANDBOXD_CONFIG);
  assert.equal(entries.map((e) => e.key).sort(), settingKeys(SANDBOXD_CONFIG).sort());
});

test.run();
