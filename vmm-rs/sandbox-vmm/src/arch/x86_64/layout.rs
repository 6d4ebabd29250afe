//! Guest physical address layout (x86_64). The low addresses follow the conventions a Linux
//! guest and Firecracker agree on, so that a kernel booted here finds what it expects.

/// GDT (4 entries) and a null IDT, read by the CPU only until the guest loads its own.
pub const GDT_START: u64 = 0x500;
pub const IDT_START: u64 = 0x520;
/// PVH `hvm_start_info`, its module list and memory map (the memory map takes the zero
/// page's place: a guest boots by one protocol or the other, never both).
pub const PVH_INFO_START: u64 = 0x6000;
pub const PVH_MODLIST_START: u64 = 0x6040;
pub const PVH_MEMMAP_START: u64 = 0x7000;
/// Linux boot protocol "zero page" (`struct boot_params`), passed in %rsi.
pub const ZERO_PAGE_START: u64 = 0x7000;
pub const BOOT_STACK_POINTER: u64 = 0x8ff0;
/// Identity page tables: PML4, one PDPT, four page directories of 2 MiB pages (4 GiB).
pub const PML4_START: u64 = 0x9000;
pub const PDPT_START: u64 = 0xa000;
pub const PD_START: u64 = 0xb000;
pub const IDENTITY_MAPPED_GIB: u64 = 4;
pub const CMDLINE_START: u64 = 0x20000;
/// End of conventional memory: [EBDA_START, HIMEM_START) is the legacy BIOS area, reserved.
pub const EBDA_START: u64 = 0x9fc00;
/// ACPI tables live in the reserved BIOS area, the RSDP where a legacy scan would find it.
pub const RSDP_START: u64 = 0xe0000;
pub const ACPI_END: u64 = 0x100000;
pub const HIMEM_START: u64 = 0x100000;
/// The 32-bit MMIO hole [MMIO32_START, 4 GiB): RAM above it continues at 4 GiB.
pub const MMIO32_START: u64 = 0xc000_0000;
pub const FOUR_GIB: u64 = 1 << 32;
/// virtio-mmio device windows: 4 KiB each from here (0xc000_0000 stays free).
pub const VIRTIO_MMIO_START: u64 = 0xc000_1000;
pub const VIRTIO_MMIO_SIZE: u64 = 0x1000;
/// First GSI for virtio-mmio devices; the ones below belong to legacy ISA devices.
pub const VIRTIO_GSI_START: u32 = 5;
pub const IOAPIC_START: u64 = 0xfec0_0000;
pub const LAPIC_START: u64 = 0xfee0_0000;
/// KVM needs three pages of guest-physical address space for the VMX TSS; below the IOAPIC.
pub const KVM_TSS_ADDRESS: u64 = 0xfffb_d000;

/// Legacy port I/O devices.
pub const COM1_PORT: u16 = 0x3f8;
pub const COM1_GSI: u32 = 4;
pub const I8042_PORT: u16 = 0x60;
pub const I8042_GSI: u32 = 1;

/// The guest RAM regions for `mem_bytes` of memory: below the 32-bit MMIO hole, then above 4 GiB.
pub fn ram_regions(mem_bytes: u64) -> Vec<(u64, u64)> {
    if mem_bytes <= MMIO32_START {
        vec![(0, mem_bytes)]
    } else {
        vec![(0, MMIO32_START), (FOUR_GIB, mem_bytes - MMIO32_START)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_skips_the_mmio_hole() {
        assert_eq!(ram_regions(256 << 20), vec![(0, 256 << 20)]);
        assert_eq!(ram_regions(MMIO32_START), vec![(0, MMIO32_START)]);
        assert_eq!(ram_regions(4 << 30), vec![(0, MMIO32_START), (FOUR_GIB, 1 << 30)]);
    }

    #[test]
    fn boot_structures_do_not_overlap() {
        let mut areas = [
            (GDT_START, IDT_START + 8),
            (PVH_INFO_START, PVH_MEMMAP_START),
            (ZERO_PAGE_START, ZERO_PAGE_START + 4096),
            (PML4_START, PD_START + IDENTITY_MAPPED_GIB * 4096),
            (CMDLINE_START, CMDLINE_START + 2048),
            (RSDP_START, ACPI_END),
        ];
        areas.sort();
        for pair in areas.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "{pair:x?}");
        }
        const { assert!(BOOT_STACK_POINTER > ZERO_PAGE_START + 4096 && BOOT_STACK_POINTER < PML4_START) };
        const { assert!(CMDLINE_START + 2048 <= EBDA_START) };
    }
}
