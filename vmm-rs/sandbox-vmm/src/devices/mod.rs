//! The devices the guest sees: the port-I/O and MMIO [`bus`]es, the [`legacy`] port devices,
//! the [`virtio`] devices with their MMIO transport, and the [`manager`] that builds the virtio
//! devices of a VM and runs their thread.

pub mod bus;
pub mod legacy;
pub mod manager;
pub mod virtio;
