//! Loading a kernel and preparing the boot CPU state.
//!
//! linux-loader parses and loads the images (ELF with or without a PVH note, bzImage) and owns
//! the `boot_params`/`hvm_start_info` layouts. What no crate does is written here: the e820
//! map for our layout, the identity page tables and GDT a 64-bit entry needs, and the initial
//! register, MSR, LAPIC, FPU and CPUID state (Firecracker and Cloud Hypervisor each keep their
//! own copy of these for the same reason).

use std::fs::File;
use std::io;
use std::path::Path;

use kvm_bindings::{kvm_fpu, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, CpuId, Msrs};
use kvm_ioctls::VcpuFd;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use linux_loader::loader::elf::start_info::{hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info};
use linux_loader::loader::{self, BzImage, Elf, KernelLoader, KernelLoaderResult, PvhBootCapability};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::layout::*;

pub const E820_RAM: u32 = 1;
pub const E820_RESERVED: u32 = 2;
const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448; // "HdrS"
const KERNEL_LOADER_OTHER: u8 = 0xff;
/// Alignment a kernel without a setup header (a plain ELF) is assumed to need.
const KERNEL_MIN_ALIGNMENT: u32 = 0x100_0000;
const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
/// The 64-bit entry of a bzImage is 0x200 bytes into the protected-mode kernel.
const BZIMAGE_64BIT_ENTRY_OFFSET: u64 = 0x200;
/// `xloadflags` bit: the kernel has a 64-bit entry point.
const XLF_KERNEL_64: u16 = 1 << 0;
/// Without a header to say otherwise, initrds are kept below this (the boot protocol's default).
const DEFAULT_INITRD_ADDR_MAX: u64 = 0x37ff_ffff;

#[derive(Debug)]
pub struct BootError {
    /// The start-configuration field at fault (`kernel`, `initrd`, `cmdline`), or `boot`.
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for BootError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn boot_err(field: &'static str, message: impl Into<String>) -> BootError {
    BootError { field, message: message.into() }
}

/// How the boot vCPU enters the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryMode {
    /// 64-bit Linux boot protocol: long mode, paging on, %rsi = zero page.
    Linux64,
    /// PVH: 32-bit protected mode, paging off, %rbx = `hvm_start_info`.
    Pvh,
}

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub mode: EntryMode,
    pub rip: u64,
}

/// The e820 map for our layout: conventional memory, the reserved BIOS area (which holds the
/// ACPI tables), then the RAM regions from 1 MiB.
pub fn e820_map(mem: &GuestMemoryMmap) -> Vec<(u64, u64, u32)> {
    let mut map = vec![(0, EBDA_START, E820_RAM), (EBDA_START, HIMEM_START - EBDA_START, E820_RESERVED)];
    for region in mem.iter() {
        let start = region.start_addr().raw_value().max(HIMEM_START);
        let end = region.start_addr().raw_value() + region.len();
        if end > start {
            map.push((start, end - start, E820_RAM));
        }
    }
    map
}

/// Reads the kernel image: an ELF (PVH entry when it has the note, else its 64-bit entry), or
/// a bzImage entered through the 64-bit boot protocol.
pub fn load_kernel(mem: &GuestMemoryMmap, path: &Path) -> Result<(KernelLoaderResult, Entry), BootError> {
    let open = || File::open(path).map_err(|e| boot_err("kernel", format!("{}: {e}", path.display())));
    let mut file = open()?;
    match Elf::load(mem, None, &mut file, Some(GuestAddress(HIMEM_START))) {
        Ok(result) => {
            let entry = match result.pvh_boot_cap {
                PvhBootCapability::PvhEntryPresent(addr) => Entry { mode: EntryMode::Pvh, rip: addr.raw_value() },
                _ => Entry { mode: EntryMode::Linux64, rip: result.kernel_load.raw_value() },
            };
            Ok((result, entry))
        }
        Err(loader::Error::Elf(loader::elf::Error::InvalidElfMagicNumber)) => {
            let mut file = open()?;
            let result = BzImage::load(mem, None, &mut file, Some(GuestAddress(HIMEM_START)))
                .map_err(|e| boot_err("kernel", format!("{}: neither an ELF nor a bzImage: {e}", path.display())))?;
            let hdr = result.setup_header.expect("the bzImage loader always returns the setup header");
            let (version, xloadflags) = (hdr.version, hdr.xloadflags);
            if version < 0x020c || xloadflags & XLF_KERNEL_64 == 0 {
                return Err(boot_err(
                    "kernel",
                    format!("{}: bzImage protocol {version:#x} has no 64-bit entry (needs 2.12 and XLF_KERNEL_64)", path.display()),
                ));
            }
            let rip = result.kernel_load.raw_value() + BZIMAGE_64BIT_ENTRY_OFFSET;
            Ok((result, Entry { mode: EntryMode::Linux64, rip }))
        }
        Err(e) => Err(boot_err("kernel", format!("{}: {e}", path.display()))),
    }
}

/// Copies the initrd to the top of low memory (below `addr_max`), page aligned.
pub fn load_initrd(mem: &GuestMemoryMmap, path: &Path, kernel_end: u64, addr_max: u64) -> Result<(u64, u64), BootError> {
    let mut file = File::open(path).map_err(|e| boot_err("initrd", format!("{}: {e}", path.display())))?;
    let size = file.metadata().map_err(|e| boot_err("initrd", format!("{}: {e}", path.display())))?.len();
    let low_end = mem.iter().next().map(|r| r.len()).unwrap_or(0);
    let top = low_end.min(addr_max + 1);
    let start = top.checked_sub(size).map(|s| s & !0xfff).filter(|s| *s >= kernel_end).ok_or_else(|| {
        boot_err("initrd", format!("{}: {size} bytes do not fit between the kernel and {top:#x}", path.display()))
    })?;
    mem.read_exact_volatile_from(GuestAddress(start), &mut file, size as usize)
        .map_err(|e| boot_err("initrd", format!("{}: {e}", path.display())))?;
    Ok((start, size))
}

pub fn write_cmdline(mem: &GuestMemoryMmap, cmdline: &str) -> Result<(), BootError> {
    let c = loader::Cmdline::try_from(cmdline, crate::config::CMDLINE_MAX).map_err(|e| boot_err("cmdline", e.to_string()))?;
    loader::load_cmdline(mem, GuestAddress(CMDLINE_START), &c).map_err(|e| boot_err("cmdline", e.to_string()))
}

/// The zero page for the 64-bit Linux boot protocol.
pub fn build_boot_params(
    mem: &GuestMemoryMmap,
    header: Option<setup_header>,
    cmdline_len: usize,
    initrd: Option<(u64, u64)>,
    rsdp: Option<u64>,
) -> Result<boot_params, BootError> {
    let mut params = boot_params::default();
    match header {
        Some(hdr) => params.hdr = hdr,
        None => params.hdr.kernel_alignment = KERNEL_MIN_ALIGNMENT,
    }
    params.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    params.hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
    params.hdr.header = KERNEL_HDR_MAGIC;
    params.hdr.cmd_line_ptr = CMDLINE_START as u32;
    params.hdr.cmdline_size = cmdline_len as u32 + 1;
    if let Some((addr, size)) = initrd {
        params.hdr.ramdisk_image = addr as u32;
        params.hdr.ramdisk_size = size as u32;
    }
    params.acpi_rsdp_addr = rsdp.unwrap_or(0);
    let map = e820_map(mem);
    if map.len() > params.e820_table.len() {
        return Err(boot_err("boot", "too many e820 entries"));
    }
    for (slot, (addr, size, kind)) in params.e820_table.iter_mut().zip(&map) {
        *slot = boot_e820_entry { addr: *addr, size: *size, r#type: *kind };
    }
    params.e820_entries = map.len() as u8;
    Ok(params)
}

pub fn write_boot_params(mem: &GuestMemoryMmap, params: &boot_params) -> Result<(), BootError> {
    let bp = BootParams::new::<boot_params>(params, GuestAddress(ZERO_PAGE_START));
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(&bp, mem).map_err(|e| boot_err("boot", e.to_string()))
}

/// `hvm_start_info` and its tables for the PVH entry.
pub fn write_pvh_info(
    mem: &GuestMemoryMmap,
    initrd: Option<(u64, u64)>,
    rsdp: Option<u64>,
) -> Result<(), BootError> {
    let memmap: Vec<hvm_memmap_table_entry> = e820_map(mem)
        .into_iter()
        .map(|(addr, size, kind)| hvm_memmap_table_entry { addr, size, type_: kind, reserved: 0 })
        .collect();
    let mut info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: 1,
        cmdline_paddr: CMDLINE_START,
        rsdp_paddr: rsdp.unwrap_or(0),
        memmap_paddr: PVH_MEMMAP_START,
        memmap_entries: memmap.len() as u32,
        ..Default::default()
    };
    let mut params = BootParams::new::<hvm_start_info>(&info, GuestAddress(PVH_INFO_START));
    if let Some((paddr, size)) = initrd {
        info.nr_modules = 1;
        info.modlist_paddr = PVH_MODLIST_START;
        params = BootParams::new::<hvm_start_info>(&info, GuestAddress(PVH_INFO_START));
        params.set_modules(&[hvm_modlist_entry { paddr, size, ..Default::default() }], GuestAddress(PVH_MODLIST_START));
    }
    params.set_sections(&memmap, GuestAddress(PVH_MEMMAP_START));
    PvhBootConfigurator::write_bootparams::<GuestMemoryMmap>(&params, mem).map_err(|e| boot_err("boot", e.to_string()))
}

/// A GDT entry from flags (access byte + flags nibble, as `0xa09b`), base and limit.
pub const fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((base as u64 & 0xff00_0000) << 32)
        | ((flags as u64 & 0xf0ff) << 40)
        | ((limit as u64 & 0x000f_0000) << 32)
        | ((base as u64 & 0x00ff_ffff) << 16)
        | (limit as u64 & 0x0000_ffff)
}

/// The KVM segment register a GDT entry describes.
pub fn segment_from_gdt(entry: u64, index: u16) -> kvm_segment {
    let base = (((entry >> 16) & 0xff_ffff) | ((entry >> 32) & 0xff00_0000)) as u32;
    let limit = ((entry & 0xffff) | ((entry >> 32) & 0xf_0000)) as u32;
    let g = ((entry >> 55) & 1) as u8;
    let present = ((entry >> 47) & 1) as u8;
    kvm_segment {
        base: base as u64,
        limit: if g == 1 { (limit << 12) | 0xfff } else { limit },
        selector: index * 8,
        type_: ((entry >> 40) & 0xf) as u8,
        present,
        dpl: ((entry >> 45) & 3) as u8,
        db: ((entry >> 54) & 1) as u8,
        s: ((entry >> 44) & 1) as u8,
        l: ((entry >> 53) & 1) as u8,
        g,
        avl: ((entry >> 52) & 1) as u8,
        unusable: if present == 1 { 0 } else { 1 },
        padding: 0,
    }
}

/// The boot GDT for a mode: null, code, data, TSS (selectors 0x8, 0x10, 0x18).
pub fn boot_gdt(mode: EntryMode) -> [u64; 4] {
    match mode {
        EntryMode::Linux64 => [0, gdt_entry(0xa09b, 0, 0xfffff), gdt_entry(0xc093, 0, 0xfffff), gdt_entry(0x808b, 0, 0xfffff)],
        EntryMode::Pvh => [0, gdt_entry(0xc09b, 0, 0xffff_ffff), gdt_entry(0xc093, 0, 0xffff_ffff), gdt_entry(0x008b, 0, 0x67)],
    }
}

/// Identity page tables for the first 4 GiB with 2 MiB pages.
pub fn write_page_tables(mem: &GuestMemoryMmap) -> Result<(), BootError> {
    let map = |e: vm_memory::GuestMemoryError| boot_err("boot", format!("page tables: {e}"));
    mem.write_obj(PDPT_START | 0x3, GuestAddress(PML4_START)).map_err(map)?;
    for gib in 0..IDENTITY_MAPPED_GIB {
        let pd = PD_START + gib * 0x1000;
        mem.write_obj(pd | 0x3, GuestAddress(PDPT_START + gib * 8)).map_err(map)?;
        for i in 0..512u64 {
            // present | writable | page size (2 MiB)
            let entry = ((gib << 30) + (i << 21)) | 0x83;
            mem.write_obj(entry, GuestAddress(pd + i * 8)).map_err(map)?;
        }
    }
    Ok(())
}

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
const X86_CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

/// Writes the GDT/IDT (and, for a 64-bit entry, the page tables) and loads the matching
/// special registers.
pub fn setup_sregs(mem: &GuestMemoryMmap, vcpu: &VcpuFd, mode: EntryMode) -> io::Result<()> {
    let gdt = boot_gdt(mode);
    for (i, e) in gdt.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(GDT_START + i as u64 * 8)).map_err(io::Error::other)?;
    }
    mem.write_obj(0u64, GuestAddress(IDT_START)).map_err(io::Error::other)?;
    let mut sregs: kvm_sregs = vcpu.get_sregs()?;
    sregs.gdt.base = GDT_START;
    sregs.gdt.limit = (gdt.len() * 8 - 1) as u16;
    sregs.idt.base = IDT_START;
    sregs.idt.limit = 7;
    let code = segment_from_gdt(gdt[1], 1);
    let data = segment_from_gdt(gdt[2], 2);
    sregs.cs = code;
    (sregs.ds, sregs.es, sregs.fs, sregs.gs, sregs.ss) = (data, data, data, data, data);
    sregs.tr = segment_from_gdt(gdt[3], 3);
    match mode {
        EntryMode::Linux64 => {
            write_page_tables(mem).map_err(|e| io::Error::other(e.message))?;
            sregs.cr3 = PML4_START;
            sregs.cr4 |= X86_CR4_PAE;
            sregs.cr0 |= X86_CR0_PE | X86_CR0_PG;
            sregs.efer |= EFER_LME | EFER_LMA;
        }
        EntryMode::Pvh => {
            sregs.cr0 = X86_CR0_PE | X86_CR0_ET;
            sregs.cr4 = 0;
        }
    }
    Ok(vcpu.set_sregs(&sregs)?)
}

pub fn setup_regs(vcpu: &VcpuFd, entry: Entry) -> io::Result<()> {
    let regs = match entry.mode {
        EntryMode::Linux64 => kvm_regs {
            rflags: 0x2,
            rip: entry.rip,
            rsp: BOOT_STACK_POINTER,
            rbp: BOOT_STACK_POINTER,
            rsi: ZERO_PAGE_START,
            ..Default::default()
        },
        EntryMode::Pvh => kvm_regs { rflags: 0x2, rip: entry.rip, rbx: PVH_INFO_START, ..Default::default() },
    };
    Ok(vcpu.set_regs(&regs)?)
}

pub fn setup_fpu(vcpu: &VcpuFd) -> io::Result<()> {
    // x87 control word with all exceptions masked and SSE with all exceptions masked, as after
    // FNINIT / reset.
    Ok(vcpu.set_fpu(&kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() })?)
}

/// MSRs a booting kernel expects in their reset state.
pub fn boot_msrs() -> Vec<kvm_msr_entry> {
    const MSR_IA32_TSC: u32 = 0x10;
    const MSR_IA32_SYSENTER_CS: u32 = 0x174;
    const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
    const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
    const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
    const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
    const MSR_STAR: u32 = 0xc000_0081;
    const MSR_LSTAR: u32 = 0xc000_0082;
    const MSR_CSTAR: u32 = 0xc000_0083;
    const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
    const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
    let entry = |index, data| kvm_msr_entry { index, data, ..Default::default() };
    vec![
        entry(MSR_IA32_SYSENTER_CS, 0),
        entry(MSR_IA32_SYSENTER_ESP, 0),
        entry(MSR_IA32_SYSENTER_EIP, 0),
        entry(MSR_STAR, 0),
        entry(MSR_CSTAR, 0),
        entry(MSR_KERNEL_GS_BASE, 0),
        entry(MSR_SYSCALL_MASK, 0),
        entry(MSR_LSTAR, 0),
        entry(MSR_IA32_TSC, 0),
        entry(MSR_IA32_MISC_ENABLE, 1), // fast strings
        entry(MSR_MTRR_DEF_TYPE, (1 << 11) | 6), // MTRRs enabled, default write-back
    ]
}

pub fn setup_msrs(vcpu: &VcpuFd) -> io::Result<()> {
    let entries = boot_msrs();
    let msrs = Msrs::from_entries(&entries).map_err(|e| io::Error::other(format!("{e:?}")))?;
    let set = vcpu.set_msrs(&msrs)?;
    if set != entries.len() {
        return Err(io::Error::other(format!("KVM refused MSR {:#x}", entries[set].index)));
    }
    Ok(())
}

/// LINT0 as ExtINT (the legacy PIC path) and LINT1 as NMI, as firmware would leave them.
pub fn setup_lapic(vcpu: &VcpuFd) -> io::Result<()> {
    const APIC_LVT0: usize = 0x350;
    const APIC_LVT1: usize = 0x360;
    const MODE_EXTINT: u32 = 0x7;
    const MODE_NMI: u32 = 0x4;
    let mut lapic = vcpu.get_lapic()?;
    for (reg, mode) in [(APIC_LVT0, MODE_EXTINT), (APIC_LVT1, MODE_NMI)] {
        let bytes: [u8; 4] = std::array::from_fn(|i| lapic.regs[reg + i] as u8);
        let value = (u32::from_le_bytes(bytes) & !0x700) | (mode << 8);
        for (i, b) in value.to_le_bytes().iter().enumerate() {
            lapic.regs[reg + i] = *b as _;
        }
    }
    Ok(vcpu.set_lapic(&lapic)?)
}

/// KVM's supported CPUID, with the per-vCPU APIC ids and topology filled in.
pub fn vcpu_cpuid(supported: &CpuId, id: u8, vcpus: u8) -> CpuId {
    let mut cpuid = supported.clone();
    for e in cpuid.as_mut_slice() {
        match e.function {
            1 => {
                // EBX[31:24] initial APIC id, EBX[23:16] logical processors per package.
                e.ebx = (e.ebx & 0x0000_ffff) | ((id as u32) << 24) | ((vcpus as u32) << 16);
                // EDX bit 28 (HTT): the package holds more than one logical processor.
                if vcpus > 1 {
                    e.edx |= 1 << 28;
                }
            }
            0xb | 0x1f => e.edx = id as u32, // x2APIC id
            _ => {}
        }
    }
    cpuid
}

/// The initrd ceiling a kernel's setup header allows (or the protocol default).
pub fn initrd_addr_max(header: Option<&setup_header>) -> u64 {
    match header.map(|h| h.initrd_addr_max) {
        Some(max) if max != 0 => max as u64,
        _ => DEFAULT_INITRD_ADDR_MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(bytes: u64) -> GuestMemoryMmap {
        let regions: Vec<(GuestAddress, usize)> =
            ram_regions(bytes).into_iter().map(|(a, l)| (GuestAddress(a), l as usize)).collect();
        GuestMemoryMmap::from_ranges(&regions).unwrap()
    }

    #[test]
    fn gdt_entries_round_trip_to_segments() {
        assert_eq!(gdt_entry(0xa09b, 0, 0xfffff), 0x00af_9b00_0000_ffff);
        assert_eq!(gdt_entry(0xc093, 0, 0xfffff), 0x00cf_9300_0000_ffff);
        let code = segment_from_gdt(gdt_entry(0xa09b, 0, 0xfffff), 1);
        assert_eq!((code.selector, code.type_, code.l, code.db, code.present, code.s), (8, 0xb, 1, 0, 1, 1));
        assert_eq!(code.limit, 0xffff_ffff);
        let tss = segment_from_gdt(gdt_entry(0x808b, 0, 0xfffff), 3);
        assert_eq!((tss.selector, tss.type_, tss.s), (0x18, 0xb, 0));
        let pvh_code = segment_from_gdt(boot_gdt(EntryMode::Pvh)[1], 1);
        assert_eq!((pvh_code.l, pvh_code.db, pvh_code.limit), (0, 1, 0xffff_ffff));
        let null = segment_from_gdt(0, 0);
        assert_eq!(null.unusable, 1);
    }

    #[test]
    fn page_tables_identity_map_four_gib() {
        let m = mem(64 << 20);
        write_page_tables(&m).unwrap();
        assert_eq!(m.read_obj::<u64>(GuestAddress(PML4_START)).unwrap(), PDPT_START | 3);
        for gib in 0..4 {
            let pdpte: u64 = m.read_obj(GuestAddress(PDPT_START + gib * 8)).unwrap();
            assert_eq!(pdpte, (PD_START + gib * 0x1000) | 3);
        }
        // Walk a few addresses through the tables as the MMU would.
        for addr in [0u64, 0x20_0000, 0x1234_5678, 0xfee0_0000, 0xffff_ffff] {
            let pdpte: u64 = m.read_obj(GuestAddress(PDPT_START + ((addr >> 30) & 511) * 8)).unwrap();
            let pde: u64 = m.read_obj(GuestAddress((pdpte & !0xfff) + ((addr >> 21) & 511) * 8)).unwrap();
            assert_eq!(pde & 0x83, 0x83);
            assert_eq!((pde & !0x1f_ffff) | (addr & 0x1f_ffff), addr);
        }
    }

    #[test]
    fn e820_reserves_the_bios_area_and_skips_the_hole() {
        let small = mem(128 << 20);
        assert_eq!(
            e820_map(&small),
            vec![(0, EBDA_START, E820_RAM), (EBDA_START, HIMEM_START - EBDA_START, E820_RESERVED), (HIMEM_START, (128 << 20) - HIMEM_START, E820_RAM)]
        );
        let big = mem(4 << 30);
        let map = e820_map(&big);
        assert_eq!(map[2], (HIMEM_START, MMIO32_START - HIMEM_START, E820_RAM));
        assert_eq!(map[3], (FOUR_GIB, 1 << 30, E820_RAM));
    }

    #[test]
    fn zero_page_carries_cmdline_initrd_rsdp_and_e820() {
        let m = mem(128 << 20);
        let params = build_boot_params(&m, None, 13, Some((0x700_0000, 0x1234)), Some(RSDP_START)).unwrap();
        write_boot_params(&m, &params).unwrap();
        let back: boot_params = m.read_obj(GuestAddress(ZERO_PAGE_START)).unwrap();
        let hdr = back.hdr;
        assert_eq!({ hdr.boot_flag }, KERNEL_BOOT_FLAG_MAGIC);
        assert_eq!({ hdr.header }, KERNEL_HDR_MAGIC);
        assert_eq!({ hdr.type_of_loader }, KERNEL_LOADER_OTHER);
        assert_eq!({ hdr.cmd_line_ptr }, CMDLINE_START as u32);
        assert_eq!({ hdr.cmdline_size }, 14);
        assert_eq!(({ hdr.ramdisk_image }, { hdr.ramdisk_size }), (0x700_0000, 0x1234));
        assert_eq!({ hdr.kernel_alignment }, KERNEL_MIN_ALIGNMENT);
        assert_eq!({ back.acpi_rsdp_addr }, RSDP_START);
        assert_eq!(back.e820_entries, 3);
        let e = back.e820_table[2];
        assert_eq!(({ e.addr }, { e.size }, { e.r#type }), (HIMEM_START, (128 << 20) - HIMEM_START, E820_RAM));
        // The raw bytes at the offsets of the boot protocol (Documentation/arch/x86/zero-page.rst).
        let mut raw = [0u8; 4096];
        m.read_slice(&mut raw, GuestAddress(ZERO_PAGE_START)).unwrap();
        assert_eq!(&raw[0x1fe..0x200], &[0x55, 0xaa]);
        assert_eq!(&raw[0x202..0x206], b"HdrS");
        assert_eq!(raw[0x1e8], 3);
        assert_eq!(u64::from_le_bytes(raw[0x70..0x78].try_into().unwrap()), RSDP_START);
        assert_eq!(u32::from_le_bytes(raw[0x228..0x22c].try_into().unwrap()), CMDLINE_START as u32);
    }

    #[test]
    fn pvh_start_info_points_at_its_tables() {
        let m = mem(64 << 20);
        write_pvh_info(&m, Some((0x300_0000, 4096)), Some(RSDP_START)).unwrap();
        let info: hvm_start_info = m.read_obj(GuestAddress(PVH_INFO_START)).unwrap();
        assert_eq!(info.magic, XEN_HVM_START_MAGIC);
        assert_eq!((info.nr_modules, info.modlist_paddr), (1, PVH_MODLIST_START));
        assert_eq!((info.memmap_paddr, info.memmap_entries), (PVH_MEMMAP_START, 3));
        assert_eq!(info.rsdp_paddr, RSDP_START);
        let module: hvm_modlist_entry = m.read_obj(GuestAddress(PVH_MODLIST_START)).unwrap();
        assert_eq!((module.paddr, module.size), (0x300_0000, 4096));
        let last: hvm_memmap_table_entry = m.read_obj(GuestAddress(PVH_MEMMAP_START + 2 * 24)).unwrap();
        assert_eq!((last.addr, last.type_), (HIMEM_START, E820_RAM));
    }

    #[test]
    fn initrd_goes_to_the_top_of_low_memory() {
        let m = mem(64 << 20);
        let dir = std::env::temp_dir().join(format!("sandbox-vmm-initrd-{}", std::process::id()));
        std::fs::write(&dir, vec![0xabu8; 5000]).unwrap();
        let (addr, size) = load_initrd(&m, &dir, 0x200_0000, DEFAULT_INITRD_ADDR_MAX).unwrap();
        assert_eq!(size, 5000);
        assert_eq!(addr, ((64 << 20) - 5000) & !0xfff);
        assert_eq!(m.read_obj::<u8>(GuestAddress(addr + 4999)).unwrap(), 0xab);
        let e = load_initrd(&m, &dir, (64 << 20) - 100, DEFAULT_INITRD_ADDR_MAX).unwrap_err();
        assert_eq!(e.field, "initrd");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn cpuid_gets_per_vcpu_apic_ids() {
        let mut supported = CpuId::new(2).unwrap();
        supported.as_mut_slice()[0].function = 1;
        supported.as_mut_slice()[0].ebx = 0xffff_0800;
        supported.as_mut_slice()[1].function = 0xb;
        let c = vcpu_cpuid(&supported, 3, 4);
        assert_eq!(c.as_slice()[0].ebx, 0x0304_0800);
        assert_ne!(c.as_slice()[0].edx & (1 << 28), 0);
        assert_eq!(c.as_slice()[1].edx, 3);
    }
}
