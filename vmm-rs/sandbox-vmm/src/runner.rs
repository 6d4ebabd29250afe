//! The `sandbox-vmm` process: start frame on stdin, answers on stdout, then control.sock.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;

use control_frame::{write_frame, FrameReader, DEFAULT_MAX_FRAME};
use serde_json::{json, Value};

use crate::config::{self, StartConfig};
use crate::control::{bind_private, ControlServer};
use crate::error_code::ErrorCode;
use crate::host::cgroup;
use crate::vstate::stop::{self, Failure, StopReason};
use crate::vstate::vm::{Vm, VmSpec};

/// Process exit codes, shared with the CLI tools: 0 ok, 1 internal, 2 invalid input,
/// 4 conflict, 6 dependency unavailable.
pub const EXIT_OK: i32 = 0;
pub const EXIT_INTERNAL: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_CONFLICT: i32 = 4;
pub const EXIT_UNAVAILABLE: i32 = 6;

/// A failure before the VM runs, answered on stdout as `{"ok":false,"error":{...}}`.
pub struct StartError {
    pub code: &'static str,
    pub field: Option<String>,
    pub message: String,
    pub exit: i32,
}

impl StartError {
    fn to_frame(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(field) = &self.field {
            error["field"] = json!(field);
        }
        json!({ "ok": false, "error": error })
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> StartError {
    StartError { code: "invalid_config", field: Some(field.into()), message: message.into(), exit: EXIT_INVALID }
}

/// Reads and validates the start frame.
pub fn read_config<R: Read>(input: R) -> Result<StartConfig, StartError> {
    let mut reader = FrameReader::new(input, DEFAULT_MAX_FRAME);
    let frame = match reader.read_frame() {
        Ok(Some(frame)) => frame,
        Ok(None) => return Err(invalid("(start frame)", "start frame: stdin closed before it arrived")),
        Err(e) => return Err(invalid("(start frame)", format!("start frame: {e}"))),
    };
    config::parse(&frame).map_err(|e| invalid(e.field.clone(), e.to_string()))
}

/// The state directory must be a directory only we can enter: it holds the control socket,
/// the vsock sockets and the serial log.
fn check_state_dir(config: &StartConfig) -> Result<(), StartError> {
    let dir = &config.state_dir;
    let meta = fs::metadata(dir).map_err(|e| invalid("state_dir", format!("state_dir: {}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(invalid("state_dir", format!("state_dir: {} is not a directory", dir.display())));
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(invalid(
            "state_dir",
            format!("state_dir: {} must be owned by uid {uid} with mode 0700 (is uid {} mode {:o})", dir.display(), meta.uid(), meta.mode() & 0o777),
        ));
    }
    Ok(())
}

/// Devices the start frame can name but this VMM does not provide yet are refused, never
/// silently dropped: a sandbox without the disk or network it asked for is not that sandbox.
fn refuse_unimplemented(config: &StartConfig) -> Result<(), StartError> {
    let unsupported = |field: &str, what: &str| StartError {
        code: "unsupported",
        field: Some(field.into()),
        message: format!("{field}: {what} is not implemented by this sandbox-vmm yet"),
        exit: EXIT_INVALID,
    };
    if !config.disks.is_empty() {
        return Err(unsupported("disks", "virtio-blk"));
    }
    if config.net_socket.is_some() {
        return Err(unsupported("net_socket", "virtio-net"));
    }
    if config.vsock_socket.is_some() {
        return Err(unsupported("vsock_socket", "virtio-vsock"));
    }
    Ok(())
}

fn start(config: &StartConfig) -> Result<(Vm, ControlServer), StartError> {
    refuse_unimplemented(config)?;
    // First of all: everything the VMM creates from here on is charged to the sandbox's cgroup.
    cgroup::join(&config.cgroup).map_err(|e| StartError {
        code: e.code().as_str(),
        field: Some("cgroup.path".into()),
        message: e.to_string(),
        exit: if e.code() == ErrorCode::CgroupIdentity { EXIT_CONFLICT } else { EXIT_UNAVAILABLE },
    })?;
    check_state_dir(config)?;
    let spec = VmSpec {
        kernel: config.kernel.clone(),
        initrd: config.initrd.clone(),
        cmdline: config.cmdline.clone(),
        vcpus: config.vcpus,
        memory_mib: config.memory_mib,
        serial_log: config.serial_log(),
        serial_log_max: config.serial_log_max_bytes,
    };
    let mut vm = Vm::create(&spec).map_err(|e| StartError {
        code: e.code().as_str(),
        field: e.field().map(str::to_owned),
        exit: match e.code() {
            ErrorCode::InvalidConfig => EXIT_INVALID,
            ErrorCode::KvmUnavailable => EXIT_UNAVAILABLE,
            _ => EXIT_INTERNAL,
        },
        message: e.to_string(),
    })?;
    let path = config.control_socket();
    let internal = |e: io::Error| StartError { code: "control_socket", field: Some("state_dir".into()), message: format!("{}: {e}", path.display()), exit: EXIT_INTERNAL };
    let listener = bind_private(&path).map_err(internal)?;
    let server = ControlServer::new(path.clone(), listener, &vm).map_err(internal)?;
    vm.start().map_err(|e| StartError { code: e.code().as_str(), field: None, message: e.to_string(), exit: EXIT_INTERNAL })?;
    Ok((vm, server))
}

/// Runs one VM from a start frame on `input`, reporting on `output`; returns the exit code.
pub fn run<R: Read, W: Write>(input: R, output: &mut W) -> i32 {
    let config = match read_config(input) {
        Ok(c) => c,
        Err(e) => {
            let _ = write_frame(output, &e.to_frame(), DEFAULT_MAX_FRAME);
            return e.exit;
        }
    };
    let (mut vm, mut server) = match start(&config) {
        Ok(pair) => pair,
        Err(e) => {
            let _ = write_frame(output, &e.to_frame(), DEFAULT_MAX_FRAME);
            return e.exit;
        }
    };
    let ready = json!({
        "ok": true,
        "state": vm.state().name(),
        "pid": std::process::id(),
        "control_socket": config.control_socket(),
        "serial_log": config.serial_log(),
        "entry": format!("{:?}", vm.entry_mode()).to_lowercase(),
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
