/** `sandboxd image prepare <rootfs>`: install the bootstrap into a root filesystem and write its image manifest (daemon/images/prepare). */
import type { CommandSpec } from '../kit/program.js';
import { InvalidInputError } from '../kit/errors.js';
// paths.js is a leaf module of constants, named in --help; the image builders are loaded by `run`.
import { DEFAULT_FIRMWARE_DIR } from '../../daemon/images/paths.js';

const list = (v: unknown): string[] => (v === undefined ? [] : Array.isArray(v) ? v.map(String) : [String(v)]);

export const imagePrepareCommand: CommandSpec = {
  name: 'image prepare <rootfs>',
  description: 'make a root filesystem directory a prepared image: install the guest bootstrap, write <images-dir>/<key>.json',
  options: [
    { flags: '--images-dir <dir>', description: 'directory of prepared image manifests (the daemon\'s --images-dir); created if missing' },
    { flags: '--key <key>', description: 'image key, the manifest name (default: the rootfs directory name)' },
    { flags: '--library-dir <dir>', description: `firmware library directory (default: ${DEFAULT_FIRMWARE_DIR})` },
    { flags: '--env <NAME=VALUE>', description: 'default environment of the workload (repeatable)' },
    { flags: '--force', description: 'replace an existing manifest of the same key' },
  ],
  examples: [
    'sandboxd image prepare /srv/rootfs/debian --images-dir /srv/images --key debian --env PATH=/usr/bin:/bin -- python3 -m http.server',
  ],
  async run(ctx, { positional, options, rest }) {
    const { parseEnv, prepareImage } = await import('../../daemon/images/prepare.js');
    if (typeof options.imagesDir !== 'string' || options.imagesDir === '') throw new InvalidInputError('--images-dir is required');
    const image = await prepareImage({
      rootfs: positional[0] as string,
      imagesDir: options.imagesDir,
      key: options.key === undefined ? undefined : String(options.key),
      libraryDir: typeof options.libraryDir === 'string' ? options.libraryDir : DEFAULT_FIRMWARE_DIR,
      cmd: rest,
      env: parseEnv(list(options.env)),
      force: options.force === true,
    });
    ctx.log.info(`installed the bootstrap at ${image.manifest.rootfs}${image.manifest.entrypoint[0]}`);
    ctx.stdout.write(`${image.path}\n`);
  },
};
