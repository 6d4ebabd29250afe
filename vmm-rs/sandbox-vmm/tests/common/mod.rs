//! Shared test support: guests assembled at test time, skip reporting, scratch
//! cgroups and private state directories.
#![allow(dead_code)] // each test binary uses a different subset

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Reports a skipped test in a form the project's test runner counts (`SKIP: <test>: <reason>`).
/// Written straight to the stderr descriptor: libtest captures only the print macros, and a
/// skip must be visible even when the test "passes".
pub fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {reason}");
}

/// Why KVM cannot run the tiny guests here, if it cannot. `SANDBOX_VMM_TEST_KVM` names
/// another device node, so the skip path itself can be exercised on a host that has KVM.
pub fn kvm_unusable() -> Option<String> {
    let device = std::env::var_os("SANDBOX_VMM_TEST_KVM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/dev/kvm"));
    sandbox_vmm::host::preflight::kvm_usable(&device).err().map(|e| e.to_string())
}

/// Returns early from a test (reporting it as skipped) when KVM is unusable.
#[macro_export]
macro_rules! require_kvm {
    ($test:expr) => {
        if let Some(reason) = common::kvm_unusable() {
            common::skip($test, &reason);
            return;
        }
    };
}

/// A guest ELF in the test target's scratch directory, deleted when dropped.
pub struct Guest(PathBuf);

impl std::ops::Deref for Guest {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Assembles one of `sandbox_vmm::guests`.
pub fn build_guest(name: &str, asm: &str) -> Guest {
    Guest(sandbox_vmm::guests::build(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("guests"), name, asm).unwrap())
}

/// Compiles one of the C guests of `sandbox_vmm::guests`.
pub fn build_c_guest(name: &str, source: &str) -> Guest {
    Guest(sandbox_vmm::guests::build_c(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("guests"), name, source).unwrap())
}

/// A private (0700) state directory with a short path (control.sock paths must stay < 104 bytes).
pub struct StateDir(pub PathBuf);

impl StateDir {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(unique("svmm"));
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        StateDir(path)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A cgroup v2 directory of our own, removed when dropped (once the processes in it are gone).
pub struct ScratchCgroup {
    pub path: PathBuf,
    pub device: u64,
    pub inode: u64,
}

impl ScratchCgroup {
    /// A new cgroup under the first cgroup2 mount, or why one cannot be made here.
    pub fn new() -> Result<Self, String> {
        let mounts = sandbox_vmm::host::cgroup::cgroup2_mounts().map_err(|e| format!("mountinfo: {e}"))?;
        let mount = mounts.first().ok_or("no cgroup v2 hierarchy is mounted")?;
        let path = mount.mount_point.join(unique("sandbox-vmm-test"));
        fs::create_dir(&path).map_err(|e| format!("cannot create a scratch cgroup {}: {e}", path.display()))?;
        let meta = fs::metadata(&path).unwrap();
        Ok(ScratchCgroup { path, device: meta.dev(), inode: meta.ino() })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "path": self.path, "device": self.device, "inode": self.inode })
    }
}

/// A scratch cgroup, or None after reporting `test` as skipped (no cgroup v2 to make one in).
pub fn scratch_cgroup(test: &str) -> Option<ScratchCgroup> {
    match ScratchCgroup::new() {
        Ok(cg) => Some(cg),
        Err(reason) => {
            skip(test, &reason);
            None
        }
    }
}

/// For a test that runs a VM in a cgroup of its own: the scratch cgroup, or None after reporting
/// `test` as skipped (KVM unusable, or no cgroup v2).
pub fn kvm_and_scratch_cgroup(test: &str) -> Option<ScratchCgroup> {
    if let Some(reason) = kvm_unusable() {
        skip(test, &reason);
        return None;
    }
    scratch_cgroup(test)
}

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        // The VMM process may take a moment to be reaped out of the group.
        for _ in 0..50 {
            if fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("warning: could not remove scratch cgroup {}", self.path.display());
    }
}

