//! sandbox-vmm: the KVM virtual machine monitor behind sandboxd, one VM per process.
//!
//! Built on the rust-vmm crates (kvm-ioctls, vm-memory, linux-loader, vm-superio,
//! vmm-sys-util, acpi_tables); see each module for what is written by hand and why.

pub mod acpi;
pub mod boot;
pub mod cgroup;
pub mod config;
pub mod control;
pub mod devices;
#[cfg(feature = "test-guests")]
pub mod guests;
pub mod layout;
pub mod preflight;
pub mod runner;
pub mod vcpu;
pub mod vm;
