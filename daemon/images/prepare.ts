/**
 * `sandboxd image prepare`: makes a root filesystem directory into a prepared image. The work
 * (installing the static bootstrap as /sbin/sandbox-guest, writing `<images_dir>/<key>.json`
 * with rootfs, entrypoint, cmd, env and library_dir) is done by the firmware library's own
 * `sandbox-guest prepare-image`, so an image always carries the bootstrap of the firmware it
 * names; this module checks the inputs first so that each error names the input and carries
 * the right exit code.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { ConflictError, InvalidInputError } from '../../lib/errors.js';
import { fsyncPath } from '../../lib/durable.js';
import { FIRMWARE_FILES } from './paths.js';

const run = promisify(execFile);

export interface PrepareImageOptions {
  rootfs: string;
  imagesDir: string;
  /** Defaults to the rootfs directory's name. */
  key?: string;
  libraryDir: string;
  /** Default workload arguments. */
  cmd: string[];
  /** Default environment. */
  env: Record<string, string>;
  /** Replace an existing manifest of the same key. */
  force: boolean;
}

export interface PreparedImage {
  path: string;
  manifest: { rootfs: string; entrypoint: string[]; cmd: string[]; env: Record<string, string>; library_dir?: string };
}

const KEY = /^(?!\.)[A-Za-z0-9._-]{1,128}$/;

function directory(what: string, path: string): string {
  if (!existsSync(path)) throw new InvalidInputError(`${what} ${path}: no such directory`);
  if (!statSync(path).isDirectory()) throw new InvalidInputError(`${what} ${path}: not a directory`);
  return realpathSync(path);
}

export async function prepareImage(o: PrepareImageOptions): Promise<PreparedImage> {
  const rootfs = directory('rootfs', resolve(o.rootfs));
  if (rootfs === '/') throw new InvalidInputError('rootfs /: the host root cannot be an image');
  const key = o.key ?? basename(rootfs);
  if (!KEY.test(key)) throw new InvalidInputError(`--key ${JSON.stringify(key)}: must be 1-128 of [A-Za-z0-9._-], not starting with '.'`);
  const library = directory('--library-dir', resolve(o.libraryDir));
  const guest = join(library, FIRMWARE_FILES.guest);
  if (!existsSync(join(library, FIRMWARE_FILES.manifest)) || !existsSync(guest)) {
    throw new InvalidInputError(`--library-dir ${library}: not a firmware library (no ${FIRMWARE_FILES.manifest} or ${FIRMWARE_FILES.guest})`, {
      hint: 'scripts/setup.sh builds one in vmm-rs/target/firmware (see README, "Guest firmware and images")',
    });
  }
  const inside = (a: string, b: string): boolean => a === b || a.startsWith(`${b}/`);
  if (inside(resolve(o.imagesDir), rootfs) || inside(rootfs, resolve(o.imagesDir))) {
    throw new InvalidInputError(`--images-dir ${o.imagesDir} and rootfs ${rootfs} must not contain one another`);
  }
  await mkdir(resolve(o.imagesDir), { recursive: true }).catch((error: Error) => {
    throw new InvalidInputError(`--images-dir ${o.imagesDir}: ${error.message}`);
  });
  const imagesDir = directory('--images-dir', resolve(o.imagesDir));
  const path = join(imagesDir, `${key}.json`);
  if (existsSync(path) && !o.force) {
    throw new ConflictError(`image ${key}: ${path} already exists`, { hint: 'pass --force to replace it' });
  }
  try {
    await run(guest, [
      'prepare-image',
      '--rootfs', rootfs,
      '--images-dir', imagesDir,
      '--key', key,
      '--cmd', JSON.stringify(o.cmd),
      '--env', JSON.stringify(o.env),
      '--library-dir', library,
    ]);
  } catch (error) {
    const e = error as Error & { stderr?: string };
    // The binary's messages name the flag (`--rootfs ...: not a directory`); its flags are ours.
    throw new InvalidInputError((e.stderr ?? e.message).trim().replace(/^sandbox-guest prepare-image: /, ''));
  }
  // The binary renames the manifest into place; make the rename itself durable.
  fsyncPath(imagesDir);
  return { path, manifest: JSON.parse(readFileSync(path, 'utf8')) as PreparedImage['manifest'] };
}
