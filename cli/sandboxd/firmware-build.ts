/** `sandboxd firmware build`: (re)build the guest firmware library from the kernel package (daemon/images/firmware); run by scripts/setup.sh. */
import type { CommandSpec } from '../kit/program.js';
import { InvalidInputError } from '../kit/errors.js';
// paths.js is a leaf module of constants, named in --help; the image builders are loaded by `run`.
import { DEFAULT_FIRMWARE_DIR, STATIC_GUEST_BINARY } from '../../daemon/images/paths.js';

export const firmwareBuildCommand: CommandSpec = {
  name: 'firmware build',
  description: 'build the guest firmware library (vmlinux, bzImage, initramfs, sandbox-guest, manifest.json); a no-op when up to date',
  options: [
    { flags: '--kernel-deb <file>', description: 'the Debian linux-image-*-cloud-amd64 package (apt-get download)' },
    { flags: '--vmlinux <file>', description: 'the ELF vmlinux cut from that package\'s bzImage' },
    { flags: '--guest-binary <file>', description: `statically linked sandbox-guest (default: ${STATIC_GUEST_BINARY})` },
    { flags: '--out <dir>', description: `library directory (default: ${DEFAULT_FIRMWARE_DIR})` },
  ],
  examples: ['sandboxd firmware build --kernel-deb vmm-rs/target/guest-kernel/linux-image-6.1.0-56-cloud-amd64_6.1.192-2_amd64.deb --vmlinux vmm-rs/target/guest-kernel/vmlinux'],
  async run(ctx, { options }) {
    const { buildFirmware } = await import('../../daemon/images/firmware.js');
    for (const flag of ['kernelDeb', 'vmlinux'] as const) {
      if (typeof options[flag] !== 'string') throw new InvalidInputError(`--${flag === 'kernelDeb' ? 'kernel-deb' : flag} is required`);
    }
    const result = await buildFirmware({
      kernelDeb: options.kernelDeb as string,
      vmlinux: options.vmlinux as string,
      guestBinary: typeof options.guestBinary === 'string' ? options.guestBinary : STATIC_GUEST_BINARY,
      out: typeof options.out === 'string' ? options.out : DEFAULT_FIRMWARE_DIR,
    });
    const { kernel, modules } = result.manifest;
    ctx.stdout.write(`${result.dir}: ${result.built ? 'built' : 'up to date'} (${kernel.package} ${kernel.version}, ${modules.length} modules)\n`);
  },
};
