//! The model-specific registers every vCPU starts with: the reset values a booting kernel
//! expects, which KVM does not set by itself.

use std::fmt;

use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;
use vmm_sys_util::fam::Error as FamError;

#[derive(Debug)]
pub enum MsrError {
    /// More entries than a `kvm_msrs` can carry.
    TooMany(FamError),
    Kvm(kvm_ioctls::Error),
    /// KVM set the MSRs before this one and stopped there.
    Refused { index: u32 },
}

impl fmt::Display for MsrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsrError::TooMany(e) => write!(f, "{e}"),
            MsrError::Kvm(e) => write!(f, "{e}"),
            MsrError::Refused { index } => write!(f, "KVM refused MSR {index:#x}"),
        }
    }
}

impl std::error::Error for MsrError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MsrError::TooMany(e) => Some(e),
            MsrError::Kvm(e) => Some(e),
            MsrError::Refused { .. } => None,
        }
    }
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

pub fn setup_msrs(vcpu: &VcpuFd) -> Result<(), MsrError> {
    let entries = boot_msrs();
    let msrs = Msrs::from_entries(&entries).map_err(MsrError::TooMany)?;
    let set = vcpu.set_msrs(&msrs).map_err(MsrError::Kvm)?;
    if set != entries.len() {
        return Err(MsrError::Refused { index: entries[set].index });
    }
    Ok(())
}
