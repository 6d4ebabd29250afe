/**
 * The storage seam of a dataset: keys (`trajstore.json`, `snapshots/<id>.json`, `parts/<relation>/<part>.parquet`)
 * mapped to bytes. The dataset layer talks only to this interface so that an object-store backend
 * (S3, a later issue) can stand beside the local one without touching the writers and readers.
 *
 * Local writes are crash-safe: bytes go to a temporary sibling, are fsynced, renamed over the key,
 * and the directory is fsynced; a crash leaves the old object or the new one, never a mix.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, writeSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { dirname, join } from 'node:path';

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
}

/** Temporary names carry this marker so a later writer can sweep what a crashed one left. */
export const TEMP_MARKER = '.tmp-';

export function fsyncDir(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Writes a whole file crash-safely: temp name, fsync, rename, fsync the directory. */
export function writeFileAtomic(path: string, bytes: Uint8Array | string): void {
  const writer = new LocalFileWriter(path);
  writer.write(typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : bytes);
  writer.commitSync();
}

class LocalFileWriter implements ObjectWriter {
  private readonly temp: string;
  private fd: number | undefined;
  private written = 0;

  constructor(private readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    this.temp = `${path}${TEMP_MARKER}${randomBytes(6).toString('hex')}`;
    this.fd = openSync(this.temp, 'wx');
  }

  get size(): number {
    return this.written;
  }

  write(bytes: Uint8Array): void {
    if (this.fd === undefined) throw new Error(`write after close: ${this.path}`);
    let offset = 0;
    while (offset < bytes.length) offset += writeSync(this.fd, bytes, offset, bytes.length - offset);
    this.written += bytes.length;
  }

  commitSync(): void {
    if (this.fd === undefined) throw new Error(`commit after close: ${this.path}`);
    fsyncSync(this.fd);
    closeSync(this.fd);
    this.fd = undefined;
    renameSync(this.temp, this.path);
    fsyncDir(dirname(this.path));
  }

  async commit(): Promise<void> {
    this.commitSync();
  }

  abort(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    rmSync(this.temp, { force: true });
  }
}

export class LocalObjectStore implements ObjectStore {
  constructor(readonly root: string) {}

  get uri(): string {
    return this.root;
  }

  private pathOf(key: string): string {
    return join(this.root, ...key.split('/'));
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      return await readFile(this.pathOf(key));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  getRange(key: string, start: number, end: number): Promise<Buffer> {
    if (end <= start) return Promise.resolve(Buffer.alloc(0));
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      createReadStream(this.pathOf(key), { start, end: end - 1 })
        .on('data', (chunk) => chunks.push(chunk as Buffer))
        .on('error', reject)
        .on('end', () => resolve(Buffer.concat(chunks)));
    });
  }

  async size(key: string): Promise<number | undefined> {
    try {
      return (await stat(this.pathOf(key))).size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  async put(key: string, bytes: Uint8Array | string): Promise<void> {
    writeFileAtomic(this.pathOf(key), bytes);
  }

  writer(key: string): ObjectWriter {
    return new LocalFileWriter(this.pathOf(key));
  }

  async list(prefix: string): Promise<string[]> {
    const keys: string[] = [];
    const walk = (dir: string, keyPrefix: string): void => {
      let entries;
      try {
        entries = readdirSync(dir, { withFileTypes: true });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw error;
      }
      for (const entry of entries) {
        const key = `${keyPrefix}${entry.name}`;
        if (entry.isDirectory()) walk(join(dir, entry.name), `${key}/`);
        else keys.push(key);
      }
    };
    walk(this.root, '');
    return keys.filter((k) => k.startsWith(prefix)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  async delete(key: string): Promise<void> {
    rmSync(this.pathOf(key), { force: true });
  }
}
