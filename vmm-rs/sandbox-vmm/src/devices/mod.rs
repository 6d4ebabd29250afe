//! The devices the guest sees: the port-I/O [`bus`] and the [`legacy`] port devices.

pub mod bus;
pub mod legacy;
