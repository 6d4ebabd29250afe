//! The virtio-net device: one receive and one transmit queue, each frame behind the 12-byte
//! `virtio_net_hdr` of virtio 1.x, no offloads, bridged to a [`FramedStream`].

use std::io::{Read, Write};

use event_manager::{EventOps, Events, MutEventSubscriber};
use virtio_bindings::bindings::virtio_net::{VIRTIO_NET_F_MAC, VIRTIO_NET_F_MTU};
use virtio_queue::QueueOwnedT;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;

use super::passt::{FramedStream, PasstError, MAX_FRAME, MTU};
use crate::devices::virtio::queue::{self, QueueError, MAX_QUEUE_SIZE};
use crate::devices::virtio::{consume, device_type, read_config_bytes, watch, ActivateError, Activation, VirtioDevice, FEATURE_VERSION_1};

const RX: usize = 0;
const TX: usize = 1;
/// Event data of the backend socket (the queues' are their indexes).
const BACKEND: u32 = 2;
/// `struct virtio_net_hdr_v1`: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset,
/// num_buffers. Without offloads every field is 0 except num_buffers, which is 1.
const HDR_LEN: usize = 12;
/// The guest's MAC address: locally administered; passt learns it from the guest's frames.
const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

pub struct Net {
    backend: FramedStream,
    /// Set once the backend failed: frames from the guest are then dropped, as on an unplugged
    /// cable, and nothing more is received.
    backend_down: bool,
    queue_evts: [EventFd; 2],
    active: Option<Activation>,
    /// Frames the guest offered that were too short or too long to send, and frames from passt
    /// that no receive buffer could hold.
    pub dropped: u64,
}

impl Net {
    pub fn new(backend: FramedStream) -> std::io::Result<Self> {
        let evt = || EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
        Ok(Net { backend, backend_down: false, queue_evts: [evt()?, evt()?], active: None, dropped: 0 })
    }

    fn broken(&self, e: &QueueError) {
        eprintln!("sandbox-vmm: virtio-net: {e}; the device needs a reset");
        if let Some(active) = &self.active {
            active.interrupt.needs_reset();
        }
    }

    fn backend_failed(&mut self, e: PasstError) {
        if !self.backend_down {
            eprintln!("sandbox-vmm: virtio-net: {e}; the network is down");
            self.backend_down = true;
        }
    }

    fn usable(&self) -> bool {
        self.active.as_ref().is_some_and(|a| !a.interrupt.is_broken())
    }

    /// Moves frames from passt into the guest's receive buffers while both have some.
    fn receive(&mut self) {
        if !self.usable() || self.backend_down {
            return;
        }
        let mut used = false;
        loop {
            let frame = match self.backend.frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    self.backend_failed(e);
                    break;
                }
            };
            let active = self.active.as_mut().expect("usable");
            let (chain, shape) = match queue::pop(&mut active.queues[RX], &active.mem) {
                Ok(Some(popped)) => popped,
                // No buffer: the frame waits in the socket buffer, and passt behind it.
                Ok(None) => break,
                Err(e) => return self.broken(&e),
            };
            let head = chain.head_index();
            let len = HDR_LEN + frame.len();
            if shape.writable as usize >= len {
                let mut header = [0u8; HDR_LEN];
                header[10] = 1; // num_buffers
                let written = chain.writer(&active.mem).and_then(|mut w| {
                    w.write_all(&header).and_then(|_| w.write_all(frame)).map_err(|_| virtio_queue::Error::InvalidChain)
                });
                if written.is_err() {
                    return self.broken(&QueueError::Chain(queue::ChainError::Changed { head }));
                }
                if let Err(e) = queue::add_used(&mut active.queues[RX], &active.mem, head, len as u32) {
                    return self.broken(&e);
                }
                used = true;
            } else {
                // The buffer cannot hold this frame: drop the frame and keep the buffer.
                active.queues[RX].go_to_previous_position();
                self.dropped += 1;
            }
            self.backend.consume();
        }
        if used {
            self.active.as_ref().expect("usable").interrupt.used_buffer();
        }
    }

    /// Moves frames from the guest's transmit queue to passt while the socket takes them.
    fn transmit(&mut self) {
        if !self.usable() {
            return;
        }
        let mut used = false;
        loop {
            if !self.backend_down {
                match self.backend.flush() {
                    Ok(true) => {}
                    // The socket is full: the rest waits for it to drain (EPOLLOUT).
                    Ok(false) => break,
                    Err(e) => self.backend_failed(e),
                }
            }
            let active = self.active.as_mut().expect("usable");
            let (chain, shape) = match queue::pop(&mut active.queues[TX], &active.mem) {
                Ok(Some(popped)) => popped,
                Ok(None) => break,
                Err(e) => return self.broken(&e),
            };
            let head = chain.head_index();
            let frame_len = (shape.readable as usize).saturating_sub(HDR_LEN);
            if shape.readable as usize <= HDR_LEN || frame_len > MAX_FRAME {
                self.dropped += 1;
            } else if !self.backend_down {
                let queued = chain.reader(&active.mem).map_err(|_| std::io::Error::other("chain")).and_then(|mut r| {
                    let mut header = [0u8; HDR_LEN];
                    r.read_exact(&mut header)?;
                    self.backend.queue(frame_len, |buf| r.read_exact(buf))
                });
                if queued.is_err() {
                    return self.broken(&QueueError::Chain(queue::ChainError::Changed { head }));
                }
            }
            if let Err(e) = queue::add_used(&mut active.queues[TX], &active.mem, head, 0) {
                return self.broken(&e);
            }
            used = true;
        }
        if used {
            self.active.as_ref().expect("usable").interrupt.used_buffer();
        }
    }
}

impl VirtioDevice for Net {
    fn device_type(&self) -> u32 {
        device_type::NET
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[MAX_QUEUE_SIZE, MAX_QUEUE_SIZE]
    }

    fn queue_events(&self) -> &[EventFd] {
        &self.queue_evts
    }

    fn features(&self) -> u64 {
        FEATURE_VERSION_1 | 1 << VIRTIO_NET_F_MAC | 1 << VIRTIO_NET_F_MTU
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_net_config: mac[6], status (not offered), max_virtqueue_pairs (not
        // offered), mtu.
        let mut config = [0u8; 12];
        config[..6].copy_from_slice(&GUEST_MAC);
        config[10..12].copy_from_slice(&MTU.to_le_bytes());
        read_config_bytes(&config, offset, data);
    }

    fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
        self.active = Some(activation);
        Ok(())
    }

    fn reset(&mut self) {
        self.active = None;
    }
}

impl MutEventSubscriber for Net {
    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        match events.data() {
            d if d == RX as u32 => {
                consume(&self.queue_evts[RX]);
                self.receive();
            }
            d if d == TX as u32 => {
                consume(&self.queue_evts[TX]);
                self.transmit();
            }
            _ => {
                // Edge-triggered: each side is drained until it would block, or until the guest
                // has no room, in which case its next notification resumes it.
                let set = events.event_set();
                if set.intersects(EventSet::OUT | EventSet::ERROR | EventSet::HANG_UP) {
                    self.transmit();
                }
                if set.intersects(EventSet::IN | EventSet::ERROR | EventSet::HANG_UP | EventSet::READ_HANG_UP) {
                    self.receive();
                }
            }
        }
    }

    fn init(&mut self, ops: &mut EventOps) {
        let backend = EventSet::IN | EventSet::OUT | EventSet::EDGE_TRIGGERED | EventSet::READ_HANG_UP;
        watch(ops, "virtio-net", &self.queue_evts, Some(Events::with_data(self.backend.fd(), BACKEND, backend)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::virtio::testing::{activate, readable, writable, Driver};
    use crate::devices::virtio::Interrupt;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    const RX_RING: u64 = 0x1000;
    const TX_RING: u64 = 0x4000;
    const RX_BUF: u64 = 0x10000;
    const TX_BUF: u64 = 0x40000;

    pub struct Fixture {
        pub net: Net,
        pub mem: GuestMemoryMmap,
        pub rx: Driver,
        pub tx: Driver,
        pub interrupt: Arc<Interrupt>,
    }

    pub fn fixture(stream: UnixStream) -> Fixture {
        let mut net = Net::new(FramedStream::new(stream).unwrap()).unwrap();
        let (rx, tx) = (Driver::new(RX_RING, 16), Driver::new(TX_RING, 16));
        let (mem, interrupt) = activate(&mut net, &[&rx, &tx]);
        Fixture { net, mem, rx, tx, interrupt }
    }

    impl Fixture {
        /// Offers a frame for transmission behind a zero header, in two buffers.
        pub fn send(&mut self, frame: &[u8]) {
            self.mem.write_slice(&[0u8; HDR_LEN], GuestAddress(TX_BUF)).unwrap();
            self.mem.write_slice(frame, GuestAddress(TX_BUF + 0x100)).unwrap();
            self.tx.offer(&self.mem, &[readable(TX_BUF, HDR_LEN as u32), readable(TX_BUF + 0x100, frame.len() as u32)]);
            self.net.transmit();
        }

        /// Offers `n` receive buffers of `len` bytes, each at RX_BUF + its head * 4 KiB.
        pub fn post(&mut self, n: u64, len: u32) {
            for _ in 0..n {
                let head = self.rx.offer(&self.mem, &[writable(0, 0)]);
                self.rx.set_desc(&self.mem, head, RX_BUF + u64::from(head) * 0x1000, len, 2, 0);
            }
        }

        /// The frames the guest received since the last call (without their header).
        pub fn received(&mut self) -> Vec<Vec<u8>> {
            self.net.receive();
            self.rx
                .take_used(&self.mem)
                .into_iter()
                .map(|(head, len)| {
                    let mut buf = vec![0u8; len as usize];
                    self.mem.read_slice(&mut buf, GuestAddress(RX_BUF + u64::from(head) * 0x1000)).unwrap();
                    assert_eq!(buf[10], 1, "num_buffers");
                    buf.split_off(HDR_LEN)
                })
                .collect()
        }
    }

    fn read_frame(peer: &mut UnixStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        peer.read_exact(&mut len).unwrap();
        let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
        peer.read_exact(&mut frame).unwrap();
        frame
    }

    fn write_frame(peer: &mut UnixStream, frame: &[u8]) {
        peer.write_all(&(frame.len() as u32).to_be_bytes()).unwrap();
        peer.write_all(frame).unwrap();
    }

    #[test]
    fn config_space_has_the_mac_and_mtu() {
        let (a, _b) = UnixStream::pair().unwrap();
        let f = fixture(a);
        let mut config = [0u8; 12];
        f.net.read_config(0, &mut config);
        assert_eq!(&config[..6], &GUEST_MAC);
        assert_eq!(u16::from_le_bytes([config[10], config[11]]), 1500);
    }

    #[test]
    fn frames_go_out_without_their_header_and_come_in_with_one() {
        let (a, mut peer) = UnixStream::pair().unwrap();
        let mut f = fixture(a);
        f.send(b"outgoing frame");
        assert_eq!(read_frame(&mut peer), b"outgoing frame");
        assert_eq!(f.tx.take_used(&f.mem), vec![(0, 0)]);
        // Frames wait in the socket until the guest offers buffers.
        write_frame(&mut peer, b"first");
        write_frame(&mut peer, b"second");
        assert!(f.received().is_empty());
        f.post(1, 2048);
        assert_eq!(f.received(), vec![b"first".to_vec()]);
        f.post(1, 2048);
        assert_eq!(f.received(), vec![b"second".to_vec()]);
    }

    #[test]
    fn frames_too_big_for_a_buffer_or_malformed_are_dropped_not_fatal() {
        let (a, mut peer) = UnixStream::pair().unwrap();
        let mut f = fixture(a);
        f.post(1, 64);
        write_frame(&mut peer, &[1u8; 100]);
        write_frame(&mut peer, b"fits");
        assert_eq!(f.received(), vec![b"fits".to_vec()]);
        assert_eq!(f.net.dropped, 1);
        // A transmit chain with no frame after its header.
        f.tx.offer(&f.mem, &[readable(TX_BUF, HDR_LEN as u32)]);
        f.net.transmit();
        assert_eq!(f.net.dropped, 2);
        assert!(!f.interrupt.is_broken());
    }

    #[test]
    fn a_full_socket_stops_transmission_until_it_drains() {
        let (a, mut peer) = UnixStream::pair().unwrap();
        let mut f = fixture(a);
        let frame = vec![0x42u8; 1500];
        let mut offered = 0;
        // Fill the socket: the device stops taking chains once a frame cannot be written whole.
        loop {
            f.send(&frame);
            offered += 1;
            if f.net.backend.sending() || offered > 2000 {
                break;
            }
            f.tx.take_used(&f.mem);
        }
        assert!(f.net.backend.sending(), "the socket never filled");
        f.send(&frame);
        let before = f.tx.take_used(&f.mem).len();
        assert!(before <= 1, "chains were taken while the socket was full");
        // The peer drains; the device resumes on its next chance.
        let mut drained = 0;
        peer.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = peer.read(&mut buf) {
            drained += n;
        }
        assert!(drained > 0);
        f.net.transmit();
        assert!(!f.tx.take_used(&f.mem).is_empty());
    }

    #[test]
    fn passt_exiting_takes_the_network_down_not_the_device() {
        let (a, peer) = UnixStream::pair().unwrap();
        let mut f = fixture(a);
        drop(peer);
        f.post(1, 2048);
        assert!(f.received().is_empty());
        f.send(b"into the void");
        assert_eq!(f.tx.take_used(&f.mem).len(), 1, "frames are consumed and dropped");
        assert!(f.net.backend_down);
        assert!(!f.interrupt.is_broken());
    }
}
