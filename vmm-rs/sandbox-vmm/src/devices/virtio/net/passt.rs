//! The network backend: a `passt` process of this sandbox's own, speaking Ethernet frames over
//! a stream socket, each frame prefixed with its length as a 32-bit big-endian integer.
//!
//! The VMM starts passt itself, as its child, with one end of a socketpair (`passt --fd`):
//! - passt runs inside the sandbox's cgroup (the VMM joined it before anything else), so the
//!   daemon's `cgroup.kill` reaps it with the VMM, and its CPU and memory count to the sandbox;
//! - there is no socket path, pid file or directory at all, so nothing needs to be writable by
//!   the user passt switches to (`nobody` when started as root) and nothing is left behind;
//! - `--fd` implies passt's one-off mode: when the VMM goes away, however abruptly, its end of
//!   the socket closes and passt exits by itself.
//!
//! Frames are read and written without blocking; the device stops taking frames from the guest
//! while the socket is full and stops reading while the guest has no buffer for the next frame,
//! so each side's back-pressure reaches the other.

use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Largest frame either side may send: passt's largest MTU (65520) plus an Ethernet header,
/// rounded up. A larger length prefix means the stream is corrupt.
pub const MAX_FRAME: usize = 65536;
/// The MTU passt announces by DHCP and the device by VIRTIO_NET_F_MTU: standard Ethernet, so
/// the guest's receive buffers (1518 bytes without mergeable buffers) hold every frame.
pub const MTU: u16 = 1500;

/// Why the backend stopped working.
#[derive(Debug)]
pub enum PasstError {
    Spawn(io::Error),
    Socket(io::Error),
    /// passt sent a length prefix no frame can have.
    BadLength(usize),
    /// passt closed its end (it exited).
    Closed,
}

impl std::fmt::Display for PasstError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PasstError::Spawn(e) => write!(f, "cannot start passt: {e}"),
            PasstError::Socket(e) => write!(f, "passt socket: {e}"),
            PasstError::BadLength(n) => write!(f, "passt sent a frame length of {n} bytes"),
            PasstError::Closed => write!(f, "passt closed the connection"),
        }
    }
}

impl std::error::Error for PasstError {}

/// Length-prefixed frames over a non-blocking stream: what is left to write, what was read.
pub struct FramedStream {
    stream: UnixStream,
    out: Vec<u8>,
    out_done: usize,
    input: Vec<u8>,
    input_len: usize,
}

impl FramedStream {
    pub fn new(stream: UnixStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(FramedStream { stream, out: Vec::with_capacity(MAX_FRAME + 4), out_done: 0, input: vec![0; MAX_FRAME + 4], input_len: 0 })
    }

    pub fn fd(&self) -> &UnixStream {
        &self.stream
    }

    /// Whether a frame is still (partly) waiting to be written.
    pub fn sending(&self) -> bool {
        self.out_done < self.out.len()
    }

    /// Queues one frame, taking its bytes from `fill` (which writes exactly `len` bytes);
    /// only when nothing is waiting to be written.
    pub fn queue(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> io::Result<()>) -> io::Result<()> {
        debug_assert!(!self.sending());
        self.out.clear();
        self.out.extend_from_slice(&(len as u32).to_be_bytes());
        self.out.resize(4 + len, 0);
        self.out_done = 0;
        let filled = fill(&mut self.out[4..]);
        if filled.is_err() {
            self.out.clear();
        }
        filled
    }

    /// Writes what it can of the queued frame; true when all of it is written.
    pub fn flush(&mut self) -> Result<bool, PasstError> {
        while self.sending() {
            match self.stream.write(&self.out[self.out_done..]) {
                Ok(0) => return Err(PasstError::Closed),
                Ok(n) => self.out_done += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::BrokenPipe || e.kind() == ErrorKind::ConnectionReset => return Err(PasstError::Closed),
                Err(e) => return Err(PasstError::Socket(e)),
            }
        }
        Ok(true)
    }

    /// The next whole frame received, if there is one, without blocking. It stays valid until
    /// [`FramedStream::consume`].
    pub fn frame(&mut self) -> Result<Option<&[u8]>, PasstError> {
        loop {
            if self.input_len >= 4 {
                let len = u32::from_be_bytes(self.input[..4].try_into().expect("four bytes")) as usize;
                if len > MAX_FRAME {
                    return Err(PasstError::BadLength(len));
                }
                if self.input_len >= 4 + len {
                    return Ok(Some(&self.input[4..4 + len]));
                }
            }
            match self.stream.read(&mut self.input[self.input_len..]) {
                Ok(0) => return Err(PasstError::Closed),
                Ok(n) => self.input_len += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Err(PasstError::Closed),
                Err(e) => return Err(PasstError::Socket(e)),
            }
        }
    }

    /// Drops the frame [`FramedStream::frame`] returned.
    pub fn consume(&mut self) {
        let len = 4 + u32::from_be_bytes(self.input[..4].try_into().expect("four bytes")) as usize;
        self.input.copy_within(len..self.input_len, 0);
        self.input_len -= len;
    }
}

/// The passt child process; killed and reaped when dropped.
pub struct Passt {
    child: Child,
}

impl Passt {
    /// Starts `binary` with one end of a new socketpair and returns it with the other end;
    /// its diagnostics go to `log`.
    pub fn spawn(binary: &Path, log: &Path) -> Result<(Passt, UnixStream), PasstError> {
        let (ours, theirs) = UnixStream::pair().map_err(PasstError::Socket)?;
        // Only passt's end crosses exec: Rust opens descriptors close-on-exec, so clear it on a
        // duplicate that passt inherits as-is.
        let theirs = OwnedFd::from(theirs);
        // SAFETY: dup(2) of a descriptor we own; the result is owned by `inherited`.
        let inherited = unsafe { libc::dup(theirs.as_raw_fd()) };
        if inherited < 0 {
            return Err(PasstError::Socket(io::Error::last_os_error()));
        }
        // SAFETY: `inherited` is a fresh descriptor only this function holds.
        let inherited = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(inherited) };
        let log = File::options().create(true).append(true).open(log).map_err(PasstError::Spawn)?;
        let child = Command::new(binary)
            .args(["--foreground", "--quiet", "--stderr", "--mtu", &MTU.to_string(), "--fd", &inherited.as_raw_fd().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(PasstError::Spawn)?;
        drop(inherited);
        drop(theirs);
        Ok((Passt { child }, ours))
    }
}

impl Drop for Passt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces_and_bad_lengths_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut ours = FramedStream::new(a).unwrap();
        let mut peer = b;
        // Two frames arriving one byte at a time, then a length no frame can have.
        let mut wire = Vec::new();
        for frame in [&b"first"[..], &[7u8; 1514][..]] {
            wire.extend_from_slice(&(frame.len() as u32).to_be_bytes());
            wire.extend_from_slice(frame);
        }
        for byte in &wire[..wire.len() - 1] {
            peer.write_all(&[*byte]).unwrap();
            if let Some(frame) = ours.frame().unwrap() {
                assert_eq!(frame, b"first");
                ours.consume();
            }
        }
        assert!(ours.frame().unwrap().is_none());
        peer.write_all(&wire[wire.len() - 1..]).unwrap();
        assert_eq!(ours.frame().unwrap().unwrap(), &[7u8; 1514][..]);
        ours.consume();
        ours.queue(3, |buf| {
            buf.copy_from_slice(b"abc");
            Ok(())
        })
        .unwrap();
        assert!(ours.flush().unwrap());
        let mut got = [0u8; 7];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"\0\0\0\x03abc");
        peer.write_all(&(MAX_FRAME as u32 + 1).to_be_bytes()).unwrap();
        assert!(matches!(ours.frame(), Err(PasstError::BadLength(n)) if n == MAX_FRAME + 1));

        let (a, peer) = UnixStream::pair().unwrap();
        let mut ours = FramedStream::new(a).unwrap();
        drop(peer);
        assert!(matches!(ours.frame(), Err(PasstError::Closed)));
    }

    #[test]
    fn a_full_socket_keeps_the_frame_until_it_drains() {
        let (a, mut peer) = UnixStream::pair().unwrap();
        let mut ours = FramedStream::new(a).unwrap();
        let mut queued = 0;
        loop {
            ours.queue(MAX_FRAME, |buf| {
                buf.fill(0x55);
                Ok(())
            })
            .unwrap();
            queued += 1;
            if !ours.flush().unwrap() {
                break;
            }
        }
        assert!(ours.sending());
        // The reader drains everything; the partly written frame then completes.
        let reader = std::thread::spawn(move || {
            let mut total = 0;
            let mut buf = vec![0u8; 1 << 16];
            peer.set_read_timeout(Some(std::time::Duration::from_millis(500))).unwrap();
            while let Ok(n) = peer.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n;
            }
            total
        });
        while !ours.flush().unwrap() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(ours);
        assert_eq!(reader.join().unwrap(), queued * (MAX_FRAME + 4));
    }
}
