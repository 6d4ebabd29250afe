/** `sandboxd firmware build`: (re)build the guest firmware library from the kernel package; run by scripts/setup.sh. */
import { DEFAULT_FIRMWARE_DIR, STATIC_GUEST_BINARY, buildFirmware, type FirmwareInputs } from '../../daemon/index.js';
import type { ParsedArgs } from '../kit/flags.js';
import { defineCommand } from '../kit/program.js';

/** `out` unset: the configuration's `library_dir`, else the built-in library. */
function flags(args: ParsedArgs): Omit<FirmwareInputs, 'out'> & { out: string | undefined } {
  return {
    kernelDeb: args.required('--kernel-deb'),
    vmlinux: args.required('--vmlinux'),
    guestBinary: args.text('--guest-binary') ?? STATIC_GUEST_BINARY,
    out: args.text('--out'),
  };
}

export const firmwareBuildCommand = defineCommand({
  name: 'firmware build',
  description: 'build the guest firmware library (vmlinux, bzImage, initramfs, sandbox-guest, manifest.json); a no-op when up to date',
  options: [
    { flags: '--kernel-deb <file>', description: 'the Debian linux-image-*-cloud-amd64 package (apt-get download)' },
    { flags: '--vmlinux <file>', description: 'the ELF vmlinux cut from that package\'s bzImage' },
    { flags: '--guest-binary <file>', description: `statically linked sandbox-guest (default: ${STATIC_GUEST_BINARY})` },
    { flags: '--out <dir>', description: `library directory (default: library_dir of the configuration, else ${DEFAULT_FIRMWARE_DIR})` },
  ],
  examples: ['sandboxd firmware build --kernel-deb vmm-rs/target/guest-kernel/linux-image-6.1.0-56-cloud-amd64_6.1.192-2_amd64.deb --vmlinux vmm-rs/target/guest-kernel/vmlinux'],
  flags,
  async run(ctx, f) {
    const result = await buildFirmware({ ...f, out: f.out ?? ctx.settings.get<string>('library_dir') ?? DEFAULT_FIRMWARE_DIR });
    const { kernel, modules } = result.manifest;
    ctx.stdout.write(`${result.dir}: ${result.built ? 'built' : 'up to date'} (${kernel.package} ${kernel.version}, ${modules.length} modules)\n`);
  },
});
