//! The VM's run-time state: the [`vm`] (KVM VM, memory, devices, lifecycle), its [`vcpu`]
//! threads, and why it [`stop`]ped.

pub mod stop;
pub mod vcpu;
pub mod vm;
