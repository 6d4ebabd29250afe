//! The `sandbox-vmm` process: start frame on stdin, answers on stdout, then control.sock.

use std::borrow::Cow;
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use control_frame::{write_frame, FrameError, FrameReader, DEFAULT_MAX_FRAME};
use serde_json::{json, Value};

use crate::config::{self, ConfigError, StartConfig};
use crate::control::{bind_private, ControlServer};
use crate::devices::manager::{DeviceSpec, NetSpec};
use crate::error_code::ErrorCode;
use crate::host::cgroup::{self, CgroupError};
use crate::vstate::stop::{self, Failure, StopReason};
use crate::vstate::vm::{Vm, VmError, VmSpec};

/// Process exit codes, shared with the CLI tools: 0 ok, 1 internal, 2 invalid input,
/// 4 conflict, 6 dependency unavailable.
pub const EXIT_OK: i32 = 0;
pub const EXIT_INTERNAL: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_CONFLICT: i32 = 4;
pub const EXIT_UNAVAILABLE: i32 = 6;

/// A failure before the VM runs, answered on stdout as `{"ok":false,"error":{...}}`.
#[derive(Debug)]
pub enum StartError {
    /// stdin closed before the start frame arrived.
    NoStartFrame,
    BadStartFrame(FrameError),
    Config(ConfigError),
    StateDir { path: PathBuf, source: io::Error },
    StateDirNotADirectory { path: PathBuf },
    /// The state directory is not ours alone (`owner`, `mode`), so it cannot hold the sockets.
    StateDirNotPrivate { path: PathBuf, uid: u32, owner: u32, mode: u32 },
    Cgroup(CgroupError),
    Vm(VmError),
    ControlSocket { path: PathBuf, source: io::Error },
}

impl StartError {
    pub fn code(&self) -> ErrorCode {
        match self {
            StartError::NoStartFrame
            | StartError::BadStartFrame(_)
            | StartError::Config(_)
            | StartError::StateDir { .. }
            | StartError::StateDirNotADirectory { .. }
            | StartError::StateDirNotPrivate { .. } => ErrorCode::InvalidConfig,
            StartError::Cgroup(e) => e.code(),
            StartError::Vm(e) => e.code(),
            StartError::ControlSocket { .. } => ErrorCode::ControlSocket,
        }
    }

    /// The start field at fault, when there is one.
    pub fn field(&self) -> Option<Cow<'_, str>> {
        match self {
            StartError::NoStartFrame | StartError::BadStartFrame(_) => Some("(start frame)".into()),
            StartError::Config(e) => Some(e.field.as_str().into()),
            StartError::StateDir { .. } | StartError::StateDirNotADirectory { .. } | StartError::StateDirNotPrivate { .. } => Some("state_dir".into()),
            StartError::Cgroup(_) => Some("cgroup.path".into()),
            StartError::Vm(e) => e.field(),
            StartError::ControlSocket { .. } => Some("state_dir".into()),
        }
    }

    /// The process exit code: invalid input, a conflict (another cgroup than the daemon's),
    /// an unavailable dependency, or internal.
    pub fn exit_code(&self) -> i32 {
        match self.code() {
            ErrorCode::InvalidConfig => EXIT_INVALID,
            ErrorCode::CgroupIdentity => EXIT_CONFLICT,
            ErrorCode::CgroupJoin | ErrorCode::KvmUnavailable => EXIT_UNAVAILABLE,
            _ => EXIT_INTERNAL,
        }
    }

    fn to_frame(&self) -> Value {
        let mut error = json!({ "code": self.code().as_str(), "message": self.to_string() });
        if let Some(field) = self.field() {
            error["field"] = json!(field);
        }
        json!({ "ok": false, "error": error })
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NoStartFrame => write!(f, "start frame: stdin closed before it arrived"),
            StartError::BadStartFrame(e) => write!(f, "start frame: {e}"),
            StartError::Config(e) => write!(f, "{e}"),
            StartError::StateDir { path, source } => write!(f, "state_dir: {}: {source}", path.display()),
            StartError::StateDirNotADirectory { path } => write!(f, "state_dir: {} is not a directory", path.display()),
            StartError::StateDirNotPrivate { path, uid, owner, mode } => {
                write!(f, "state_dir: {} must be owned by uid {uid} with mode 0700 (is uid {owner} mode {mode:o})", path.display())
            }
            StartError::Cgroup(e) => write!(f, "{e}"),
            StartError::Vm(e) => write!(f, "{e}"),
            StartError::ControlSocket { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::BadStartFrame(e) => Some(e),
            StartError::Config(e) => Some(e),
            StartError::StateDir { source, .. } | StartError::ControlSocket { source, .. } => Some(source),
            StartError::Cgroup(e) => Some(e),
            StartError::Vm(e) => Some(e),
            StartError::NoStartFrame
            | StartError::StateDirNotADirectory { .. }
            | StartError::StateDirNotPrivate { .. } => None,
        }
    }
}

/// Reads and validates the start frame.
pub fn read_config<R: Read>(input: R) -> Result<StartConfig, StartError> {
    let mut reader = FrameReader::new(input, DEFAULT_MAX_FRAME);
    let frame = match reader.read_frame() {
        Ok(Some(frame)) => frame,
        Ok(None) => return Err(StartError::NoStartFrame),
        Err(e) => return Err(StartError::BadStartFrame(e)),
    };
    config::parse(&frame).map_err(StartError::Config)
}

/// The state directory must be a directory only we can enter: it holds the control socket,
/// the vsock sockets and the serial log.
fn check_state_dir(config: &StartConfig) -> Result<(), StartError> {
    let path = || config.state_dir.clone();
    let meta = fs::metadata(&config.state_dir).map_err(|source| StartError::StateDir { path: path(), source })?;
    if !meta.is_dir() {
        return Err(StartError::StateDirNotADirectory { path: path() });
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(StartError::StateDirNotPrivate { path: path(), uid, owner: meta.uid(), mode: meta.mode() & 0o777 });
    }
    Ok(())
}

fn start(config: &StartConfig) -> Result<(Vm, ControlServer), StartError> {
    // First of all: everything the VMM creates from here on is charged to the sandbox's cgroup.
    cgroup::join(&config.cgroup).map_err(StartError::Cgroup)?;
    check_state_dir(config)?;
    let spec = VmSpec {
        kernel: config.kernel.clone(),
        initrd: config.initrd.clone(),
        cmdline: config.cmdline.clone(),
        vcpus: config.vcpus,
        memory_mib: config.memory_mib,
        serial_log: config.serial_log(),
        serial_log_max: config.serial_log_max_bytes,
        devices: DeviceSpec {
            disks: config.disks.clone(),
            net: config.net.as_ref().map(|n| NetSpec { passt: n.passt.clone(), log: config.state_dir.join("passt.log") }),
            vsock: config.vsock_socket.clone(),
        },
    };
    let mut vm = Vm::create(&spec).map_err(StartError::Vm)?;
    let path = config.control_socket();
    let socket_err = |source| StartError::ControlSocket { path: path.clone(), source };
    let listener = bind_private(&path).map_err(socket_err)?;
    let server = ControlServer::new(path.clone(), listener, &vm).map_err(socket_err)?;
    vm.start().map_err(StartError::Vm)?;
    Ok((vm, server))
}

/// Runs one VM from a start frame on `input`, reporting on `output`; returns the exit code.
pub fn run<R: Read, W: Write>(input: R, output: &mut W) -> i32 {
    let config = match read_config(input) {
        Ok(c) => c,
        Err(e) => {
            let _ = write_frame(output, &e.to_frame(), DEFAULT_MAX_FRAME);
            return e.exit_code();
        }
    };
    let (mut vm, mut server) = match start(&config) {
        Ok(pair) => pair,
        Err(e) => {
            let _ = write_frame(output, &e.to_frame(), DEFAULT_MAX_FRAME);
            return e.exit_code();
        }
    };
    let ready = json!({
        "ok": true,
        "state": vm.state().name(),
        "pid": std::process::id(),
        "control_socket": config.control_socket(),
        "serial_log": config.serial_log(),
        "entry": vm.entry_mode().name(),
    });
    // The daemon may have gone away; the VM keeps running and control.sock still serves.
    let _ = write_frame(output, &ready, DEFAULT_MAX_FRAME);
    let (reason, code) = match server.serve(&mut vm) {
        Ok(reason) => {
            let code = if matches!(reason, StopReason::Error(_)) { EXIT_INTERNAL } else { EXIT_OK };
            (reason, code)
        }
        Err(e) => (vm.halt(StopReason::Error(Failure::ControlLoop(stop::errno(&e)))), EXIT_INTERNAL),
    };
    drop(server);
    let mut stopped = json!({ "event": "stopped", "reason": reason.name() });
    if let Some(detail) = reason.detail() {
        stopped["detail"] = json!(detail);
    }
    let _ = write_frame(output, &stopped, DEFAULT_MAX_FRAME);
    code
}
