//! The start configuration: the first frame the daemon writes on the VMM's stdin.
//!
//! It travels on stdin rather than in argv or the environment because it may carry secrets
//! (argv and environ are readable by other processes of the same user through /proc).
//! Parsing is strict: an unknown field or a value of the wrong type is an error that names the
//! field, so a daemon/VMM version mismatch is loud instead of silently ignored.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Map, Value};

/// Largest vCPU count accepted; the MADT and the per-vCPU APIC ids are u8.
pub const MAX_VCPUS: u64 = 64;
/// Smallest guest RAM: below this nothing useful boots and the boot structures would not fit.
pub const MIN_MEMORY_MIB: u64 = 16;
/// Largest guest RAM: keeps the address space below the 64-bit MMIO area.
pub const MAX_MEMORY_MIB: u64 = 256 * 1024;
/// Kernel command line capacity of the x86 boot protocol (including the terminating NUL).
pub const CMDLINE_MAX: usize = 2048;
/// `sun_path` holds 108 bytes including the NUL; the spec asks control.sock paths < 104 bytes.
pub const CONTROL_SOCKET_PATH_MAX: usize = 103;
const UNIX_PATH_MAX: usize = 107;
/// Default cap on the serial console log.
pub const DEFAULT_SERIAL_LOG_MAX: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub path: PathBuf,
    pub read_only: bool,
}

/// The sandbox's network: a `passt` the VMM starts for it (see `devices::virtio::net`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfig {
    /// The passt executable, a trusted absolute path like the kernel's.
    pub passt: PathBuf,
}

/// The cgroup v2 directory the VMM must run in, identified by device and inode so that a
/// directory removed and recreated under the same name is not mistaken for the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupIdentity {
    pub path: PathBuf,
    pub device: u64,
    pub inode: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartConfig {
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub cmdline: String,
    pub vcpus: u8,
    pub memory_mib: u64,
    pub disks: Vec<Disk>,
    pub net: Option<NetConfig>,
    pub vsock_socket: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub cgroup: CgroupIdentity,
    pub serial_log_max_bytes: u64,
}

impl StartConfig {
    pub fn control_socket(&self) -> PathBuf {
        self.state_dir.join("control.sock")
    }

    pub fn serial_log(&self) -> PathBuf {
        self.state_dir.join("serial.log")
    }
}

/// A configuration error names the offending field (a JSON path such as `disks[1].path`) and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub problem: Problem,
}

/// What is wrong with a start-frame field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The frame itself is not a JSON object.
    FrameNotAnObject,
    NotAnObject,
    NotAnArray,
    NotABoolean,
    NotAString,
    UnknownField,
    Required,
    /// A path field holds something other than a string.
    PathNotAString,
    NotAbsolute { path: String },
    ContainsNul,
    PathTooLong { len: usize, max: usize },
    TooLong { len: usize, max: usize },
    IntegerOutOfRange { min: u64, max: u64, got: Value },
    /// `state_dir` is so long that the control socket's path under it would not fit `sun_path`.
    ControlSocketTooLong { len: usize },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field)?;
        match &self.problem {
            Problem::FrameNotAnObject => write!(f, "must be a JSON object"),
            Problem::NotAnObject => write!(f, "must be an object"),
            Problem::NotAnArray => write!(f, "must be an array"),
            Problem::NotABoolean => write!(f, "must be a boolean"),
            Problem::NotAString => write!(f, "must be a string"),
            Problem::UnknownField => write!(f, "unknown field"),
            Problem::Required => write!(f, "is required"),
            Problem::PathNotAString => write!(f, "must be a string (an absolute path)"),
            Problem::NotAbsolute { path } => write!(f, "must be an absolute path, got {path:?}"),
            Problem::ContainsNul => write!(f, "must not contain NUL"),
            Problem::PathTooLong { len, max } => write!(f, "path is {len} bytes, the limit is {max}"),
            Problem::TooLong { len, max } => write!(f, "is {len} bytes, the limit is {max}"),
            Problem::IntegerOutOfRange { min, max, got } => write!(f, "must be an integer from {min} to {max}, got {got}"),
            Problem::ControlSocketTooLong { len } => {
                write!(f, "control.sock under it would be {len} bytes long; it must be shorter than {}", CONTROL_SOCKET_PATH_MAX + 1)
            }
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(field: impl Into<String>, problem: Problem) -> ConfigError {
    ConfigError { field: field.into(), problem }
}

const TOP_FIELDS: &[&str] = &[
    "kernel",
    "initrd",
    "cmdline",
    "vcpus",
    "memory_mib",
    "disks",
    "net",
    "vsock_socket",
    "state_dir",
    "cgroup",
    "serial_log_max_bytes",
];

fn reject_unknown(obj: &Map<String, Value>, known: &[&str], prefix: &str) -> Result<(), ConfigError> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(err(format!("{prefix}{k}"), Problem::UnknownField)),
        None => Ok(()),
    }
}

fn absolute_path(value: &Value, field: &str, max_len: usize) -> Result<PathBuf, ConfigError> {
    let s = value.as_str().ok_or_else(|| err(field, Problem::PathNotAString))?;
    if !s.starts_with('/') {
        return Err(err(field, Problem::NotAbsolute { path: s.to_owned() }));
    }
    if s.contains('\0') {
        return Err(err(field, Problem::ContainsNul));
    }
    if s.len() > max_len {
        return Err(err(field, Problem::PathTooLong { len: s.len(), max: max_len }));
    }
    Ok(PathBuf::from(s))
}

fn optional_path(obj: &Map<String, Value>, field: &str, max_len: usize) -> Result<Option<PathBuf>, ConfigError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => absolute_path(v, field, max_len).map(Some),
    }
}

fn required<'a>(obj: &'a Map<String, Value>, field: &str, prefix: &str) -> Result<&'a Value, ConfigError> {
    obj.get(field).ok_or_else(|| err(format!("{prefix}{field}"), Problem::Required))
}

fn integer(value: &Value, field: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
    match value.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(err(field, Problem::IntegerOutOfRange { min, max, got: value.clone() })),
    }
}

/// Parses and validates the start frame. Only the shape is checked here; whether the files
/// exist is checked when they are opened, with errors naming the same fields.
pub fn parse(frame: &Value) -> Result<StartConfig, ConfigError> {
    let obj = frame.as_object().ok_or_else(|| err("(start frame)", Problem::FrameNotAnObject))?;
    reject_unknown(obj, TOP_FIELDS, "")?;

    let kernel = absolute_path(required(obj, "kernel", "")?, "kernel", 4096)?;
    let initrd = optional_path(obj, "initrd", 4096)?;
    let cmdline = match obj.get("cmdline") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.len() < CMDLINE_MAX && !s.contains('\0') => s.clone(),
        Some(Value::String(s)) => return Err(err("cmdline", Problem::TooLong { len: s.len(), max: CMDLINE_MAX - 1 })),
        Some(_) => return Err(err("cmdline", Problem::NotAString)),
    };
    let vcpus = integer(required(obj, "vcpus", "")?, "vcpus", 1, MAX_VCPUS)? as u8;
    let memory_mib = integer(required(obj, "memory_mib", "")?, "memory_mib", MIN_MEMORY_MIB, MAX_MEMORY_MIB)?;

    let disks = match obj.get("disks") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let prefix = format!("disks[{i}].");
                let d = item.as_object().ok_or_else(|| err(format!("disks[{i}]"), Problem::NotAnObject))?;
                reject_unknown(d, &["path", "read_only"], &prefix)?;
                let path = absolute_path(required(d, "path", &prefix)?, &format!("{prefix}path"), 4096)?;
                let read_only = match d.get("read_only") {
                    None => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(err(format!("{prefix}read_only"), Problem::NotABoolean)),
                };
                Ok(Disk { path, read_only })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(err("disks", Problem::NotAnArray)),
    };

    let net = match obj.get("net") {
        None | Some(Value::Null) => None,
        Some(Value::Object(n)) => {
            reject_unknown(n, &["passt"], "net.")?;
            Some(NetConfig { passt: absolute_path(required(n, "passt", "net.")?, "net.passt", 4096)? })
        }
        Some(_) => return Err(err("net", Problem::NotAnObject)),
    };
    let vsock_socket = optional_path(obj, "vsock_socket", UNIX_PATH_MAX)?;
    let state_dir = absolute_path(required(obj, "state_dir", "")?, "state_dir", 4096)?;
    let control_len = state_dir.join("control.sock").as_os_str().len();
    if control_len > CONTROL_SOCKET_PATH_MAX {
        return Err(err("state_dir", Problem::ControlSocketTooLong { len: control_len }));
    }

    let cg = required(obj, "cgroup", "")?.as_object().ok_or_else(|| err("cgroup", Problem::NotAnObject))?;
    reject_unknown(cg, &["path", "device", "inode"], "cgroup.")?;
    let cgroup = CgroupIdentity {
        path: absolute_path(required(cg, "path", "cgroup.")?, "cgroup.path", 4096)?,
        device: integer(required(cg, "device", "cgroup.")?, "cgroup.device", 0, u64::MAX)?,
        inode: integer(required(cg, "inode", "cgroup.")?, "cgroup.inode", 1, u64::MAX)?,
    };

    let serial_log_max_bytes = match obj.get("serial_log_max_bytes") {
        None | Some(Value::Null) => DEFAULT_SERIAL_LOG_MAX,
        Some(v) => integer(v, "serial_log_max_bytes", 0, 1 << 40)?,
    };

    Ok(StartConfig {
        kernel,
        initrd,
        cmdline,
        vcpus,
        memory_mib,
        disks,
        net,
        vsock_socket,
        state_dir,
        cgroup,
        serial_log_max_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> Value {
        json!({
            "kernel": "/k/vmlinux", "initrd": "/k/initrd", "cmdline": "console=ttyS0",
            "vcpus": 2, "memory_mib": 256,
            "disks": [{"path": "/img/root.ext4", "read_only": true}],
            "net": {"passt": "/usr/bin/passt"}, "vsock_socket": "/s/v.sock", "state_dir": "/s",
            "cgroup": {"path": "/sys/fs/cgroup/sb/1", "device": 30, "inode": 4242}
        })
    }

    fn field_of(v: Value) -> String {
        parse(&v).unwrap_err().field
    }

    #[test]
    fn parses_a_full_config() {
        let c = parse(&valid()).unwrap();
        assert_eq!(c.vcpus, 2);
        assert_eq!(c.memory_mib, 256);
        assert_eq!(c.disks, vec![Disk { path: "/img/root.ext4".into(), read_only: true }]);
        assert_eq!(c.cgroup.inode, 4242);
        assert_eq!(c.net, Some(NetConfig { passt: "/usr/bin/passt".into() }));
        assert_eq!(c.control_socket(), PathBuf::from("/s/control.sock"));
        assert_eq!(c.serial_log_max_bytes, DEFAULT_SERIAL_LOG_MAX);
    }

    #[test]
    fn errors_name_the_field() {
        let mut v = valid();
        v["vcpus"] = json!(0);
        assert_eq!(field_of(v), "vcpus");
        let mut v = valid();
        v["vcpus"] = json!("2");
        assert_eq!(field_of(v), "vcpus");
        let mut v = valid();
        v.as_object_mut().unwrap().remove("kernel");
        assert_eq!(field_of(v), "kernel");
        let mut v = valid();
        v["kernel"] = json!("relative/vmlinux");
        assert_eq!(field_of(v), "kernel");
        let mut v = valid();
        v["disks"][0]["path"] = json!(3);
        assert_eq!(field_of(v), "disks[0].path");
        let mut v = valid();
        v["disks"][0]["cache"] = json!("none");
        assert_eq!(field_of(v), "disks[0].cache");
        let mut v = valid();
        v["cgroup"]["inode"] = json!(-1);
        assert_eq!(field_of(v), "cgroup.inode");
        let mut v = valid();
        v["net"]["passt"] = json!("passt");
        assert_eq!(field_of(v), "net.passt");
        let mut v = valid();
        v["net"]["socket"] = json!("/s/passt.sock");
        assert_eq!(field_of(v), "net.socket");
        let mut v = valid();
        v["surprise"] = json!(1);
        assert_eq!(field_of(v), "surprise");
        let mut v = valid();
        v["cmdline"] = json!("x".repeat(CMDLINE_MAX));
        assert_eq!(field_of(v), "cmdline");
        assert_eq!(field_of(json!([1])), "(start frame)");
    }

    #[test]
    fn state_dir_must_leave_room_for_control_sock() {
        let mut v = valid();
        v["state_dir"] = json!(format!("/{}", "d".repeat(95)));
        let e = parse(&v).unwrap_err();
        assert_eq!((e.field.as_str(), &e.problem), ("state_dir", &Problem::ControlSocketTooLong { len: 96 + "/control.sock".len() }));
        assert!(e.to_string().contains("shorter than 104"), "{e}");
    }
}
