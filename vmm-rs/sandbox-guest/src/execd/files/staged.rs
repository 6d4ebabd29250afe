//! Files written beside their targets and renamed into place: readers never see one half
//! written, a failure leaves the target as it was, and nothing a workload plants at either name
//! is written through. Uploads, text replacements and moves across filesystems write this way.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::info::{apply_to, Ownership};
use super::io_error;
use crate::http::ApiError;

/// A temporary file beside `target`, removed when dropped unless committed.
pub(super) struct Staged {
    pub(super) file: fs::File,
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staged {
    /// Creates `.NAME.<purpose>-<id>` beside `target`. O_EXCL and O_NOFOLLOW: whatever a
    /// workload put at that name is an error, never a file written through. Mode 0600: nobody
    /// reads the contents before the file has the owner and mode it is meant to have.
    pub(super) fn create(target: &Path, purpose: &str) -> Result<Staged, ApiError> {
        let name = target
            .file_name()
            .ok_or_else(|| ApiError::bad_request("INVALID_FILE", format!("{}: names no file", target.display())))?;
        let tmp = target.with_file_name(format!(".{}.{purpose}-{}", name.to_string_lossy(), crate::execd::random_id()));
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| io_error(&tmp, e))?;
        Ok(Staged { file, tmp, target: target.to_path_buf(), committed: false })
    }

    /// Gives the file `own` through its descriptor (a new file's mode when `own` names none)
    /// and renames it over the target.
    pub(super) fn commit(mut self, own: &Ownership) -> Result<(), ApiError> {
        let own = Ownership { mode: Some(own.mode.unwrap_or_else(new_file_mode)), ..*own };
        apply_to(&self.file, &self.target, &own)?;
        fs::rename(&self.tmp, &self.target).map_err(|e| io_error(&self.target, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The mode open(2) would give a new file: 0666 less the service's umask. No call reads the
/// umask without also setting it (a race with every thread creating files), so it is read
/// where the kernel shows it.
fn new_file_mode() -> u32 {
    static MODE: OnceLock<u32> = OnceLock::new();
    *MODE.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let umask = status.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|v| u32::from_str_radix(v.trim(), 8).ok());
        0o666 & !umask.unwrap_or(0o022)
    })
}
