//! The devices the guest sees: the port-I/O [`bus`], the [`legacy`] port devices, and the home
//! of the [`virtio`] devices and their MMIO transport.

pub mod bus;
pub mod legacy;
pub mod virtio;
