/**
 * The two facts the firmware and image steps need from an ELF file, read from its headers
 * only (a vmlinux is 50 MB): whether it is dynamically linked (the bootstrap and init must
 * not be: an image may have no C library, the initramfs has none), and the PVH entry point
 * (Xen note XEN_ELFNOTE_PHYS32_ENTRY) the VMM's direct boot jumps to.
 */
import { closeSync, openSync, readSync } from 'node:fs';

const PT_INTERP = 3;
const PT_NOTE = 4;
const XEN_ELFNOTE_PHYS32_ENTRY = 18;

export interface ElfFacts {
  dynamic: boolean;
  /** Physical PVH entry address, when the file carries the Xen note. */
  pvhEntry: number | undefined;
}

function readAt(fd: number, offset: number, length: number): Buffer {
  const buf = Buffer.alloc(length);
  const n = readSync(fd, buf, 0, length, offset);
  return buf.subarray(0, n);
}

/** Throws `<path>: not a 64-bit little-endian ELF file` for anything else. */
export function elfFacts(path: string): ElfFacts {
  const fd = openSync(path, 'r');
  try {
    const header = readAt(fd, 0, 64);
    if (header.length < 64 || header.readUInt32BE(0) !== 0x7f454c46 || header[4] !== 2 || header[5] !== 1) {
      throw new Error(`${path}: not a 64-bit little-endian ELF file`);
    }
    const phoff = Number(header.readBigUInt64LE(32));
    const phentsize = header.readUInt16LE(54);
    const phnum = header.readUInt16LE(56);
    const table = readAt(fd, phoff, phentsize * phnum);
    if (table.length < phentsize * phnum) throw new Error(`${path}: truncated program headers`);
    const facts: ElfFacts = { dynamic: false, pvhEntry: undefined };
    for (let i = 0; i < phnum; i++) {
      const ph = table.subarray(i * phentsize, (i + 1) * phentsize);
      const type = ph.readUInt32LE(0);
      if (type === PT_INTERP) facts.dynamic = true;
      if (type === PT_NOTE) facts.pvhEntry ??= pvhNote(readAt(fd, Number(ph.readBigUInt64LE(8)), Number(ph.readBigUInt64LE(32))));
    }
    return facts;
  } finally {
    closeSync(fd);
  }
}

/** Notes are (namesz, descsz, type, name padded to 4, desc padded to 4). */
function pvhNote(notes: Buffer): number | undefined {
  const pad = (n: number): number => (n + 3) & ~3;
  for (let at = 0; at + 12 <= notes.length; ) {
    const namesz = notes.readUInt32LE(at);
    const descsz = notes.readUInt32LE(at + 4);
    const type = notes.readUInt32LE(at + 8);
    const name = notes.subarray(at + 12, at + 12 + namesz).toString('latin1');
    const desc = at + 12 + pad(namesz);
    if (name === 'Xen\0' && type === XEN_ELFNOTE_PHYS32_ENTRY && descsz >= 4 && desc + 4 <= notes.length) return notes.readUInt32LE(desc);
    at = desc + pad(descsz);
  }
  return undefined;
}
