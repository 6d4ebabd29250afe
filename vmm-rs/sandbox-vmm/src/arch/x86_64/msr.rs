//! The model-specific registers every vCPU starts with: the reset values a booting kernel
//! expects, which KVM does not set by itself.

use std::io;

use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;

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
