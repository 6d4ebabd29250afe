/**
 * `trajstore agent` on object-store datasets (a real S3-compatible server on loopback): the agent
 * keeps the AWS keys when its trajstore reads the dataset with them, and is given none when a pin
 * carries its own; a pin's keys never reach its argv, prompt or environment.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { S3TestServer, TEST_ACCESS_KEY, TEST_SECRET_KEY } from '../../bench/lib/s3-server.js';
import { runTool } from '../../lib/testing/run-tool.js';
import { installFakeAgents, readRecord } from './helpers/fake-agents.js';
import { PROJECT_TESTDATA } from './helpers/fixtures.js';
import { sandbox } from './helpers/sandbox.js';

const s = sandbox('agent-s3-test-');
const bin = s.path('bin');
const record = s.path('agent-record.json');
let server: S3TestServer;
let keys: NodeJS.ProcessEnv;

test.before(async () => {
  server = await S3TestServer.start();
  await server.createBucket('lake');
  keys = { AWS_ENDPOINT_URL_S3: server.endpoint, AWS_REGION: 'us-west-2', AWS_ACCESS_KEY_ID: TEST_ACCESS_KEY, AWS_SECRET_ACCESS_KEY: TEST_SECRET_KEY };
  const r = await runTool('trajstore', ['import', '-f', join(PROJECT_TESTDATA, 'samples', 'agenta'), '-t', 's3://lake/runs'], { env: { ...s.env, ...keys }, cwd: s.home });
  assert.is(r.code, 0, r.stderr);
  installFakeAgents(bin, record);
});

test.after(async () => {
  await server?.stop();
});

function agent(args: string[], env: NodeJS.ProcessEnv) {
  writeFileSync(record, '');
  return runTool('trajstore', ['agent', 'agenta', ...args, '--ask', 'How many runs?'], { env: { ...s.env, PATH: bin, ...env }, cwd: s.home });
}

test('agent on a bare s3:// dataset: the agent keeps the AWS keys its trajstore reads the dataset with (the pin keys still go)', async () => {
  const r = await agent(['s3://lake/runs'], { ...keys, TRAJSTORE_SECRET_KEY: 'ts-secret' });
  assert.is(r.code, 0, r.stderr);
  const got = readRecord(record);
  assert.ok(got.stdin.includes('dataset s3://lake/runs'));
  assert.ok(got.stdin.includes('### stats overview'));
  assert.is(got.env.AWS_ACCESS_KEY_ID, TEST_ACCESS_KEY);
  assert.is(got.env.AWS_SECRET_ACCESS_KEY, TEST_SECRET_KEY);
  assert.is(got.env.TRAJSTORE_SECRET_KEY, undefined);
});

test('agent on a pin with its own keys: the agent is told the pin, and neither the pin\'s keys nor the user\'s AWS keys reach it', async () => {
  const pinned = await runTool('trajstore', ['dataset', 'pin', 'lake', 's3://lake/runs', '--endpoint', server.endpoint, '--region', 'us-west-2'], {
    env: { ...s.env, TRAJSTORE_ACCESS_KEY: TEST_ACCESS_KEY, TRAJSTORE_SECRET_KEY: TEST_SECRET_KEY },
    cwd: s.home,
  });
  assert.is(pinned.code, 0, pinned.stderr);
  const r = await agent(['@lake'], { AWS_ACCESS_KEY_ID: 'user-own-ak', AWS_SECRET_ACCESS_KEY: 'user-own-secret' });
  assert.is(r.code, 0, r.stderr);
  const got = readRecord(record);
  assert.ok(got.stdin.includes('dataset @lake'));
  assert.is(got.env.AWS_ACCESS_KEY_ID, undefined);
  assert.is(got.env.AWS_SECRET_ACCESS_KEY, undefined);
  const everything = JSON.stringify(got);
  assert.not.ok(everything.includes(TEST_SECRET_KEY), 'the pin\'s secret key reached the agent');
});

test.run();
