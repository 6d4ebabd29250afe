//! virtio devices and their MMIO transport. No device is here yet: virtio-blk (the root
//! filesystem), virtio-net (to passt) and virtio-vsock (hybrid vsock to the guest services)
//! come next. Until then this module holds what the virtio 1.2 specification fixes and all of
//! them will share: the virtio-mmio register layout, the device status and interrupt bits, and
//! the device type ids.
//!
//! How the pieces go in, as in Firecracker's `devices/virtio/`:
//! - `mmio.rs`, the transport: one [`VIRTIO_MMIO_SIZE`]-byte window per device from
//!   [`VIRTIO_MMIO_START`] with GSIs from [`VIRTIO_GSI_START`], announced to the guest by the
//!   DSDT ([`MmioDevice`]). It owns the [`regs`], feature negotiation, the [`status`] state
//!   machine, each queue's size and addresses, and the [`interrupt`] status; it turns a
//!   QueueNotify (an ioeventfd per queue) into a call on the device and raises the device's
//!   interrupt through an irqfd.
//! - `queue.rs`: the split virtqueue, from the virtio-queue crate, as the transport sets it up
//!   and the devices walk it.
//! - one folder per device (`block/`, `net/`, `vsock/`), each implementing the one device trait
//!   the transport drives: its [`device_type`], features, config space, queues and activation.
//!   A device never knows its transport: it sees guest memory, its queues and a way to
//!   interrupt, so it can be unit-tested against simulated guest memory.
//!
//! [`VIRTIO_MMIO_SIZE`]: crate::arch::x86_64::layout::VIRTIO_MMIO_SIZE
//! [`VIRTIO_MMIO_START`]: crate::arch::x86_64::layout::VIRTIO_MMIO_START
//! [`VIRTIO_GSI_START`]: crate::arch::x86_64::layout::VIRTIO_GSI_START
//! [`MmioDevice`]: crate::arch::x86_64::acpi::MmioDevice

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
