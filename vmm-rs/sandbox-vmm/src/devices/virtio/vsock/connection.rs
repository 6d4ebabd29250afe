//! One vsock stream connection between a guest port and a host Unix stream: its state machine
//! and both directions' credit accounting (virtio 1.2, 5.10.6.3).
//!
//! Credit: each side advertises the receive buffer it has (`buf_alloc`) and how much of what it
//! received it has passed on (`fwd_cnt`); a sender may have at most `buf_alloc` bytes in flight
//! beyond the other side's `fwd_cnt`. Toward the guest, the connection reads from the host
//! stream only as much as the guest's credit allows, so a guest that stops reading stops the
//! host writer. From the guest, data goes straight into the host stream; what the stream does
//! not take at once waits in `tx_buf`, which the credit this side advertises bounds: a guest
//! that sends more than that is reset.

use std::io::{ErrorKind, Write};
use std::net::Shutdown;
use std::num::Wrapping;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use vm_memory::{ReadVolatile, VolatileMemoryError, WriteVolatile};

use super::packet::*;

/// This side's receive buffer per connection, advertised as `buf_alloc` (Firecracker's size).
pub const BUF_ALLOC: u32 = 64 << 10;
/// Once this much of the guest's data has been passed on without telling the guest, a credit
/// update goes out, so a guest waiting for credit is not kept waiting for a whole buffer.
pub const CREDIT_UPDATE_THRESHOLD: u32 = BUF_ALLOC / 2;
/// How long the guest has to answer a host connection's REQUEST.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a closing connection waits for the guest's RST or for its data to drain.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Host-initiated: the REQUEST is queued or sent; waiting for the guest's RESPONSE.
    LocalInit,
    /// Data flows (as far as shutdowns allow).
    Established,
    /// No more data to the guest; waiting for the guest's RST, or for the guest's data to drain
    /// into the host stream, until the deadline.
    Closing,
    /// An RST is queued for the guest; the connection goes once it is sent.
    Resetting,
}

/// Control packets waiting for a receive buffer, as bits.
const SEND_REQUEST: u8 = 1;
const SEND_RESPONSE: u8 = 2;
const SEND_SHUTDOWN: u8 = 4;
const SEND_CREDIT_UPDATE: u8 = 8;
const SEND_CREDIT_REQUEST: u8 = 16;

pub struct Connection {
    pub stream: UnixStream,
    /// The host's port (the muxer's for host-initiated connections).
    pub local_port: u32,
    pub peer_port: u32,
    pub state: State,
    pub deadline: Option<Instant>,
    /// Whether the muxer has this connection in its receive queue.
    pub queued: bool,
    /// The host stream reported readable and was not read to exhaustion since.
    host_readable: bool,
    pending: u8,
    /// The guest's receive credit: its buffer and what it passed on, and what was sent to it.
    peer_buf_alloc: u32,
    peer_fwd_cnt: Wrapping<u32>,
    tx_cnt: Wrapping<u32>,
    credit_requested: bool,
    /// This side's receive accounting: bytes from the guest, bytes passed to the host stream,
    /// and the `fwd_cnt` the guest was last told.
    rx_cnt: Wrapping<u32>,
    fwd_cnt: Wrapping<u32>,
    last_fwd_cnt_sent: Wrapping<u32>,
    tx_buf: Vec<u8>,
    /// SHUTDOWN flags the guest has sent.
    peer_shutdown: u32,
}

/// What the muxer must do with a connection after a packet or an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Keep,
    /// Forget the connection now (closing the host stream); nothing goes to the guest.
    Remove,
}

impl Connection {
    fn new(stream: UnixStream, local_port: u32, peer_port: u32, state: State, pending: u8) -> Self {
        Connection {
            stream,
            local_port,
            peer_port,
            state,
            deadline: None,
            queued: false,
            host_readable: false,
            pending,
            peer_buf_alloc: 0,
            peer_fwd_cnt: Wrapping(0),
            tx_cnt: Wrapping(0),
            credit_requested: false,
            rx_cnt: Wrapping(0),
            fwd_cnt: Wrapping(0),
            last_fwd_cnt_sent: Wrapping(0),
            tx_buf: Vec::new(),
            peer_shutdown: 0,
        }
    }

    /// A host client's connection to guest port `peer_port`, announced by a REQUEST.
    pub fn host_initiated(stream: UnixStream, local_port: u32, peer_port: u32, now: Instant) -> Self {
        let mut c = Connection::new(stream, local_port, peer_port, State::LocalInit, SEND_REQUEST);
        c.deadline = Some(now + REQUEST_TIMEOUT);
        c
    }

    /// The guest's connection from its `peer_port` to the host's `local_port`, accepted by a
    /// RESPONSE; `request` carries the guest's credit.
    pub fn guest_initiated(stream: UnixStream, request: &Packet<'_>) -> Self {
        let mut c = Connection::new(stream, request.dst_port(), request.src_port(), State::Established, SEND_RESPONSE);
        c.peer_buf_alloc = request.buf_alloc();
        c.peer_fwd_cnt = Wrapping(request.fwd_cnt());
        c
    }

    fn reset(&mut self) -> Next {
        self.state = State::Resetting;
        Next::Keep
    }

    /// Whether the guest may receive `n` more bytes of data.
    fn peer_credit(&self) -> u32 {
        let in_flight = (self.tx_cnt - self.peer_fwd_cnt).0;
        self.peer_buf_alloc.saturating_sub(in_flight)
    }

    /// A packet the guest sent on this connection.
    pub fn on_guest_packet(&mut self, pkt: &Packet<'_>, now: Instant) -> Next {
        if self.state == State::Resetting {
            return Next::Keep;
        }
        self.peer_buf_alloc = pkt.buf_alloc();
        self.peer_fwd_cnt = Wrapping(pkt.fwd_cnt());
        match (self.state, pkt.op()) {
            (_, OP_RST) => Next::Remove,
            (State::LocalInit, OP_RESPONSE) => {
                self.state = State::Established;
                self.deadline = None;
                // The hybrid vsock handshake's answer, as Firecracker writes it.
                match (&self.stream).write_all(format!("OK {}\n", self.local_port).as_bytes()) {
                    Ok(()) => Next::Keep,
                    Err(_) => self.reset(),
                }
            }
            (State::Established | State::Closing, OP_RW) => self.data_from_guest(pkt),
            (State::Established | State::Closing, OP_SHUTDOWN) => {
                self.peer_shutdown |= pkt.flags() & (SHUTDOWN_RCV | SHUTDOWN_SEND);
                if self.peer_shutdown == SHUTDOWN_RCV | SHUTDOWN_SEND {
                    self.state = State::Closing;
                    self.deadline.get_or_insert(now + SHUTDOWN_TIMEOUT);
                }
                self.after_flush()
            }
            (State::Established | State::Closing, OP_CREDIT_UPDATE) => {
                self.credit_requested = false;
                Next::Keep
            }
            (State::Established | State::Closing, OP_CREDIT_REQUEST) => {
                self.pending |= SEND_CREDIT_UPDATE;
                Next::Keep
            }
            // A REQUEST on a live connection, a RESPONSE nobody asked for, data before the
            // connection was accepted: the guest lost track of this connection.
            _ => self.reset(),
        }
    }

    fn data_from_guest(&mut self, pkt: &Packet<'_>) -> Next {
        let Some(data) = pkt.data_slice() else { return Next::Keep };
        if self.peer_shutdown & SHUTDOWN_SEND != 0 {
            return self.reset();
        }
        let len = data.len() as u32;
        // What is buffered plus this packet may not exceed the credit this side gave.
        if (self.rx_cnt - self.fwd_cnt).0.saturating_add(len) > BUF_ALLOC {
            return self.reset();
        }
        self.rx_cnt += Wrapping(len);
        let mut written = 0;
        if self.tx_buf.is_empty() {
            match (&self.stream).write_volatile(data) {
                Ok(n) => written = n,
                Err(VolatileMemoryError::IOError(e)) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return self.reset(),
            }
        }
        if written < data.len() {
            let rest = data.offset(written).expect("written <= len");
            if self.tx_buf.write_volatile(&rest).is_err() {
                return self.reset();
            }
        }
        self.forwarded(written);
        Next::Keep
    }

    fn forwarded(&mut self, n: usize) {
        self.fwd_cnt += Wrapping(n as u32);
        if (self.fwd_cnt - self.last_fwd_cnt_sent).0 >= CREDIT_UPDATE_THRESHOLD {
            self.pending |= SEND_CREDIT_UPDATE;
        }
    }

    /// The host stream can take more: passes on what waits in `tx_buf`.
    pub fn host_writable(&mut self) -> Next {
        if self.tx_buf.is_empty() || self.state == State::Resetting {
            return Next::Keep;
        }
        match (&self.stream).write(&self.tx_buf) {
            Ok(n) => {
                self.tx_buf.drain(..n);
                self.forwarded(n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return self.reset(),
        }
        self.after_flush()
    }

    /// Once the guest's data is all in the host stream: half-close the host stream after the
    /// guest's SHUTDOWN(SEND), and finish the close after the guest shut down both ways.
    fn after_flush(&mut self) -> Next {
        if !self.tx_buf.is_empty() {
            return Next::Keep;
        }
        if self.peer_shutdown & SHUTDOWN_SEND != 0 {
            let _ = self.stream.shutdown(Shutdown::Write);
        }
        if self.peer_shutdown == SHUTDOWN_RCV | SHUTDOWN_SEND {
            return self.reset();
        }
        Next::Keep
    }

    /// The host stream reported data (or its end, or an error).
    pub fn host_readable(&mut self) {
        self.host_readable = true;
    }

    /// Whether the host stream may be read for the guest now.
    fn may_read_host(&self) -> bool {
        self.state == State::Established && self.host_readable && self.peer_shutdown & SHUTDOWN_RCV == 0
    }

    /// Whether there is a packet for the guest.
    pub fn has_rx(&self) -> bool {
        self.state == State::Resetting
            || self.pending != 0
            || (self.may_read_host() && (self.peer_credit() > 0 || !self.credit_requested))
    }

    /// Whether the RST went out and the connection can go.
    pub fn is_done(&self) -> bool {
        self.state == State::Resetting && self.pending == u8::MAX
    }

    /// Writes the next packet for the guest into `pkt` (a receive buffer) and returns its data
    /// length, or None when there is nothing to send after all.
    pub fn fill_rx(&mut self, pkt: &mut Packet<'_>, now: Instant) -> Option<u32> {
        let (op, flags, len) = if self.state == State::Resetting {
            // u8::MAX marks the RST as sent (see is_done).
            self.pending = u8::MAX;
            (OP_RST, 0, 0)
        } else if self.take(SEND_REQUEST) {
            (OP_REQUEST, 0, 0)
        } else if self.take(SEND_RESPONSE) {
            (OP_RESPONSE, 0, 0)
        } else if self.take(SEND_SHUTDOWN) {
            (OP_SHUTDOWN, SHUTDOWN_RCV | SHUTDOWN_SEND, 0)
        } else if self.take(SEND_CREDIT_UPDATE) {
            (OP_CREDIT_UPDATE, 0, 0)
        } else if self.take(SEND_CREDIT_REQUEST) {
            (OP_CREDIT_REQUEST, 0, 0)
        } else if self.may_read_host() {
            let credit = self.peer_credit();
            if credit == 0 {
                if self.credit_requested {
                    return None;
                }
                self.credit_requested = true;
                (OP_CREDIT_REQUEST, 0, 0)
            } else {
                let data = pkt.data_slice()?;
                let max = (data.len() as u32).min(credit).min(MAX_PKT_DATA) as usize;
                let mut room = data.subslice(0, max).ok()?;
                match (&self.stream).read_volatile(&mut room) {
                    Ok(0) => {
                        // The host closed: tell the guest, and wait for its RST.
                        self.host_readable = false;
                        self.state = State::Closing;
                        self.deadline = Some(now + SHUTDOWN_TIMEOUT);
                        (OP_SHUTDOWN, SHUTDOWN_RCV | SHUTDOWN_SEND, 0)
                    }
                    Ok(n) => {
                        self.tx_cnt += Wrapping(n as u32);
                        (OP_RW, 0, n as u32)
                    }
                    Err(VolatileMemoryError::IOError(e)) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                        self.host_readable = false;
                        return None;
                    }
                    Err(_) => {
                        self.pending = u8::MAX;
                        self.state = State::Resetting;
                        (OP_RST, 0, 0)
                    }
                }
            }
        } else {
            return None;
        };
        set_header(pkt, self.local_port, self.peer_port, op, flags, len, BUF_ALLOC, self.fwd_cnt.0);
        self.last_fwd_cnt_sent = self.fwd_cnt;
        Some(len)
    }

    fn take(&mut self, bit: u8) -> bool {
        let set = self.pending & bit != 0;
        self.pending &= !bit;
        set
    }

    /// The deadline passed: a REQUEST the guest never answered, or a close it never finished.
    pub fn expire(&mut self) {
        self.deadline = None;
        self.state = State::Resetting;
    }
}

#[cfg(test)]
mod tests {
    use super::super::packet::testing::{from_guest, Buffers};
    use super::*;
    use std::io::Read;

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// Drives `fill_rx` into a fresh buffer of `room` data bytes: (op, flags, data).
    fn rx(c: &mut Connection, room: usize) -> Option<(u16, u32, Vec<u8>)> {
        let mut b = Buffers::new(room);
        let mut pkt = b.packet();
        let len = c.fill_rx(&mut pkt, Instant::now())?;
        assert_eq!((pkt.src_cid(), pkt.dst_cid(), pkt.type_()), (HOST_CID, GUEST_CID, TYPE_STREAM));
        assert_eq!((pkt.src_port(), pkt.dst_port(), pkt.len(), pkt.buf_alloc()), (c.local_port, c.peer_port, len, BUF_ALLOC));
        let (op, flags) = (pkt.op(), pkt.flags());
        Some((op, flags, b.data[..len as usize].to_vec()))
    }

    fn guest(c: &mut Connection, op: u16, flags: u32, data: &[u8], buf_alloc: u32, fwd_cnt: u32) -> Next {
        let mut b = Buffers::new(0);
        let pkt = from_guest(&mut b, c.peer_port, c.local_port, op, flags, data, buf_alloc, fwd_cnt);
        c.on_guest_packet(&pkt, Instant::now())
    }

    fn established() -> (Connection, UnixStream) {
        let (ours, host) = pair();
        let mut c = Connection::host_initiated(ours, 1 << 30, 44772, Instant::now());
        assert_eq!(rx(&mut c, 0).unwrap().0, OP_REQUEST);
        assert_eq!(guest(&mut c, OP_RESPONSE, 0, b"", 4096, 0), Next::Keep);
        let mut ok = [0u8; 14];
        (&host).read_exact(&mut ok).unwrap();
        assert_eq!(&ok, b"OK 1073741824\n");
        (c, host)
    }

    #[test]
    fn host_initiated_handshake_then_data_both_ways() {
        let (mut c, mut host) = established();
        assert_eq!(c.state, State::Established);
        host.write_all(b"ping").unwrap();
        c.host_readable();
        assert_eq!(rx(&mut c, 4096), Some((OP_RW, 0, b"ping".to_vec())));
        assert_eq!(rx(&mut c, 4096), None, "the stream is drained");
        assert_eq!(guest(&mut c, OP_RW, 0, b"pong", 4096, 4), Next::Keep);
        let mut got = [0u8; 4];
        host.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
    }

    #[test]
    fn a_refused_or_unanswered_request_closes_the_host_stream() {
        let (ours, _host) = pair();
        let mut c = Connection::host_initiated(ours, 7, 44772, Instant::now());
        rx(&mut c, 0);
        assert_eq!(guest(&mut c, OP_RST, 0, b"", 0, 0), Next::Remove);

        let (ours, _host) = pair();
        let mut c = Connection::host_initiated(ours, 7, 44772, Instant::now());
        assert!(c.deadline.is_some());
        c.expire();
        assert_eq!(rx(&mut c, 0).unwrap().0, OP_RST);
        assert!(c.is_done());
    }

    #[test]
    fn the_guest_s_credit_limits_what_is_read_from_the_host() {
        let (mut c, mut host) = established();
        host.write_all(&[1u8; 10000]).unwrap();
        c.host_readable();
        // The guest advertised 4096 bytes of buffer.
        let (op, _, data) = rx(&mut c, 65536).unwrap();
        assert_eq!((op, data.len()), (OP_RW, 4096));
        // No credit left: one CREDIT_REQUEST, then nothing until an update.
        assert_eq!(rx(&mut c, 65536).unwrap().0, OP_CREDIT_REQUEST);
        assert!(!c.has_rx());
        assert_eq!(rx(&mut c, 65536), None);
        guest(&mut c, OP_CREDIT_UPDATE, 0, b"", 4096, 4096);
        assert!(c.has_rx());
        assert_eq!(rx(&mut c, 65536).unwrap().2.len(), 4096);
        // A small receive buffer takes a smaller packet.
        guest(&mut c, OP_CREDIT_UPDATE, 0, b"", 1 << 20, 8192);
        assert_eq!(rx(&mut c, 100).unwrap().2.len(), 100);
    }

    /// Fills the host stream's socket buffer from the connection's side, as a host client
    /// that stops reading would leave it.
    fn fill_socket(c: &Connection) -> usize {
        let mut filled = 0;
        while let Ok(n) = (&c.stream).write(&[0u8; 4096]) {
            filled += n;
        }
        filled
    }

    #[test]
    fn forwarded_data_is_credited_back_to_the_guest() {
        let (mut c, mut host) = established();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 40 << 10];
            host.read_exact(&mut buf).unwrap();
        });
        guest(&mut c, OP_RW, 0, &[3u8; 20 << 10], 4096, 0);
        assert!(!c.has_rx(), "no update before the threshold");
        guest(&mut c, OP_RW, 0, &[3u8; 20 << 10], 4096, 0);
        let mut b = Buffers::new(0);
        let mut pkt = b.packet();
        assert_eq!(c.fill_rx(&mut pkt, Instant::now()), Some(0));
        assert_eq!((pkt.op(), pkt.fwd_cnt()), (OP_CREDIT_UPDATE, 40 << 10));
        reader.join().unwrap();
        // A CREDIT_REQUEST is answered at once.
        guest(&mut c, OP_CREDIT_REQUEST, 0, b"", 4096, 0);
        assert_eq!(rx(&mut c, 0).unwrap().0, OP_CREDIT_UPDATE);
    }

    #[test]
    fn data_waits_for_a_slow_host_within_the_credit_and_a_guest_exceeding_it_is_reset() {
        let (mut c, mut host) = established();
        let filled = fill_socket(&c);
        for _ in 0..4 {
            assert_eq!(guest(&mut c, OP_RW, 0, &[7u8; 16 << 10], 4096, 0), Next::Keep);
        }
        assert_eq!(c.state, State::Established, "exactly the credit given is fine");
        // The host reads; what waited goes on, and the guest hears about it.
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; filled + (64 << 10)];
            host.read_exact(&mut buf).unwrap();
            assert!(buf[filled..].iter().all(|b| *b == 7));
            host
        });
        while !c.tx_buf.is_empty() {
            c.host_writable();
        }
        let _host = reader.join().unwrap();
        assert_eq!(rx(&mut c, 0).unwrap().0, OP_CREDIT_UPDATE);

        let (mut c, _host) = established();
        fill_socket(&c);
        for _ in 0..4 {
            guest(&mut c, OP_RW, 0, &[7u8; 16 << 10], 4096, 0);
        }
        guest(&mut c, OP_RW, 0, b"!", 4096, 0);
        assert_eq!(c.state, State::Resetting);
        assert_eq!(rx(&mut c, 0).unwrap().0, OP_RST);
        assert!(c.is_done());
    }

    #[test]
    fn host_eof_sends_shutdown_and_the_guest_s_rst_ends_it() {
        let (mut c, host) = established();
        drop(host);
        c.host_readable();
        assert_eq!(rx(&mut c, 4096), Some((OP_SHUTDOWN, SHUTDOWN_RCV | SHUTDOWN_SEND, vec![])));
        assert_eq!(c.state, State::Closing);
        assert!(c.deadline.is_some());
        assert_eq!(guest(&mut c, OP_RST, 0, b"", 4096, 0), Next::Remove);
    }

    #[test]
    fn guest_shutdown_half_closes_the_host_stream_then_resets() {
        let (mut c, mut host) = established();
        guest(&mut c, OP_RW, 0, b"last words", 4096, 0);
        assert_eq!(guest(&mut c, OP_SHUTDOWN, SHUTDOWN_SEND, b"", 4096, 0), Next::Keep);
        let mut all = Vec::new();
        host.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"last words", "the host sees the data, then EOF");
        guest(&mut c, OP_SHUTDOWN, SHUTDOWN_RCV, b"", 4096, 0);
        assert_eq!(c.state, State::Resetting);
        assert_eq!(rx(&mut c, 0).unwrap().0, OP_RST);
        // Data after SHUTDOWN(SEND) is a protocol error.
        let (mut c, _host) = established();
        guest(&mut c, OP_SHUTDOWN, SHUTDOWN_SEND, b"", 4096, 0);
        guest(&mut c, OP_RW, 0, b"late", 4096, 0);
        assert_eq!(c.state, State::Resetting);
    }

    #[test]
    fn out_of_place_packets_reset_the_connection() {
        for (op, before_response) in [(OP_RW, true), (OP_REQUEST, false), (OP_RESPONSE, false), (OP_CREDIT_UPDATE, true)] {
            let (mut c, _host) = if before_response {
                let (ours, host) = pair();
                (Connection::host_initiated(ours, 5, 6, Instant::now()), host)
            } else {
                established()
            };
            guest(&mut c, op, 0, b"x", 4096, 0);
            assert_eq!(c.state, State::Resetting, "op {op}");
        }
    }
}
