//! One virtual machine: KVM VM, guest memory, irqchip + PIT, legacy and virtio devices, boot
//! state and vCPU threads, with confirmed pause, resume and terminate.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_pit_config, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VmFd};
use vm_memory::mmap::FromRangesError;
use vm_memory::{Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

use super::stop::{StopReason, StopSignal};
use super::vcpu::{VcpuCmd, VcpuEvent, VcpuHandle};
use crate::arch::x86_64::acpi::{self, AcpiError};
use crate::arch::x86_64::boot::{self, BootError, EntryMode};
use crate::arch::x86_64::layout::{self, COM1_GSI, KVM_TSS_ADDRESS, RSDP_START};
use crate::arch::x86_64::msr::{self, MsrError};
use crate::arch::x86_64::regs::{self, RegsError};
use crate::arch::x86_64::{cpuid, interrupts};
use crate::arch::x86_64::acpi::MmioDevice;
use crate::devices::bus::PortBus;
use crate::devices::legacy::serial::CappedLog;
use crate::devices::manager::{DeviceError, DeviceSpec, Devices};
use crate::error_code::ErrorCode;

pub struct VmSpec {
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub cmdline: String,
    pub vcpus: u8,
    pub memory_mib: u64,
    pub serial_log: PathBuf,
    pub serial_log_max: u64,
    pub devices: DeviceSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmState {
    /// Built, vCPU threads not started yet.
    Created,
    Running,
    Paused,
    Stopped,
}

impl VmState {
    pub fn name(self) -> &'static str {
        match self {
            VmState::Created => "created",
            VmState::Running => "running",
            VmState::Paused => "paused",
            VmState::Stopped => "stopped",
        }
    }
}

/// Why a vCPU's initial state could not be set.
#[derive(Debug)]
pub enum VcpuSetupError {
    Msrs(MsrError),
    Fpu(kvm_ioctls::Error),
    Lapic(kvm_ioctls::Error),
    SegmentRegisters(RegsError),
    Registers(kvm_ioctls::Error),
}

impl fmt::Display for VcpuSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VcpuSetupError::Msrs(e) => write!(f, "MSRs: {e}"),
            VcpuSetupError::Fpu(e) => write!(f, "FPU: {e}"),
            VcpuSetupError::Lapic(e) => write!(f, "LAPIC: {e}"),
            VcpuSetupError::SegmentRegisters(e) => write!(f, "segment registers: {e}"),
            VcpuSetupError::Registers(e) => write!(f, "registers: {e}"),
        }
    }
}

impl std::error::Error for VcpuSetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VcpuSetupError::Msrs(e) => Some(e),
            VcpuSetupError::Fpu(e) | VcpuSetupError::Lapic(e) | VcpuSetupError::Registers(e) => Some(e),
            VcpuSetupError::SegmentRegisters(e) => Some(e),
        }
    }
}

/// Why the VM could not be built, started, paused or resumed.
#[derive(Debug)]
pub enum VmError {
    /// /dev/kvm cannot be opened (`op` is `/dev/kvm`) or cannot create a VM.
    KvmUnavailable { op: &'static str, source: kvm_ioctls::Error },
    /// A KVM ioctl of the set-up failed; `op` names it.
    Kvm { op: &'static str, source: kvm_ioctls::Error },
    GuestMemory { mib: u64, source: FromRangesError },
    EventFd(io::Error),
    SerialLog { path: PathBuf, source: io::Error },
    Boot(BootError),
    Acpi(AcpiError),
    Devices(DeviceError),
    Vcpu { id: u8, source: VcpuSetupError },
    VcpuThread { id: usize, source: io::Error },
    /// The request needs a running or paused VM.
    NotRunning(VmState),
    /// Every vCPU exited while the request waited for them.
    Stopped,
    /// The vCPUs listed did not acknowledge within `timeout`.
    Timeout { missing: Vec<usize>, timeout: Duration },
}

impl VmError {
    pub fn code(&self) -> ErrorCode {
        match self {
            VmError::KvmUnavailable { .. } => ErrorCode::KvmUnavailable,
            VmError::Boot(e) => e.code(),
            VmError::Devices(e) => e.code(),
            VmError::NotRunning(_) | VmError::Stopped => ErrorCode::NotRunning,
            VmError::Timeout { .. } => ErrorCode::Timeout,
            VmError::Kvm { .. }
            | VmError::GuestMemory { .. }
            | VmError::EventFd(_)
            | VmError::SerialLog { .. }
            | VmError::Acpi(_)
            | VmError::Vcpu { .. }
            | VmError::VcpuThread { .. } => ErrorCode::VmSetup,
        }
    }

    /// The start-configuration field at fault, when there is one.
    pub fn field(&self) -> Option<Cow<'static, str>> {
        match self {
            VmError::Boot(e) => Some(e.field().into()),
            VmError::Devices(e) => e.field().map(Cow::Owned),
            VmError::GuestMemory { .. } => Some("memory_mib".into()),
            VmError::SerialLog { .. } => Some("state_dir".into()),
            _ => None,
        }
    }
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Its Display names its field already.
            VmError::Boot(e) => write!(f, "{e}"),
            VmError::KvmUnavailable { op, source } | VmError::Kvm { op, source } => write!(f, "{op}: {source}"),
            VmError::GuestMemory { mib, source } => write!(f, "memory_mib: cannot map {mib} MiB of guest memory: {source}"),
            VmError::EventFd(e) => write!(f, "eventfd: {e}"),
            VmError::SerialLog { path, source } => write!(f, "state_dir: {}: {source}", path.display()),
            VmError::Acpi(e) => write!(f, "ACPI: {e}"),
            VmError::Devices(e) => write!(f, "{e}"),
            VmError::Vcpu { id, source } => write!(f, "vcpu{id} {source}"),
            VmError::VcpuThread { id, source } => write!(f, "vcpu{id} thread: {source}"),
            VmError::NotRunning(state) => write!(f, "the VM is {}", state.name()),
            VmError::Stopped => write!(f, "the VM stopped"),
            VmError::Timeout { missing, timeout } => write!(f, "vCPUs {missing:?} did not acknowledge within {timeout:?}"),
        }
    }
}

impl std::error::Error for VmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VmError::KvmUnavailable { source, .. } | VmError::Kvm { source, .. } => Some(source),
            VmError::GuestMemory { source, .. } => Some(source),
            VmError::EventFd(source) | VmError::SerialLog { source, .. } | VmError::VcpuThread { source, .. } => Some(source),
            VmError::Boot(e) => Some(e),
            VmError::Acpi(e) => Some(e),
            VmError::Devices(e) => Some(e),
            VmError::Vcpu { source, .. } => Some(source),
            VmError::NotRunning(_) | VmError::Stopped | VmError::Timeout { .. } => None,
        }
    }
}

impl From<BootError> for VmError {
    fn from(e: BootError) -> Self {
        VmError::Boot(e)
    }
}

fn setup_err(op: &'static str) -> impl Fn(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { op, source }
}

pub struct Vm {
    // Drop joins the vCPU threads first; then fields go in declaration order, so the VM fd is
    // closed before the guest memory it maps is unmapped.
    vcpus: Vec<VcpuHandle>,
    pending_fds: Vec<kvm_ioctls::VcpuFd>,
    events: Receiver<VcpuEvent>,
    events_tx: mpsc::Sender<VcpuEvent>,
    exited: Vec<bool>,
    state: VmState,
    bus: Arc<PortBus>,
    devices: Devices,
    stop: Arc<StopSignal>,
    entry: boot::Entry,
    _serial_irq: EventFd,
    _vm_fd: VmFd,
    _kvm: Kvm,
    mem: GuestMemoryMmap,
}

impl Vm {
    /// Builds the whole machine; the vCPUs start with [`Vm::start`].
    pub fn create(spec: &VmSpec) -> Result<Vm, VmError> {
        let kvm = Kvm::new().map_err(|source| VmError::KvmUnavailable { op: "/dev/kvm", source })?;
        let vm_fd = kvm.create_vm().map_err(|source| VmError::KvmUnavailable { op: "KVM_CREATE_VM", source })?;

        let mem_bytes = spec.memory_mib << 20;
        let ranges: Vec<(GuestAddress, usize)> =
            layout::ram_regions(mem_bytes).into_iter().map(|(a, l)| (GuestAddress(a), l as usize)).collect();
        let mem = GuestMemoryMmap::from_ranges(&ranges).map_err(|source| VmError::GuestMemory { mib: spec.memory_mib, source })?;
        for (slot, region) in mem.iter().enumerate() {
            let host = mem.get_host_address(region.start_addr()).expect("a region's start is inside it") as u64;
            let region = kvm_userspace_memory_region {
                slot: slot as u32,
                flags: 0,
                guest_phys_addr: region.start_addr().raw_value(),
                memory_size: region.len(),
                userspace_addr: host,
            };
            // SAFETY: the mapping belongs to `mem`, which the Vm keeps for as long as the VM fd.
            unsafe { vm_fd.set_user_memory_region(region) }.map_err(setup_err("KVM_SET_USER_MEMORY_REGION"))?;
        }

        vm_fd.set_tss_address(KVM_TSS_ADDRESS as usize).map_err(setup_err("KVM_SET_TSS_ADDR"))?;
        vm_fd.create_irq_chip().map_err(setup_err("KVM_CREATE_IRQCHIP"))?;
        // The dummy speaker port keeps port 0x61 in the kernel: a guest polling it would
        // otherwise cost a VM exit per read.
        vm_fd
            .create_pit2(kvm_pit_config { flags: KVM_PIT_SPEAKER_DUMMY, ..Default::default() })
            .map_err(setup_err("KVM_CREATE_PIT2"))?;

        let stop = StopSignal::new().map_err(VmError::EventFd)?;
        let serial_irq = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC).map_err(VmError::EventFd)?;
        vm_fd.register_irqfd(&serial_irq, COM1_GSI).map_err(setup_err("KVM_IRQFD (COM1)"))?;
        let log = CappedLog::create(&spec.serial_log, spec.serial_log_max)
            .map_err(|source| VmError::SerialLog { path: spec.serial_log.clone(), source })?;
        let irq_for_serial = serial_irq.try_clone().map_err(VmError::EventFd)?;
        let bus = Arc::new(PortBus::new(irq_for_serial, log, stop.clone()));

        let devices = Devices::create(&vm_fd, &mem, &spec.devices).map_err(VmError::Devices)?;
        let entry = load_guest(&mem, spec, devices.acpi())?;

        let supported = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(setup_err("KVM_GET_SUPPORTED_CPUID"))?;
        let mut pending_fds = Vec::new();
        for id in 0..spec.vcpus {
            let fd = vm_fd.create_vcpu(id as u64).map_err(setup_err("KVM_CREATE_VCPU"))?;
            fd.set_cpuid2(&cpuid::vcpu_cpuid(&supported, id, spec.vcpus)).map_err(setup_err("KVM_SET_CPUID2"))?;
            let vcpu_err = |source| VmError::Vcpu { id, source };
            msr::setup_msrs(&fd).map_err(|e| vcpu_err(VcpuSetupError::Msrs(e)))?;
            regs::setup_fpu(&fd).map_err(|e| vcpu_err(VcpuSetupError::Fpu(e)))?;
            interrupts::setup_lapic(&fd).map_err(|e| vcpu_err(VcpuSetupError::Lapic(e)))?;
            // Application processors wait in the in-kernel LAPIC for INIT/SIPI from the boot CPU.
            if id == 0 {
                regs::setup_sregs(&mem, &fd, entry.mode).map_err(|e| vcpu_err(VcpuSetupError::SegmentRegisters(e)))?;
                regs::setup_regs(&fd, entry).map_err(|e| vcpu_err(VcpuSetupError::Registers(e)))?;
            }
            pending_fds.push(fd);
        }

        let (events_tx, events) = mpsc::channel();
        Ok(Vm {
            vcpus: Vec::new(),
            pending_fds,
            events,
            events_tx,
            exited: Vec::new(),
            state: VmState::Created,
            bus,
            devices,
            stop,
            entry,
            _serial_irq: serial_irq,
            _vm_fd: vm_fd,
            _kvm: kvm,
            mem,
        })
    }

    pub fn start(&mut self) -> Result<(), VmError> {
        self.devices.start().map_err(VmError::Devices)?;
        for (id, fd) in self.pending_fds.drain(..).enumerate() {
            let handle = VcpuHandle::spawn(id, fd, self.bus.clone(), self.devices.bus().clone(), self.stop.clone(), self.events_tx.clone())
                .map_err(|source| VmError::VcpuThread { id, source })?;
            self.vcpus.push(handle);
            self.exited.push(false);
        }
        self.state = VmState::Running;
        Ok(())
    }

    pub fn state(&self) -> VmState {
        self.state
    }

    pub fn vcpu_count(&self) -> usize {
        self.vcpus.len().max(self.pending_fds.len())
    }

    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    pub fn entry_mode(&self) -> EntryMode {
        self.entry.mode
    }

    pub fn stop_signal(&self) -> &Arc<StopSignal> {
        &self.stop
    }

    /// Each disk's counters, in the order of the spec's disks.
    pub fn disk_metrics(&self) -> &[std::sync::Arc<crate::devices::virtio::block::BlockMetrics>] {
        self.devices.disk_metrics()
    }

    pub fn serial_log_counts(&self) -> (u64, u64) {
        self.bus.serial_log_counts()
    }

    fn broadcast(&self, cmd: VcpuCmd) {
        for (vcpu, exited) in self.vcpus.iter().zip(&self.exited) {
            if !exited {
                vcpu.send(cmd);
            }
        }
    }

    /// Waits until every live vCPU has sent `want` (matched by `is_ack`).
    fn await_acks(&mut self, is_ack: fn(&VcpuEvent) -> Option<usize>, timeout: Duration) -> Result<(), VmError> {
        let deadline = Instant::now() + timeout;
        let mut acked = vec![false; self.vcpus.len()];
        loop {
            if acked.iter().zip(&self.exited).all(|(a, e)| *a || *e) {
                if self.exited.iter().all(|e| *e) {
                    return Err(VmError::Stopped);
                }
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(VcpuEvent::Exited(id)) => self.exited[id] = true,
                Ok(event) => {
                    if let Some(id) = is_ack(&event) {
                        acked[id] = true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let missing: Vec<usize> = (0..acked.len()).filter(|i| !acked[*i] && !self.exited[*i]).collect();
                    return Err(VmError::Timeout { missing, timeout });
                }
                Err(RecvTimeoutError::Disconnected) => unreachable!("the Vm holds a sender"),
            }
        }
    }

    /// Drops acknowledgements left over from a request that timed out, so that they cannot be
    /// taken for answers to the next one; notes vCPUs that exited meanwhile.
    fn drain_stale_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            if let VcpuEvent::Exited(id) = event {
                self.exited[id] = true;
            }
        }
    }

    /// Sends `cmd` to every vCPU and waits for each one's acknowledgement. Sent even when the
    /// state says it is not needed: after a timed-out request some vCPUs may be paused and
    /// others not, and repeating the command is what brings them back in line (a vCPU answers a
    /// repeated command at once).
    fn command_all(&mut self, cmd: VcpuCmd, target: VmState, timeout: Duration) -> Result<VmState, VmError> {
        match self.state {
            VmState::Running | VmState::Paused => {}
            other => return Err(VmError::NotRunning(other)),
        }
        self.drain_stale_events();
        self.broadcast(cmd);
        let ack: fn(&VcpuEvent) -> Option<usize> = match cmd {
            VcpuCmd::Pause => |e| if let VcpuEvent::Paused(id) = e { Some(*id) } else { None },
            _ => |e| if let VcpuEvent::Resumed(id) = e { Some(*id) } else { None },
        };
        self.await_acks(ack, timeout)?;
        self.state = target;
        Ok(self.state)
    }

    /// Pauses every vCPU; returns once each has left KVM_RUN and acknowledged.
    pub fn pause(&mut self, timeout: Duration) -> Result<VmState, VmError> {
        self.command_all(VcpuCmd::Pause, VmState::Paused, timeout)
    }

    /// Resumes every vCPU; returns once each has acknowledged.
    pub fn resume(&mut self, timeout: Duration) -> Result<VmState, VmError> {
        self.command_all(VcpuCmd::Resume, VmState::Running, timeout)
    }

    /// Stops every vCPU thread and joins it; the reason recorded first (a guest reset, say) stays.
    pub fn halt(&mut self, reason: StopReason) -> StopReason {
        self.stop.stop(reason);
        self.broadcast(VcpuCmd::Exit);
        for vcpu in &mut self.vcpus {
            vcpu.join();
        }
        self.devices.stop();
        self.exited.iter_mut().for_each(|e| *e = true);
        self.state = VmState::Stopped;
        self.stop.reason().expect("set just above")
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.state != VmState::Stopped {
            self.halt(StopReason::Terminated);
        }
    }
}

/// Loads kernel, command line, initrd, ACPI tables (with the virtio windows) and the boot
/// protocol's parameter block.
fn load_guest(mem: &GuestMemoryMmap, spec: &VmSpec, virtio: &[MmioDevice]) -> Result<boot::Entry, VmError> {
    let (kernel, entry) = boot::load_kernel(mem, &spec.kernel)?;
    boot::write_cmdline(mem, &spec.cmdline)?;
    let initrd = match &spec.initrd {
        Some(path) => Some(
            boot::load_initrd(mem, path, kernel.kernel_end, boot::initrd_addr_max(kernel.setup_header.as_ref()))?,
        ),
        None => None,
    };
    acpi::write_tables(mem, spec.vcpus, virtio).map_err(VmError::Acpi)?;
    match entry.mode {
        EntryMode::Linux64 => {
            let params = boot::build_boot_params(mem, kernel.setup_header, spec.cmdline.len(), initrd, Some(RSDP_START))?;
            boot::write_boot_params(mem, &params)?;
        }
        EntryMode::Pvh => boot::write_pvh_info(mem, initrd, Some(RSDP_START))?,
    }
    Ok(entry)
}
