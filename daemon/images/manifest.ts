/**
 * A prepared image's manifest, `<images_dir>/<key>.json`, checked before a sandbox starts from it.
 * The file is trusted, but one written by hand may still be malformed or name the host root or the
 * daemon's own state, which the root disk would then hand to the guest with every sandbox's secrets.
 */
import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { isInsideOrSame, realPathOf } from '../../lib/real-path.js';

const AbsolutePath = Type.String({ pattern: '^/' });

export const ImageManifest = Type.Object({
  rootfs: AbsolutePath,
  /** The guest bootstrap's argument vector; the workload's is appended to it. */
  entrypoint: Type.Array(Type.String(), { minItems: 1 }),
  cmd: Type.Optional(Type.Array(Type.String())),
  env: Type.Optional(Type.Record(Type.String(), Type.String())),
  library_dir: Type.Optional(AbsolutePath),
});
export type ImageManifest = Static<typeof ImageManifest>;

const check = TypeCompiler.Compile(ImageManifest);

/** The manifest in `text`, or throws an Error saying what is wrong with it. */
export function parseManifest(text: string, stateDir: string): ImageManifest {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`is not JSON (${(error as Error).message})`);
  }
  const problem = check.Errors(value).First();
  if (problem) throw new Error(`is not a prepared image: ${problem.path || '/'}: ${problem.message}`);
  const manifest = value as ImageManifest;
  if (!manifest.entrypoint[0]!.startsWith('/')) throw new Error(`is not a prepared image: entrypoint[0] ${JSON.stringify(manifest.entrypoint[0])} is not an absolute path`);
  if (realPathOf(manifest.rootfs) === '/') throw new Error(`names the host root as its rootfs (${manifest.rootfs})`);
  if (isInsideOrSame(manifest.rootfs, stateDir) || isInsideOrSame(stateDir, manifest.rootfs)) {
    throw new Error(`names a rootfs ${manifest.rootfs} that overlaps the daemon's state ${stateDir}`);
  }
  return manifest;
}
