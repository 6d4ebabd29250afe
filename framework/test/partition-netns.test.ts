/**
 * A real network partition: three nodes in network namespaces of their own, joined by veth pairs to
 * a bridge in a fourth namespace. Taking one veth down drops that node's packets (no resets), and
 * bringing it up heals. Needs root and `ip netns`; elsewhere the test is skipped (cluster.test.ts
 * covers partitions with the transport's fault hook).
 */
import { execFileSync, execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { DIST_ROOT } from '../../lib/testing/run-tool.js';
import { FAST_TIMERS, INSPECT_CLUSTER, killAll, parseInspectStatuses, startNode, waitFor, type NodeProcess } from './helpers/cluster.js';

const run = promisify(execFile);
const PREFIX = `ai5-${process.pid}`;
const HUB = `${PREFIX}-hub`;
const NAMES = ['a', 'b', 'c'] as const;
const ns = (x: string): string => `${PREFIX}-${x}`;
const ip = (x: string): string => `10.213.${process.pid % 250}.${NAMES.indexOf(x as (typeof NAMES)[number]) + 1}`;
const created: string[] = [];

function sh(args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

function teardown(): void {
  for (const name of created.splice(0).reverse()) {
    try {
      sh(['netns', 'del', name]);
    } catch {
      // already gone
    }
  }
}
process.on('exit', teardown);

function setup(): boolean {
  try {
    sh(['netns', 'add', HUB]);
    created.push(HUB);
    sh(['netns', 'exec', HUB, 'ip', 'link', 'add', 'br0', 'type', 'bridge']);
    sh(['netns', 'exec', HUB, 'ip', 'link', 'set', 'br0', 'up']);
    for (const x of NAMES) {
      sh(['netns', 'add', ns(x)]);
      created.push(ns(x));
      sh(['netns', 'exec', HUB, 'ip', 'link', 'add', `h${x}`, 'type', 'veth', 'peer', 'name', 'v0', 'netns', ns(x)]);
      sh(['netns', 'exec', HUB, 'ip', 'link', 'set', `h${x}`, 'master', 'br0', 'up']);
      sh(['netns', 'exec', ns(x), 'ip', 'link', 'set', 'lo', 'up']);
      sh(['netns', 'exec', ns(x), 'ip', 'addr', 'add', `${ip(x)}/24`, 'dev', 'v0']);
      sh(['netns', 'exec', ns(x), 'ip', 'link', 'set', 'v0', 'up']);
    }
    return true;
  } catch (error) {
    process.stderr.write(`network namespaces unavailable, skipping: ${(error as Error).message.split('\n')[0]}\n`);
    teardown();
    return false;
  }
}

/** Member statuses by address, as `actorctl inspect cluster` prints them from inside namespace `x`. */
async function view(x: string): Promise<Map<string, string>> {
  const { stdout } = await run('ip', ['netns', 'exec', ns(x), process.execPath, join(DIST_ROOT, 'cli', 'actorctl.js'), ...INSPECT_CLUSTER, '--seeds', `${ip(x)}:7000`, '--timeout', '2']);
  return parseInspectStatuses(stdout);
}

const available = setup();
const maybe = available ? test : test.skip;

test.after(async () => {
  await killAll();
  teardown();
});

maybe('a node cut off by the network is Failed on both sides and Alive again when the link is back', async () => {
  const addr = (x: string): string => `${ip(x)}:7000`;
  const nodes: NodeProcess[] = [];
  for (const x of NAMES) {
    nodes.push(await startNode({ wrap: ['ip', 'netns', 'exec', ns(x)], addr: addr(x), seeds: x === 'a' ? [] : [addr('a')], name: `echo-${x}`, timers: FAST_TIMERS, extraArgs: ['--insecure'] }));
  }
  const all = (s: Map<string, string>, status: string, which: readonly string[]): boolean => which.every((x) => s.get(addr(x)) === status);
  for (const x of NAMES) await waitFor(`${x} to see everyone Alive`, async () => all(await view(x), 'Alive', NAMES));
  sh(['netns', 'exec', HUB, 'ip', 'link', 'set', 'hc', 'down']);
  await waitFor('a and b to see c Failed', async () => (await view('a')).get(addr('c')) === 'Failed' && (await view('b')).get(addr('c')) === 'Failed', 15_000);
  await waitFor('c to see a and b Failed', async () => all(await view('c'), 'Failed', ['a', 'b']), 15_000);
  assert.ok(all(await view('a'), 'Alive', ['a', 'b']), 'the majority side stays Alive');
  sh(['netns', 'exec', HUB, 'ip', 'link', 'set', 'hc', 'up']);
  for (const x of NAMES) await waitFor(`${x} to see everyone Alive after healing`, async () => all(await view(x), 'Alive', NAMES), 20_000);
});

test.run();
