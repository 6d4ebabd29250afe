//! The error codes the daemon reads: `error.code` in the answers on stdout (the start frame's
//! outcome) and on control.sock. The typed errors of each module say which code they are; the
//! strings on the wire are spelled here and nowhere else.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The start frame is malformed, or names a kernel, initrd or value that cannot be used.
    InvalidConfig,
    /// The cgroup directory is not the one the daemon recorded.
    CgroupIdentity,
    /// Joining the cgroup failed or could not be verified.
    CgroupJoin,
    /// /dev/kvm cannot be opened or refuses to create a VM.
    KvmUnavailable,
    /// Building the VM failed for a reason of the VMM or the host, not of the start frame.
    VmSetup,
    /// control.sock could not be created.
    ControlSocket,
    /// A control.sock request is not a well-formed frame (the connection is closed after it).
    BadFrame,
    /// A control.sock request is a frame but not a request this VMM knows.
    BadRequest,
    /// The request needs a running or paused VM.
    NotRunning,
    /// Not every vCPU acknowledged in time: the VM's state is unknown.
    Timeout,
}

impl ErrorCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidConfig => "invalid_config",
            ErrorCode::CgroupIdentity => "cgroup_identity",
            ErrorCode::CgroupJoin => "cgroup_join",
            ErrorCode::KvmUnavailable => "kvm_unavailable",
            ErrorCode::VmSetup => "vm_setup",
            ErrorCode::ControlSocket => "control_socket",
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::NotRunning => "not_running",
            ErrorCode::Timeout => "timeout",
        }
    }
}
