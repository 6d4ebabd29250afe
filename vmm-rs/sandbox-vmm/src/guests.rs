//! Tiny guest programs for the KVM integration tests and the benchmark (`bench/vm`), built
//! into the library only with the `test-guests` feature.
//!
//! They are built when needed, never shipped. Most are a few instructions assembled with GNU as
//! and ld (Debian binutils), each exercising one VMM path with real KVM exits (port I/O to the
//! 8250, the i8042 reset, a spinning counter in guest memory, the boot protocols' hand-over).
//! The virtio guests drive real devices through their MMIO windows and queues, which is more
//! than hand-written assembly should carry: they are freestanding C (`guests/*.c`) compiled
//! with gcc.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Prefixes a guest body with the entry symbol, in 64-bit code: without a PVH note the VMM
/// enters it in long mode through the 64-bit Linux boot path (%rsi = zero page).
macro_rules! prelude {
    () => {
        ".code64\n.text\n.globl _start\n_start:\n"
    };
}
macro_rules! long_mode_guest {
    ($body:expr) => {
        concat!(prelude!(), $body)
    };
}
const PRELUDE: &str = prelude!();

/// A fresh `<dir>/<name>-<pid>-<n>` path stem, so parallel tests never share a file.
fn scratch_stem(dir: &Path, name: &str) -> io::Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    fs::create_dir_all(dir)?;
    Ok(dir.join(format!("{name}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))))
}

fn run(cmd: &mut Command, package: &str) -> io::Result<()> {
    let out = cmd.output().map_err(|e| io::Error::new(e.kind(), format!("{cmd:?}: {e} (needs Debian {package})")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr))))
    }
}

/// The linker flags every guest shares: a static ELF64 whose code starts at 2 MiB.
const LINK_FLAGS: [&str; 7] = ["-nostdlib", "-static", "-e", "_start", "-Ttext=0x200000", "--build-id=none", "-zmax-page-size=0x1000"];

/// Assembles `asm` (AT&T syntax) into `<dir>/<name>-<pid>-<n>.elf`, an ELF64 linked at 2 MiB.
pub fn build(dir: &Path, name: &str, asm: &str) -> io::Result<PathBuf> {
    let base = scratch_stem(dir, name)?;
    let (src, obj, elf) = (base.with_extension("S"), base.with_extension("o"), base.with_extension("elf"));
    fs::write(&src, format!("{asm}\n"))?;
    let result = run(Command::new("as").arg("--64").arg("-o").arg(&obj).arg(&src), "binutils")
        .and_then(|_| run(Command::new("ld").args(LINK_FLAGS).arg("-o").arg(&elf).arg(&obj), "binutils"));
    let _ = fs::remove_file(&src);
    let _ = fs::remove_file(&obj);
    result.map(|_| elf)
}

/// The freestanding C of the virtio test guests: entry, serial output, the boot command line
/// and a minimal virtio-mmio driver (`guests/virtio.h`).
pub const VIRTIO_H: &str = include_str!("guests/virtio.h");
/// Reads a known sector of the first virtio-blk disk, tries a write and GET_ID, and with
/// `bench_mib=N` on its command line reads N MiB in 1 MiB requests.
pub const BLOCK_C: &str = include_str!("guests/block.c");
/// Asks the first virtio-net device for an address by DHCP, then resolves the router by ARP.
pub const NET_C: &str = include_str!("guests/net.c");
/// Echoes vsock connections to `listen=PORT`, or connects out to host `connect=PORT`.
pub const VSOCK_C: &str = include_str!("guests/vsock.c");

/// Compiles one of the C guests (`source` includes `virtio.h`) into an ELF64 linked at 2 MiB,
/// entered in long mode like the assembled ones. Freestanding, no SSE (the boot CPU state does
/// not enable it), no red zone (nothing here needs one, and interrupts stay off).
pub fn build_c(dir: &Path, name: &str, source: &str) -> io::Result<PathBuf> {
    // The source and its header go in a directory of their own, so `#include "virtio.h"`
    // finds the header beside it.
    let base = scratch_stem(dir, name)?;
    let (src_dir, elf) = (base.with_extension("src"), base.with_extension("elf"));
    fs::create_dir_all(&src_dir)?;
    fs::write(src_dir.join("virtio.h"), VIRTIO_H)?;
    fs::write(src_dir.join(format!("{name}.c")), source)?;
    let link = LINK_FLAGS[2..].iter().map(|f| format!("-Wl,{f}"));
    let result = run(
        Command::new("gcc")
            .args(["-O2", "-std=gnu11", "-Wall", "-Werror", "-ffreestanding", "-fno-builtin", "-fno-pic", "-no-pie", "-fno-stack-protector"])
            .args(["-mgeneral-regs-only", "-mno-red-zone", "-nostdlib", "-static", "-fno-asynchronous-unwind-tables"])
            .args(link)
            .arg("-o")
            .arg(&elf)
            .arg(src_dir.join(format!("{name}.c"))),
        "gcc (build-essential)",
    );
    let _ = fs::remove_dir_all(&src_dir);
    result.map(|_| elf)
}

/// Prints "hello from long mode 1\n" (the 1 computed with a 64-bit immediate, which only
/// long mode can hold), then resets the machine through the i8042.
pub const HELLO_ASM: &str = long_mode_guest!(
    r#"
    mov $0x3f8, %dx
    lea msg(%rip), %rsi
    mov $(msg_end - msg), %ecx
1:  lodsb
    outb %al, %dx
    dec %ecx
    jnz 1b
    movabs $0x100000000, %rax
    shr $32, %rax
    add $'0', %al
    outb %al, %dx
    mov $'\n', %al
    outb %al, %dx
    mov $0xfe, %al
    outb %al, $0x64
2:  hlt
    jmp 2b
msg: .ascii "hello from long mode "
msg_end:
"#);

/// Guest-physical address of the spinning guests' counter.
pub const COUNTER_ADDR: u64 = 0x30_0000;

/// Counts forever, storing the count at COUNTER_ADDR; every 16384 counts it prints a dot.
pub const SPIN_ASM: &str = long_mode_guest!(r#"
    mov $0x3f8, %dx
    xor %rbx, %rbx
1:  inc %rbx
    mov %rbx, 0x300000
    test $0x3fff, %ebx
    jnz 1b
    mov $'.', %al
    outb %al, %dx
    jmp 1b
"#);

/// Echoes what the 64-bit Linux boot protocol handed it: the command line (through the zero
/// page's `cmd_line_ptr`), the RSDP signature (through `acpi_rsdp_addr`), the e820 entry count
/// and the initrd's bytes (`ramdisk_image`, `ramdisk_size`), as
/// `<cmdline>|RSD PTR |<n>|<initrd>\n`; `!` if %rsi does not point at a zero page.
pub const BOOT_PARAMS_ASM: &str = long_mode_guest!(r#"
    mov $0x3f8, %dx
    cmpl $0x53726448, 0x202(%rsi)
    jne bad
    mov 0x228(%rsi), %ebx
1:  mov (%rbx), %al
    test %al, %al
    jz 2f
    outb %al, %dx
    inc %rbx
    jmp 1b
2:  mov $'|', %al
    outb %al, %dx
    mov 0x70(%rsi), %rbx
    mov $8, %ecx
3:  mov (%rbx), %al
    outb %al, %dx
    inc %rbx
    dec %ecx
    jnz 3b
    mov $'|', %al
    outb %al, %dx
    movzbl 0x1e8(%rsi), %eax
    add $'0', %al
    outb %al, %dx
    mov $'|', %al
    outb %al, %dx
    mov 0x218(%rsi), %ebx
    mov 0x21c(%rsi), %ecx
    test %ecx, %ecx
    jz 5f
4:  mov (%rbx), %al
    outb %al, %dx
    inc %rbx
    dec %ecx
    jnz 4b
5:  mov $'\n', %al
    outb %al, %dx
    jmp reset
bad:
    mov $'!', %al
    outb %al, %dx
reset:
    mov $0xfe, %al
    outb %al, $0x64
6:  hlt
    jmp 6b
"#);

/// A PVH kernel in miniature: a Xen PHYS32_ENTRY note, 32-bit protected-mode code that checks
/// %ebx points at `hvm_start_info` (magic 0x336ec578) and prints `pvh <cmdline>\n`.
pub const PVH_ASM: &str = r#"
.section .note.pvh, "a", @note
    .balign 4
    .long 4, 4, 18
    .asciz "Xen"
    .long pvh_entry
.text
.code32
.globl _start
_start:
pvh_entry:
    mov $0x3f8, %dx
    cmpl $0x336ec578, (%ebx)
    jne bad
    mov $'p', %al
    outb %al, %dx
    mov $'v', %al
    outb %al, %dx
    mov $'h', %al
    outb %al, %dx
    mov $' ', %al
    outb %al, %dx
    mov 24(%ebx), %esi
1:  mov (%esi), %al
    test %al, %al
    jz 2f
    outb %al, %dx
    inc %esi
    jmp 1b
2:  mov $'
', %al
    outb %al, %dx
    jmp reset
bad:
    mov $'!', %al
    outb %al, %dx
reset:
    mov $0xfe, %al
    outb %al, $0x64
3:  hlt
    jmp 3b
"#;

/// Raises an exception under the boot IDT, which holds no usable gate: neither the exception
/// nor the double fault that follows can be delivered, so the CPU triple-faults
/// (KVM_EXIT_SHUTDOWN).
pub const TRIPLE_FAULT_ASM: &str = long_mode_guest!(
    r#"
    ud2
1:  jmp 1b
"#
);

/// Writes `count` bytes to an unclaimed port (one VM exit each, answered by the VMM's port
/// bus), then resets. With `NOP_LOOP_ASM` it measures the exit round trip.
pub fn exit_loop_asm(count: u32) -> String {
    format!("{PRELUDE}    mov ${count}, %ecx\n1:  outb %al, $0x80\n    dec %ecx\n    jnz 1b\n{RESET_TAIL}")
}

/// The same loop without the port write: the baseline of `exit_loop_asm`.
pub fn nop_loop_asm(count: u32) -> String {
    format!("{PRELUDE}    mov ${count}, %ecx\n1:  nop\n    dec %ecx\n    jnz 1b\n{RESET_TAIL}")
}

/// Prints one byte and resets: create-to-first-serial-byte.
pub const FIRST_BYTE_ASM: &str = long_mode_guest!(
    r#"
    mov $0x3f8, %dx
    mov $'!', %al
    outb %al, %dx
    mov $0xfe, %al
    outb %al, $0x64
1:  hlt
    jmp 1b
"#
);

const RESET_TAIL: &str = "    mov $0xfe, %al\n    outb %al, $0x64\n2:  hlt\n    jmp 2b\n";
