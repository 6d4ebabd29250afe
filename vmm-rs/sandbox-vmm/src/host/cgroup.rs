//! Joining the sandbox's cgroup v2 directory and proving we are inside it.
//!
//! The daemon kills and accounts sandboxes through their cgroup (an identity-bound
//! `cgroup.kill`, never a stored pid), so a VMM that ran outside its cgroup would escape
//! cleanup. The directory is therefore pinned by an `O_PATH` descriptor whose device and inode
//! must match what the daemon recorded, the join goes through that descriptor (so a rename or
//! a remove-and-recreate between check and join cannot redirect it), and afterwards
//! `/proc/self/cgroup` must resolve to the same directory.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::CgroupIdentity;
use crate::error_code::ErrorCode;

/// `statfs.f_type` of cgroup v2 (`CGROUP2_SUPER_MAGIC` in linux/magic.h).
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Why the VMM cannot run in the sandbox's cgroup. Each names `cgroup.path`, the start field
/// at fault.
#[derive(Debug)]
pub enum CgroupError {
    /// The directory cannot be opened or examined.
    Pin { path: PathBuf, source: io::Error },
    /// The directory is another one than the daemon recorded (removed and recreated, say).
    WrongIdentity { path: PathBuf, found: (u64, u64), expected: (u64, u64) },
    /// The directory is not on a cgroup v2 filesystem.
    NotCgroup2 { path: PathBuf, magic: i64 },
    Statfs { path: PathBuf, source: io::Error },
    /// `cgroup.procs` cannot be opened for writing.
    OpenProcs { path: PathBuf, source: io::Error },
    /// Writing our pid to `cgroup.procs` failed.
    Join { path: PathBuf, source: io::Error },
    /// After the join, /proc/self/cgroup cannot be read or has no v2 line, or the mounts cannot be
    /// listed: membership cannot be verified.
    ProcSelfCgroup(io::Error),
    NoV2Line,
    Mountinfo(io::Error),
    /// After the join, this process is in another cgroup (`now`).
    Outside { now: String, identity: CgroupIdentity },
}

impl CgroupError {
    /// `cgroup_identity` when the directory is not the one the daemon named, `cgroup_join`
    /// when joining it failed or could not be verified.
    pub fn code(&self) -> ErrorCode {
        match self {
            CgroupError::Pin { .. } | CgroupError::WrongIdentity { .. } | CgroupError::NotCgroup2 { .. } | CgroupError::Statfs { .. } => {
                ErrorCode::CgroupIdentity
            }
            CgroupError::OpenProcs { .. }
            | CgroupError::Join { .. }
            | CgroupError::ProcSelfCgroup(_)
            | CgroupError::NoV2Line
            | CgroupError::Mountinfo(_)
            | CgroupError::Outside { .. } => ErrorCode::CgroupJoin,
        }
    }
}

impl std::fmt::Display for CgroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupError::Pin { path, source } => write!(f, "cgroup.path {}: {source}", path.display()),
            CgroupError::WrongIdentity { path, found, expected } => write!(
                f,
                "cgroup.path {} is device {} inode {}, expected device {} inode {}: not the sandbox's cgroup",
                path.display(),
                found.0,
                found.1,
                expected.0,
                expected.1
            ),
            CgroupError::NotCgroup2 { path, magic } => write!(f, "cgroup.path {} is not on cgroup2 (filesystem magic {magic:#x})", path.display()),
            CgroupError::Statfs { path, source } => write!(f, "cgroup.path {}: statfs: {source}", path.display()),
            CgroupError::OpenProcs { path, source } => write!(f, "cgroup.path {}/cgroup.procs: {source}", path.display()),
            CgroupError::Join { path, source } => write!(f, "joining cgroup.path {}: {source}", path.display()),
            CgroupError::ProcSelfCgroup(e) => write!(f, "/proc/self/cgroup: {e}"),
            CgroupError::NoV2Line => write!(f, "/proc/self/cgroup has no cgroup v2 line"),
            CgroupError::Mountinfo(e) => write!(f, "/proc/self/mountinfo: {e}"),
            CgroupError::Outside { now, identity } => write!(
                f,
                "after joining, this process is in cgroup {now}, which is not cgroup.path {} (device {} inode {}); refusing to run outside it",
                identity.path.display(),
                identity.device,
                identity.inode
            ),
        }
    }
}

impl std::error::Error for CgroupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CgroupError::Pin { source, .. }
            | CgroupError::Statfs { source, .. }
            | CgroupError::OpenProcs { source, .. }
            | CgroupError::Join { source, .. }
            | CgroupError::ProcSelfCgroup(source)
            | CgroupError::Mountinfo(source) => Some(source),
            CgroupError::WrongIdentity { .. } | CgroupError::NotCgroup2 { .. } | CgroupError::NoV2Line | CgroupError::Outside { .. } => None,
        }
    }
}

/// A cgroup v2 mount: where it is mounted and which cgroup path its root shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    pub mount_point: PathBuf,
    pub root: String,
}

/// Undoes the octal escapes (`\040` for a space) of /proc/self/mountinfo.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            out.push((bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup v2 mounts listed in a mountinfo text.
pub fn parse_cgroup2_mounts(mountinfo: &str) -> Vec<Cgroup2Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            if after.split(' ').next()? != "cgroup2" {
                return None;
            }
            let fields: Vec<&str> = before.split(' ').collect();
            Some(Cgroup2Mount { root: unescape(fields.get(3)?), mount_point: PathBuf::from(unescape(fields.get(4)?)) })
        })
        .collect()
}

pub fn cgroup2_mounts() -> io::Result<Vec<Cgroup2Mount>> {
    Ok(parse_cgroup2_mounts(&fs::read_to_string("/proc/self/mountinfo")?))
}

/// The v2 path (the `0::` line) of a `/proc/<pid>/cgroup` text.
pub fn parse_v2_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
}

/// Where a cgroup path appears under each cgroup v2 mount.
fn candidate_dirs(mounts: &[Cgroup2Mount], cgroup_path: &str) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter_map(|m| {
            let rel = if m.root == "/" { cgroup_path } else { cgroup_path.strip_prefix(m.root.as_str())? };
            Some(m.mount_point.join(rel.trim_start_matches('/')))
        })
        .collect()
}

fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain open(2) on a NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid output buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open and st is a valid buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub fn fs_magic(fd: &OwnedFd) -> io::Result<i64> {
    // SAFETY: an all-zero statfs is a valid output buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open and st is a valid buffer.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

/// Moves this whole process into the cgroup and verifies it landed there. Must run before any
/// thread or VM resource exists, so that everything the VMM creates is charged to the cgroup.
pub fn join(identity: &CgroupIdentity) -> Result<(), CgroupError> {
    let path = || identity.path.clone();
    let dir = open_dir_path(&identity.path).map_err(|source| CgroupError::Pin { path: path(), source })?;
    let st = fstat(&dir).map_err(|source| CgroupError::Pin { path: path(), source })?;
    if (st.st_dev, st.st_ino) != (identity.device, identity.inode) {
        return Err(CgroupError::WrongIdentity { path: path(), found: (st.st_dev, st.st_ino), expected: (identity.device, identity.inode) });
    }
    match fs_magic(&dir) {
        Ok(CGROUP2_SUPER_MAGIC) => {}
        Ok(magic) => return Err(CgroupError::NotCgroup2 { path: path(), magic }),
        Err(source) => return Err(CgroupError::Statfs { path: path(), source }),
    }

    // SAFETY: openat relative to our O_PATH directory descriptor; the result is checked.
    let procs = unsafe { libc::openat(dir.as_raw_fd(), c"cgroup.procs".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if procs < 0 {
        return Err(CgroupError::OpenProcs { path: path(), source: io::Error::last_os_error() });
    }
    // SAFETY: procs is a fresh descriptor we own.
    let mut procs = fs::File::from(unsafe { OwnedFd::from_raw_fd(procs) });
    procs
        .write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(|source| CgroupError::Join { path: path(), source })?;

    verify_member(identity)
}

/// Checks that /proc/self/cgroup names a directory with the expected identity.
fn verify_member(identity: &CgroupIdentity) -> Result<(), CgroupError> {
    let text = fs::read_to_string("/proc/self/cgroup").map_err(CgroupError::ProcSelfCgroup)?;
    let path = parse_v2_path(&text).ok_or(CgroupError::NoV2Line)?;
    let mounts = cgroup2_mounts().map_err(CgroupError::Mountinfo)?;
    let inside = candidate_dirs(&mounts, &path).iter().any(|dir| {
        fs::metadata(dir).map(|m| (m.dev(), m.ino()) == (identity.device, identity.inode)).unwrap_or(false)
    });
    if inside {
        Ok(())
    } else {
        Err(CgroupError::Outside { now: path, identity: identity.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 1 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
30 24 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
31 24 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
40 1 0:35 /sandboxes /mnt/my\\040cg rw - cgroup2 none rw\n";

    #[test]
    fn finds_cgroup2_mounts_and_their_roots() {
        let mounts = parse_cgroup2_mounts(MOUNTINFO);
        assert_eq!(
            mounts,
            vec![
                Cgroup2Mount { mount_point: "/sys/fs/cgroup/unified".into(), root: "/".into() },
                Cgroup2Mount { mount_point: "/mnt/my cg".into(), root: "/sandboxes".into() },
            ]
        );
        assert_eq!(
            candidate_dirs(&mounts, "/sandboxes/a"),
            vec![PathBuf::from("/sys/fs/cgroup/unified/sandboxes/a"), PathBuf::from("/mnt/my cg/a")]
        );
        assert_eq!(candidate_dirs(&mounts[1..], "/elsewhere"), Vec::<PathBuf>::new());
    }

    #[test]
    fn reads_the_v2_line() {
        assert_eq!(parse_v2_path("4:memory:/x\n0::/sb/1\n").as_deref(), Some("/sb/1"));
        assert_eq!(parse_v2_path("4:memory:/x\n"), None);
    }

    #[test]
    fn refuses_a_directory_with_another_identity() {
        let dir = std::env::temp_dir();
        let meta = fs::metadata(&dir).unwrap();
        let wrong = CgroupIdentity { path: dir.clone(), device: meta.dev(), inode: meta.ino() + 1 };
        let e = join(&wrong).unwrap_err();
        assert!(matches!(e, CgroupError::WrongIdentity { .. }), "{e}");
        assert_eq!(e.code(), ErrorCode::CgroupIdentity);
        assert!(e.to_string().contains("expected device"), "{e}");
        // Right identity, but a plain directory: still refused, before any write.
        let right = CgroupIdentity { path: dir, device: meta.dev(), inode: meta.ino() };
        let e = join(&right).unwrap_err();
        assert!(matches!(e, CgroupError::NotCgroup2 { .. }), "{e}");
        assert_eq!(e.code(), ErrorCode::CgroupIdentity);
        assert!(e.to_string().contains("not on cgroup2"), "{e}");
    }
}
