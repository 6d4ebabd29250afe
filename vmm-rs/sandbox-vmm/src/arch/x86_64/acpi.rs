//! ACPI tables (with acpi_tables): RSDP, XSDT, a hardware-reduced FADT, MADT and a DSDT that
//! declares COM1, the PS/2 controller and every virtio-mmio device as `LNRO0005`.
//!
//! Debian's kernels build virtio_mmio as a module without `VIRTIO_MMIO_CMDLINE_DEVICES` and
//! the cloud kernel lacks MP-table parsing, so the DSDT is the only way such a kernel finds its
//! virtio devices and the MADT the only way it finds its CPUs.

use acpi_tables::aml;
use acpi_tables::Aml;
use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::madt::{EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use vm_memory::{Bytes, GuestAddress, GuestMemoryError, GuestMemoryMmap};

use super::layout::{ACPI_END, COM1_GSI, COM1_PORT, I8042_GSI, I8042_PORT, IOAPIC_START, LAPIC_START, RSDP_START, VIRTIO_MMIO_SIZE};

const OEM_ID: [u8; 6] = *b"SNDBOX";
const OEM_TABLE_ID: [u8; 8] = *b"SANDBOXV";
const OEM_REVISION: u32 = 1;
/// FADT IA-PC boot architecture flags: an 8042 is present, no VGA, no CMOS RTC.
const IAPC_BOOT_ARCH_8042: u16 = 1 << 1;
const IAPC_BOOT_ARCH_VGA_NOT_PRESENT: u16 = 1 << 2;
const IAPC_BOOT_ARCH_CMOS_RTC_NOT_PRESENT: u16 = 1 << 5;

/// One virtio-mmio device window and its interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmioDevice {
    pub base: u64,
    pub gsi: u32,
}

/// The tables with the guest-physical address of each.
pub struct Tables {
    pub rsdp: Vec<u8>,
    /// (address, bytes) of XSDT, FADT, MADT and DSDT, in that order.
    pub tables: Vec<(u64, Vec<u8>)>,
}

fn bytes(table: &dyn Aml) -> Vec<u8> {
    let mut out = Vec::new();
    table.to_aml_bytes(&mut out);
    out
}

pub fn dsdt(devices: &[MmioDevice]) -> Vec<u8> {
    let mut body = Vec::new();
    let (com1_io, com1_irq) = (aml::IO::new(COM1_PORT, COM1_PORT, 1, 8), aml::Interrupt::new(true, true, false, false, COM1_GSI));
    let com1_crs = aml::ResourceTemplate::new(vec![&com1_io, &com1_irq]);
    aml::Device::new(
        "_SB_.COM1".into(),
        vec![&aml::Name::new("_HID".into(), &aml::EISAName::new("PNP0501")), &aml::Name::new("_UID".into(), &aml::ZERO), &aml::Name::new("_CRS".into(), &com1_crs)],
    )
    .to_aml_bytes(&mut body);
    let ps2_data = aml::IO::new(I8042_PORT, I8042_PORT, 1, 1);
    let ps2_cmd = aml::IO::new(I8042_PORT + 4, I8042_PORT + 4, 1, 1);
    let ps2_irq = aml::Interrupt::new(true, true, false, false, I8042_GSI);
    let ps2_crs = aml::ResourceTemplate::new(vec![&ps2_data, &ps2_cmd, &ps2_irq]);
    aml::Device::new(
        "_SB_.PS2_".into(),
        vec![&aml::Name::new("_HID".into(), &aml::EISAName::new("PNP0303")), &aml::Name::new("_CRS".into(), &ps2_crs)],
    )
    .to_aml_bytes(&mut body);
    for (i, dev) in devices.iter().enumerate() {
        let window = aml::Memory32Fixed::new(true, dev.base as u32, VIRTIO_MMIO_SIZE as u32);
        let irq = aml::Interrupt::new(true, true, false, false, dev.gsi);
        let crs = aml::ResourceTemplate::new(vec![&window, &irq]);
        let uid = i as u32;
        aml::Device::new(
            format!("_SB_.V{i:03X}").as_str().into(),
            vec![
                &aml::Name::new("_HID".into(), &"LNRO0005"),
                &aml::Name::new("_UID".into(), &uid),
                // Cache-coherent DMA: virtio rings are in ordinary guest RAM.
                &aml::Name::new("_CCA".into(), &aml::ONE),
                &aml::Name::new("_CRS".into(), &crs),
            ],
        )
        .to_aml_bytes(&mut body);
    }
    let mut table = Sdt::new(*b"DSDT", 36, 6, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    table.append_slice(&body);
    table.as_slice().to_vec()
}

pub fn build(vcpus: u8, devices: &[MmioDevice]) -> Tables {
    let align = |a: u64| (a + 7) & !7;
    let xsdt_addr = align(RSDP_START + Rsdp::len() as u64);
    // The XSDT's size is known before its entries' addresses: header + three pointers.
    let fadt_addr = align(xsdt_addr + 36 + 3 * 8);

    let dsdt = dsdt(devices);
    let mut madt = MADT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION, LocalInterruptController::Address(LAPIC_START as u32));
    madt.add_structure(IoApic::new(0, IOAPIC_START as u32, 0));
    for id in 0..vcpus {
        madt.add_structure(ProcessorLocalApic::new(id, id, EnabledStatus::Enabled));
    }
    let madt = bytes(&madt);

    let fadt_len = acpi_tables::fadt::FADT::len() as u64;
    let madt_addr = align(fadt_addr + fadt_len);
    let dsdt_addr = align(madt_addr + madt.len() as u64);
    let mut fadt = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
        .dsdt_64(dsdt_addr)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton);
    fadt.iapc_boot_arch = (IAPC_BOOT_ARCH_8042 | IAPC_BOOT_ARCH_VGA_NOT_PRESENT | IAPC_BOOT_ARCH_CMOS_RTC_NOT_PRESENT).into();
    let fadt = bytes(&fadt.finalize());

    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    for addr in [fadt_addr, madt_addr, dsdt_addr] {
        xsdt.add_entry(addr);
    }
    let xsdt = bytes(&xsdt);
    debug_assert_eq!(xsdt.len(), 36 + 3 * 8);
    Tables {
        rsdp: bytes(&Rsdp::new(OEM_ID, xsdt_addr)),
        tables: vec![(xsdt_addr, xsdt), (fadt_addr, fadt), (madt_addr, madt), (dsdt_addr, dsdt)],
    }
}

#[derive(Debug)]
pub enum AcpiError {
    /// The tables would run past the reserved BIOS area, into RAM the guest may use.
    TooLarge { end: u64 },
    Write(GuestMemoryError),
}

impl std::fmt::Display for AcpiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcpiError::TooLarge { end } => write!(f, "tables end at {end:#x}, past the reserved area"),
            AcpiError::Write(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AcpiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AcpiError::TooLarge { .. } => None,
            AcpiError::Write(e) => Some(e),
        }
    }
}

/// Writes the tables into the reserved BIOS area; the RSDP at [`RSDP_START`].
pub fn write_tables(mem: &GuestMemoryMmap, vcpus: u8, devices: &[MmioDevice]) -> Result<(), AcpiError> {
    let tables = build(vcpus, devices);
    mem.write_slice(&tables.rsdp, GuestAddress(RSDP_START)).map_err(AcpiError::Write)?;
    for (addr, data) in &tables.tables {
        let end = addr + data.len() as u64;
        if end > ACPI_END {
            return Err(AcpiError::TooLarge { end });
        }
        mem.write_slice(data, GuestAddress(*addr)).map_err(AcpiError::Write)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::layout::{VIRTIO_GSI_START, VIRTIO_MMIO_START};

    fn sum(bytes: &[u8]) -> u8 {
        bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b))
    }

    fn devices(n: u32) -> Vec<MmioDevice> {
        (0..n).map(|i| MmioDevice { base: VIRTIO_MMIO_START + i as u64 * VIRTIO_MMIO_SIZE, gsi: VIRTIO_GSI_START + i }).collect()
    }

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    #[test]
    fn every_table_checksums_to_zero_and_has_its_declared_length() {
        let t = build(2, &devices(3));
        assert_eq!(&t.rsdp[..8], b"RSD PTR ");
        assert_eq!(sum(&t.rsdp[..20]), 0, "RSDP v1 checksum");
        assert_eq!(sum(&t.rsdp), 0, "RSDP extended checksum");
        for (addr, table) in &t.tables {
            assert_eq!(sum(table), 0, "{} checksum", String::from_utf8_lossy(&table[..4]));
            assert_eq!(u32_at(table, 4) as usize, table.len());
            assert_eq!(addr % 8, 0);
        }
        let sigs: Vec<&[u8]> = t.tables.iter().map(|(_, b)| &b[..4]).collect();
        assert_eq!(sigs, [b"XSDT", b"FACP", b"APIC", b"DSDT"]);
    }

    #[test]
    fn pointers_chain_rsdp_to_dsdt() {
        let t = build(1, &[]);
        let (xsdt_addr, xsdt) = &t.tables[0];
        assert_eq!(u64_at(&t.rsdp, 24), *xsdt_addr);
        let entries: Vec<u64> = (0..3).map(|i| u64_at(xsdt, 36 + 8 * i)).collect();
        assert_eq!(entries, t.tables[1..].iter().map(|(a, _)| *a).collect::<Vec<_>>());
        let fadt = &t.tables[1].1;
        assert_eq!(u64_at(fadt, 140), t.tables[3].0, "FADT X_DSDT");
        assert_ne!(u32_at(fadt, 112) & (1 << 20), 0, "HW_REDUCED_ACPI");
        let (last_addr, last) = &t.tables[3];
        assert!(last_addr + last.len() as u64 <= ACPI_END);
    }

    #[test]
    fn madt_lists_one_lapic_per_vcpu_and_the_ioapic() {
        let t = build(3, &[]);
        let madt = &t.tables[2].1;
        assert_eq!(u32_at(madt, 36), LAPIC_START as u32);
        let mut off = 44;
        let (mut lapics, mut ioapics) = (Vec::new(), 0);
        while off < madt.len() {
            let (kind, len) = (madt[off], madt[off + 1] as usize);
            match kind {
                0 => lapics.push((madt[off + 2], madt[off + 3], u32_at(madt, off + 4))),
                1 => {
                    ioapics += 1;
                    assert_eq!(u32_at(madt, off + 4), IOAPIC_START as u32);
                }
                other => panic!("unexpected MADT structure {other}"),
            }
            off += len;
        }
        assert_eq!(lapics, vec![(0, 0, 1), (1, 1, 1), (2, 2, 1)]);
        assert_eq!(ioapics, 1);
    }

    #[test]
    fn dsdt_declares_devices_and_disassembles_cleanly() {
        let dsdt = dsdt(&devices(2));
        let text = String::from_utf8_lossy(&dsdt);
        assert_eq!(text.matches("LNRO0005").count(), 2);
        let Ok(iasl) = which("iasl") else {
            // Straight to the stderr descriptor (libtest captures only the print macros), in the
            // form scripts/run-tests.ts counts as skipped.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIP: dsdt_declares_devices_and_disassembles_cleanly: iasl is not installed (Debian acpica-tools)");
            return;
        };
        let dir = std::env::temp_dir().join(format!("sandbox-vmm-dsdt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("dsdt.dat"), &dsdt).unwrap();
        let out = std::process::Command::new(iasl).arg("-d").arg("dsdt.dat").current_dir(&dir).output().unwrap();
        let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "iasl -d failed:\n{log}");
        let dsl = std::fs::read_to_string(dir.join("dsdt.dsl")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for needle in ["\"LNRO0005\"", "PNP0501", "PNP0303", "0xC0001000", "0xC0002000", "Device (_SB.V001)", "Device (_SB.COM1)", "Device (_SB.PS2)"] {
            assert!(dsl.contains(needle), "{needle} missing from\n{dsl}");
        }
        // The interrupts as declared: COM1 on 4, virtio on 5 and 6.
        for irq in ["0x00000004", "0x00000005", "0x00000006"] {
            assert!(dsl.contains(irq), "interrupt {irq} missing");
        }
    }

    fn which(cmd: &str) -> Result<std::path::PathBuf, ()> {
        std::env::var_os("PATH")
            .and_then(|p| std::env::split_paths(&p).map(|d| d.join(cmd)).find(|p| p.is_file()))
            .ok_or(())
    }
}
