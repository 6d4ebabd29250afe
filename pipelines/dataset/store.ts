/**
 * The storage seam of a dataset: keys (`trajstore.json`, `snapshots/<id>.json`, `parts/<relation>/<part>.parquet`)
 * mapped to bytes. The dataset layer talks only to this interface so that an object-store backend
 * (S3, a later issue) can stand beside the local one without touching the writers and readers.
 *
 * Local writes are crash-safe (lib/durable.ts): a crash leaves the old object or the new one, never a mix.
 */
// Synchronous reads behind the async interface: they are small (manifests, snapshots, part
// footers) and fs/promises costs every read command milliseconds of start-up to load.
import { closeSync, openSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DurableFile, writeFileDurably } from '../../lib/durable.js';
import { InvalidInputError } from '../../lib/errors.js';
import { walkFiles } from '../../lib/walk.js';

/** A write in progress to one key; nothing is visible under the key until `commit`. */
export interface ObjectWriter {
  write(bytes: Uint8Array): void;
  /** Bytes written so far. */
  readonly size: number;
  commit(): Promise<void>;
  abort(): void;
}

export interface ObjectStore {
  /** Where the store lives, for messages (`/path/to/dataset`, later `s3://bucket/prefix`). */
  readonly uri: string;
  get(key: string): Promise<Buffer | undefined>;
  /** Bytes `[start, end)` of an object, for Parquet footers and row groups. */
  getRange(key: string, start: number, end: number): Promise<Buffer>;
  size(key: string): Promise<number | undefined>;
  put(key: string, bytes: Uint8Array | string): Promise<void>;
  /** A streaming writer for large objects (Parquet parts). */
  writer(key: string): ObjectWriter;
  /** Keys under a prefix (`parts/`), in byte order. */
  list(prefix: string): Promise<string[]>;
  delete(key: string): Promise<void>;
  /**
   * The error for a part (`key`) found `damage`d (`missing`, `not a readable Parquet file`) by a
   * read. A store that holds a copy it can fetch again (an object-store dataset's local cache)
   * drops the copy and says so; without this, the dataset itself is damaged.
   */
  damagedPart?(key: string, damage: string): Error;
}

/** A local object being written: a DurableFile, published under its key by `commit`. */
class LocalFileWriter implements ObjectWriter {
  private readonly file: DurableFile;
  constructor(path: string, options: LocalStoreOptions) {
    this.file = new DurableFile(path, { createDirectory: true, ...options });
  }
  get size(): number {
    return this.file.size;
  }
  write(bytes: Uint8Array): void {
    this.file.write(bytes);
  }
  async commit(): Promise<void> {
    this.file.commit();
  }
  abort(): void {
    this.file.abort();
  }
}

export interface LocalStoreOptions {
  /** false: objects are not flushed to disk (a scratch copy, uploaded then removed); see DurableFileOptions. */
  fsync?: boolean;
}

export class LocalObjectStore implements ObjectStore {
  constructor(
    readonly root: string,
    private readonly options: LocalStoreOptions = {},
  ) {}

  get uri(): string {
    return this.root;
  }

  /** The file of `key`; a key that would step out of the root (`..`, an empty or absolute segment) is refused, whoever wrote it. */
  protected pathOf(key: string): string {
    const segments = key.split('/');
    if (segments.some((segment) => segment === '' || segment === '.' || segment === '..' || segment.includes('\0'))) {
      throw new InvalidInputError(`${this.root}: ${JSON.stringify(key)} is not a key inside the dataset`);
    }
    return join(this.root, ...segments);
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      return readFileSync(this.pathOf(key));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  async getRange(key: string, start: number, end: number): Promise<Buffer> {
    if (end <= start) return Buffer.alloc(0);
    const fd = openSync(this.pathOf(key), 'r');
    try {
      const bytes = Buffer.allocUnsafe(end - start);
      let filled = 0;
      while (filled < bytes.length) {
        const n = readSync(fd, bytes, filled, bytes.length - filled, start + filled);
        if (n === 0) break;
        filled += n;
      }
      return bytes.subarray(0, filled);
    } finally {
      closeSync(fd);
    }
  }

  async size(key: string): Promise<number | undefined> {
    try {
      return statSync(this.pathOf(key)).size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  async put(key: string, bytes: Uint8Array | string): Promise<void> {
    writeFileDurably(this.pathOf(key), bytes, { createDirectory: true, ...this.options });
  }

  writer(key: string): ObjectWriter {
    return new LocalFileWriter(this.pathOf(key), this.options);
  }

  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    walkFiles(this.root, (key) => keys.push(key));
    return keys.filter((k) => k.startsWith(prefix)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  async delete(key: string): Promise<void> {
    rmSync(this.pathOf(key), { force: true });
  }
}
