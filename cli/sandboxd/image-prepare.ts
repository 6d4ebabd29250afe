/** `sandboxd image prepare <rootfs>`: install the bootstrap into a root filesystem and write its image manifest. */
import { InvalidInputError } from '../../lib/errors.js';
import { DEFAULT_FIRMWARE_DIR, prepareImage, type PrepareImageOptions } from '../../daemon/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';
import { imagesDirSetting, pathSetting } from './settings.js';

/** `NAME=VALUE` of a repeatable `--env` as a map. */
function environment(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    const name = pair.slice(0, eq);
    if (eq <= 0 || /[\0=]/.test(name)) throw new InvalidInputError(`--env ${JSON.stringify(pair)}: expected NAME=VALUE`);
    env[name] = pair.slice(eq + 1);
  }
  return env;
}

interface PrepareFlags extends Omit<PrepareImageOptions, 'imagesDir' | 'libraryDir'> {
  /** Unset: the configuration's `images_dir`. */
  imagesDir: string | undefined;
  /** Unset: the configuration's `library_dir`, else the library set-up builds. */
  libraryDir: string | undefined;
}

function flags(args: ParsedArgs): PrepareFlags {
  const key = args.text('--key');
  return {
    rootfs: args.requiredPositional(0, 'ROOTFS'),
    imagesDir: args.text('--images-dir'),
    ...(key === undefined ? {} : { key }),
    libraryDir: args.text('--library-dir'),
    cmd: [...args.rest],
    env: environment(args.list('--env')),
    force: args.has('--force'),
  };
}

export const imagePrepareCommand = defineCommand({
  name: 'image prepare <rootfs>',
  takesRest: true,
  description: 'make a root filesystem directory a prepared image: install the guest bootstrap, write <images-dir>/<key>.json',
  options: [
    { flags: '--images-dir <dir>', description: 'directory of prepared image manifests (the daemon\'s --images-dir); created if missing (default: images_dir of the configuration)' },
    { flags: '--key <key>', description: 'image key, the manifest name (default: the rootfs directory name)' },
    { flags: '--library-dir <dir>', description: `firmware library directory (default: library_dir of the configuration, else ${DEFAULT_FIRMWARE_DIR})` },
    { flags: '--env <NAME=VALUE>', description: 'default environment of the workload (repeatable)' },
    { flags: '--force', description: 'replace an existing manifest of the same key' },
  ],
  examples: [
    'sandboxd image prepare /srv/rootfs/debian --images-dir /srv/images --key debian --env PATH=/usr/bin:/bin -- python3 -m http.server',
  ],
  flags,
  async run(ctx, f) {
    const { imagesDir, libraryDir, ...rest } = f;
    const library = pathSetting('--library-dir', libraryDir, ctx.settings, 'library_dir');
    const image = await prepareImage({ ...rest, imagesDir: imagesDirSetting(imagesDir, ctx.settings), ...(library === undefined ? {} : { libraryDir: library }) });
    ctx.log.info(`installed the bootstrap at ${image.manifest.rootfs}${image.manifest.entrypoint[0]}`);
    ctx.stdout.write(`${image.path}\n`);
  },
});
