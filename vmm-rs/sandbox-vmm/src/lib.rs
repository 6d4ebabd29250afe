//! sandbox-vmm: the KVM virtual machine monitor behind sandboxd, one VM per process.
//!
//! Built on the rust-vmm crates (kvm-ioctls, vm-memory, linux-loader, vm-superio,
//! vmm-sys-util, acpi_tables); see each module for what is written by hand and why. Laid out
//! as Firecracker's VMM is:
//!
//! - [`arch`]: the guest's address layout, kernel loading, boot CPU state and ACPI (x86_64)
//! - [`vstate`]: the VM, its vCPU threads and its stop reasons
//! - [`devices`]: the port bus, the legacy devices and the home of the virtio devices
//! - [`host`]: the sandbox's cgroup and the host preflight
//! - [`config`], [`runner`], [`control`]: the process around the VM: the start frame on
//!   stdin, its answers on stdout, and control.sock; [`error_code`]: the error codes those
//!   answers carry

pub mod arch;
pub mod config;
pub mod control;
pub mod devices;
pub mod error_code;
#[cfg(feature = "test-guests")]
pub mod guests;
pub mod host;
pub mod runner;
pub mod vstate;
