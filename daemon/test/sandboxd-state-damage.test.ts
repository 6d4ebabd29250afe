/**
 * A damaged state directory, met by a real daemon process at start-up: a record file, the records
 * directory, owner.json or run/ that is a symbolic link out of the state directory; a record file
 * that is not a record; what a writer killed mid-write leaves. The daemon refuses to start with
 * exit 2 naming the file (never following the link, never touching the good records), or clears
 * only what is provably its own debris, and starts once the damage is undone.
 */
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { tempSiblingOf } from '../../lib/durable.js';
import { cgroup2Mount, makeFixture, type Fixture } from './supervisor/fixture.js';
import { api, DaemonExit, startDaemonProcess, stopDaemonProcess, type DaemonProcess } from './supervisor/process.js';

const mount = cgroup2Mount();
const BODY = { image: { uri: 'test' }, entrypoint: ['sleep', 'infinity'], resourceLimits: { cpu: '250m', memory: '256Mi' } };

interface Setup {
  fixture: Fixture;
  /** Two sandboxes made by a daemon that was then stopped. */
  ids: [string, string];
  record(id: string): string;
  /** A directory beside the state directory, where links point. */
  outside: string;
}

const fixtures: Fixture[] = [];
const daemons: DaemonProcess[] = [];

async function setUp(): Promise<Setup> {
  const fixture = makeFixture((mount as { path: string }).path);
  fixtures.push(fixture);
  const daemon = await startDaemonProcess(fixture);
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) ids.push((await api(daemon, 'POST', '/v1/sandboxes', BODY)).json!.id as string);
  await stopDaemonProcess(daemon);
  const outside = join(fixture.root, 'outside');
  mkdirSync(outside);
  return { fixture, ids: ids as [string, string], record: (id) => join(fixture.state, 'records', `${id}.json`), outside };
}

async function start(fixture: Fixture): Promise<DaemonProcess> {
  const daemon = await startDaemonProcess(fixture);
  daemons.push(daemon);
  return daemon;
}

/** The start is refused with exit 2 and a message matching `message`. */
async function assertRefused(fixture: Fixture, message: RegExp): Promise<void> {
  const error = await start(fixture).then(
    () => assert.unreachable('the daemon started'),
    (e: unknown) => e,
  );
  assert.instance(error, DaemonExit);
  assert.is((error as DaemonExit).code, 2, (error as DaemonExit).stderr);
  assert.match((error as DaemonExit).stderr, message);
}

/** A daemon starts and lists exactly `ids`, each deletable; then it is stopped. */
async function assertStartsWith(fixture: Fixture, ids: string[]): Promise<void> {
  const daemon = await start(fixture);
  const items = (await api(daemon, 'GET', '/v1/sandboxes?pageSize=200')).json!.items as { id: string }[];
  assert.equal(items.map((item) => item.id).sort(), [...ids].sort());
  for (const id of ids) assert.is((await api(daemon, 'DELETE', `/v1/sandboxes/${id}`)).status, 204);
  await stopDaemonProcess(daemon);
}

if ('skip' in mount) {
  test('SKIP: sandboxd state damage tests', () => console.log(`SKIP: sandboxd-state-damage: ${mount.skip}`));
} else {
  test.after.each(async () => {
    for (const daemon of daemons.splice(0)) if (daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGKILL');
  });
  test.after(async () => {
    for (const fixture of fixtures) await fixture.cleanup();
  });

  test('a record file that is a symbolic link out of the state directory is refused, not read; the good record stays', async () => {
    const { fixture, ids, record, outside } = await setUp();
    const good = readFileSync(record(ids[1]));
    const elsewhere = join(outside, 'record.json');
    copyFileSync(record(ids[0]), elsewhere);
    unlinkSync(record(ids[0]));
    symlinkSync(elsewhere, record(ids[0]));
    await assertRefused(fixture, new RegExp(`${record(ids[0])}: .*symbolic link`));
    assert.equal(readFileSync(record(ids[1])), good);
    assert.ok(existsSync(elsewhere));
    unlinkSync(record(ids[0]));
    renameSync(elsewhere, record(ids[0]));
    await assertStartsWith(fixture, ids);
  });

  test('records/, owner.json and run/ as symbolic links out of the state directory are refused', async () => {
    const { fixture, ids, outside } = await setUp();
    for (const name of ['records', 'owner.json', 'run']) {
      const inside = join(fixture.state, name);
      const elsewhere = join(outside, name);
      cpSync(inside, elsewhere, { recursive: true });
      rmSync(inside, { recursive: true });
      symlinkSync(elsewhere, inside);
      const before = readdirSync(outside, { recursive: true }).sort();
      await assertRefused(fixture, new RegExp(`${inside}: .*symbolic link`));
      // Nothing was made, removed or replaced through the link.
      assert.equal(readdirSync(outside, { recursive: true }).sort(), before);
      unlinkSync(inside);
      renameSync(elsewhere, inside);
    }
    await assertStartsWith(fixture, ids);
  });

  test('a record file that is not a record (null, a field missing, a reservation not a number) is refused naming it', async () => {
    const { fixture, ids, record } = await setUp();
    const original = readFileSync(record(ids[0]), 'utf8');
    const good = readFileSync(record(ids[1]));
    const wrapped = JSON.parse(original) as { owner: string; record: Record<string, unknown> };
    const damaged: [text: string, message: RegExp][] = [
      ['null', /not a record/],
      [JSON.stringify({ ...wrapped, record: { id: ids[0] } }), /not a record.*\/record\/state/],
      [JSON.stringify({ ...wrapped, record: { ...wrapped.record, cpuMillis: 'x' } }), /not a record.*\/record\/cpuMillis/],
      [JSON.stringify({ ...wrapped, record: { ...wrapped.record, memoryBytes: -1 } }), /not a record.*\/record\/memoryBytes/],
      [JSON.stringify({ ...wrapped, record: { ...wrapped.record, token: 7 } }), /not a record.*\/record\/token/],
      [original.slice(0, 10), /unreadable registry file/],
    ];
    for (const [text, message] of damaged) {
      writeFileSync(record(ids[0]), text);
      await assertRefused(fixture, new RegExp(`${record(ids[0])}: ${message.source}`));
      assert.equal(readFileSync(record(ids[1])), good);
    }
    for (const header of ['sandboxes.json', join('records', 'meta.json')]) {
      const path = join(fixture.state, header);
      const text = readFileSync(path, 'utf8');
      writeFileSync(path, 'null');
      await assertRefused(fixture, new RegExp(`${path}: `));
      writeFileSync(path, text);
    }
    writeFileSync(record(ids[0]), original);
    await assertStartsWith(fixture, ids);
  });

  test('the temporary files of a record write cut short by kill -9 (they hold its secrets) are cleared at start-up', async () => {
    const { fixture, ids, record } = await setUp();
    // What a writer killed between the temporary's write and its rename leaves: a whole record
    // (its tokens with it) or a piece of one, under the name writeFileDurably gave it.
    const leftovers = [tempSiblingOf(record(ids[0])), tempSiblingOf(record(ids[1]))];
    writeFileSync(leftovers[0]!, readFileSync(record(ids[0])));
    writeFileSync(leftovers[1]!, '{"owner":');
    // Names that are not such leftovers are not the registry's to remove.
    const foreign = join(fixture.state, 'records', 'notes.txt');
    writeFileSync(foreign, 'kept');
    const daemon = await start(fixture);
    for (const leftover of leftovers) assert.not.ok(existsSync(leftover), `${leftover} left`);
    assert.ok(existsSync(foreign));
    await stopDaemonProcess(daemon);
    await assertStartsWith(fixture, ids);
  });
}

test.run();
