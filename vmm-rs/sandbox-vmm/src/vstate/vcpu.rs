//! vCPU threads and their confirmed pause/resume.
//!
//! Each vCPU runs KVM_RUN in its own thread. The control side sends a command on the vCPU's
//! channel and then kicks the thread with a real-time signal whose handler sets
//! `kvm_run.immediate_exit`: if the thread is inside KVM_RUN the signal makes it return EINTR,
//! and if the signal lands just before the thread enters KVM_RUN, `immediate_exit` makes that
//! KVM_RUN return at once. Either way the thread gets back to its channel promptly, so a pause
//! is acknowledged only by a thread that is provably out of guest mode.

use std::cell::Cell;
use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;

use kvm_bindings::kvm_run;
use kvm_ioctls::{VcpuExit, VcpuFd};
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use super::stop::{Failure, Shutdown, StopReason, StopSignal};
use crate::devices::bus::{MmioBus, PortBus};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuCmd {
    Pause,
    Resume,
    Exit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuEvent {
    Paused(usize),
    Resumed(usize),
    Exited(usize),
}

thread_local! {
    /// This thread's `kvm_run` mapping, for the kick signal handler; null outside a vCPU thread.
    static KVM_RUN: Cell<*mut kvm_run> = const { Cell::new(ptr::null_mut()) };
}

pub fn kick_signal() -> libc::c_int {
    SIGRTMIN()
}

extern "C" fn handle_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe work here: a volatile store into the shared kvm_run page.
    let run = KVM_RUN.with(Cell::get);
    if !run.is_null() {
        // SAFETY: the pointer is set by this thread while its VcpuFd (and so the mapping) lives,
        // and cleared before the VcpuFd is dropped.
        unsafe { ptr::addr_of_mut!((*run).immediate_exit).write_volatile(1) };
    }
    fence(Ordering::Release);
}

fn install_kick_handler() -> io::Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| result = register_signal_handler(kick_signal(), handle_kick).map_err(io::Error::from));
    result
}

pub struct VcpuHandle {
    pub id: usize,
    tx: Sender<VcpuCmd>,
    thread: Option<JoinHandle<()>>,
}

impl VcpuHandle {
    pub fn spawn(id: usize, fd: VcpuFd, bus: Arc<PortBus>, mmio: Arc<MmioBus>, stop: Arc<StopSignal>, events: Sender<VcpuEvent>) -> io::Result<Self> {
        install_kick_handler()?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("vcpu{id}"))
            .spawn(move || {
                vcpu_thread(id, fd, &rx, &events, &bus, &mmio, &stop);
                let _ = events.send(VcpuEvent::Exited(id));
            })?;
        Ok(VcpuHandle { id, tx, thread: Some(thread) })
    }

    /// Queues a command and kicks the thread out of KVM_RUN to read it.
    pub fn send(&self, cmd: VcpuCmd) {
        let _ = self.tx.send(cmd);
        if let Some(thread) = &self.thread {
            // SAFETY: the pthread_t stays valid until the handle is joined, which needs `&mut self`.
            unsafe { libc::pthread_kill(thread.as_pthread_t(), kick_signal()) };
        }
    }

    pub fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Blocks while paused; false when the thread must exit.
fn paused(id: usize, fd: &VcpuFd, rx: &Receiver<VcpuCmd>, events: &Sender<VcpuEvent>) -> bool {
    // Tell the guest's kvmclock it was stopped, so its watchdogs do not see the pause as a
    // soft lockup. EINVAL only means the guest has not enabled kvmclock.
    let _ = fd.kvmclock_ctrl();
    let _ = events.send(VcpuEvent::Paused(id));
    loop {
        match rx.recv() {
            Ok(VcpuCmd::Resume) => {
                let _ = events.send(VcpuEvent::Resumed(id));
                return true;
            }
            Ok(VcpuCmd::Pause) => {
                let _ = events.send(VcpuEvent::Paused(id));
            }
            Ok(VcpuCmd::Exit) | Err(_) => return false,
        }
    }
}

fn vcpu_thread(id: usize, mut fd: VcpuFd, rx: &Receiver<VcpuCmd>, events: &Sender<VcpuEvent>, bus: &PortBus, mmio: &MmioBus, stop: &StopSignal) {
    KVM_RUN.with(|p| p.set(fd.get_kvm_run() as *mut kvm_run));
    let outcome = run_loop(id, &mut fd, rx, events, bus, mmio);
    KVM_RUN.with(|p| p.set(ptr::null_mut()));
    if let Some(reason) = outcome {
        stop.stop(reason);
    }
}

/// Runs the vCPU until told to exit (None) or until the guest stops the machine.
fn run_loop(id: usize, fd: &mut VcpuFd, rx: &Receiver<VcpuCmd>, events: &Sender<VcpuEvent>, bus: &PortBus, mmio: &MmioBus) -> Option<StopReason> {
    loop {
        loop {
            match rx.try_recv() {
                Ok(VcpuCmd::Pause) => {
                    if !paused(id, fd, rx, events) {
                        return None;
                    }
                }
                Ok(VcpuCmd::Resume) => {
                    let _ = events.send(VcpuEvent::Resumed(id));
                }
                Ok(VcpuCmd::Exit) | Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => break,
            }
        }
        match fd.run() {
            Ok(VcpuExit::IoOut(port, data)) => {
                if let Err(error) = bus.write(port, data) {
                    return Some(StopReason::Error(Failure::Port { vcpu: id, port, error }));
                }
            }
            Ok(VcpuExit::IoIn(port, data)) => bus.read(port, data),
            Ok(VcpuExit::MmioRead(addr, data)) => mmio.read(addr, data),
            Ok(VcpuExit::MmioWrite(addr, data)) => mmio.write(addr, data),
            Ok(VcpuExit::Intr) => {}
            Ok(VcpuExit::Hlt) => return Some(StopReason::Shutdown(Shutdown::Halted { vcpu: id })),
            Ok(VcpuExit::Shutdown) => return Some(StopReason::Shutdown(Shutdown::TripleFault { vcpu: id })),
            Ok(VcpuExit::SystemEvent(kind, _)) => {
                return Some(match kind {
                    kvm_bindings::KVM_SYSTEM_EVENT_RESET => StopReason::Reset,
                    kvm_bindings::KVM_SYSTEM_EVENT_SHUTDOWN => StopReason::Shutdown(Shutdown::PoweredOff),
                    kind => StopReason::Error(Failure::SystemEvent { vcpu: id, kind }),
                })
            }
            Ok(VcpuExit::FailEntry(reason, cpu)) => return Some(StopReason::Error(Failure::EntryFailed { vcpu: id, reason, cpu })),
            Ok(VcpuExit::InternalError) => {
                // SAFETY: after KVM_EXIT_INTERNAL_ERROR the kernel filled the `internal` member.
                let suberror = unsafe { fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
                return Some(StopReason::Error(Failure::Internal { vcpu: id, suberror }));
            }
            Ok(other) => return Some(StopReason::Error(Failure::UnexpectedExit { vcpu: id, exit: format!("{other:?}") })),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                // The kick: clear it so the next KVM_RUN enters the guest, then read the channel.
                fd.set_kvm_immediate_exit(0);
                fence(Ordering::Acquire);
            }
            Err(error) => return Some(StopReason::Error(Failure::KvmRun { vcpu: id, error })),
        }
    }
}
