import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { storylineProblems } from '../storyline/validate.js';
import { SHARED_FIXTURES } from './helpers/fixtures.js';

const fixture = (name: string): unknown => JSON.parse(readFileSync(join(SHARED_FIXTURES, name), 'utf8'));
const minimal = () => ({ schema_version: 'storyline/v1', session: 's', agent: { id: 'a' }, turns: [] as unknown[] });

test('the Storyline fixtures are valid', () => {
  for (const name of ['incident-triage-0007.storyline.json', 'incident-triage-0007.sub-1.storyline.json']) {
    assert.equal(storylineProblems(fixture(`synthetic/storyline/${name}`)), [], name);
  }
});

test('other schema versions fail closed, before any other check', () => {
  const problems = storylineProblems(fixture('synthetic/bad/wrong-schema-version.storyline.json'));
  assert.equal(problems, [{ pointer: '/schema_version', message: 'unsupported schema_version "storyline/v2" (this build reads "storyline/v1")' }]);
  assert.is(storylineProblems({ session: 's' })[0]?.message, 'unsupported schema_version missing (this build reads "storyline/v1")');
  assert.is(storylineProblems([])[0]?.pointer, '');
});

test('schema problems carry a JSON Pointer to the offending value', () => {
  const doc = { ...minimal(), turns: [{ id: 1, src: 'bot', msg: 'hi', surprise: true }] };
  const pointers = storylineProblems(doc).map((p) => p.pointer);
  assert.ok(pointers.includes('/turns/0/src'), pointers.join());
  assert.ok(pointers.includes('/turns/0/surprise'), 'closed objects reject unknown keys');
  const missingAgentId = storylineProblems({ ...minimal(), agent: {} });
  assert.is(missingAgentId[0]?.pointer, '/agent/id');
});

test('turn ids and tool call ids are unique; observations answer a call of the document', () => {
  const call = (tcid: string) => ({ tcid, fn: 'bash', args: {} });
  const doc = {
    ...minimal(),
    turns: [
      { id: 1, src: 'agent', msg: '', tool_calls: [call('c1'), call('c1')] },
      { id: 1, src: 'agent', msg: '', observation: { results: [{ source_call_id: 'c9', content: 'x' }, { source_call_id: null, content: 'y' }] } },
    ],
  };
  assert.equal(storylineProblems(doc), [
    { pointer: '/turns/0/tool_calls/1/tcid', message: 'duplicate tool call id "c1"' },
    { pointer: '/turns/1/id', message: 'duplicate turn id 1' },
    { pointer: '/turns/1/observation/results/0/source_call_id', message: 'no tool call has id "c9"' },
  ]);
});

test('pointer tokens are escaped (RFC 6901)', async () => {
  const { pointerOf } = await import('../storyline/validate.js');
  assert.is(pointerOf('unknown_fields', 'a/b~c', 0), '/unknown_fields/a~1b~0c/0');
});

test.run();
