//! What depends on the guest's CPU architecture. Only x86_64 guests are supported; the rest of
//! the VMM reaches the architecture through this module, as Firecracker's does.

pub mod x86_64;
