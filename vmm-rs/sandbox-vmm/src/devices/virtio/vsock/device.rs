//! The virtio-vsock device: receive, transmit and event queues between the guest and the
//! [`Muxer`].

use std::time::Instant;

use event_manager::{EventOps, Events, MutEventSubscriber};
use virtio_queue::QueueOwnedT;
use virtio_vsock::packet::{Error as PacketError, VsockPacket, PKT_HEADER_SIZE};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;

use super::muxer::Muxer;
use super::packet::{GUEST_CID, MAX_PKT_DATA};
use crate::devices::virtio::queue::{self, QueueError, MAX_QUEUE_SIZE};
use crate::devices::virtio::{consume, device_type, read_config_bytes, watch, ActivateError, Activation, VirtioDevice, FEATURE_VERSION_1};

const RX: usize = 0;
const TX: usize = 1;
/// The event queue carries only transport resets after a snapshot restore, which this VMM
/// does not do; the driver fills it and the device leaves it alone.
const EVENT: usize = 2;
/// Event data of the muxer's epoll (the queues' are their indexes).
const MUXER: u32 = 3;

pub struct Vsock {
    muxer: Muxer,
    queue_evts: [EventFd; 3],
    active: Option<Activation>,
}

/// Why a chain cannot carry a vsock packet: the driver broke the protocol, and the device needs
/// a reset. (A header that is merely wrong is the muxer's business, not this.)
#[derive(Debug)]
pub enum ChainFault {
    Queue(QueueError),
    Packet(PacketError),
}

impl std::fmt::Display for ChainFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainFault::Queue(e) => write!(f, "{e}"),
            ChainFault::Packet(e) => write!(f, "packet: {e}"),
        }
    }
}

impl Vsock {
    pub fn new(muxer: Muxer) -> std::io::Result<Self> {
        let evt = || EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
        Ok(Vsock { muxer, queue_evts: [evt()?, evt()?, evt()?], active: None })
    }

    fn broken(&self, fault: ChainFault) {
        eprintln!("sandbox-vmm: virtio-vsock: {fault}; the device needs a reset");
        if let Some(active) = &self.active {
            active.interrupt.needs_reset();
        }
    }

    fn usable(&self) -> bool {
        self.active.as_ref().is_some_and(|a| !a.interrupt.is_broken())
    }

    /// Packets from the guest to the muxer.
    fn process_tx(&mut self) -> Result<(), ChainFault> {
        let active = self.active.as_mut().expect("checked by the caller");
        let mut used = false;
        while let Some((mut chain, _)) = queue::pop(&mut active.queues[TX], &active.mem).map_err(ChainFault::Queue)? {
            let head = chain.head_index();
            match VsockPacket::from_tx_virtq_chain(&active.mem, &mut chain, MAX_PKT_DATA) {
                Ok(pkt) => self.muxer.send(&pkt, Instant::now()),
                // A length beyond what any packet may carry: dropped, the chain returned.
                Err(PacketError::InvalidHeaderLen(len)) => self.muxer.refused(format_args!("a length of {len} bytes")),
                Err(e) => return Err(ChainFault::Packet(e)),
            }
            queue::add_used(&mut active.queues[TX], &active.mem, head, 0).map_err(ChainFault::Queue)?;
            used = true;
        }
        if used {
            active.interrupt.used_buffer();
        }
        Ok(())
    }

    /// Packets from the muxer into the guest's receive buffers, while both have some.
    fn process_rx(&mut self) -> Result<(), ChainFault> {
        let active = self.active.as_mut().expect("checked by the caller");
        let mut used = false;
        while self.muxer.has_rx() {
            let Some((mut chain, _)) = queue::pop(&mut active.queues[RX], &active.mem).map_err(ChainFault::Queue)? else { break };
            let head = chain.head_index();
            let mut pkt = VsockPacket::from_rx_virtq_chain(&active.mem, &mut chain, MAX_PKT_DATA).map_err(ChainFault::Packet)?;
            match self.muxer.fill_rx(&mut pkt, Instant::now()) {
                Some(len) => {
                    queue::add_used(&mut active.queues[RX], &active.mem, head, PKT_HEADER_SIZE as u32 + len).map_err(ChainFault::Queue)?;
                    used = true;
                }
                None => {
                    // Nothing after all (a stream that had drained): the buffer stays the guest's.
                    active.queues[RX].go_to_previous_position();
                    break;
                }
            }
        }
        if used {
            active.interrupt.used_buffer();
        }
        Ok(())
    }

    fn serve(&mut self, tx: bool) {
        if !self.usable() {
            return;
        }
        let served = if tx { self.process_tx() } else { Ok(()) }.and_then(|_| self.process_rx());
        if let Err(fault) = served {
            self.broken(fault);
        }
    }
}

impl VirtioDevice for Vsock {
    fn device_type(&self) -> u32 {
        device_type::VSOCK
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[MAX_QUEUE_SIZE, MAX_QUEUE_SIZE, MAX_QUEUE_SIZE]
    }

    fn queue_events(&self) -> &[EventFd] {
        &self.queue_evts
    }

    fn features(&self) -> u64 {
        FEATURE_VERSION_1
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_vsock_config: the guest's CID.
        read_config_bytes(&GUEST_CID.to_le_bytes(), offset, data);
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        self.active = Some(activation);
        Ok(())
    }

    fn reset(&mut self) {
        self.active = None;
        self.muxer.reset();
    }
}

impl MutEventSubscriber for Vsock {
    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        match events.data() {
            d if d == RX as u32 => {
                consume(&self.queue_evts[RX]);
                self.serve(false);
            }
            d if d == TX as u32 => {
                consume(&self.queue_evts[TX]);
                self.serve(true);
            }
            d if d == EVENT as u32 => consume(&self.queue_evts[EVENT]),
            _ => {
                // Host connections move even before the driver is up: handshakes are read and
                // time out; their REQUESTs wait for receive buffers.
                self.muxer.process_events(Instant::now());
                self.serve(false);
            }
        }
    }

    fn init(&mut self, ops: &mut EventOps) {
        watch(ops, "virtio-vsock", &self.queue_evts, Some(Events::with_data_raw(self.muxer.epoll_fd(), MUXER, EventSet::IN)));
    }
}

#[cfg(test)]
mod tests {
    use super::super::packet::*;
    use super::*;
    use crate::devices::virtio::testing::{activate, readable, writable, Buf, Driver, Rng, Scratch};
    use crate::devices::virtio::Interrupt;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    const RX_RING: u64 = 0x1000;
    const TX_RING: u64 = 0x3000;
    const EVT_RING: u64 = 0x5000;
    const RX_BUF: u64 = 0x10000;
    const TX_BUF: u64 = 0x80000;

    struct Fixture {
        vsock: Vsock,
        mem: GuestMemoryMmap,
        rx: Driver,
        tx: Driver,
        interrupt: Arc<Interrupt>,
        dir: Scratch,
    }

    fn fixture() -> Fixture {
        let dir = Scratch::new("vsockdev");
        let mut vsock = Vsock::new(Muxer::new(&dir.0.join("v.sock")).unwrap()).unwrap();
        let (rx, tx, evt) = (Driver::new(RX_RING, 16), Driver::new(TX_RING, 16), Driver::new(EVT_RING, 16));
        let (mem, interrupt) = activate(&mut vsock, &[&rx, &tx, &evt]);
        Fixture { vsock, mem, rx, tx, interrupt, dir }
    }

    /// A packet header as the guest writes it.
    fn header(src_port: u32, dst_port: u32, op: u16, len: u32) -> [u8; PKT_HEADER_SIZE] {
        let mut h = [0u8; PKT_HEADER_SIZE];
        h[0..8].copy_from_slice(&GUEST_CID.to_le_bytes());
        h[8..16].copy_from_slice(&HOST_CID.to_le_bytes());
        h[16..20].copy_from_slice(&src_port.to_le_bytes());
        h[20..24].copy_from_slice(&dst_port.to_le_bytes());
        h[24..28].copy_from_slice(&len.to_le_bytes());
        h[28..30].copy_from_slice(&TYPE_STREAM.to_le_bytes());
        h[30..32].copy_from_slice(&op.to_le_bytes());
        h[36..40].copy_from_slice(&(64u32 << 10).to_le_bytes());
        h
    }

    impl Fixture {
        /// The guest sends a packet, its header and data in one descriptor or two.
        fn send(&mut self, src_port: u32, dst_port: u32, op: u16, data: &[u8], one_descriptor: bool) {
            self.mem.write_slice(&header(src_port, dst_port, op, data.len() as u32), GuestAddress(TX_BUF)).unwrap();
            self.mem.write_slice(data, GuestAddress(TX_BUF + PKT_HEADER_SIZE as u64)).unwrap();
            let hdr = PKT_HEADER_SIZE as u32;
            if one_descriptor || data.is_empty() {
                self.tx.offer(&self.mem, &[readable(TX_BUF, hdr + data.len() as u32)]);
            } else {
                self.tx.offer(&self.mem, &[readable(TX_BUF, hdr), readable(TX_BUF + u64::from(hdr), data.len() as u32)]);
            }
            self.vsock.serve(true);
            assert_eq!(self.tx.take_used(&self.mem).len(), 1);
        }

        /// Offers a receive buffer at RX_BUF + head * 64 KiB, in one descriptor or two.
        fn post(&mut self, one_descriptor: bool) {
            let head = self.rx.offer(&self.mem, &[writable(0, 0)]);
            let at = RX_BUF + u64::from(head) * 0x1_0000;
            if one_descriptor {
                self.rx.set_desc(&self.mem, head, at, 4096 + PKT_HEADER_SIZE as u32, 2, 0);
            } else {
                // Two descriptors: head and the next table slot (offered chains use one each).
                let next = (head + 8) % 16;
                self.rx.set_desc(&self.mem, head, at, PKT_HEADER_SIZE as u32, 3, next);
                self.rx.set_desc(&self.mem, next, at + 0x100, 4096, 2, 0);
            }
        }

        /// What the device put in the receive buffers: (op, src port, dst port, data).
        fn received(&mut self) -> Vec<(u16, u32, u32, Vec<u8>)> {
            self.vsock.serve(false);
            self.rx
                .take_used(&self.mem)
                .into_iter()
                .map(|(head, len)| {
                    let at = RX_BUF + u64::from(head) * 0x1_0000;
                    let mut h = [0u8; PKT_HEADER_SIZE];
                    self.mem.read_slice(&mut h, GuestAddress(at)).unwrap();
                    let data_len = len as usize - PKT_HEADER_SIZE;
                    let two = self.mem.read_obj::<u16>(GuestAddress(RX_RING + 16 * u64::from(head) + 12)).unwrap() & 1 != 0;
                    let data_at = if two { at + 0x100 } else { at + PKT_HEADER_SIZE as u64 };
                    let mut data = vec![0u8; data_len];
                    self.mem.read_slice(&mut data, GuestAddress(data_at)).unwrap();
                    let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
                    (u16::from_le_bytes([h[30], h[31]]), u32_at(16), u32_at(20), data)
                })
                .collect()
        }

        fn pump(&mut self) {
            for _ in 0..100 {
                self.vsock.muxer.process_events(Instant::now());
                if self.vsock.muxer.has_rx() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }

    #[test]
    fn config_space_is_the_guest_cid() {
        let f = fixture();
        let mut cid = [0u8; 8];
        f.vsock.read_config(0, &mut cid);
        assert_eq!(u64::from_le_bytes(cid), 3);
    }

    #[test]
    fn a_connection_through_the_queues_with_header_and_data_split_or_in_one_descriptor() {
        for one_descriptor in [false, true] {
            let mut f = fixture();
            let mut client = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
            client.write_all(b"CONNECT 44772\n").unwrap();
            f.pump();
            // The REQUEST waits for a buffer.
            assert!(f.received().is_empty());
            f.post(one_descriptor);
            let got = f.received();
            assert_eq!((got[0].0, got[0].2), (OP_REQUEST, 44772));
            let local = got[0].1;
            f.send(44772, local, OP_RESPONSE, b"", one_descriptor);
            let mut ok = vec![0u8; format!("OK {local}\n").len()];
            client.read_exact(&mut ok).unwrap();
            // Guest to host.
            f.send(44772, local, OP_RW, b"echo me", one_descriptor);
            let mut got = [0u8; 7];
            client.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"echo me");
            // Host to guest.
            client.write_all(b"and back").unwrap();
            f.pump();
            f.post(one_descriptor);
            assert_eq!(f.received(), vec![(OP_RW, local, 44772, b"and back".to_vec())]);
            assert!(!f.interrupt.is_broken());
        }
    }

    #[test]
    fn malformed_chains_break_the_device() {
        let shapes: [&[Buf]; 4] = [
            &[readable(TX_BUF, 20)],
            &[writable(TX_BUF, PKT_HEADER_SIZE as u32)],
            &[readable(TX_BUF, PKT_HEADER_SIZE as u32), writable(TX_BUF + 0x100, 8)],
            &[readable(TX_BUF, PKT_HEADER_SIZE as u32), readable(u64::MAX - 4, 8)],
        ];
        for bufs in shapes {
            let mut f = fixture();
            f.mem.write_slice(&header(1, 2, OP_RW, 8), GuestAddress(TX_BUF)).unwrap();
            f.tx.offer(&f.mem, bufs);
            f.vsock.serve(true);
            assert!(f.interrupt.is_broken(), "{bufs:?}");
        }
        // A receive buffer too small for a header.
        let mut f = fixture();
        let client = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        (&client).write_all(b"CONNECT 1\n").unwrap();
        f.pump();
        f.rx.offer(&f.mem, &[writable(RX_BUF, 16)]);
        f.vsock.serve(false);
        assert!(f.interrupt.is_broken());
    }

    #[test]
    fn a_length_no_packet_may_have_is_dropped_without_breaking_the_device() {
        let mut f = fixture();
        f.mem.write_slice(&header(1, 2, OP_RW, MAX_PKT_DATA + 1), GuestAddress(TX_BUF)).unwrap();
        f.tx.offer(&f.mem, &[readable(TX_BUF, PKT_HEADER_SIZE as u32), readable(TX_BUF + 0x100, 8)]);
        f.vsock.serve(true);
        assert_eq!(f.tx.take_used(&f.mem).len(), 1);
        assert!(!f.interrupt.is_broken());
    }

    /// Seeded fuzzing of the packet parser through the device: random headers (mostly valid
    /// fields, some garbage) in random chain shapes, and random receive buffers. Nothing may
    /// panic, whatever the device then concludes.
    #[test]
    fn fuzz_random_packets_and_chains_never_panic() {
        let mut rng = Rng::from_env(0x5eed_0004);
        for _ in 0..200 {
            let mut f = fixture();
            for _ in 0..20 {
                if f.interrupt.is_broken() {
                    break;
                }
                let ops = [OP_REQUEST, OP_RESPONSE, OP_RST, OP_SHUTDOWN, OP_RW, OP_CREDIT_UPDATE, OP_CREDIT_REQUEST, rng.next() as u16];
                let len = if rng.chance(80) { rng.below(128) as u32 } else { rng.next() as u32 };
                let mut h = header(rng.below(4) as u32, [5000, rng.next() as u32][rng.below(2) as usize], ops[rng.below(8) as usize], len);
                for _ in 0..rng.below(3) {
                    let i = rng.below(PKT_HEADER_SIZE as u64) as usize;
                    h[i] = rng.next() as u8;
                }
                f.mem.write_slice(&h, GuestAddress(TX_BUF)).unwrap();
                let hdr = PKT_HEADER_SIZE as u32;
                let shape: Vec<Buf> = match rng.below(5) {
                    0 => vec![readable(TX_BUF, hdr + len.min(256))],
                    1 => vec![readable(TX_BUF, hdr), readable(TX_BUF + 0x100, len.min(256))],
                    2 => vec![readable(TX_BUF, rng.below(u64::from(hdr) * 2) as u32)],
                    3 => vec![readable(TX_BUF, hdr), writable(TX_BUF + 0x100, 64)],
                    _ => vec![readable(TX_BUF + rng.below(0x100000), rng.below(0x2000) as u32)],
                };
                f.tx.offer(&f.mem, &shape);
                if rng.chance(50) {
                    f.rx.offer(&f.mem, &[writable(RX_BUF + rng.below(0x1000), [8, 44, 100, 4096][rng.below(4) as usize])]);
                }
                f.vsock.serve(rng.chance(80));
            }
        }
    }
}
