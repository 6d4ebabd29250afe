//! The CPUID each vCPU sees: what KVM supports, with its own APIC id and the topology filled
//! in.

use kvm_bindings::CpuId;

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

#[cfg(test)]
mod tests {
    use super::*;

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
