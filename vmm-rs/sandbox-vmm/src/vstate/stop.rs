//! Why and when the VM stops: the first reason recorded wins, and an eventfd wakes the control
//! loop. vCPU threads, the i8042's reset line and the control channel all stop the VM here.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};

use vmm_sys_util::errno::Error as Errno;
use vmm_sys_util::eventfd::EventFd;

use crate::devices::bus::BusError;

/// Why the VM stopped. Plain data, cheap to copy out of the [`StopSignal`] and to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The guest reset the machine through the i8042 (`reboot=k`).
    Reset,
    /// The guest shut the machine down, or triple-faulted.
    Shutdown(Shutdown),
    /// The control channel asked for it.
    Terminated,
    /// A vCPU or the control loop failed.
    Error(Failure),
}

impl StopReason {
    /// The reason as the daemon reads it (`reason` of the stopped event and of terminate).
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Reset => "reset",
            StopReason::Shutdown(_) => "shutdown",
            StopReason::Terminated => "terminated",
            StopReason::Error(_) => "error",
        }
    }

    /// What happened, for people (`detail` of the stopped event).
    pub fn detail(&self) -> Option<String> {
        match self {
            StopReason::Shutdown(shutdown) => Some(shutdown.to_string()),
            StopReason::Error(failure) => Some(failure.to_string()),
            StopReason::Reset | StopReason::Terminated => None,
        }
    }
}

/// How the guest shut the machine down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// A vCPU halted with interrupts off: nothing can wake it.
    Halted { vcpu: usize },
    TripleFault { vcpu: usize },
    /// The guest asked KVM for a shutdown system event.
    PoweredOff,
}

impl fmt::Display for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shutdown::Halted { vcpu } => write!(f, "vcpu{vcpu} halted with interrupts off"),
            Shutdown::TripleFault { vcpu } => write!(f, "vcpu{vcpu}: triple fault"),
            Shutdown::PoweredOff => write!(f, "guest powered off"),
        }
    }
}

/// The failure that stopped the VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The device behind a port could not complete the guest's write.
    Port { vcpu: usize, port: u16, error: BusError },
    /// A KVM system event other than shutdown and reset.
    SystemEvent { vcpu: usize, kind: u32 },
    /// KVM could not enter the guest; `reason` is the hardware's.
    EntryFailed { vcpu: usize, reason: u64, cpu: u32 },
    /// KVM_EXIT_INTERNAL_ERROR. Suberror 1 is an instruction KVM could not emulate: what a stock
    /// kernel hits under PVM (see the reference's `lock cmpxchg16b`).
    Internal { vcpu: usize, suberror: u32 },
    /// An exit this VMM does not handle, as KVM's bindings print it (the exit itself borrows the
    /// vCPU's `kvm_run` page, so it cannot be kept).
    UnexpectedExit { vcpu: usize, exit: String },
    KvmRun { vcpu: usize, error: kvm_ioctls::Error },
    /// The control loop's epoll or socket failed.
    ControlLoop(Errno),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Port { vcpu, port, error } => write!(f, "vcpu{vcpu}: port {port:#x}: {error}"),
            Failure::SystemEvent { vcpu, kind } => write!(f, "vcpu{vcpu}: system event {kind}"),
            Failure::EntryFailed { vcpu, reason, cpu } => write!(f, "vcpu{vcpu}: KVM entry failed, reason {reason:#x} on cpu {cpu}"),
            Failure::Internal { vcpu, suberror } => write!(f, "vcpu{vcpu}: KVM internal error, suberror {suberror}"),
            Failure::UnexpectedExit { vcpu, exit } => write!(f, "vcpu{vcpu}: unexpected exit {exit}"),
            Failure::KvmRun { vcpu, error } => write!(f, "vcpu{vcpu}: KVM_RUN: {error}"),
            Failure::ControlLoop(e) => write!(f, "control loop: {e}"),
        }
    }
}

/// The error number of an I/O error, which is what a [`StopReason`] keeps of it (an
/// `io::Error` can be neither copied nor compared). The errors met here come from system
/// calls; EIO stands in for one that did not.
pub fn errno(e: &io::Error) -> Errno {
    Errno::new(e.raw_os_error().unwrap_or(libc::EIO))
}

/// The first stop reason wins; the eventfd wakes the control loop.
pub struct StopSignal {
    reason: Mutex<Option<StopReason>>,
    pub evt: EventFd,
}

impl StopSignal {
    pub fn new() -> io::Result<Arc<Self>> {
        Ok(Arc::new(StopSignal { reason: Mutex::new(None), evt: EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)? }))
    }

    pub fn stop(&self, reason: StopReason) {
        let mut slot = self.reason.lock().unwrap();
        if slot.is_none() {
            *slot = Some(reason);
        }
        // A full counter only means a wake-up is already pending.
        let _ = self.evt.write(1);
    }

    pub fn reason(&self) -> Option<StopReason> {
        self.reason.lock().unwrap().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detail_says_what_happened_and_keeps_the_error_number() {
        assert_eq!(StopReason::Reset.detail(), None);
        assert_eq!(StopReason::Shutdown(Shutdown::Halted { vcpu: 1 }).detail().as_deref(), Some("vcpu1 halted with interrupts off"));
        let full_disk = errno(&io::Error::from_raw_os_error(libc::ENOSPC));
        let failure = Failure::Port { vcpu: 0, port: 0x3f8, error: BusError::SerialLog(full_disk) };
        assert_eq!(
            StopReason::Error(failure).detail().as_deref(),
            Some("vcpu0: port 0x3f8: serial: cannot write the log: No space left on device (os error 28)")
        );
        assert_eq!(errno(&io::Error::other("not from a system call")).errno(), libc::EIO);
    }
}
