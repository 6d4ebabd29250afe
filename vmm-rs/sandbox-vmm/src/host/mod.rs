//! What the VMM needs from the host beyond KVM: the sandbox's [`cgroup`], and the
//! [`preflight`] report of what a host lacks.

pub mod cgroup;
pub mod preflight;
