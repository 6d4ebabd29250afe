//! The virtio-blk device: its features and config space, and the request queue served on the
//! device thread.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Arc;

use event_manager::{EventOps, Events, MutEventSubscriber};
use virtio_bindings::bindings::virtio_blk::{VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_RO, VIRTIO_BLK_ID_BYTES};
use vmm_sys_util::eventfd::EventFd;

use super::request::{BlockMetrics, Disk, SECTOR_SIZE};
use crate::devices::virtio::queue::{self, MAX_QUEUE_SIZE};
use crate::devices::virtio::{consume, device_type, read_config_bytes, watch, ActivateError, Activation, VirtioDevice, FEATURE_VERSION_1};

pub struct Block {
    disk: Disk,
    queue_evts: [EventFd; 1],
    active: Option<Activation>,
}

impl Block {
    /// Opens the disk image at `path`; `id` is what the guest reads with GET_ID (its serial
    /// number), cut to 20 bytes.
    pub fn new(path: &Path, read_only: bool, id: &str) -> io::Result<Self> {
        let file: File = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let sectors = file.metadata()?.len() / SECTOR_SIZE;
        let mut id_bytes = [0u8; VIRTIO_BLK_ID_BYTES as usize];
        let n = id.len().min(id_bytes.len());
        id_bytes[..n].copy_from_slice(&id.as_bytes()[..n]);
        Ok(Block {
            disk: Disk { file, read_only, sectors, id: id_bytes, metrics: Arc::default() },
            queue_evts: [EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?],
            active: None,
        })
    }

    /// The disk's counters, shared with whoever asks.
    pub fn metrics(&self) -> Arc<BlockMetrics> {
        self.disk.metrics.clone()
    }

    /// Serves every request the driver has queued; a chain that cannot be a request breaks the
    /// device until the driver resets it.
    fn process_queue(&mut self) {
        let Some(active) = self.active.as_mut() else { return };
        if active.interrupt.is_broken() {
            return;
        }
        match serve(&self.disk, active) {
            Ok(true) => active.interrupt.used_buffer(),
            Ok(false) => {}
            Err(e) => {
                eprintln!("sandbox-vmm: virtio-blk: {e}; the device needs a reset");
                active.interrupt.needs_reset();
            }
        }
    }
}

/// Executes the queued requests in order and returns their chains to the driver: whether any
/// was, or the first chain that could not be served.
fn serve(disk: &Disk, active: &mut Activation) -> Result<bool, String> {
    let mut used = false;
    while let Some((chain, shape)) = queue::pop(&mut active.queues[0], &active.mem).map_err(|e| e.to_string())? {
        let head = chain.head_index();
        let written = disk.execute(&active.mem, chain, shape).map_err(|e| e.to_string())?;
        queue::add_used(&mut active.queues[0], &active.mem, head, written).map_err(|e| e.to_string())?;
        used = true;
    }
    Ok(used)
}

impl VirtioDevice for Block {
    fn device_type(&self) -> u32 {
        device_type::BLOCK
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[MAX_QUEUE_SIZE]
    }

    fn queue_events(&self) -> &[EventFd] {
        &self.queue_evts
    }

    fn features(&self) -> u64 {
        // A read-only disk says so (the guest then mounts it read-only and never writes); a
        // writable one has a cache to flush.
        let own = if self.disk.read_only { 1 << VIRTIO_BLK_F_RO } else { 1 << VIRTIO_BLK_F_FLUSH };
        FEATURE_VERSION_1 | own
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_blk_config: only `capacity`, in 512-byte sectors, is used.
        read_config_bytes(&self.disk.sectors.to_le_bytes(), offset, data);
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        self.active = Some(activation);
        Ok(())
    }

    fn reset(&mut self) {
        self.active = None;
    }
}

impl MutEventSubscriber for Block {
    fn process(&mut self, _events: Events, _ops: &mut EventOps) {
        consume(&self.queue_evts[0]);
        self.process_queue();
    }

    fn init(&mut self, ops: &mut EventOps) {
        watch(ops, "virtio-blk", &self.queue_evts, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::virtio::testing::{activate, readable, writable, Driver, Rng, Scratch};
    use crate::devices::virtio::Interrupt;
    use std::io::Write as _;
    use std::sync::Arc;
    use virtio_bindings::bindings::virtio_blk::*;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    const RING: u64 = 0x1000;
    const HDR: u64 = 0x8000;
    const DATA: u64 = 0x10000;
    const STATUS: u64 = 0x9000;

    struct Fixture {
        block: Block,
        mem: GuestMemoryMmap,
        driver: Driver,
        interrupt: Arc<Interrupt>,
        path: std::path::PathBuf,
        _dir: Scratch,
    }

    /// A disk of `sectors` sectors whose sector n is filled with byte n.
    fn fixture(sectors: u64, read_only: bool) -> Fixture {
        let dir = Scratch::new("blk");
        let path = dir.0.join("disk.img");
        let mut f = File::create(&path).unwrap();
        for s in 0..sectors {
            f.write_all(&[s as u8; 512]).unwrap();
        }
        // A partial sector at the end is not part of the disk.
        f.write_all(&[0xee; 100]).unwrap();
        let mut block = Block::new(&path, read_only, "serial-0123456789-abcdef").unwrap();
        let driver = Driver::new(RING, 16);
        let (mem, interrupt) = activate(&mut block, &[&driver]);
        Fixture { block, mem, driver, interrupt, path, _dir: dir }
    }

    impl Fixture {
        fn header(&self, request_type: u32, sector: u64) {
            self.mem.write_obj(request_type, GuestAddress(HDR)).unwrap();
            self.mem.write_obj(0u32, GuestAddress(HDR + 4)).unwrap();
            self.mem.write_obj(sector, GuestAddress(HDR + 8)).unwrap();
            self.mem.write_obj(0xffu8, GuestAddress(STATUS)).unwrap();
        }

        fn run(&mut self, bufs: &[crate::devices::virtio::testing::Buf]) -> Vec<(u16, u32)> {
            self.driver.offer(&self.mem, bufs);
            self.block.process_queue();
            self.driver.take_used(&self.mem)
        }

        fn status(&self) -> u8 {
            self.mem.read_obj(GuestAddress(STATUS)).unwrap()
        }
    }

    #[test]
    fn config_and_features() {
        let f = fixture(8, true);
        let mut cap = [0u8; 8];
        f.block.read_config(0, &mut cap);
        assert_eq!(u64::from_le_bytes(cap), 8);
        assert_ne!(f.block.features() & (1 << VIRTIO_BLK_F_RO), 0);
        assert_eq!(f.block.features() & (1 << VIRTIO_BLK_F_FLUSH), 0);
        assert_ne!(fixture(1, false).block.features() & (1 << VIRTIO_BLK_F_FLUSH), 0);
    }

    #[test]
    fn reads_a_known_sector_through_split_and_single_buffers() {
        let mut f = fixture(8, true);
        f.header(VIRTIO_BLK_T_IN, 3);
        let used = f.run(&[readable(HDR, 16), writable(DATA, 512), writable(STATUS, 1)]);
        assert_eq!(used, vec![(0, 513)]);
        assert_eq!(f.status(), VIRTIO_BLK_S_OK as u8);
        let mut got = [0u8; 512];
        f.mem.read_slice(&mut got, GuestAddress(DATA)).unwrap();
        assert_eq!(got, [3u8; 512]);
        // Two sectors over three buffers, the status byte in the last one with data before it.
        f.header(VIRTIO_BLK_T_IN, 6);
        let used = f.run(&[readable(HDR, 16), writable(DATA, 100), writable(DATA + 0x1000, 700), writable(STATUS - 224, 225)]);
        assert_eq!(used[0].1, 1025);
        assert_eq!(f.status(), VIRTIO_BLK_S_OK as u8);
        let mut got = [0u8; 100];
        f.mem.read_slice(&mut got, GuestAddress(DATA)).unwrap();
        assert_eq!(got, [6u8; 100]);
        let mut tail = [0u8; 224];
        f.mem.read_slice(&mut tail, GuestAddress(STATUS - 224)).unwrap();
        assert_eq!(tail, [7u8; 224]);
        assert_eq!(f.interrupt.status() & crate::devices::virtio::interrupt::USED_BUFFER, 1);
        // Both reads, counted as the device served them.
        assert_eq!(f.block.metrics().snapshot(), (512 + 1024, 2, 0, 0));
    }

    #[test]
    fn out_of_range_and_partial_sectors_are_io_errors() {
        let mut f = fixture(8, true);
        for (sector, len) in [(8, 512), (7, 1024), (u64::MAX, 512), (0, 100)] {
            f.header(VIRTIO_BLK_T_IN, sector);
            let used = f.run(&[readable(HDR, 16), writable(DATA, len), writable(STATUS, 1)]);
            assert_eq!(used.len(), 1);
            assert_eq!(f.status(), VIRTIO_BLK_S_IOERR as u8, "sector {sector} len {len}");
        }
        assert!(!f.interrupt.is_broken());
        // Failed reads are errors, not bytes read.
        assert_eq!(f.block.metrics().snapshot(), (0, 0, 0, 4));
    }

    #[test]
    fn writes_are_refused_on_a_read_only_disk_and_land_on_a_writable_one() {
        let mut f = fixture(4, true);
        f.mem.write_slice(&[0xab; 512], GuestAddress(DATA)).unwrap();
        f.header(VIRTIO_BLK_T_OUT, 1);
        let used = f.run(&[readable(HDR, 16), readable(DATA, 512), writable(STATUS, 1)]);
        assert_eq!(used[0].1, 1);
        assert_eq!(f.status(), VIRTIO_BLK_S_IOERR as u8);
        assert_eq!(std::fs::read(&f.path).unwrap()[512..1024], [1u8; 512]);
        assert_eq!(f.block.metrics().snapshot(), (0, 0, 0, 1));

        let mut f = fixture(4, false);
        f.mem.write_slice(&[0xab; 512], GuestAddress(DATA)).unwrap();
        f.header(VIRTIO_BLK_T_OUT, 1);
        f.run(&[readable(HDR, 16), readable(DATA, 512), writable(STATUS, 1)]);
        assert_eq!(f.status(), VIRTIO_BLK_S_OK as u8);
        assert_eq!(std::fs::read(&f.path).unwrap()[512..1024], [0xab; 512]);
        assert_eq!(f.block.metrics().snapshot(), (0, 0, 512, 0));
        f.header(VIRTIO_BLK_T_FLUSH, 0);
        f.run(&[readable(HDR, 16), writable(STATUS, 1)]);
        assert_eq!(f.status(), VIRTIO_BLK_S_OK as u8);
    }

    #[test]
    fn get_id_and_unsupported_requests() {
        let mut f = fixture(1, true);
        f.header(VIRTIO_BLK_T_GET_ID, 0);
        let used = f.run(&[readable(HDR, 16), writable(DATA, 20), writable(STATUS, 1)]);
        assert_eq!(used[0].1, 21);
        let mut id = [0u8; 20];
        f.mem.read_slice(&mut id, GuestAddress(DATA)).unwrap();
        assert_eq!(&id, b"serial-0123456789-ab");
        f.header(VIRTIO_BLK_T_DISCARD, 0);
        f.run(&[readable(HDR, 16), writable(STATUS, 1)]);
        assert_eq!(f.status(), VIRTIO_BLK_S_UNSUPP as u8);
        f.header(VIRTIO_BLK_T_FLUSH, 0);
        f.run(&[readable(HDR, 16), writable(STATUS, 1)]);
        assert_eq!(f.status(), VIRTIO_BLK_S_OK as u8);
    }

    #[test]
    fn malformed_requests_break_the_device_until_reset() {
        let shapes: [&[crate::devices::virtio::testing::Buf]; 4] = [
            &[readable(HDR, 16)],
            &[readable(HDR, 8), writable(STATUS, 1)],
            &[writable(STATUS, 1)],
            &[readable(HDR, 16), writable(u64::MAX - 1, 1)],
        ];
        for bufs in shapes {
            let mut f = fixture(1, true);
            f.header(VIRTIO_BLK_T_IN, 0);
            let used = f.run(bufs);
            assert!(used.is_empty(), "{bufs:?}");
            assert!(f.interrupt.is_broken(), "{bufs:?}");
            // Further requests are left alone while broken.
            f.header(VIRTIO_BLK_T_IN, 0);
            assert!(f.run(&[readable(HDR, 16), writable(DATA, 512), writable(STATUS, 1)]).is_empty());
        }
    }

    #[test]
    fn fuzz_random_requests_never_panic() {
        let mut rng = Rng::from_env(0x5eed_0002);
        for _ in 0..300 {
            let mut f = fixture(4, rng.chance(50));
            for _ in 0..8 {
                let request_type = [VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, rng.next() as u32][rng.below(5) as usize];
                f.header(request_type, if rng.chance(70) { rng.below(6) } else { rng.next() });
                let mut bufs = vec![readable(HDR, [16, 8, 0, 32][rng.below(4) as usize])];
                for _ in 0..rng.below(4) {
                    let len = [512, 1024, 100, 0, 4096][rng.below(5) as usize];
                    bufs.push(if rng.chance(50) { writable(DATA + rng.below(0x1000), len) } else { readable(DATA, len) });
                }
                if rng.chance(90) {
                    bufs.push(writable(STATUS, 1));
                }
                f.run(&bufs);
            }
        }
    }
}
