//! The local APIC's interrupt pins as firmware leaves them, so that the in-kernel LAPIC
//! delivers the legacy PIC's interrupts and NMIs before the guest programs it.

use kvm_ioctls::VcpuFd;

/// LINT0 as ExtINT (the legacy PIC path) and LINT1 as NMI, as firmware would leave them.
pub fn setup_lapic(vcpu: &VcpuFd) -> Result<(), kvm_ioctls::Error> {
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
    vcpu.set_lapic(&lapic)
}
