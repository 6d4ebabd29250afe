//! Why and when the VM stops: the first reason recorded wins, and an eventfd wakes the control
//! loop. vCPU threads, the i8042's reset line and the control channel all stop the VM here.

use std::io;
use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::EventFd;

/// Why the VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The guest reset the machine through the i8042 (`reboot=k`).
    Reset,
    /// The guest triple-faulted or asked KVM for a shutdown/reset system event.
    Shutdown(String),
    /// The control channel asked for it.
    Terminated,
    /// A vCPU failed (KVM internal error, failed entry, an unexpected ioctl error).
    Error(String),
}

impl StopReason {
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Reset => "reset",
            StopReason::Shutdown(_) => "shutdown",
            StopReason::Terminated => "terminated",
            StopReason::Error(_) => "error",
        }
    }

    pub fn detail(&self) -> Option<&str> {
        match self {
            StopReason::Shutdown(d) | StopReason::Error(d) => Some(d),
            _ => None,
        }
    }
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
