//! Loading the guest: kernel, initrd and command line into guest memory, and the boot
//! protocol's parameter block (the zero page, or PVH's `hvm_start_info`) with the e820 map.
//! The boot vCPU's state for the entry chosen here is set up in [`super::regs`].
//!
//! linux-loader parses and loads the images (ELF with or without a PVH note, bzImage) and owns
//! the `boot_params`/`hvm_start_info` layouts. What no crate does is written here: the e820
//! map for our layout and the choice of entry (Firecracker and Cloud Hypervisor each keep their
//! own copy of these for the same reason).

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::cmdline;
use linux_loader::configurator::{self, BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use linux_loader::loader::elf::start_info::{hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info};
use linux_loader::loader::{self, BzImage, Elf, KernelLoader, KernelLoaderResult, PvhBootCapability};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryError, GuestMemoryMmap, GuestMemoryRegion};

use super::layout::*;
use crate::error_code::ErrorCode;

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

/// Why the guest could not be loaded: most often the kernel, initrd or command line the start
/// frame named, otherwise the boot parameter block.
#[derive(Debug)]
pub enum BootError {
    OpenKernel { path: PathBuf, source: io::Error },
    /// An ELF linux-loader cannot load, or a read error before the format was known.
    LoadKernel { path: PathBuf, source: loader::Error },
    /// Not an ELF, and the bzImage loader refuses it too.
    NotAKernel { path: PathBuf, source: loader::Error },
    /// A bzImage too old for the 64-bit boot protocol.
    No64BitEntry { path: PathBuf, version: u16 },
    ReadInitrd { path: PathBuf, source: io::Error },
    /// The initrd does not fit between the kernel's end and `top`.
    InitrdTooLarge { path: PathBuf, size: u64, top: u64 },
    CopyInitrd { path: PathBuf, source: GuestMemoryError },
    /// The command line is not one the kernel accepts (too long, bad characters).
    Cmdline(cmdline::Error),
    WriteCmdline(loader::Error),
    /// The memory map does not fit the zero page's e820 table.
    TooManyE820Entries,
    WriteBootParams(configurator::Error),
}

impl BootError {
    /// The start field at fault (`kernel`, `initrd`, `cmdline`), or `boot` for the VMM's own
    /// boot parameter block.
    pub fn field(&self) -> &'static str {
        match self {
            BootError::OpenKernel { .. } | BootError::LoadKernel { .. } | BootError::NotAKernel { .. } | BootError::No64BitEntry { .. } => "kernel",
            BootError::ReadInitrd { .. } | BootError::InitrdTooLarge { .. } | BootError::CopyInitrd { .. } => "initrd",
            BootError::Cmdline(_) | BootError::WriteCmdline(_) => "cmdline",
            BootError::TooManyE820Entries | BootError::WriteBootParams(_) => "boot",
        }
    }

    /// `invalid_config` when the start frame named something unusable, `vm_setup` when the
    /// boot parameter block could not be written.
    pub fn code(&self) -> ErrorCode {
        match self {
            BootError::TooManyE820Entries | BootError::WriteBootParams(_) => ErrorCode::VmSetup,
            _ => ErrorCode::InvalidConfig,
        }
    }
}

impl fmt::Display for BootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field())?;
        match self {
            BootError::OpenKernel { path, source } | BootError::ReadInitrd { path, source } => write!(f, "{}: {source}", path.display()),
            BootError::LoadKernel { path, source } => write!(f, "{}: {source}", path.display()),
            BootError::NotAKernel { path, source } => write!(f, "{}: neither an ELF nor a bzImage: {source}", path.display()),
            BootError::No64BitEntry { path, version } => {
                write!(f, "{}: bzImage protocol {version:#x} has no 64-bit entry (needs 2.12 and XLF_KERNEL_64)", path.display())
            }
            BootError::InitrdTooLarge { path, size, top } => write!(f, "{}: {size} bytes do not fit between the kernel and {top:#x}", path.display()),
            BootError::CopyInitrd { path, source } => write!(f, "{}: {source}", path.display()),
            BootError::Cmdline(e) => write!(f, "{e}"),
            BootError::WriteCmdline(e) => write!(f, "{e}"),
            BootError::TooManyE820Entries => write!(f, "too many e820 entries"),
            BootError::WriteBootParams(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BootError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootError::OpenKernel { source, .. } | BootError::ReadInitrd { source, .. } => Some(source),
            BootError::LoadKernel { source, .. } | BootError::NotAKernel { source, .. } | BootError::WriteCmdline(source) => Some(source),
            BootError::CopyInitrd { source, .. } => Some(source),
            BootError::Cmdline(e) => Some(e),
            BootError::WriteBootParams(e) => Some(e),
            BootError::No64BitEntry { .. } | BootError::InitrdTooLarge { .. } | BootError::TooManyE820Entries => None,
        }
    }
}

/// How the boot vCPU enters the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryMode {
    /// 64-bit Linux boot protocol: long mode, paging on, %rsi = zero page.
    Linux64,
    /// PVH: 32-bit protected mode, paging off, %rbx = `hvm_start_info`.
    Pvh,
}

impl EntryMode {
    /// The mode as the daemon reads it (`entry` of the ready answer).
    pub fn name(self) -> &'static str {
        match self {
            EntryMode::Linux64 => "linux64",
            EntryMode::Pvh => "pvh",
        }
    }
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
    let open = || File::open(path).map_err(|source| BootError::OpenKernel { path: path.to_owned(), source });
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
                .map_err(|source| BootError::NotAKernel { path: path.to_owned(), source })?;
            let hdr = result.setup_header.expect("the bzImage loader always returns the setup header");
            let (version, xloadflags) = (hdr.version, hdr.xloadflags);
            if version < 0x020c || xloadflags & XLF_KERNEL_64 == 0 {
                return Err(BootError::No64BitEntry { path: path.to_owned(), version });
            }
            let rip = result.kernel_load.raw_value() + BZIMAGE_64BIT_ENTRY_OFFSET;
            Ok((result, Entry { mode: EntryMode::Linux64, rip }))
        }
        Err(source) => Err(BootError::LoadKernel { path: path.to_owned(), source }),
    }
}

/// Copies the initrd to the top of low memory (below `addr_max`), page aligned.
pub fn load_initrd(mem: &GuestMemoryMmap, path: &Path, kernel_end: u64, addr_max: u64) -> Result<(u64, u64), BootError> {
    let read_err = |source| BootError::ReadInitrd { path: path.to_owned(), source };
    let mut file = File::open(path).map_err(read_err)?;
    let size = file.metadata().map_err(read_err)?.len();
    let low_end = mem.iter().next().map(|r| r.len()).unwrap_or(0);
    let top = low_end.min(addr_max + 1);
    let start = top
        .checked_sub(size)
        .map(|s| s & !0xfff)
        .filter(|s| *s >= kernel_end)
        .ok_or_else(|| BootError::InitrdTooLarge { path: path.to_owned(), size, top })?;
    mem.read_exact_volatile_from(GuestAddress(start), &mut file, size as usize)
        .map_err(|source| BootError::CopyInitrd { path: path.to_owned(), source })?;
    Ok((start, size))
}

pub fn write_cmdline(mem: &GuestMemoryMmap, cmdline: &str) -> Result<(), BootError> {
    let c = loader::Cmdline::try_from(cmdline, crate::config::CMDLINE_MAX).map_err(BootError::Cmdline)?;
    loader::load_cmdline(mem, GuestAddress(CMDLINE_START), &c).map_err(BootError::WriteCmdline)
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
        return Err(BootError::TooManyE820Entries);
    }
    for (slot, (addr, size, kind)) in params.e820_table.iter_mut().zip(&map) {
        *slot = boot_e820_entry { addr: *addr, size: *size, r#type: *kind };
    }
    params.e820_entries = map.len() as u8;
    Ok(params)
}

pub fn write_boot_params(mem: &GuestMemoryMmap, params: &boot_params) -> Result<(), BootError> {
    let bp = BootParams::new::<boot_params>(params, GuestAddress(ZERO_PAGE_START));
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(&bp, mem).map_err(BootError::WriteBootParams)
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
    PvhBootConfigurator::write_bootparams::<GuestMemoryMmap>(&params, mem).map_err(BootError::WriteBootParams)
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
        assert!(matches!(e, BootError::InitrdTooLarge { size: 5000, .. }), "{e}");
        assert_eq!((e.field(), e.code()), ("initrd", ErrorCode::InvalidConfig));
        std::fs::remove_file(&dir).unwrap();
    }
}
