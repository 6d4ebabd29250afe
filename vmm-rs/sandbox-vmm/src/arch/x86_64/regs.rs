//! The boot vCPU's register state for the entry [`super::boot`] chose: the GDT and identity
//! page tables a 64-bit entry needs, the special and general registers of each entry mode, and
//! the FPU. No crate provides these (Firecracker and Cloud Hypervisor each keep their own copy).

use std::fmt;

use kvm_bindings::{kvm_fpu, kvm_regs, kvm_segment, kvm_sregs};
use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryError, GuestMemoryMmap};

use super::boot::{Entry, EntryMode};
use super::layout::*;

/// Why the boot vCPU's special registers could not be set.
#[derive(Debug)]
pub enum RegsError {
    /// Writing the GDT or IDT into guest memory failed.
    DescriptorTables(GuestMemoryError),
    PageTables(GuestMemoryError),
    Kvm(kvm_ioctls::Error),
}

impl fmt::Display for RegsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegsError::DescriptorTables(e) => write!(f, "{e}"),
            RegsError::PageTables(e) => write!(f, "page tables: {e}"),
            RegsError::Kvm(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RegsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RegsError::DescriptorTables(e) | RegsError::PageTables(e) => Some(e),
            RegsError::Kvm(e) => Some(e),
        }
    }
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
pub fn write_page_tables(mem: &GuestMemoryMmap) -> Result<(), GuestMemoryError> {
    mem.write_obj(PDPT_START | 0x3, GuestAddress(PML4_START))?;
    for gib in 0..IDENTITY_MAPPED_GIB {
        let pd = PD_START + gib * 0x1000;
        mem.write_obj(pd | 0x3, GuestAddress(PDPT_START + gib * 8))?;
        for i in 0..512u64 {
            // present | writable | page size (2 MiB)
            let entry = ((gib << 30) + (i << 21)) | 0x83;
            mem.write_obj(entry, GuestAddress(pd + i * 8))?;
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
pub fn setup_sregs(mem: &GuestMemoryMmap, vcpu: &VcpuFd, mode: EntryMode) -> Result<(), RegsError> {
    let gdt = boot_gdt(mode);
    for (i, e) in gdt.iter().enumerate() {
        mem.write_obj(*e, GuestAddress(GDT_START + i as u64 * 8)).map_err(RegsError::DescriptorTables)?;
    }
    mem.write_obj(0u64, GuestAddress(IDT_START)).map_err(RegsError::DescriptorTables)?;
    let mut sregs: kvm_sregs = vcpu.get_sregs().map_err(RegsError::Kvm)?;
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
            write_page_tables(mem).map_err(RegsError::PageTables)?;
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
    vcpu.set_sregs(&sregs).map_err(RegsError::Kvm)
}

pub fn setup_regs(vcpu: &VcpuFd, entry: Entry) -> Result<(), kvm_ioctls::Error> {
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
    vcpu.set_regs(&regs)
}

pub fn setup_fpu(vcpu: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
    // x87 control word with all exceptions masked and SSE with all exceptions masked, as after
    // FNINIT / reset.
    vcpu.set_fpu(&kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let m = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
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
}
