/**
 * `sandboxd image prepare`: makes a root filesystem directory into a prepared image. The work
 * (installing the static bootstrap as /sbin/sandbox-guest, writing `<images_dir>/<key>.json`
 * with rootfs, entrypoint, cmd, env and library_dir) is done by the firmware library's own
 * `sandbox-guest prepare-image`, so an image always carries the bootstrap of the firmware it
 * names; this module checks the inputs first so that each error names the input and carries
 * the right exit code.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { ConflictError, InvalidInputError } from '../../lib/errors.js';
import { fsyncPath } from '../../lib/durable.js';
import { directoryProblem, type PathInput } from '../path-input.js';
import { DEFAULT_FIRMWARE_DIR, FIRMWARE_FILES } from './paths.js';

const run = promisify(execFile);

export interface PrepareImageOptions {
  rootfs: string;
  /** Made when missing. */
  imagesDir: PathInput;
  /** Defaults to the rootfs directory's name. */
  key?: string;
  /** Unset: the library set-up builds (DEFAULT_FIRMWARE_DIR). */
  libraryDir?: PathInput;
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

/** The firmware library when none is named: the one set-up builds, and how to build it. */
const DEFAULT_LIBRARY: PathInput = { input: 'the default firmware library (--library-dir unset)', path: DEFAULT_FIRMWARE_DIR };
const BUILD_LIBRARY_HINT = 'scripts/setup.sh builds the default one, or `sandboxd firmware build --kernel-deb FILE --vmlinux FILE` '
  + '(README, "Guest firmware and images"); or name one with --library-dir';

/** The real path of a directory the user named; exit 2 naming the input otherwise. */
function directory({ input, path }: PathInput, hint?: string): string {
  const problem = directoryProblem({ input, path: resolve(path) });
  if (problem) throw new InvalidInputError(problem, hint === undefined ? {} : { hint });
  return realpathSync(path);
}

export async function prepareImage(o: PrepareImageOptions): Promise<PreparedImage> {
  const rootfs = directory({ input: 'rootfs', path: o.rootfs });
  if (rootfs === '/') throw new InvalidInputError('rootfs /: the host root cannot be an image');
  const key = o.key ?? basename(rootfs);
  if (!KEY.test(key)) throw new InvalidInputError(`--key ${JSON.stringify(key)}: must be 1-128 of [A-Za-z0-9._-], not starting with '.'`);
  const libraryDir = o.libraryDir ?? DEFAULT_LIBRARY;
  const library = directory(libraryDir, BUILD_LIBRARY_HINT);
  const guest = join(library, FIRMWARE_FILES.guest);
  if (!existsSync(join(library, FIRMWARE_FILES.manifest)) || !existsSync(guest)) {
    throw new InvalidInputError(`${libraryDir.input} ${library}: not a firmware library (no ${FIRMWARE_FILES.manifest} or ${FIRMWARE_FILES.guest})`, {
      hint: BUILD_LIBRARY_HINT,
    });
  }
  const inside = (a: string, b: string): boolean => a === b || a.startsWith(`${b}/`);
  const images = o.imagesDir;
  if (inside(resolve(images.path), rootfs) || inside(rootfs, resolve(images.path))) {
    throw new InvalidInputError(`${images.input} ${images.path} and rootfs ${rootfs} must not contain one another`);
  }
  await mkdir(resolve(images.path), { recursive: true }).catch((error: Error) => {
    throw new InvalidInputError(`${images.input} ${images.path}: ${error.message}`);
  });
  const imagesDir = directory(images);
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
