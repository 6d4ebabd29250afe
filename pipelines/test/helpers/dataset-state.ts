/**
 * What the writer tests look at in a dataset's directory and beside it: what a finished writer must
 * not leave (hidden siblings, locks, temporaries, snapshots off the manifest's chain, parts no
 * snapshot lists, a stale index), and sources of Storyline documents with chosen ids.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { indexSnapshotId } from '../../dataset/index-meta.js';
import { SHARED_FIXTURES } from './fixtures.js';
import { filesUnder } from './sandbox.js';

export const STORYLINES = join(SHARED_FIXTURES, 'synthetic', 'storyline');

/** Everything beside the dataset at `path` that belongs to it: `.<name>.*` (builds, asides, locks, lock candidates). */
export function hiddenSiblings(path: string): string[] {
  return readdirSync(dirname(path)).filter((name) => name.startsWith(`.${basename(path)}.`));
}

/**
 * What is wrong with the dataset at `path` once every writer has finished: hidden siblings,
 * temporaries, snapshots not on the manifest's chain, parts no snapshot on it lists, an index of
 * another snapshot. Empty when all is well.
 */
export function leftovers(path: string): string[] {
  const problems = hiddenSiblings(path).map((name) => `beside: ${name}`);
  if (!existsSync(path)) return problems;
  const files = filesUnder(path);
  problems.push(...files.filter((f) => f.includes('.tmp-')).map((f) => `temporary: ${f}`));
  const manifest = JSON.parse(readFileSync(join(path, 'trajstore.json'), 'utf8')) as { snapshot_id: string };
  const chain = new Set<string>();
  const listed = new Set<string>();
  // Ancestors older than the grace period may have been reclaimed (dataset/compaction.ts): the chain ends there.
  for (let id: string | null = manifest.snapshot_id; id !== null && !chain.has(id) && existsSync(join(path, 'snapshots', `${id}.json`)); ) {
    chain.add(id);
    const snapshot = JSON.parse(readFileSync(join(path, 'snapshots', `${id}.json`), 'utf8')) as { parent: string | null; relations: Record<string, Array<{ key: string }>> };
    for (const parts of Object.values(snapshot.relations)) for (const part of parts) listed.add(part.key);
    id = snapshot.parent;
  }
  for (const file of files) {
    if (file.startsWith('snapshots/') && !chain.has(file.slice('snapshots/'.length, -'.json'.length))) problems.push(`snapshot off the chain: ${file}`);
    if (file.startsWith('parts/') && !file.includes('.tmp-') && !listed.has(file)) problems.push(`part no snapshot lists: ${file}`);
  }
  if (indexSnapshotId(join(path, 'index.sqlite')) !== manifest.snapshot_id) problems.push('index.sqlite does not describe the current snapshot');
  return problems;
}

/** A fixture Storyline document, to make documents of chosen ids from. */
export function baseStoryline(): Record<string, unknown> {
  return JSON.parse(readFileSync(join(STORYLINES, 'incident-triage-0007.storyline.json'), 'utf8')) as Record<string, unknown>;
}

/** Writes a JSONL source of Storyline documents with these trajectory ids (the document ids they import as). */
export function writeStorylines(file: string, ids: readonly string[]): void {
  const base = baseStoryline();
  writeFileSync(file, ids.map((id) => `${JSON.stringify({ ...base, trajectory: id })}\n`).join(''));
}
