//! `control.sock`: inspect, pause, resume and terminate, one length-prefixed JSON frame per
//! request and per answer (the shared control framing). Every answer carries the state the VM
//! is confirmed to be in after the request, never the state it was asked to reach.

use std::fmt;
use std::fs;
use std::io::{self, ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use control_frame::{write_frame, Decoder, DEFAULT_MAX_FRAME};
use serde_json::{json, Map, Value};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use crate::error_code::ErrorCode;
use crate::vstate::stop::StopReason;
use crate::vstate::vm::{Vm, VmError, VmState};

/// How long a pause or resume may wait for every vCPU's acknowledgement.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that stops reading its answers must not stall the VMM.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
const TOKEN_LISTENER: u64 = u64::MAX;
const TOKEN_STOP: u64 = u64::MAX - 1;
const TOKEN_SIGNAL: u64 = u64::MAX - 2;

/// SIGTERM, SIGINT and SIGHUP become an orderly terminate (VM stopped, control.sock removed,
/// the stopped frame written) instead of killing the process mid-flight. They are blocked here,
/// before any vCPU thread exists so every thread inherits the mask, and read from a signalfd.
fn termination_signalfd() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: sigset manipulation on a local set, then a signalfd we take ownership of.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(std::os::fd::OwnedFd::from_raw_fd(fd))
    }
}

/// Binds the socket with mode 0600 from the start: the umask is narrowed around bind(2) so
/// there is no window in which the socket exists with wider permissions. Called while the
/// process is still single-threaded, so the process-wide umask change races with nothing.
pub fn bind_private(path: &Path) -> io::Result<UnixListener> {
    if fs::symlink_metadata(path).is_ok() {
        return Err(io::Error::new(ErrorKind::AlreadyExists, format!("{} already exists", path.display())));
    }
    // SAFETY: umask(2) cannot fail.
    let old = unsafe { libc::umask(0o177) };
    let listener = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = listener?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The peer's uid (SO_PEERCRED).
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    // SAFETY: ucred is plain data; getsockopt fills at most `len` bytes of it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid socket, buffer and length.
    let rc = unsafe {
        libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

struct Conn {
    stream: UnixStream,
    decoder: Decoder,
}

pub struct ControlServer {
    path: PathBuf,
    listener: UnixListener,
    epoll: Epoll,
    conns: Vec<Option<Conn>>,
    started: Instant,
    _signals: std::os::fd::OwnedFd,
}

fn error_reply(code: ErrorCode, message: &str, state: &str) -> Value {
    json!({ "ok": false, "state": state, "error": { "code": code.as_str(), "message": message } })
}

/// What a request asks for: its `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Inspect,
    Pause,
    Resume,
    Terminate,
}

impl Op {
    fn of(request: &Value) -> Result<Op, RequestError> {
        match request.get("op").and_then(Value::as_str) {
            Some("inspect") => Ok(Op::Inspect),
            Some("pause") => Ok(Op::Pause),
            Some("resume") => Ok(Op::Resume),
            Some("terminate") => Ok(Op::Terminate),
            Some(other) => Err(RequestError::UnknownOp(other.to_owned())),
            None => Err(RequestError::MissingOp),
        }
    }
}

/// Why a well-formed frame is not a request: answered with `bad_request`.
#[derive(Debug)]
enum RequestError {
    MissingOp,
    UnknownOp(String),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::MissingOp => write!(f, "op: required string field missing"),
            RequestError::UnknownOp(op) => write!(f, "op: unknown operation {op:?} (inspect, pause, resume, terminate)"),
        }
    }
}

impl std::error::Error for RequestError {}

impl ControlServer {
    pub fn new(path: PathBuf, listener: UnixListener, vm: &Vm) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let epoll = Epoll::new()?;
        epoll.ctl(ControlOperation::Add, listener.as_raw_fd(), EpollEvent::new(EventSet::IN, TOKEN_LISTENER))?;
        epoll.ctl(ControlOperation::Add, vm.stop_signal().evt.as_raw_fd(), EpollEvent::new(EventSet::IN, TOKEN_STOP))?;
        let signals = termination_signalfd()?;
        epoll.ctl(ControlOperation::Add, signals.as_raw_fd(), EpollEvent::new(EventSet::IN, TOKEN_SIGNAL))?;
        Ok(ControlServer { path, listener, epoll, conns: Vec::new(), started: Instant::now(), _signals: signals })
    }

    /// Serves until the VM stops (guest reset or shutdown, terminate request or signal, vCPU
    /// error).
    pub fn serve(&mut self, vm: &mut Vm) -> io::Result<StopReason> {
        let mut events = vec![EpollEvent::default(); 32];
        loop {
            let n = match self.epoll.wait(-1, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            for event in &events[..n] {
                match event.data() {
                    TOKEN_LISTENER => self.accept()?,
                    TOKEN_STOP | TOKEN_SIGNAL => return Ok(vm.halt(StopReason::Terminated)),
                    token => {
                        if let Some(reason) = self.serve_conn(token as usize, vm) {
                            return Ok(reason);
                        }
                    }
                }
            }
        }
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            // Only our own user may control the VM (the socket mode says the same; this also
            // holds if someone widens it).
            // SAFETY: geteuid cannot fail.
            if peer_uid(&stream).ok() != Some(unsafe { libc::geteuid() }) {
                continue;
            }
            // Blocking, so that the write timeout bounds a client that stops reading; reads
            // happen only when epoll reports data, one read(2) per report, so they never block.
            stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
            let slot = self.conns.iter().position(Option::is_none).unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            self.epoll.ctl(ControlOperation::Add, stream.as_raw_fd(), EpollEvent::new(EventSet::IN | EventSet::READ_HANG_UP, slot as u64))?;
            self.conns[slot] = Some(Conn { stream, decoder: Decoder::new(DEFAULT_MAX_FRAME) });
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].take() {
            let _ = self.epoll.ctl(ControlOperation::Delete, conn.stream.as_raw_fd(), EpollEvent::default());
        }
    }

    /// Reads what the client sent and answers every complete request; Some when the VM stopped.
    fn serve_conn(&mut self, slot: usize, vm: &mut Vm) -> Option<StopReason> {
        let conn = self.conns.get_mut(slot).and_then(Option::as_mut)?;
        let mut buf = [0u8; 4096];
        let mut eof = match conn.stream.read(&mut buf) {
            Ok(0) => true,
            Ok(n) => {
                conn.decoder.push(&buf[..n]);
                false
            }
            Err(e) => e.kind() != ErrorKind::Interrupted && e.kind() != ErrorKind::WouldBlock,
        };
        let mut stopped = None;
        loop {
            let conn = self.conns[slot].as_mut().expect("checked above");
            let request = match conn.decoder.next_frame() {
                Ok(Some(v)) => v,
                Ok(None) => break,
                Err(e) => {
                    // The stream cannot be resynchronised after a bad frame: answer and hang up.
                    let _ = write_frame(&mut conn.stream, &error_reply(ErrorCode::BadFrame, &e.to_string(), vm.state().name()), DEFAULT_MAX_FRAME);
                    eof = true;
                    break;
                }
            };
            let (reply, stop) = self.handle(&request, vm);
            let conn = self.conns[slot].as_mut().expect("checked above");
            let _ = write_frame(&mut conn.stream, &reply, DEFAULT_MAX_FRAME);
            if stop.is_some() {
                stopped = stop;
                break;
            }
        }
        if eof || stopped.is_some() {
            self.close(slot);
        }
        stopped
    }

    fn handle(&self, request: &Value, vm: &mut Vm) -> (Value, Option<StopReason>) {
        let (mut reply, stop) = match Op::of(request) {
            Ok(Op::Inspect) => (self.inspect(vm), None),
            Ok(Op::Pause) => (confirmed(vm.pause(ACK_TIMEOUT), vm), None),
            Ok(Op::Resume) => (confirmed(vm.resume(ACK_TIMEOUT), vm), None),
            Ok(Op::Terminate) => {
                let reason = vm.halt(StopReason::Terminated);
                (json!({ "ok": true, "state": vm.state().name(), "reason": reason.name() }), Some(reason))
            }
            Err(e) => (error_reply(ErrorCode::BadRequest, &e.to_string(), vm.state().name()), None),
        };
        // Echo the caller's correlation id, if any, so pipelined requests can be matched.
        if let (Some(id), Some(obj)) = (request.get("id"), reply.as_object_mut()) {
            obj.insert("id".into(), id.clone());
        }
        (reply, stop)
    }

    fn inspect(&self, vm: &Vm) -> Value {
        let (written, dropped) = vm.serial_log_counts();
        let mut obj = Map::new();
        obj.insert("ok".into(), json!(true));
        obj.insert("state".into(), json!(vm.state().name()));
        obj.insert("pid".into(), json!(std::process::id()));
        obj.insert("vcpus".into(), json!(vm.vcpu_count()));
        obj.insert("uptime_ms".into(), json!(self.started.elapsed().as_millis() as u64));
        obj.insert("serial_log_bytes".into(), json!(written));
        obj.insert("serial_log_dropped".into(), json!(dropped));
        let disks: Vec<Value> = vm
            .disk_metrics()
            .iter()
            .map(|m| {
                let (read_bytes, reads, write_bytes, errors) = m.snapshot();
                json!({ "read_bytes": read_bytes, "reads": reads, "write_bytes": write_bytes, "errors": errors })
            })
            .collect();
        obj.insert("disks".into(), Value::Array(disks));
        Value::Object(obj)
    }
}

fn confirmed(result: Result<VmState, VmError>, vm: &Vm) -> Value {
    match result {
        Ok(state) => json!({ "ok": true, "state": state.name() }),
        // After a timeout the vCPUs' state is not known, and the answer says so rather than
        // guessing: the daemon treats it as uncertainty.
        Err(e @ VmError::Timeout { .. }) => error_reply(e.code(), &e.to_string(), "unknown"),
        Err(e) => error_reply(e.code(), &e.to_string(), vm.state().name()),
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
