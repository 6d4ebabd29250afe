/**
 * Export to an object store: `-t s3://bucket/key` is one JSONL object, `-t s3://bucket/prefix/` one
 * object per document under the prefix. Everything is written to a local staging directory first
 * (in the cache, staging.ts: the next such export removes one that a killed export left) and uploaded
 * by `commit`, so an export stopped part-way uploads nothing (and one that fails while uploading
 * deletes the objects it had added: one it wrote over keeps what it wrote). Create-only unless --overwrite: an object already under a
 * name is refused (exit 4) before anything is read, and each upload is conditional
 * (`If-None-Match: *`), so that one written meanwhile is not replaced either.
 */
import { mkdirSync } from 'node:fs';
import { join, sep } from 'node:path';
import { ConflictError, InvalidInputError } from '../../lib/errors.js';
import { S3ObjectStore } from '../dataset/s3-store.js';
import { LocalObjectStore, type ObjectWriter } from '../dataset/store.js';
import type { S3Place } from '../pins/pins.js';
import { stageForUpload } from './staging.js';
import { trackedFile, type Target } from './target.js';

export interface ObjectTargetOptions {
  place: S3Place;
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
  /** `-t` ends with `/`: one object per document under the prefix. */
  directory: boolean;
  overwrite: boolean;
}

const HINT = { hint: 'choose a new target, or add --overwrite' };

export async function openObjectTarget({ place, env, signal, directory, overwrite }: ObjectTargetOptions): Promise<Target> {
  let store: S3ObjectStore;
  let single: string | undefined;
  if (directory) {
    store = new S3ObjectStore(place, env, signal);
  } else {
    if (place.prefix === '') throw new InvalidInputError(`-t ${place.uri}: names a bucket, not an object`, { hint: `name an object (${place.uri}/out.jsonl), or a prefix ending in / for one object per document` });
    const cut = place.prefix.lastIndexOf('/');
    const parent = cut === -1 ? '' : place.prefix.slice(0, cut);
    single = place.prefix.slice(cut + 1);
    store = new S3ObjectStore({ ...place, prefix: parent, uri: parent === '' ? `s3://${place.bucket}` : `s3://${place.bucket}/${parent}` }, env, signal);
  }
  const shown = (key: string): string => `${store.uri}/${key}`;
  // What is there already, asked once, before anything is read or written: refused without
  // --overwrite; with it, never deleted by an upload that fails (below).
  const existing = new Set(single !== undefined ? ((await store.size(single)) === undefined ? [] : [single]) : await store.list(''));
  // Create-only uploads are conditional: a server that would ignore the condition is refused before anything is read.
  if (!overwrite) await store.requireConditionalWrites();
  const claim = (key: string): string => {
    if (!overwrite && existing.has(key)) throw new ConflictError(`-t ${shown(key)}: already exists`, HINT);
    staged.push(key);
    return key;
  };
  const staged: string[] = [];
  const staging = stageForUpload(env);
  // Uploaded, then removed: a crash leaves nothing read again, so nothing is flushed to disk.
  const local = new LocalObjectStore(staging.content, { fsync: false });
  const pending = new Set<ObjectWriter>();
  let stream: ObjectWriter | undefined;
  try {
    mkdirSync(staging.content);
    if (single !== undefined) stream = local.writer(claim(single));
  } catch (error) {
    staging.remove();
    throw error;
  }
  const discard = (): void => {
    for (const writer of pending) writer.abort();
    stream?.abort();
    staging.remove();
  };
  const upload = async (): Promise<void> => {
    const uploaded: string[] = [];
    try {
      for (const key of staged) {
        await store.upload(key, join(staging.content, ...key.split('/')), overwrite ? undefined : { ifNoneMatch: '*' });
        uploaded.push(key);
      }
    } catch (error) {
      // Nothing half done stays: the objects this export added go again. One it wrote over (--overwrite)
      // keeps what it wrote: what it held is gone already, and deleting it would lose both.
      // A bulk delete, a thousand keys a request; a failure leaves the rest, as the export's own error says more.
      await store.deleteMany(uploaded.filter((key) => !existing.has(key))).catch(() => undefined);
      if (error instanceof ConflictError) throw new ConflictError(`-t ${shown(staged[uploaded.length] as string)}: already exists (written while the export ran)`, HINT);
      throw error;
    }
  };
  const target: Target = {
    isDirectory: directory,
    written: 0,
    append: async (bytes) => {
      if (!stream) throw new Error('not a stream target');
      const buffer = typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes;
      target.written += buffer.length;
      stream.write(buffer);
    },
    file: async (relPath, bytes) => {
      const key = claim(relPath.split(sep).join('/'));
      target.written += Buffer.byteLength(bytes);
      await local.put(key, bytes);
    },
    openFile: (relPath) => trackedFile(local.writer(claim(relPath.split(sep).join('/'))), target, pending),
    commit: async () => {
      try {
        await stream?.commit();
        await upload();
      } finally {
        staging.remove();
      }
    },
    abort: discard,
  };
  return target;
}
