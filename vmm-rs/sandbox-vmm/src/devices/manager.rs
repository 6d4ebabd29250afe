//! The VM's virtio-mmio devices: builds each device from the start configuration, places it in
//! the next MMIO window with the next GSI, binds its queue notifications (ioeventfd) and its
//! interrupt (irqfd) in KVM, and runs the device thread that serves them all.
//!
//! Windows are given in a fixed order (disks as listed, then the network, then vsock), so a
//! guest sees the same device at the same address on every boot: the first disk is
//! `/dev/vda`.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use event_manager::{EventManager, EventOps, Events, MutEventSubscriber, SubscriberOps};
use kvm_ioctls::{IoEventAddress, VmFd};
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;

use super::bus::MmioBus;
use super::virtio::block::{Block, BlockMetrics};
use super::virtio::mmio::MmioTransport;
use super::virtio::net::{FramedStream, Net, Passt, PasstError};
use super::virtio::vsock::muxer::{Muxer, MuxerError};
use super::virtio::vsock::Vsock;
use super::virtio::{regs, Interrupt, VirtioDevice};
use crate::arch::x86_64::acpi::MmioDevice;
use crate::arch::x86_64::layout::{VIRTIO_GSI_START, VIRTIO_MMIO_SIZE, VIRTIO_MMIO_START};
use crate::config::Disk;
use crate::error_code::ErrorCode;

/// GSIs 5 to 23 are the IOAPIC pins left to virtio-mmio devices.
pub const MAX_DEVICES: usize = 19;

/// The devices a VM gets.
#[derive(Debug, Clone, Default)]
pub struct DeviceSpec {
    pub disks: Vec<Disk>,
    pub net: Option<NetSpec>,
    /// The hybrid vsock's Unix socket (Firecracker's `uds_path`).
    pub vsock: Option<PathBuf>,
}

/// The network device's passt: its executable and where its diagnostics go.
#[derive(Debug, Clone)]
pub struct NetSpec {
    pub passt: PathBuf,
    pub log: PathBuf,
}

/// Why the devices could not be built.
#[derive(Debug)]
pub enum DeviceError {
    Disk { index: usize, path: PathBuf, source: io::Error },
    Net(PasstError),
    Vsock(MuxerError),
    TooMany { count: usize },
    EventFd(io::Error),
    Kvm { op: &'static str, source: kvm_ioctls::Error },
    EventManager(event_manager::Error),
    Thread(io::Error),
}

impl DeviceError {
    pub fn code(&self) -> ErrorCode {
        match self {
            DeviceError::Disk { .. } | DeviceError::TooMany { .. } | DeviceError::Net(PasstError::Spawn(_))
            | DeviceError::Vsock(MuxerError::Bind { .. }) => ErrorCode::InvalidConfig,
            _ => ErrorCode::VmSetup,
        }
    }

    pub fn field(&self) -> Option<String> {
        match self {
            DeviceError::Disk { index, .. } => Some(format!("disks[{index}].path")),
            DeviceError::Net(_) => Some("net.passt".into()),
            DeviceError::Vsock(_) => Some("vsock_socket".into()),
            DeviceError::TooMany { .. } => Some("disks".into()),
            _ => None,
        }
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Disk { index, path, source } => write!(f, "disks[{index}].path: {}: {source}", path.display()),
            DeviceError::Net(e) => write!(f, "net.passt: {e}"),
            DeviceError::Vsock(e) => write!(f, "vsock_socket: {e}"),
            DeviceError::TooMany { count } => write!(f, "{count} devices asked for; at most {MAX_DEVICES} fit"),
            DeviceError::EventFd(e) => write!(f, "eventfd: {e}"),
            DeviceError::Kvm { op, source } => write!(f, "{op}: {source}"),
            DeviceError::EventManager(e) => write!(f, "device event loop: {e}"),
            DeviceError::Thread(e) => write!(f, "device thread: {e}"),
        }
    }
}

impl std::error::Error for DeviceError {}

type Subscriber = Arc<Mutex<dyn MutEventSubscriber + Send>>;

/// Ends the device thread: its eventfd is one of the thread's events.
struct Stopper {
    evt: EventFd,
    stopped: Arc<AtomicBool>,
}

impl MutEventSubscriber for Stopper {
    fn process(&mut self, _: Events, _: &mut EventOps) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    fn init(&mut self, ops: &mut EventOps) {
        ops.add(Events::new(&self.evt, EventSet::IN)).expect("a fresh eventfd can be watched");
    }
}

pub struct Devices {
    bus: Arc<MmioBus>,
    acpi: Vec<MmioDevice>,
    events: Option<EventManager<Subscriber>>,
    stop: EventFd,
    stopped: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    disk_metrics: Vec<Arc<BlockMetrics>>,
    /// Dropped after the device thread stopped: kills and reaps passt.
    _passt: Option<Passt>,
}

impl Devices {
    pub fn create(vm_fd: &VmFd, mem: &GuestMemoryMmap, spec: &DeviceSpec) -> Result<Devices, DeviceError> {
        let mut devices: Vec<(Arc<Mutex<dyn VirtioDevice>>, Subscriber)> = Vec::new();
        let mut disk_metrics = Vec::new();
        for (index, disk) in spec.disks.iter().enumerate() {
            let block = Block::new(&disk.path, disk.read_only, &format!("disk{index}"))
                .map_err(|source| DeviceError::Disk { index, path: disk.path.clone(), source })?;
            disk_metrics.push(block.metrics());
            let block = Arc::new(Mutex::new(block));
            devices.push((block.clone(), block));
        }
        let mut passt = None;
        if let Some(net) = &spec.net {
            let (child, stream) = Passt::spawn(&net.passt, &net.log).map_err(DeviceError::Net)?;
            passt = Some(child);
            let stream = FramedStream::new(stream).map_err(|e| DeviceError::Net(PasstError::Socket(e)))?;
            let net = Arc::new(Mutex::new(Net::new(stream).map_err(DeviceError::EventFd)?));
            devices.push((net.clone(), net));
        }
        if let Some(path) = &spec.vsock {
            let muxer = Muxer::new(path).map_err(DeviceError::Vsock)?;
            let vsock = Arc::new(Mutex::new(Vsock::new(muxer).map_err(DeviceError::EventFd)?));
            devices.push((vsock.clone(), vsock));
        }
        if devices.len() > MAX_DEVICES {
            return Err(DeviceError::TooMany { count: devices.len() });
        }

        let mut events = EventManager::<Subscriber>::new().map_err(DeviceError::EventManager)?;
        let mut bus = MmioBus::default();
        let mut acpi = Vec::new();
        let kvm = |op| move |source| DeviceError::Kvm { op, source };
        for (slot, (device, subscriber)) in devices.into_iter().enumerate() {
            let window = MmioDevice { base: VIRTIO_MMIO_START + slot as u64 * VIRTIO_MMIO_SIZE, gsi: VIRTIO_GSI_START + slot as u32 };
            let irq = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC).map_err(DeviceError::EventFd)?;
            vm_fd.register_irqfd(&irq, window.gsi).map_err(kvm("KVM_IRQFD"))?;
            for (queue, evt) in device.lock().unwrap().queue_events().iter().enumerate() {
                let notify = IoEventAddress::Mmio(window.base + regs::QUEUE_NOTIFY);
                vm_fd.register_ioevent(evt, &notify, queue as u32).map_err(kvm("KVM_IOEVENTFD"))?;
            }
            bus.insert(window.base, MmioTransport::new(device, mem.clone(), Interrupt::new(irq)));
            events.add_subscriber(subscriber);
            acpi.push(window);
        }
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC).map_err(DeviceError::EventFd)?;
        let stopper = Stopper { evt: stop.try_clone().map_err(DeviceError::EventFd)?, stopped: stopped.clone() };
        events.add_subscriber(Arc::new(Mutex::new(stopper)));
        Ok(Devices { bus: Arc::new(bus), acpi, events: Some(events), stop, stopped, thread: None, disk_metrics, _passt: passt })
    }

    /// The windows and interrupts the DSDT announces.
    pub fn acpi(&self) -> &[MmioDevice] {
        &self.acpi
    }

    /// What the vCPUs route their MMIO exits to.
    pub fn bus(&self) -> &Arc<MmioBus> {
        &self.bus
    }

    /// Each disk's counters, in the order of the start configuration's `disks`.
    pub fn disk_metrics(&self) -> &[Arc<BlockMetrics>] {
        &self.disk_metrics
    }

    /// Starts the device thread.
    pub fn start(&mut self) -> Result<(), DeviceError> {
        let Some(mut events) = self.events.take() else { return Ok(()) };
        let stopped = self.stopped.clone();
        let thread = std::thread::Builder::new()
            .name("virtio".into())
            .spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    if let Err(e) = events.run() {
                        // EINTR from the vCPU kick signal is routine; anything else is not
                        // recoverable for the devices, and the VM goes on without them.
                        if !matches!(&e, event_manager::Error::Epoll(errno) if errno.errno() == libc::EINTR) {
                            eprintln!("sandbox-vmm: device thread: {e}");
                            return;
                        }
                    }
                }
            })
            .map_err(DeviceError::Thread)?;
        self.thread = Some(thread);
        Ok(())
    }

    /// Stops the device thread and waits for it.
    pub fn stop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = self.stop.write(1);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Devices {
    fn drop(&mut self) {
        self.stop();
    }
}
