//! The hybrid vsock muxer, compatible with Firecracker's: host sockets on one side, the guest's
//! packets on the other.
//!
//! - Host-initiated: a client connects to the Unix socket at `uds_path` and writes
//!   `CONNECT <port>\n`; the muxer picks a local port, sends the guest a REQUEST to `<port>`,
//!   and when the guest's RESPONSE arrives writes `OK <local port>\n` back. From then on the
//!   stream carries the connection's bytes.
//! - Guest-initiated: a REQUEST to host port P connects to the Unix socket `<uds_path>_P`;
//!   success is answered with a RESPONSE, failure with an RST.
//!
//! The muxer has an epoll of its own over the listener, the handshakes, the connections and its
//! timer; the device thread waits on that one descriptor. Connections' streams are watched
//! edge-triggered: a connection remembers that its stream was readable and is read when the
//! guest has a buffer and credit for it.

use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::timerfd::TimerFd;

use super::connection::{Connection, Next, BUF_ALLOC};
use super::packet::*;

/// Connections at once, handshakes included (Firecracker's limit).
pub const MAX_CONNECTIONS: usize = 1023;
/// The longest handshake line accepted (`CONNECT 4294967295\n` is 19 bytes).
const MAX_HANDSHAKE: usize = 32;
/// How long a host client has to send its `CONNECT` line.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// RSTs for packets that belong to no connection waiting for a receive buffer; beyond this they
/// are dropped (the guest times out on its own).
const MAX_STRAY_RESETS: usize = 256;
/// The first local port of host-initiated connections: above any port a guest listens on.
const FIRST_LOCAL_PORT: u32 = 1 << 30;

const TOKEN_LISTENER: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const FIRST_TOKEN: u64 = 2;

/// A host client before its `CONNECT` line.
struct Handshake {
    stream: UnixStream,
    line: Vec<u8>,
    deadline: Instant,
}

pub struct Muxer {
    uds_path: PathBuf,
    listener: UnixListener,
    epoll: Epoll,
    timer: TimerFd,
    handshakes: HashMap<u64, Handshake>,
    conns: HashMap<u64, Connection>,
    /// (local port, peer port) to token.
    keys: HashMap<(u32, u32), u64>,
    /// Connections with something for the guest, in the order they got it.
    rxq: VecDeque<u64>,
    /// RSTs to send for packets with no connection: (local port, peer port).
    stray_resets: VecDeque<(u32, u32)>,
    next_token: u64,
    next_local_port: u32,
    /// Guest packets refused so far; logged sparingly, since a guest can send any number.
    refused: u64,
}

/// Why the muxer cannot be set up.
#[derive(Debug)]
pub enum MuxerError {
    Bind { path: PathBuf, source: io::Error },
    Setup(io::Error),
}

impl std::fmt::Display for MuxerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MuxerError::Bind { path, source } => write!(f, "{}: {source}", path.display()),
            MuxerError::Setup(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for MuxerError {}

/// The handshake line's port: `CONNECT <port>`, the keyword in any case.
fn parse_connect(line: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split_ascii_whitespace();
    let keyword = words.next()?;
    let port = words.next()?.parse().ok()?;
    (keyword.eq_ignore_ascii_case("connect") && words.next().is_none()).then_some(port)
}

/// Connects to a Unix stream socket without blocking: a listener whose backlog is full is a
/// refusal, not a wait that would stall the device thread.
fn connect(path: &Path) -> io::Result<UnixStream> {
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor only this function holds.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(ErrorKind::InvalidInput, "path too long for a Unix socket"));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: a valid address of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UnixStream::from(fd))
}

/// What a connection's stream is watched for: both directions, edge-triggered.
fn stream_events() -> EventSet {
    EventSet::IN | EventSet::OUT | EventSet::READ_HANG_UP | EventSet::EDGE_TRIGGERED
}

impl Muxer {
    /// Listens on `uds_path` (which must not exist).
    pub fn new(uds_path: &Path) -> Result<Muxer, MuxerError> {
        // Mode 0600 from the start, like control.sock: only the daemon's user may connect.
        let listener = crate::control::bind_private(uds_path).map_err(|source| MuxerError::Bind { path: uds_path.to_path_buf(), source })?;
        let setup = (|| -> io::Result<(Epoll, TimerFd)> {
            listener.set_nonblocking(true)?;
            let epoll = Epoll::new()?;
            let timer = TimerFd::new()?;
            epoll.ctl(ControlOperation::Add, listener.as_raw_fd(), EpollEvent::new(EventSet::IN, TOKEN_LISTENER))?;
            epoll.ctl(ControlOperation::Add, timer.as_raw_fd(), EpollEvent::new(EventSet::IN, TOKEN_TIMER))?;
            Ok((epoll, timer))
        })();
        let (epoll, timer) = match setup {
            Ok(pair) => pair,
            Err(e) => {
                let _ = std::fs::remove_file(uds_path);
                return Err(MuxerError::Setup(e));
            }
        };
        Ok(Muxer {
            uds_path: uds_path.to_path_buf(),
            listener,
            epoll,
            timer,
            handshakes: HashMap::new(),
            conns: HashMap::new(),
            keys: HashMap::new(),
            rxq: VecDeque::new(),
            stray_resets: VecDeque::new(),
            next_token: FIRST_TOKEN,
            next_local_port: FIRST_LOCAL_PORT,
            refused: 0,
        })
    }

    /// The descriptor the device thread waits on.
    pub fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn token(&mut self) -> u64 {
        loop {
            let t = self.next_token;
            self.next_token = self.next_token.checked_add(1).unwrap_or(FIRST_TOKEN);
            if !self.handshakes.contains_key(&t) && !self.conns.contains_key(&t) {
                return t;
            }
        }
    }

    fn local_port(&mut self) -> u32 {
        loop {
            let p = self.next_local_port;
            self.next_local_port = if p == u32::MAX { FIRST_LOCAL_PORT } else { p + 1 };
            if !self.keys.keys().any(|(local, _)| *local == p) {
                return p;
            }
        }
    }

    fn live(&self) -> usize {
        self.handshakes.len() + self.conns.len()
    }

    /// Handles whatever the muxer's epoll reports, without blocking.
    pub fn process_events(&mut self, now: Instant) {
        let mut events = [EpollEvent::default(); 64];
        loop {
            let n = match self.epoll.wait(0, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("sandbox-vmm: vsock: epoll: {e}");
                    return;
                }
            };
            for event in &events[..n] {
                match event.data() {
                    TOKEN_LISTENER => self.accept(now),
                    TOKEN_TIMER => {
                        let _ = self.timer.wait();
                    }
                    token if self.handshakes.contains_key(&token) => self.read_handshake(token, now),
                    token => self.stream_event(token, event.event_set()),
                }
            }
            if n < events.len() {
                break;
            }
        }
        self.expire(now);
    }

    fn accept(&mut self, now: Instant) {
        loop {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            // Over the limit the client is closed at once: it sees EOF instead of an OK.
            if self.live() >= MAX_CONNECTIONS || stream.set_nonblocking(true).is_err() {
                continue;
            }
            let token = self.token();
            if self.epoll.ctl(ControlOperation::Add, stream.as_raw_fd(), EpollEvent::new(EventSet::IN, token)).is_ok() {
                self.handshakes.insert(token, Handshake { stream, line: Vec::new(), deadline: now + HANDSHAKE_TIMEOUT });
            }
        }
    }

    /// Reads the handshake byte by byte up to its newline: whatever follows the line belongs
    /// to the connection and must stay in the stream.
    fn read_handshake(&mut self, token: u64, now: Instant) {
        let handshake = self.handshakes.get_mut(&token).expect("checked by the caller");
        let mut byte = [0u8; 1];
        let complete = loop {
            match handshake.stream.read(&mut byte) {
                Ok(1) if byte[0] == b'\n' => break Some(true),
                Ok(1) if handshake.line.len() < MAX_HANDSHAKE => handshake.line.push(byte[0]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // EOF, an error, or a line too long.
                _ => break Some(false),
            }
        };
        match complete {
            None => {}
            Some(false) => self.drop_handshake(token),
            Some(true) => {
                let handshake = self.handshakes.remove(&token).expect("present");
                let Some(port) = parse_connect(&handshake.line) else {
                    let _ = self.epoll.ctl(ControlOperation::Delete, handshake.stream.as_raw_fd(), EpollEvent::default());
                    return;
                };
                let local = self.local_port();
                let fd = handshake.stream.as_raw_fd();
                if self.epoll.ctl(ControlOperation::Modify, fd, EpollEvent::new(stream_events(), token)).is_err() {
                    return;
                }
                self.keys.insert((local, port), token);
                self.conns.insert(token, Connection::host_initiated(handshake.stream, local, port, now));
                self.enqueue(token);
            }
        }
    }

    fn drop_handshake(&mut self, token: u64) {
        if let Some(h) = self.handshakes.remove(&token) {
            let _ = self.epoll.ctl(ControlOperation::Delete, h.stream.as_raw_fd(), EpollEvent::default());
        }
    }

    fn stream_event(&mut self, token: u64, set: EventSet) {
        let Some(conn) = self.conns.get_mut(&token) else { return };
        if set.intersects(EventSet::IN | EventSet::READ_HANG_UP | EventSet::HANG_UP | EventSet::ERROR) {
            conn.host_readable();
        }
        let next = if set.intersects(EventSet::OUT | EventSet::ERROR) { conn.host_writable() } else { Next::Keep };
        self.settle(token, next);
    }

    /// After a connection changed: forgets it, or queues it for the guest if it has a packet.
    fn settle(&mut self, token: u64, next: Next) {
        match next {
            Next::Remove => self.remove(token),
            Next::Keep => self.enqueue(token),
        }
    }

    fn enqueue(&mut self, token: u64) {
        if let Some(conn) = self.conns.get_mut(&token) {
            if !conn.queued && conn.has_rx() {
                conn.queued = true;
                self.rxq.push_back(token);
            }
        }
    }

    fn remove(&mut self, token: u64) {
        if let Some(conn) = self.conns.remove(&token) {
            let _ = self.epoll.ctl(ControlOperation::Delete, conn.stream.as_raw_fd(), EpollEvent::default());
            self.keys.remove(&(conn.local_port, conn.peer_port));
        }
    }

    fn stray_reset(&mut self, local: u32, peer: u32) {
        if self.stray_resets.len() < MAX_STRAY_RESETS {
            self.stray_resets.push_back((local, peer));
        }
    }

    /// A packet from the guest.
    pub fn send(&mut self, pkt: &Packet<'_>, now: Instant) {
        if let Err(refusal) = check_from_guest(pkt) {
            self.refused(refusal);
            // Only a packet between the right CIDs names a connection to reset.
            if !matches!(refusal, Refusal::WrongCid { .. }) && pkt.op() != OP_RST {
                self.stray_reset(pkt.dst_port(), pkt.src_port());
            }
            return;
        }
        let key = (pkt.dst_port(), pkt.src_port());
        match self.keys.get(&key) {
            Some(&token) => {
                let next = self.conns.get_mut(&token).expect("keys and conns agree").on_guest_packet(pkt, now);
                self.settle(token, next);
            }
            None if pkt.op() == OP_REQUEST => self.guest_connect(pkt),
            None if pkt.op() == OP_RST => {}
            None => self.stray_reset(key.0, key.1),
        }
        self.expire(now);
    }

    /// Notes a guest packet that was dropped: the 1st, 2nd, 4th, 8th... are logged.
    pub fn refused(&mut self, why: impl std::fmt::Display) {
        self.refused += 1;
        if self.refused.is_power_of_two() {
            eprintln!("sandbox-vmm: vsock: dropped a guest packet: {why} ({} so far)", self.refused);
        }
    }

    /// The guest connects to host port P: `<uds_path>_P`.
    fn guest_connect(&mut self, pkt: &Packet<'_>) {
        let mut path = self.uds_path.clone().into_os_string();
        path.push(format!("_{}", pkt.dst_port()));
        let stream = match connect(Path::new(&path)) {
            Ok(stream) if self.live() < MAX_CONNECTIONS => stream,
            _ => return self.stray_reset(pkt.dst_port(), pkt.src_port()),
        };
        let token = self.token();
        if self.epoll.ctl(ControlOperation::Add, stream.as_raw_fd(), EpollEvent::new(stream_events(), token)).is_err() {
            return self.stray_reset(pkt.dst_port(), pkt.src_port());
        }
        let conn = Connection::guest_initiated(stream, pkt);
        self.keys.insert((conn.local_port, conn.peer_port), token);
        self.conns.insert(token, conn);
        self.enqueue(token);
    }

    /// Whether a packet waits for a receive buffer.
    pub fn has_rx(&self) -> bool {
        !self.stray_resets.is_empty() || !self.rxq.is_empty()
    }

    /// Writes the next packet for the guest into `pkt` and returns its data length; None when
    /// nothing is left to send.
    pub fn fill_rx(&mut self, pkt: &mut Packet<'_>, now: Instant) -> Option<u32> {
        if let Some((local, peer)) = self.stray_resets.pop_front() {
            set_header(pkt, local, peer, OP_RST, 0, 0, BUF_ALLOC, 0);
            return Some(0);
        }
        while let Some(token) = self.rxq.pop_front() {
            let Some(conn) = self.conns.get_mut(&token) else { continue };
            conn.queued = false;
            let filled = conn.fill_rx(pkt, now);
            if conn.is_done() {
                self.remove(token);
            } else {
                // Back of the queue if it has more: connections take turns.
                self.enqueue(token);
            }
            if filled.is_some() {
                return filled;
            }
        }
        None
    }

    /// Times out handshakes, unanswered requests and closes that never finished, then arms the
    /// timer for the next deadline.
    fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self.handshakes.iter().filter(|(_, h)| h.deadline <= now).map(|(t, _)| *t).collect();
        for token in late {
            self.drop_handshake(token);
        }
        let late: Vec<u64> = self.conns.iter().filter(|(_, c)| c.deadline.is_some_and(|d| d <= now)).map(|(t, _)| *t).collect();
        for token in late {
            let conn = self.conns.get_mut(&token).expect("listed above");
            conn.expire();
            self.enqueue(token);
        }
        let next = self.handshakes.values().map(|h| h.deadline).chain(self.conns.values().filter_map(|c| c.deadline)).min();
        let armed = match next {
            // A zero duration would disarm the timer: at least a millisecond.
            Some(at) => self.timer.reset(at.saturating_duration_since(now).max(Duration::from_millis(1)), None),
            None => self.timer.clear(),
        };
        if let Err(e) = armed {
            eprintln!("sandbox-vmm: vsock: timer: {e}");
        }
    }

    /// Drops every connection: the driver reset the device, so the guest forgot them.
    pub fn reset(&mut self) {
        let tokens: Vec<u64> = self.conns.keys().chain(self.handshakes.keys()).copied().collect();
        for token in tokens {
            self.remove(token);
            self.drop_handshake(token);
        }
        self.rxq.clear();
        self.stray_resets.clear();
    }
}

impl Drop for Muxer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.uds_path);
    }
}

#[cfg(test)]
mod tests {
    use super::super::packet::testing::{from_guest, Buffers};
    use super::*;
    use crate::devices::virtio::testing::Scratch;
    use std::io::Write;

    /// A muxer whose hybrid socket is `v.sock` in a scratch directory (dropped after it).
    struct Fixture {
        muxer: Muxer,
        dir: Scratch,
    }

    fn fixture() -> Fixture {
        let dir = Scratch::new("vsock");
        Fixture { muxer: Muxer::new(&dir.0.join("v.sock")).unwrap(), dir }
    }

    /// The next packet for the guest: (op, src port, dst port, flags, data).
    fn rx(m: &mut Muxer) -> Option<(u16, u32, u32, u32, Vec<u8>)> {
        let mut b = Buffers::new(4096);
        let mut pkt = b.packet();
        let len = m.fill_rx(&mut pkt, Instant::now())?;
        let out = (pkt.op(), pkt.src_port(), pkt.dst_port(), pkt.flags());
        Some((out.0, out.1, out.2, out.3, b.data[..len as usize].to_vec()))
    }

    /// The next packet's (op, src port, dst port).
    fn head(m: &mut Muxer) -> (u16, u32, u32) {
        let (op, src, dst, ..) = rx(m).expect("a packet for the guest");
        (op, src, dst)
    }

    fn guest(m: &mut Muxer, src: u32, dst: u32, op: u16, data: &[u8]) {
        let mut b = Buffers::new(0);
        let pkt = from_guest(&mut b, src, dst, op, 0, data, 65536, 0);
        m.send(&pkt, Instant::now());
    }

    fn settle(m: &mut Muxer) {
        for _ in 0..50 {
            m.process_events(Instant::now());
            if m.has_rx() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn connect_lines() {
        assert_eq!(parse_connect(b"CONNECT 44772"), Some(44772));
        assert_eq!(parse_connect(b"connect 5"), Some(5));
        assert_eq!(parse_connect(b"Connect  7 "), Some(7));
        for bad in [&b"CONNECT"[..], b"CONNECT x", b"CONNECT 1 2", b"LISTEN 1", b"CONNECT -1", b"CONNECT 4294967296", b"\xff 1"] {
            assert_eq!(parse_connect(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn host_connects_through_the_handshake_and_data_follows_the_line() {
        let mut f = fixture();
        let mut client = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        // Bytes after the line already belong to the connection.
        client.write_all(b"CONNECT 44772\nearly").unwrap();
        settle(&mut f.muxer);
        let (op, local, port, _, _) = rx(&mut f.muxer).unwrap();
        assert_eq!((op, port), (OP_REQUEST, 44772));
        assert!(local >= FIRST_LOCAL_PORT);
        guest(&mut f.muxer, 44772, local, OP_RESPONSE, b"");
        let mut ok = vec![0u8; format!("OK {local}\n").len()];
        client.read_exact(&mut ok).unwrap();
        assert_eq!(String::from_utf8(ok).unwrap(), format!("OK {local}\n"));
        settle(&mut f.muxer);
        assert_eq!(rx(&mut f.muxer).unwrap().4, b"early");
        guest(&mut f.muxer, 44772, local, OP_RW, b"reply");
        let mut got = [0u8; 5];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"reply");
        // The client goes away: SHUTDOWN to the guest, whose RST ends the connection.
        drop(client);
        settle(&mut f.muxer);
        assert_eq!(rx(&mut f.muxer).unwrap().0, OP_SHUTDOWN);
        guest(&mut f.muxer, 44772, local, OP_RST, b"");
        assert_eq!(f.muxer.conns.len(), 0);
    }

    #[test]
    fn bad_or_missing_handshakes_are_closed() {
        let mut f = fixture();
        let mut bad = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        bad.write_all(b"HELLO\n").unwrap();
        let mut long = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        long.write_all(&[b'9'; 40]).unwrap();
        let silent = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        settle(&mut f.muxer);
        for s in [&bad, &long] {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            // Closed with the client's bytes unread: EOF or a reset.
            let read = (&*s).read(&mut [0u8; 8]);
            assert!(matches!(&read, Ok(0)) || matches!(&read, Err(e) if e.kind() == ErrorKind::ConnectionReset), "{read:?}");
        }
        assert_eq!(f.muxer.handshakes.len(), 1);
        f.muxer.process_events(Instant::now() + HANDSHAKE_TIMEOUT);
        assert_eq!(f.muxer.handshakes.len(), 0);
        silent.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!((&silent).read(&mut [0u8; 8]).unwrap(), 0);
        assert!(!f.muxer.has_rx());
    }

    #[test]
    fn a_request_the_guest_never_answers_times_out_with_an_rst() {
        let mut f = fixture();
        let mut client = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        client.write_all(b"CONNECT 1234\n").unwrap();
        settle(&mut f.muxer);
        let (_, local, ..) = rx(&mut f.muxer).unwrap();
        f.muxer.process_events(Instant::now() + Duration::from_secs(3));
        assert_eq!(head(&mut f.muxer), (OP_RST, local, 1234));
        assert_eq!(f.muxer.conns.len(), 0);
        client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(client.read(&mut [0u8; 8]).unwrap(), 0, "closed without an OK");
    }

    #[test]
    fn the_guest_connects_out_to_path_underscore_port() {
        let mut f = fixture();
        let listener = UnixListener::bind(f.dir.0.join("v.sock_5000")).unwrap();
        guest(&mut f.muxer, 1025, 5000, OP_REQUEST, b"");
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(head(&mut f.muxer), (OP_RESPONSE, 5000, 1025));
        guest(&mut f.muxer, 1025, 5000, OP_RW, b"hello host");
        let mut got = [0u8; 10];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello host");
        server.write_all(b"hello guest").unwrap();
        settle(&mut f.muxer);
        assert_eq!(rx(&mut f.muxer).unwrap().4, b"hello guest");
        // No listener on that port: RST.
        guest(&mut f.muxer, 1026, 5001, OP_REQUEST, b"");
        assert_eq!(head(&mut f.muxer), (OP_RST, 5001, 1026));
    }

    #[test]
    fn packets_for_no_connection_and_bad_packets_get_rsts_not_crashes() {
        let mut f = fixture();
        guest(&mut f.muxer, 1, 2, OP_RW, b"lost");
        assert_eq!(rx(&mut f.muxer).unwrap().0, OP_RST);
        guest(&mut f.muxer, 1, 2, OP_RST, b"");
        assert!(!f.muxer.has_rx(), "an RST is never answered");
        let mut b = Buffers::new(0);
        let mut pkt = from_guest(&mut b, 1, 2, OP_REQUEST, 0, b"", 0, 0);
        pkt.set_type(2);
        f.muxer.send(&pkt, Instant::now());
        pkt.set_type(TYPE_STREAM).set_op(99);
        f.muxer.send(&pkt, Instant::now());
        pkt.set_op(OP_REQUEST).set_dst_cid(7);
        f.muxer.send(&pkt, Instant::now());
        assert_eq!(rx(&mut f.muxer).unwrap().0, OP_RST);
        assert_eq!(rx(&mut f.muxer).unwrap().0, OP_RST);
        assert!(!f.muxer.has_rx(), "a packet from or to another CID gets nothing");
        // Stray RSTs are bounded.
        for i in 0..1000 {
            guest(&mut f.muxer, i, 2, OP_RW, b"");
        }
        assert_eq!(f.muxer.stray_resets.len(), MAX_STRAY_RESETS);
    }

    #[test]
    fn reset_forgets_every_connection() {
        let mut f = fixture();
        let client = UnixStream::connect(f.dir.0.join("v.sock")).unwrap();
        (&client).write_all(b"CONNECT 1\n").unwrap();
        settle(&mut f.muxer);
        f.muxer.reset();
        assert!(!f.muxer.has_rx());
        client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!((&client).read(&mut [0u8; 8]).unwrap(), 0);
    }

    #[test]
    fn the_socket_file_goes_with_the_muxer() {
        let f = fixture();
        let path = f.dir.0.join("v.sock");
        assert!(path.exists());
        assert!(matches!(Muxer::new(&path), Err(MuxerError::Bind { .. })), "an existing path is not taken over");
        drop(f);
        assert!(!path.exists());
    }
}
