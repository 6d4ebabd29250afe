/** README.md lists exactly the columns of pipelines/dataset/relations.ts (regenerate: `node dist/scripts/readme-columns.js --write`). */
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RECORDS, STORYLINE_RELATIONS } from '../dataset/relations.js';
import { BEGIN, END, README, withTables } from '../../scripts/readme-columns.js';

test('the README column tables are the ones generated from relations.ts', () => {
  const readme = readFileSync(README, 'utf8');
  assert.ok(readme.includes(BEGIN) && readme.includes(END), 'README has the column block');
  assert.fixture(readme, withTables(readme), 'README column tables are stale: run node dist/scripts/readme-columns.js --write');
});

test('every column of every relation is named in the README block, and no other', () => {
  const readme = readFileSync(README, 'utf8');
  const block = readme.slice(readme.indexOf(BEGIN), readme.indexOf(END));
  const named = [...block.matchAll(/^\| `([a-z0-9_]+)` \|/gm)].map((m) => m[1]);
  const expected = [...Object.values(STORYLINE_RELATIONS).flatMap((cols) => cols.map((c) => c.name)), ...RECORDS.map((c) => c.name)];
  assert.equal(named, expected);
});

test.run();
