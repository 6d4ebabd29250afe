//! The split virtqueue as the devices walk it: virtio-queue's [`Queue`] keeps the ring indexes
//! (and refuses an available index that runs more than a queue ahead), and every chain it hands
//! out is first walked here, strictly, before a device touches it.
//!
//! The strict walk exists because virtio-queue's own descriptor iterator ends a chain quietly on
//! whatever it cannot follow (a `next` past the table, an unreadable descriptor, an indirect
//! table the device never offered), so a corrupt chain would look like a short, valid one. Here
//! every such chain is an error, which the device answers by marking itself broken
//! (DEVICE_NEEDS_RESET) rather than guessing what the driver meant. Every access to guest memory
//! goes through vm-memory, which bounds-checks it: a guest can make its own I/O fail, never make
//! the VMM read or write outside guest RAM.

use std::fmt;

use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// The largest queue any device offers (Firecracker's choice too): enough in flight for a
/// sandbox, and it bounds every chain walk.
pub const MAX_QUEUE_SIZE: u16 = 256;

/// What the driver wrote into one queue's registers, kept as written until activation turns it
/// into a [`Queue`] (so a misaligned address is reported then, not silently replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    pub max_size: u16,
    pub size: u16,
    pub ready: bool,
    pub desc_table: u64,
    pub avail_ring: u64,
    pub used_ring: u64,
}

impl QueueConfig {
    pub fn new(max_size: u16) -> Self {
        QueueConfig { max_size, size: max_size, ready: false, desc_table: 0, avail_ring: 0, used_ring: 0 }
    }

    /// The queue the device will use, or why the driver's set-up cannot be used.
    pub fn build(&self, mem: &GuestMemoryMmap) -> Result<Queue, QueueError> {
        let setup = |e| QueueError::Setup(e);
        let mut queue = Queue::new(self.max_size).map_err(setup)?;
        queue.try_set_size(self.size).map_err(setup)?;
        queue.try_set_desc_table_address(GuestAddress(self.desc_table)).map_err(setup)?;
        queue.try_set_avail_ring_address(GuestAddress(self.avail_ring)).map_err(setup)?;
        queue.try_set_used_ring_address(GuestAddress(self.used_ring)).map_err(setup)?;
        queue.set_ready(self.ready);
        // Ready, and its three areas inside guest RAM.
        if !queue.is_valid(mem) {
            return Err(QueueError::NotInMemory);
        }
        Ok(queue)
    }
}

/// Why a queue or one of its chains cannot be used. Each one is the driver's fault, and each
/// one breaks the device until the driver resets it.
#[derive(Debug)]
pub enum QueueError {
    /// A size that is not a power of two up to the maximum, or a misaligned ring address.
    Setup(virtio_queue::Error),
    /// The queue is not ready, or a ring lies outside guest RAM.
    NotInMemory,
    /// The available ring is unreadable or its index runs more than a queue ahead.
    AvailRing(virtio_queue::Error),
    /// The used ring cannot take the entry.
    UsedRing(virtio_queue::Error),
    Chain(ChainError),
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::Setup(e) => write!(f, "queue set-up: {e}"),
            QueueError::NotInMemory => write!(f, "queue not ready or its rings are outside guest memory"),
            QueueError::AvailRing(e) => write!(f, "available ring: {e}"),
            QueueError::UsedRing(e) => write!(f, "used ring: {e}"),
            QueueError::Chain(e) => write!(f, "descriptor chain: {e}"),
        }
    }
}

impl std::error::Error for QueueError {}

/// What is wrong with a descriptor chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainError {
    /// A head or `next` index outside the descriptor table.
    IndexOutOfRange { index: u16, size: u16 },
    /// The descriptor table entry itself cannot be read.
    TableUnreadable { index: u16 },
    /// Indirect descriptors were not offered.
    Indirect { index: u16 },
    /// A buffer that is not wholly inside guest RAM.
    BufferOutOfMemory { index: u16, addr: u64, len: u32 },
    /// A device-readable buffer after a device-writable one (spec 2.7.4.2).
    ReadableAfterWritable { index: u16 },
    /// More descriptors than the queue has: the chain loops.
    Loop,
    /// The buffers add up to more than 4 GiB.
    TooLong,
    /// The buffers of the chain at `head` could not be used after the walk accepted them: the
    /// driver changed the chain while the device was using it.
    Changed { head: u16 },
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainError::IndexOutOfRange { index, size } => write!(f, "index {index} outside a table of {size}"),
            ChainError::TableUnreadable { index } => write!(f, "descriptor {index} cannot be read"),
            ChainError::Indirect { index } => write!(f, "descriptor {index} is indirect, which was not offered"),
            ChainError::BufferOutOfMemory { index, addr, len } => {
                write!(f, "descriptor {index}: buffer {addr:#x}+{len:#x} is outside guest memory")
            }
            ChainError::ReadableAfterWritable { index } => write!(f, "descriptor {index} is readable after a writable one"),
            ChainError::Loop => write!(f, "the chain is longer than the queue (a loop)"),
            ChainError::TooLong => write!(f, "the buffers add up to more than 4 GiB"),
            ChainError::Changed { head } => write!(f, "chain {head} changed while in use"),
        }
    }
}

/// What the strict walk found: the byte counts on each side of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainShape {
    pub descriptors: u16,
    pub readable: u32,
    pub writable: u32,
}

/// Walks the chain starting at `head` of a table of `size` descriptors at `table`, checking
/// every rule a device relies on; see [`ChainError`].
pub fn walk(mem: &GuestMemoryMmap, table: GuestAddress, size: u16, head: u16) -> Result<ChainShape, ChainError> {
    let mut shape = ChainShape::default();
    let mut index = head;
    let mut writable_seen = false;
    loop {
        if index >= size {
            return Err(ChainError::IndexOutOfRange { index, size });
        }
        if shape.descriptors == size {
            return Err(ChainError::Loop);
        }
        shape.descriptors += 1;
        // `index < size <= 2^15`: the offset cannot overflow, but the table base may be anything.
        let at = table.checked_add(u64::from(index) * 16).ok_or(ChainError::TableUnreadable { index })?;
        let desc: Descriptor = mem.read_obj(at).map_err(|_| ChainError::TableUnreadable { index })?;
        let flags = u32::from(desc.flags());
        if flags & VRING_DESC_F_INDIRECT != 0 {
            return Err(ChainError::Indirect { index });
        }
        let len = desc.len();
        if len > 0 && !mem.check_range(desc.addr(), len as usize) {
            return Err(ChainError::BufferOutOfMemory { index, addr: desc.addr().raw_value(), len });
        }
        if flags & VRING_DESC_F_WRITE != 0 {
            writable_seen = true;
            shape.writable = shape.writable.checked_add(len).ok_or(ChainError::TooLong)?;
        } else if writable_seen {
            return Err(ChainError::ReadableAfterWritable { index });
        } else {
            shape.readable = shape.readable.checked_add(len).ok_or(ChainError::TooLong)?;
        }
        shape.readable.checked_add(shape.writable).ok_or(ChainError::TooLong)?;
        if flags & VRING_DESC_F_NEXT == 0 {
            return Ok(shape);
        }
        index = desc.next();
    }
}

/// A chain the device may use: virtio-queue's, checked by [`walk`].
pub type Chain<'m> = DescriptorChain<&'m GuestMemoryMmap>;

/// The next available chain, checked; `None` when the driver has offered nothing new.
pub fn pop<'m>(queue: &mut Queue, mem: &'m GuestMemoryMmap) -> Result<Option<(Chain<'m>, ChainShape)>, QueueError> {
    let (table, size) = (GuestAddress(queue.desc_table()), queue.size());
    let chain = match queue.iter(mem).map_err(QueueError::AvailRing)?.next() {
        Some(chain) => chain,
        None => return Ok(None),
    };
    let shape = walk(mem, table, size, chain.head_index()).map_err(QueueError::Chain)?;
    Ok(Some((chain, shape)))
}

/// Returns the chain at `head` to the driver with `len` bytes written into it.
pub fn add_used(queue: &mut Queue, mem: &GuestMemoryMmap, head: u16, len: u32) -> Result<(), QueueError> {
    queue.add_used(mem, head, len).map_err(QueueError::UsedRing)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    const RING: u64 = 0x1000;
    const DATA: u64 = 0x10000;

    fn setup(size: u16) -> (GuestMemoryMmap, Driver, Queue) {
        let mem = memory();
        let driver = Driver::new(RING, size);
        let queue = driver.queue(&mem);
        (mem, driver, queue)
    }

    fn pop_err(queue: &mut Queue, mem: &GuestMemoryMmap) -> ChainError {
        match pop(queue, mem) {
            Err(QueueError::Chain(e)) => e,
            other => panic!("expected a chain error, got {:?}", other.map(|c| c.map(|(_, s)| s))),
        }
    }

    #[test]
    fn chains_of_every_shape_are_measured() {
        let (mem, mut driver, mut queue) = setup(16);
        let shapes: [&[Buf]; 5] = [
            &[readable(DATA, 16)],
            &[writable(DATA, 512)],
            &[readable(DATA, 16), writable(DATA + 0x100, 1)],
            &[readable(DATA, 16), readable(DATA + 0x100, 512), readable(DATA + 0x400, 512), writable(DATA + 0x800, 1)],
            &[readable(DATA, 0), writable(DATA, 0)],
        ];
        for bufs in shapes {
            let head = driver.offer(&mem, bufs);
            let (chain, shape) = pop(&mut queue, &mem).unwrap().unwrap();
            assert_eq!(chain.head_index(), head);
            let readable: u32 = bufs.iter().filter(|b| !b.writable).map(|b| b.len).sum();
            let writable: u32 = bufs.iter().filter(|b| b.writable).map(|b| b.len).sum();
            assert_eq!(shape, ChainShape { descriptors: bufs.len() as u16, readable, writable });
        }
        assert!(pop(&mut queue, &mem).unwrap().is_none());
    }

    #[test]
    fn buffers_outside_guest_memory_are_refused() {
        for (addr, len) in [(MEM_SIZE, 1), (MEM_SIZE - 1, 2), (u64::MAX, 1), (u64::MAX - 2, 16), (0, u32::MAX)] {
            let (mem, mut driver, mut queue) = setup(8);
            driver.offer(&mem, &[readable(DATA, 16), writable(addr, len)]);
            assert!(matches!(pop_err(&mut queue, &mem), ChainError::BufferOutOfMemory { index: 1, .. }), "{addr:#x}+{len:#x}");
        }
        // The last byte of guest memory is fine.
        let (mem, mut driver, mut queue) = setup(8);
        driver.offer(&mem, &[writable(MEM_SIZE - 1, 1)]);
        assert!(pop(&mut queue, &mem).unwrap().is_some());
    }

    #[test]
    fn bad_indexes_loops_indirect_tables_and_order_are_refused() {
        let (mem, mut driver, mut queue) = setup(8);
        // A `next` past the table.
        driver.set_desc(&mem, 0, DATA, 16, VRING_DESC_F_NEXT as u16, 8);
        driver.publish(&mem, 0);
        assert_eq!(pop_err(&mut queue, &mem), ChainError::IndexOutOfRange { index: 8, size: 8 });
        // A head past the table.
        driver.publish(&mem, 100);
        assert_eq!(pop_err(&mut queue, &mem), ChainError::IndexOutOfRange { index: 100, size: 8 });
        // A loop of two.
        driver.set_desc(&mem, 1, DATA, 16, VRING_DESC_F_NEXT as u16, 2);
        driver.set_desc(&mem, 2, DATA, 16, VRING_DESC_F_NEXT as u16, 1);
        driver.publish(&mem, 1);
        assert_eq!(pop_err(&mut queue, &mem), ChainError::Loop);
        // A descriptor pointing at itself.
        driver.set_desc(&mem, 3, DATA, 16, VRING_DESC_F_NEXT as u16, 3);
        driver.publish(&mem, 3);
        assert_eq!(pop_err(&mut queue, &mem), ChainError::Loop);
        // An indirect table.
        driver.set_desc(&mem, 4, DATA, 32, VRING_DESC_F_INDIRECT as u16, 0);
        driver.publish(&mem, 4);
        assert_eq!(pop_err(&mut queue, &mem), ChainError::Indirect { index: 4 });
        // Readable after writable.
        driver.set_desc(&mem, 5, DATA, 16, (VRING_DESC_F_WRITE | VRING_DESC_F_NEXT) as u16, 6);
        driver.set_desc(&mem, 6, DATA, 16, 0, 0);
        driver.publish(&mem, 5);
        assert_eq!(pop_err(&mut queue, &mem), ChainError::ReadableAfterWritable { index: 6 });
        // Lengths that add up past 4 GiB (each buffer within memory is impossible at this size,
        // so check the arithmetic on its own).
        let big = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let mut d = Driver::new(RING, 8);
        let mut q = d.queue(&big);
        d.set_desc(&big, 0, DATA, 0, VRING_DESC_F_NEXT as u16, 1);
        d.set_desc(&big, 1, DATA, 16, 0, 0);
        d.publish(&big, 0);
        assert!(pop(&mut q, &big).unwrap().is_some());
    }

    #[test]
    fn an_available_index_more_than_a_queue_ahead_is_refused() {
        let (mem, mut driver, mut queue) = setup(8);
        driver.set_avail_idx(&mem, 9);
        assert!(matches!(pop(&mut queue, &mem), Err(QueueError::AvailRing(virtio_queue::Error::InvalidAvailRingIndex))));
    }

    #[test]
    fn indexes_wrap_around_at_65536() {
        let (mem, mut driver, mut queue) = setup(4);
        // Both sides start just before the wrap: the device's next index and the driver's.
        queue.set_next_avail(65534);
        queue.set_next_used(65534);
        driver.set_avail_idx(&mem, 65534);
        let mut heads = Vec::new();
        for i in 0..6u16 {
            heads.push(driver.offer(&mem, &[writable(DATA + u64::from(i) * 64, 64)]));
            let (chain, _) = pop(&mut queue, &mem).unwrap().unwrap();
            assert_eq!(chain.head_index(), *heads.last().unwrap());
            add_used(&mut queue, &mem, chain.head_index(), 64).unwrap();
        }
        assert_eq!(queue.next_avail(), 4);
        assert_eq!(queue.next_used(), 4);
        let used_idx: u16 = mem.read_obj(GuestAddress(driver.used + 2)).unwrap();
        assert_eq!(used_idx, 4);
    }

    #[test]
    fn set_up_errors_are_named() {
        let mem = memory();
        let mut config = Driver::new(RING, 8).config();
        config.size = 6;
        assert!(matches!(config.build(&mem), Err(QueueError::Setup(virtio_queue::Error::InvalidSize))));
        let mut config = Driver::new(RING, 8).config();
        config.desc_table += 8;
        assert!(matches!(config.build(&mem), Err(QueueError::Setup(virtio_queue::Error::InvalidDescTableAlign))));
        let mut config = Driver::new(RING, 8).config();
        config.used_ring = MEM_SIZE - 8;
        assert!(matches!(config.build(&mem), Err(QueueError::NotInMemory)));
        let mut config = Driver::new(RING, 8).config();
        config.ready = false;
        assert!(matches!(config.build(&mem), Err(QueueError::NotInMemory)));
    }

    /// Seeded fuzzing of the parser: random descriptor tables (mostly plausible, some hostile)
    /// and random available indexes. The walk must never panic, and whatever it accepts must be
    /// wholly inside guest memory, in order and as long as it says.
    #[test]
    fn fuzz_random_tables_never_panic_and_accepted_chains_are_sound() {
        let mut rng = Rng::from_env(0x5eed_0001);
        let mem = memory();
        let interesting = [0, 1, 16, 511, 512, 4096, 65535, MEM_SIZE - 1, MEM_SIZE, u64::MAX, u64::MAX - 15];
        for case in 0..4000 {
            let size = 1u16 << rng.below(6);
            let mut driver = Driver::new(RING, size);
            let mut queue = driver.queue(&mem);
            for index in 0..size {
                let addr = if rng.chance(80) { DATA + rng.below(0x8000) } else { interesting[rng.below(interesting.len() as u64) as usize] };
                let len = if rng.chance(80) { rng.below(0x2000) as u32 } else { rng.next() as u32 };
                let flags = (rng.next() as u16) & if rng.chance(80) { 0x3 } else { 0xffff };
                let next = if rng.chance(85) { rng.below(u64::from(size)) as u16 } else { rng.next() as u16 };
                driver.set_desc(&mem, index, addr, len, flags, next);
            }
            for _ in 0..rng.below(u64::from(size) + 1) {
                let head = if rng.chance(90) { rng.below(u64::from(size)) as u16 } else { rng.next() as u16 };
                driver.publish(&mem, head);
            }
            if rng.chance(5) {
                driver.set_avail_idx(&mem, rng.next() as u16);
            }
            for _ in 0..=size {
                match pop(&mut queue, &mem) {
                    Ok(None) | Err(_) => break,
                    Ok(Some((chain, shape))) => {
                        let descs: Vec<Descriptor> = chain.collect();
                        assert_eq!(descs.len(), usize::from(shape.descriptors), "case {case}");
                        let mut writable = false;
                        for d in &descs {
                            assert!(d.len() == 0 || mem.check_range(d.addr(), d.len() as usize), "case {case}: {d:?}");
                            assert!(!writable || d.is_write_only(), "case {case}: order");
                            writable |= d.is_write_only();
                        }
                        let total: u64 = descs.iter().map(|d| u64::from(d.len())).sum();
                        assert_eq!(total, u64::from(shape.readable) + u64::from(shape.writable), "case {case}");
                    }
                }
            }
        }
    }
}
