/**
 * The read-only root disk of a prepared image: its rootfs directory as an ext4 image made with
 * `mke2fs -d`, which the VMM attaches as the first virtio-blk disk (`/dev/vda`, read-only) and
 * the guest mounts under a private writable overlay.
 *
 * Images are cached by content: the key is a SHA-256 over the tree as the image will hold it
 * (each entry's path, type, mode, owner, mtime, size, symlink target, device number, hard-link
 * group, and each regular file's SHA-256) and the recipe's version. A tree that has not changed
 * maps to the image already built, however often sandboxes are created from it; any change
 * that would make another image makes another key. File hashes are remembered by inode and
 * change time in `hashes.json` beside the images, so an unchanged file is not read again.
 *
 * sandboxd keeps the cache in its state directory (`<state>/disks/<key>.ext4`); callers name
 * the directory. Images are written to a temporary name, fsynced and renamed into place, so a
 * crash leaves no partial image under a key; two builders of one key both produce it whole.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, readFileSync, statSync, type BigIntStats } from 'node:fs';
import { chmod, lstat, readdir, readlink, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { InvalidInputError, UnavailableError } from '../../lib/errors.js';
import { fsyncPath, renameDurably, tempSiblingOf, writeFileDurably } from '../../lib/durable.js';

const run = promisify(execFile);

/** Bumped whenever the mke2fs recipe below changes, so old images are not taken for new ones. */
const RECIPE = 'sandboxd-rootfs-ext4/1';
const BLOCK = 4096;

export interface RootfsDiskOptions {
  /** The prepared image's root filesystem directory. */
  rootfs: string;
  /** Where the images and the hash index live (created if missing). */
  cacheDir: string;
}

export interface RootfsDisk {
  /** `<cacheDir>/<key>.ext4`, mode 0444. */
  path: string;
  key: string;
  /** False when the image was already in the cache. */
  built: boolean;
}

interface HashEntry {
  ctimeNs: string;
  size: string;
  sha256: string;
}

type HashIndex = Record<string, HashEntry>;

interface Walk {
  lines: string[];
  files: number;
  dataBlocks: bigint;
  /** First path seen of each multiply linked inode. */
  links: Map<string, string>;
}

async function fileSha256(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** A regular file's hash, from the index when its inode, size and change time are as recorded. */
async function hashOf(path: string, st: BigIntStats, index: HashIndex, seen: HashIndex): Promise<string> {
  const id = `${st.dev}:${st.ino}`;
  const known = index[id];
  const entry: HashEntry =
    known && known.ctimeNs === String(st.ctimeNs) && known.size === String(st.size)
      ? known
      : { ctimeNs: String(st.ctimeNs), size: String(st.size), sha256: await fileSha256(path) };
  seen[id] = entry;
  return entry.sha256;
}

async function walk(root: string, rel: string, out: Walk, index: HashIndex, seen: HashIndex): Promise<void> {
  const path = rel ? join(root, rel) : root;
  const st = await lstat(path, { bigint: true });
  const meta = `${(st.mode & 0o7777n).toString(8)} ${st.uid}:${st.gid} ${st.mtimeMs / 1000n}`;
  const name = JSON.stringify(rel || '.');
  out.files++;
  if (st.isDirectory()) {
    out.lines.push(`d ${name} ${meta}`);
    out.dataBlocks += 1n;
    const entries = (await readdir(path)).sort();
    for (const entry of entries) await walk(root, rel ? join(rel, entry) : entry, out, index, seen);
    return;
  }
  const id = `${st.dev}:${st.ino}`;
  if (st.nlink > 1n) {
    const first = out.links.get(id);
    if (first !== undefined) {
      out.lines.push(`h ${name} ${JSON.stringify(first)}`);
      return;
    }
    out.links.set(id, rel);
  }
  if (st.isFile()) {
    out.lines.push(`f ${name} ${meta} ${st.size} ${await hashOf(path, st, index, seen)}`);
    out.dataBlocks += (st.size + BigInt(BLOCK) - 1n) / BigInt(BLOCK) + 1n;
  } else if (st.isSymbolicLink()) {
    out.lines.push(`l ${name} ${meta} ${JSON.stringify(await readlink(path))}`);
    out.dataBlocks += 1n;
  } else if (st.isCharacterDevice() || st.isBlockDevice()) {
    out.lines.push(`${st.isCharacterDevice() ? 'c' : 'b'} ${name} ${meta} ${st.rdev}`);
  } else if (st.isFIFO()) {
    out.lines.push(`p ${name} ${meta}`);
  }
  // Sockets are not copied by mke2fs -d, and so are not part of the image.
}

/** The hash index as stored ('' when missing) and as parsed ({} when missing or unreadable). */
function readIndex(path: string): { text: string; index: HashIndex } {
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
    return { text, index: JSON.parse(text) as HashIndex };
  } catch {
    return { text, index: {} };
  }
}

/** The ext4 image of `rootfs`, built unless the cache already holds the same tree. */
export async function rootfsDisk(o: RootfsDiskOptions): Promise<RootfsDisk> {
  if (!existsSync(o.rootfs) || !statSync(o.rootfs).isDirectory()) throw new InvalidInputError(`rootfs ${o.rootfs}: not a directory`);
  mkdirSync(o.cacheDir, { recursive: true, mode: 0o700 });
  const indexPath = join(o.cacheDir, 'hashes.json');
  const stored = readIndex(indexPath);
  const seen: HashIndex = {};
  const tree: Walk = { lines: [RECIPE], files: 0, dataBlocks: 0n, links: new Map() };
  await walk(o.rootfs, '', tree, stored.index, seen);
  // The index keeps only this tree's files: one index per cache, for the trees built last. It is
  // rewritten only when it changed: every sandbox created from an unchanged tree comes through
  // here, and need not pay for a durable write.
  const text = JSON.stringify(seen);
  if (text !== stored.text) writeFileDurably(indexPath, text);
  const key = createHash('sha256').update(tree.lines.join('\n')).digest('hex');
  const path = join(o.cacheDir, `${key}.ext4`);
  if (existsSync(path)) return { path, key, built: false };

  // Room for the data, the inode tables and ext4's own metadata, with a margin for what the
  // estimate misses; read-only, so nothing is reserved and no journal is kept.
  const inodes = tree.files + 64;
  const bytes = (tree.dataBlocks * BigInt(BLOCK) * 11n) / 10n + BigInt(inodes) * 256n + (16n << 20n);
  const sizeKiB = (bytes + 1023n) / 1024n;
  const uuid = `${key.slice(0, 8)}-${key.slice(8, 12)}-4${key.slice(13, 16)}-8${key.slice(17, 20)}-${key.slice(20, 32)}`;
  const tmp = tempSiblingOf(path);
  try {
    await run('mke2fs', ['-q', '-F', '-t', 'ext4', '-b', String(BLOCK), '-N', String(inodes), '-m', '0', '-O', '^has_journal',
      '-U', uuid, '-E', `root_owner=0:0,hash_seed=${uuid}`, '-L', 'sandbox-root', '-d', o.rootfs, tmp, `${sizeKiB}k`],
    { env: { PATH: '/usr/sbin:/sbin:/usr/bin:/bin', E2FSPROGS_FAKE_TIME: '0' } });
  } catch (error) {
    await rm(tmp, { force: true });
    const e = error as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT') throw new UnavailableError('mke2fs is not installed (Debian package e2fsprogs)');
    throw new InvalidInputError(`rootfs ${o.rootfs}: mke2fs failed: ${(e.stderr ?? e.message).trim()}`);
  }
  await chmod(tmp, 0o444);
  fsyncPath(tmp);
  renameDurably(tmp, path);
  return { path, key, built: true };
}
