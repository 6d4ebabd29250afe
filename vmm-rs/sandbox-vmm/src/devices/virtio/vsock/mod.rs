//! virtio-vsock with a Firecracker-compatible hybrid Unix socket: the only path between the
//! host and the guest's services (the daemon's proxy reaches execd and egress through it, and
//! the guest's bootstrap reaches the daemon through `<path>_<port>`). Guest CID 3; no vhost
//! (these hosts have no /dev/vhost-vsock, and userspace keeps the connections in the sandbox's
//! cgroup).
//!
//! - [`packet`]: the wire rules (ops, CIDs, what a guest may send), over virtio-vsock's
//!   `VsockPacket`
//! - [`connection`]: one connection's state machine and credit accounting
//! - [`muxer`]: the Unix socket side: handshakes, `<path>_<port>`, timeouts
//! - `device`: the three queues, served on the device thread

mod device;
mod connection;
pub mod muxer;
pub mod packet;

pub use device::Vsock;
