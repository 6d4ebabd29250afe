//! Loading a real Debian cloud kernel (fetched by scripts/setup.sh into
//! vmm-rs/target/guest-kernel, never committed): the bzImage through the 64-bit boot protocol
//! and the ELF vmlinux through its PVH note; and, in the slow tier, booting it to its first
//! console lines.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use linux_loader::loader::bootparam::boot_params;
use sandbox_vmm::arch::x86_64::boot::{self, EntryMode};
use sandbox_vmm::arch::x86_64::layout::{ram_regions, HIMEM_START, ZERO_PAGE_START};
use sandbox_vmm::vstate::stop::StopReason;
use sandbox_vmm::vstate::vm::{Vm, VmSpec};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use common::StateDir;

/// The cached kernel file, or None after reporting the test as skipped.
fn kernel(test: &str, name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guest-kernel").join(name);
    if path.is_file() {
        Some(path)
    } else {
        common::skip(test, &format!("{} is missing: scripts/setup.sh fetches Debian's cloud kernel", path.display()));
        None
    }
}

fn memory(mib: u64) -> GuestMemoryMmap {
    let ranges: Vec<_> = ram_regions(mib << 20).into_iter().map(|(a, l)| (GuestAddress(a), l as usize)).collect();
    GuestMemoryMmap::from_ranges(&ranges).unwrap()
}

#[test]
fn debian_bzimage_loads_through_the_64bit_boot_protocol() {
    let Some(path) = kernel("debian_bzimage_loads_through_the_64bit_boot_protocol", "vmlinuz") else { return };
    let image = std::fs::read(&path).unwrap();
    let mem = memory(128);
    let (result, entry) = boot::load_kernel(&mem, &path).unwrap();
    assert_eq!(entry.mode, EntryMode::Linux64);
    assert_eq!(entry.rip, HIMEM_START + 0x200);
    let hdr = result.setup_header.unwrap();
    assert!({ hdr.version } >= 0x020c, "protocol {:#x}", { hdr.version });
    // The protected-mode kernel (everything after the setup sectors) is at 1 MiB, verbatim.
    let setup = (image[0x1f1] as usize + 1) * 512;
    let mut loaded = vec![0u8; image.len() - setup];
    mem.read_slice(&mut loaded, GuestAddress(HIMEM_START)).unwrap();
    assert!(loaded == image[setup..], "kernel bytes differ from the image");

    // The zero page keeps the kernel's own header and adds the loader's fields.
    let params = boot::build_boot_params(&mem, Some(hdr), 20, None, None).unwrap();
    boot::write_boot_params(&mem, &params).unwrap();
    let back: boot_params = mem.read_obj(GuestAddress(ZERO_PAGE_START)).unwrap();
    assert_eq!(back.hdr.setup_sects, image[0x1f1]);
    assert_eq!(back.hdr.type_of_loader, 0xff);
    assert_eq!({ back.hdr.kernel_alignment }, u32::from_le_bytes(image[0x230..0x234].try_into().unwrap()));
}

#[test]
fn debian_vmlinux_loads_through_its_pvh_note() {
    let Some(path) = kernel("debian_vmlinux_loads_through_its_pvh_note", "vmlinux") else { return };
    let mem = memory(128);
    let (result, entry) = boot::load_kernel(&mem, &path).unwrap();
    assert_eq!(entry.mode, EntryMode::Pvh);
    assert_eq!(result.kernel_load, GuestAddress(0x100_0000), "CONFIG_PHYSICAL_START");
    assert!(entry.rip > 0x100_0000 && entry.rip < result.kernel_end, "PVH entry {:#x} outside the kernel", entry.rip);
    let code: [u8; 16] = mem.read_obj(GuestAddress(entry.rip)).unwrap();
    assert_ne!(code, [0u8; 16], "no code at the PVH entry");
}

#[test]
fn debian_kernels_are_refused_when_memory_is_too_small() {
    let Some(path) = kernel("debian_kernels_are_refused_when_memory_is_too_small", "vmlinux") else { return };
    let err = boot::load_kernel(&memory(32), &path).unwrap_err();
    assert_eq!(err.field(), "kernel");
}

/// Slow tier: under PVM a stock kernel is instruction-emulated (about 1000x slower), so this
/// only asks for the first console lines, within a bound.
#[test]
#[ignore = "slow tier: boots the Debian cloud kernel to its first console lines (minutes under PVM)"]
fn debian_vmlinux_boots_to_its_first_console_lines() {
    let test = "debian_vmlinux_boots_to_its_first_console_lines";
    require_kvm!(test);
    let Some(path) = kernel(test, "vmlinux") else { return };
    let state = StateDir::new();
    let log = state.0.join("serial.log");
    let spec = VmSpec {
        kernel: path,
        initrd: None,
        cmdline: "console=ttyS0 earlyprintk=ttyS0 reboot=k panic=-1 loglevel=8".into(),
        vcpus: 1,
        memory_mib: 256,
        serial_log: log.clone(),
        serial_log_max: 1 << 20,
        devices: Default::default(),
    };
    let mut vm = Vm::create(&spec).unwrap();
    vm.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut text = String::new();
    while Instant::now() < deadline && vm.stop_signal().reason().is_none() {
        text = String::from_utf8_lossy(&std::fs::read(&log).unwrap()).into_owned();
        if text.contains("Linux version") && text.contains("BIOS-e820") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let reason = vm.halt(StopReason::Terminated);
    assert!(text.contains("Linux version 6."), "no banner within the bound (stop: {reason:?}); console:\n{text}");
    assert!(text.contains("BIOS-e820"), "no e820 map on the console:\n{text}");
}
