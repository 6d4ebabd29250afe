//! virtio devices and their MMIO transport, laid out as Firecracker's `devices/virtio/`:
//!
//! - [`mmio`], the transport: one [`VIRTIO_MMIO_SIZE`]-byte window per device from
//!   [`VIRTIO_MMIO_START`] with GSIs from [`VIRTIO_GSI_START`], announced to the guest by the
//!   DSDT ([`MmioDevice`]). It owns the [`regs`], feature negotiation, the [`status`] state
//!   machine, each queue's registers and the [`interrupt`] status; a QueueNotify reaches the
//!   device through the queue's eventfd (an ioeventfd, so no VM exit to userspace) and the
//!   device interrupts through an irqfd.
//! - [`queue`]: the split virtqueue from the virtio-queue crate, with every chain walked and
//!   bounds-checked before a device uses it.
//! - one folder per device, [`block`], [`net`] and [`vsock`], each a [`VirtioDevice`]: its
//!   [`device_type`], features, config space, queues, activation and reset, and the events it
//!   serves on the device thread. A device never knows its transport: it sees guest memory, its
//!   queues and an [`Interrupt`], so it is unit-tested against simulated guest memory.
//!
//! A guest that hands a device a chain it cannot use (outside guest memory, looping, out of
//! order) gets the device marked DEVICE_NEEDS_RESET: the device stops using its queues until the
//! driver resets it. Nothing a guest writes can make the VMM panic or touch memory outside the
//! guest's RAM.
//!
//! [`VIRTIO_MMIO_SIZE`]: crate::arch::x86_64::layout::VIRTIO_MMIO_SIZE
//! [`VIRTIO_MMIO_START`]: crate::arch::x86_64::layout::VIRTIO_MMIO_START
//! [`VIRTIO_GSI_START`]: crate::arch::x86_64::layout::VIRTIO_GSI_START
//! [`MmioDevice`]: crate::arch::x86_64::acpi::MmioDevice

pub mod block;
pub mod mmio;
pub mod net;
pub mod queue;
#[cfg(test)]
pub(crate) mod testing;
pub mod vsock;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use event_manager::{EventOps, Events, MutEventSubscriber};
use virtio_queue::Queue;
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;

use self::queue::QueueError;

/// A device as its transport drives it. The device also serves its own events (queue
/// notifications, its backend's sockets) as an event-manager subscriber on the device thread.
pub trait VirtioDevice: MutEventSubscriber + Send {
    /// One of [`device_type`].
    fn device_type(&self) -> u32;
    /// The largest size of each queue; as many entries as the device has queues.
    fn queue_max_sizes(&self) -> &[u16];
    /// One eventfd per queue: the transport binds each to QueueNotify with the queue's index.
    fn queue_events(&self) -> &[EventFd];
    /// The feature bits offered, [`VIRTIO_F_VERSION_1`] included.
    fn features(&self) -> u64;
    /// Reads the device-specific config space from `offset`; bytes past its end read as 0.
    fn read_config(&self, offset: u64, data: &mut [u8]);
    /// Starts using the queues the driver set up.
    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError>;
    /// Forgets the queues and anything in flight: the driver wrote 0 to the status register.
    fn reset(&mut self);
}

/// What a device gets when the driver sets DRIVER_OK, and keeps while it is active.
pub struct Activation {
    pub mem: GuestMemoryMmap,
    /// The queues in the device's order, each built from the driver's registers and checked.
    pub queues: Vec<Queue>,
    /// The features both sides accepted.
    pub features: u64,
    pub interrupt: Arc<Interrupt>,
}

/// Why a device could not be activated; the transport reports it as DEVICE_NEEDS_RESET.
#[derive(Debug)]
pub enum ActivateError {
    /// The driver's queue set-up cannot be used.
    Queue { index: usize, source: QueueError },
    /// The device's backend is gone (passt exited, say).
    Backend(std::io::Error),
}

impl fmt::Display for ActivateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActivateError::Queue { index, source } => write!(f, "queue {index}: {source}"),
            ActivateError::Backend(e) => write!(f, "backend: {e}"),
        }
    }
}

impl std::error::Error for ActivateError {}

/// Shared by a device and its transport: the interrupt status bits, the device's "needs reset"
/// condition and the irqfd that raises the device's GSI.
pub struct Interrupt {
    status: AtomicU32,
    needs_reset: AtomicBool,
    irq: EventFd,
}

impl Interrupt {
    pub fn new(irq: EventFd) -> Arc<Self> {
        Arc::new(Interrupt { status: AtomicU32::new(0), needs_reset: AtomicBool::new(false), irq })
    }

    fn raise(&self, bit: u32) {
        self.status.fetch_or(bit, Ordering::SeqCst);
        // Fails only when the counter is saturated, and then an interrupt is pending anyway.
        let _ = self.irq.write(1);
    }

    /// The device put buffers in a used ring.
    pub fn used_buffer(&self) {
        self.raise(interrupt::USED_BUFFER);
    }

    /// The device cannot go on without a reset (spec 2.1.2): it sets DEVICE_NEEDS_RESET and
    /// tells the driver through a configuration change interrupt.
    pub fn needs_reset(&self) {
        self.needs_reset.store(true, Ordering::SeqCst);
        self.raise(interrupt::CONFIG_CHANGE);
    }

    pub fn is_broken(&self) -> bool {
        self.needs_reset.load(Ordering::SeqCst)
    }

    pub fn status(&self) -> u32 {
        self.status.load(Ordering::SeqCst)
    }

    pub fn ack(&self, bits: u32) {
        self.status.fetch_and(!bits, Ordering::SeqCst);
    }

    /// Back to no pending interrupt and a healthy device, as after a reset.
    pub fn clear(&self) {
        self.status.store(0, Ordering::SeqCst);
        self.needs_reset.store(false, Ordering::SeqCst);
    }

    /// The irqfd itself, for KVM_IRQFD.
    pub fn irq(&self) -> &EventFd {
        &self.irq
    }
}

/// Reads `data.len()` bytes at `offset` of a device's config space `config`; what lies past
/// its end reads as 0 (the driver may probe fields of features not offered).
pub fn read_config_bytes(config: &[u8], offset: u64, data: &mut [u8]) {
    data.fill(0);
    if let Ok(offset) = usize::try_from(offset) {
        if offset < config.len() {
            let n = data.len().min(config.len() - offset);
            data[..n].copy_from_slice(&config[offset..offset + n]);
        }
    }
}

/// A device's `init`: registers on the device thread each of its queue eventfds, with the
/// queue's index as the event data (how its `process` tells them apart), then its backend's
/// events, if it has a backend. A failure is logged as `name`'s: the device then never hears
/// from the guest or its backend.
pub fn watch(ops: &mut EventOps, name: &str, queue_evts: &[EventFd], backend: Option<Events>) {
    let watched = queue_evts
        .iter()
        .enumerate()
        .try_for_each(|(i, evt)| ops.add(Events::with_data(evt, i as u32, EventSet::IN)))
        .and_then(|_| backend.map_or(Ok(()), |events| ops.add(events)));
    if let Err(e) = watched {
        eprintln!("sandbox-vmm: {name}: cannot watch its queues and backend: {e}");
    }
}

/// Empties an eventfd that woke the device thread (a non-blocking read of its counter).
pub fn consume(evt: &EventFd) {
    let _ = evt.read();
}

/// The virtio-mmio registers: offsets into a device's window (spec 4.2.2). The driver accesses
/// them only with aligned 32-bit reads and writes; the 64-bit queue addresses are two
/// registers, low word first.
pub mod regs {
    /// Reads [`MAGIC`].
    pub const MAGIC_VALUE: u64 = 0x000;
    /// Reads [`VERSION`].
    pub const VERSION: u64 = 0x004;
    /// Reads the [`super::device_type`]; 0 makes the driver ignore the window.
    pub const DEVICE_ID: u64 = 0x008;
    pub const VENDOR_ID: u64 = 0x00c;
    /// The 32 feature bits selected by `DEVICE_FEATURES_SEL` (0: bits 0-31, 1: bits 32-63).
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    /// The feature bits the driver accepts, selected the same way.
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    /// Selects the queue the `QUEUE_*` registers below refer to.
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    /// Written with a queue's index when it has new buffers: the one register on a device's
    /// hot path, which is why the transport serves it with an ioeventfd, not a VM exit.
    pub const QUEUE_NOTIFY: u64 = 0x050;
    /// Reads the pending [`super::interrupt`] bits; writing `INTERRUPT_ACK` clears them.
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    /// The device [`super::status`]; writing 0 resets the device.
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    /// The driver area (the available ring).
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    /// The device area (the used ring).
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    /// Changes whenever the device changes its config space, so a driver can tell a torn read.
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// The device-specific config space starts here and runs to the end of the window.
    pub const CONFIG: u64 = 0x100;

    /// "virt" in little-endian byte order.
    pub const MAGIC: u32 = 0x7472_6976;
    /// The virtio 1.x ("modern") register layout; version 1 is the legacy one, not offered.
    pub const VERSION_MODERN: u32 = 2;
}

/// Device status bits (spec 2.1), set by the driver in order as it brings the device up.
pub mod status {
    /// The driver has noticed the device.
    pub const ACKNOWLEDGE: u32 = 1;
    /// The driver knows how to drive it.
    pub const DRIVER: u32 = 2;
    /// The driver is set up: the device may use its queues from now on.
    pub const DRIVER_OK: u32 = 4;
    /// Feature negotiation is complete; the device clears it if it cannot accept the features.
    pub const FEATURES_OK: u32 = 8;
    /// The device hit an error it cannot recover from without a reset.
    pub const DEVICE_NEEDS_RESET: u32 = 64;
    /// The driver gave up on the device.
    pub const FAILED: u32 = 128;
}

/// Bits of the virtio-mmio interrupt status (spec 4.2.2): why the device interrupted.
pub mod interrupt {
    /// The device used buffers in one of its queues.
    pub const USED_BUFFER: u32 = 1;
    /// The device changed its config space.
    pub const CONFIG_CHANGE: u32 = 2;
}

/// Device type ids (spec 5) of the devices this VMM is to provide.
pub mod device_type {
    pub const NET: u32 = 1;
    pub const BLOCK: u32 = 2;
    pub const VSOCK: u32 = 19;
}

/// Feature bit every device offers: the device follows virtio 1.x, not the legacy interface
/// (spec 6.1). Bits 0-23 are the device's own; this one is in the second feature word.
pub const VIRTIO_F_VERSION_1: u32 = 32;

/// [`VIRTIO_F_VERSION_1`] as a feature mask.
pub const FEATURE_VERSION_1: u64 = 1 << VIRTIO_F_VERSION_1;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::layout::VIRTIO_MMIO_SIZE;

    const REGISTERS: [u64; 25] = [
        regs::MAGIC_VALUE,
        regs::VERSION,
        regs::DEVICE_ID,
        regs::VENDOR_ID,
        regs::DEVICE_FEATURES,
        regs::DEVICE_FEATURES_SEL,
        regs::DRIVER_FEATURES,
        regs::DRIVER_FEATURES_SEL,
        regs::QUEUE_SEL,
        regs::QUEUE_NUM_MAX,
        regs::QUEUE_NUM,
        regs::QUEUE_READY,
        regs::QUEUE_NOTIFY,
        regs::INTERRUPT_STATUS,
        regs::INTERRUPT_ACK,
        regs::STATUS,
        regs::QUEUE_DESC_LOW,
        regs::QUEUE_DESC_HIGH,
        regs::QUEUE_DRIVER_LOW,
        regs::QUEUE_DRIVER_HIGH,
        regs::QUEUE_DEVICE_LOW,
        regs::QUEUE_DEVICE_HIGH,
        regs::CONFIG_GENERATION,
        regs::CONFIG,
        VIRTIO_MMIO_SIZE,
    ];

    #[test]
    fn the_magic_value_reads_virt() {
        assert_eq!(&regs::MAGIC.to_le_bytes(), b"virt");
    }

    #[test]
    fn registers_are_aligned_words_in_order_before_the_config_space() {
        // Strictly increasing by at least a word: no register overlaps the next, and the
        // config space (then the window's end) comes after them all.
        for pair in REGISTERS.windows(2) {
            assert_eq!(pair[0] % 4, 0, "{:#x} is not word aligned", pair[0]);
            assert!(pair[0] + 4 <= pair[1], "{:#x} runs into {:#x}", pair[0], pair[1]);
        }
    }

    #[test]
    fn queue_addresses_are_low_then_high_words() {
        assert_eq!(
            [regs::QUEUE_DESC_HIGH, regs::QUEUE_DRIVER_HIGH, regs::QUEUE_DEVICE_HIGH],
            [regs::QUEUE_DESC_LOW + 4, regs::QUEUE_DRIVER_LOW + 4, regs::QUEUE_DEVICE_LOW + 4]
        );
    }

    #[test]
    fn status_and_interrupt_bits_are_distinct_single_bits() {
        let status = [status::ACKNOWLEDGE, status::DRIVER, status::DRIVER_OK, status::FEATURES_OK, status::DEVICE_NEEDS_RESET, status::FAILED];
        let interrupt = [interrupt::USED_BUFFER, interrupt::CONFIG_CHANGE];
        for bits in [&status[..], &interrupt[..]] {
            assert!(bits.iter().all(|b| b.is_power_of_two()), "{bits:?}");
            assert_eq!(bits.iter().fold(0, |all, b| all | b).count_ones() as usize, bits.len(), "{bits:?}");
        }
    }

    #[test]
    fn device_types_are_distinct_and_never_the_placeholder() {
        let types = [device_type::NET, device_type::BLOCK, device_type::VSOCK];
        // Device id 0 tells the driver to ignore the window.
        assert!(!types.contains(&0));
        assert!(types.iter().enumerate().all(|(i, t)| !types[..i].contains(t)));
    }

    #[test]
    fn version_1_is_in_the_second_feature_word() {
        // The transport offers it when DEVICE_FEATURES_SEL is 1, as bit 0 of that word.
        assert_eq!((VIRTIO_F_VERSION_1 / 32, VIRTIO_F_VERSION_1 % 32), (1, 0));
    }
}
