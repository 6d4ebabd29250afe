//! Test support of the devices' unit tests: simulated guest memory, the driver's side of a
//! queue, a seeded generator for the fuzz tests, and scratch directories.

use std::path::PathBuf;
use std::sync::Arc;

use virtio_bindings::bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::Queue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

use super::queue::{QueueConfig, MAX_QUEUE_SIZE};
use super::{Activation, Interrupt, VirtioDevice};

/// Guest RAM of the tests: 1 MiB from address 0.
pub const MEM_SIZE: u64 = 1 << 20;

pub fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap()
}

/// Activates `device` over fresh [`memory`] as a driver that accepted every feature offered,
/// with one queue per driver, in the device's order; returns the memory and the interrupt.
pub fn activate(device: &mut impl VirtioDevice, drivers: &[&Driver]) -> (GuestMemoryMmap, Arc<Interrupt>) {
    let mem = memory();
    let interrupt = Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap());
    let queues = drivers.iter().map(|d| d.queue(&mem)).collect();
    device.activate(Activation { mem: mem.clone(), queues, features: device.features(), interrupt: interrupt.clone() }).unwrap();
    (mem, interrupt)
}

/// One buffer of a chain the test driver offers.
#[derive(Debug, Clone, Copy)]
pub struct Buf {
    pub addr: u64,
    pub len: u32,
    pub writable: bool,
}

pub fn readable(addr: u64, len: u32) -> Buf {
    Buf { addr, len, writable: false }
}

pub fn writable(addr: u64, len: u32) -> Buf {
    Buf { addr, len, writable: true }
}

/// The driver's side of a queue: descriptor table, available and used rings at `base`.
pub struct Driver {
    pub size: u16,
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    next_desc: u16,
    avail_idx: u16,
    seen_used: u16,
}

impl Driver {
    pub fn new(base: u64, size: u16) -> Self {
        let desc = base;
        let avail = desc + 16 * u64::from(size);
        let used = (avail + 6 + 2 * u64::from(size) + 3) & !3;
        Driver { size, desc, avail, used, next_desc: 0, avail_idx: 0, seen_used: 0 }
    }

    pub fn config(&self) -> QueueConfig {
        QueueConfig { max_size: MAX_QUEUE_SIZE, size: self.size, ready: true, desc_table: self.desc, avail_ring: self.avail, used_ring: self.used }
    }

    pub fn queue(&self, mem: &GuestMemoryMmap) -> Queue {
        self.config().build(mem).unwrap()
    }

    /// Writes raw descriptor `index`.
    pub fn set_desc(&self, mem: &GuestMemoryMmap, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        mem.write_obj(Descriptor::new(addr, len, flags, next), GuestAddress(self.desc + 16 * u64::from(index))).unwrap();
    }

    /// Puts `head` in the available ring and publishes it.
    pub fn publish(&mut self, mem: &GuestMemoryMmap, head: u16) {
        let slot = self.avail + 4 + 2 * u64::from(self.avail_idx % self.size);
        mem.write_obj(head, GuestAddress(slot)).unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.set_avail_idx(mem, self.avail_idx);
    }

    pub fn set_avail_idx(&mut self, mem: &GuestMemoryMmap, idx: u16) {
        self.avail_idx = idx;
        mem.write_obj(idx, GuestAddress(self.avail + 2)).unwrap();
    }

    /// Offers a chain of `bufs` (consecutive descriptors, wrapping in the table); returns its head.
    pub fn offer(&mut self, mem: &GuestMemoryMmap, bufs: &[Buf]) -> u16 {
        let head = self.next_desc;
        for (i, b) in bufs.iter().enumerate() {
            let index = self.next_desc;
            self.next_desc = (self.next_desc + 1) % self.size;
            let mut flags = if b.writable { VRING_DESC_F_WRITE as u16 } else { 0 };
            if i + 1 < bufs.len() {
                flags |= VRING_DESC_F_NEXT as u16;
            }
            self.set_desc(mem, index, b.addr, b.len, flags, self.next_desc);
        }
        self.publish(mem, head);
        head
    }

    /// The used entries the device added since the last call: (head, bytes written).
    pub fn take_used(&mut self, mem: &GuestMemoryMmap) -> Vec<(u16, u32)> {
        let idx: u16 = mem.read_obj(GuestAddress(self.used + 2)).unwrap();
        let mut out = Vec::new();
        while self.seen_used != idx {
            let at = self.used + 4 + 8 * u64::from(self.seen_used % self.size);
            let id: u32 = mem.read_obj(GuestAddress(at)).unwrap();
            let len: u32 = mem.read_obj(GuestAddress(at + 4)).unwrap();
            out.push((id as u16, len));
            self.seen_used = self.seen_used.wrapping_add(1);
        }
        out
    }
}

/// A small deterministic generator (xorshift64*) for the seeded fuzz tests of the parsers.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `VIRTIO_FUZZ_SEED` when set, so a failure can be replayed or the space
    /// explored further; a fixed seed otherwise, so the default run is repeatable.
    pub fn from_env(default: u64) -> Self {
        let seed = std::env::var("VIRTIO_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A fresh directory under the system temp directory, removed with what is in it when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("svmm-{name}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
