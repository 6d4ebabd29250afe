//! virtio-net: the sandbox's outbound network, Ethernet frames bridged to a `passt` process of
//! its own (user-mode networking: no TAP device, no privileges, no host network set-up).

mod device;
mod passt;

pub use device::Net;
pub use passt::{FramedStream, Passt, PasstError};
