//! x86_64: the guest-physical layout, loading the guest and the boot protocols' hand-over, the
//! vCPUs' initial registers, MSRs, CPUID and LAPIC, and the ACPI tables.

pub mod acpi;
pub mod boot;
pub mod cpuid;
pub mod interrupts;
pub mod layout;
pub mod msr;
pub mod regs;
