//! File and directory routes, one module per job: `upload` and `download` move file contents,
//! `info` describes files and sets their owners and modes, `manage` deletes and moves them,
//! `search` finds files and replaces text in them, `dirs` lists, makes and deletes
//! directories; `form` reads upload bodies within bounds and `staged` writes files beside their
//! targets. This module holds what they share: API errors for I/O errors, path checks, and
//! running blocking filesystem work off the async threads.

mod dirs;
mod download;
mod form;
mod info;
mod manage;
mod search;
mod staged;
mod upload;

pub use dirs::{delete_directories, list_directory, make_directories};
pub use download::download;
pub use info::{info, set_permissions};
pub use manage::{delete_files, move_files};
pub use search::{replace, search};
pub use upload::upload;

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use crate::http::{self, ApiError};

/// The API error for an I/O error on `path`. What the request asked for decides the status: a
/// missing file is 404, one the service may not touch 403, a path that cannot name what the
/// route needs (a file where a directory must be, a name too long, a loop of symlinks) 400, a
/// full disk 507; only what the client could not have caused stays 500.
fn io_error(path: &Path, e: io::Error) -> ApiError {
    let shown = path.display();
    match e.raw_os_error() {
        Some(libc::ENOENT) => ApiError::not_found("FILE_NOT_FOUND", format!("{shown}: no such file or directory")),
        Some(libc::EACCES | libc::EPERM) => ApiError::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", format!("{shown}: permission denied")),
        Some(libc::EROFS) => ApiError::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", format!("{shown}: {e}")),
        Some(
            libc::ENOTDIR | libc::EISDIR | libc::EINVAL | libc::ELOOP | libc::ENAMETOOLONG | libc::EEXIST | libc::ENOTEMPTY
            | libc::EXDEV | libc::EBUSY,
        ) => ApiError::bad_request("INVALID_FILE", format!("{shown}: {e}")),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "INSUFFICIENT_STORAGE", format!("{shown}: {e}")),
        _ => ApiError::runtime(format!("{shown}: {e}")),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::runtime(format!("worker failed: {e}")))?
}

/// Opens `path` for reading with `flags`. With O_NOFOLLOW a symlink in the last component is
/// refused by name: the service runs as root, and a symlink a workload planted where the client
/// expects its own file would otherwise point it at any file on the system.
fn open_with(path: &Path, flags: i32) -> Result<fs::File, ApiError> {
    fs::OpenOptions::new().read(true).custom_flags(flags | libc::O_NOCTTY).open(path).map_err(|e| {
        if flags & libc::O_NOFOLLOW != 0 && fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            ApiError::bad_request("INVALID_FILE", format!("{}: is a symbolic link, which this request does not follow", path.display()))
        } else {
            io_error(path, e)
        }
    })
}

/// Opens `path` for reading only if it is a regular file, following a symlink in its last
/// component unless `nofollow`. The open itself does not block (O_NONBLOCK): a FIFO would
/// otherwise hold a worker until some writer appeared, and a device or socket is not a file to
/// read. Checked on the opened descriptor, so a path swapped after a check cannot slip through;
/// the descriptor is blocking again afterwards. Returns the file with the metadata it was checked by.
fn open_regular(path: &Path, nofollow: bool) -> Result<(fs::File, fs::Metadata), ApiError> {
    let file = open_with(path, libc::O_NONBLOCK | if nofollow { libc::O_NOFOLLOW } else { 0 })?;
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if meta.is_dir() {
        return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is a directory", path.display())));
    }
    if !meta.is_file() {
        return Err(ApiError::bad_request("INVALID_FILE", format!("{}: not a regular file", path.display())));
    }
    // SAFETY: fcntl on a descriptor `file` owns.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok((file, meta))
}

/// A path from the request: not empty, no NUL, shorter than PATH_MAX, and rejoined from its
/// components, so `//x/./y/` is `/x/y`. A trailing slash would make the kernel follow a
/// symlink in the last component, which the routes that act on a path itself must not do.
fn checked_path(raw: &str, what: &str) -> Result<PathBuf, ApiError> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("{what}: invalid path '{raw}'")));
    }
    if raw.len() >= libc::PATH_MAX as usize {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("{what}: the path is {} bytes long, more than a path may be", raw.len())));
    }
    Ok(Path::new(raw).components().collect())
}

/// Refuses to `verb` the root directory, however the path spells it: `//`, `/tmp/..`,
/// `/proc/self/root/` and a bind mount of `/` all name it, and a comparison of the string with
/// "/" once let such a request empty the whole filesystem. Checked by canonical path and by the
/// device and inode of what the path names, which catches the names no canonical path shows.
fn refuse_root(path: &Path, verb: &str) -> Result<(), ApiError> {
    let root = fs::metadata("/").map_err(|e| io_error(Path::new("/"), e))?;
    // By device and inode: every spelling of the root (`//`, `/tmp/..`, a bind mount) is the same directory.
    let is_root = fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (root.dev(), root.ino()));
    if is_root {
        return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is the root directory; refusing to {verb} it", path.display())));
    }
    Ok(())
}

/// The `path` query parameters, each as the request wrote it (answers are keyed by that) and as
/// [`checked_path`] makes it.
fn query_paths(req: &Request<Incoming>) -> Result<Vec<(String, PathBuf)>, ApiError> {
    let pairs = http::query_pairs(req);
    let paths = http::query_all(&pairs, "path");
    if paths.is_empty() {
        return Err(ApiError::bad_request("MISSING_QUERY", "missing query parameter 'path'"));
    }
    paths.into_iter().map(|raw| checked_path(&raw, "query 'path'").map(|p| (raw, p))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only checks: nothing here deletes anything.
    #[test]
    fn the_root_directory_is_recognised_under_every_name() {
        for root in ["/", "//", "/.", "/tmp/..", "/usr/../", "/proc/self/root", "/proc/self/root/", "/proc/self/cwd/../../../../.."] {
            let err = refuse_root(&checked_path(root, "test").unwrap(), "delete").unwrap_err();
            assert_eq!((err.status, err.code), (StatusCode::BAD_REQUEST, "INVALID_FILE"), "{root}");
            assert!(err.message.contains("is the root directory"), "{root}: {}", err.message);
        }
        let dir = crate::scratch::Scratch::new("refuse-root");
        std::os::unix::fs::symlink("/", dir.join("to-root")).unwrap();
        assert!(refuse_root(&dir.join("to-root"), "delete").is_err());
        assert!(refuse_root(&dir, "delete").is_ok());
        assert!(refuse_root(&dir.join("missing"), "delete").is_ok());
    }

    #[test]
    fn request_paths_are_rejoined_from_their_components() {
        assert_eq!(checked_path("//a//b/./c/", "t").unwrap(), Path::new("/a/b/c"));
        assert_eq!(checked_path("a/../b", "t").unwrap(), Path::new("a/../b"));
        assert!(checked_path("", "t").is_err());
        assert!(checked_path("a\0b", "t").is_err());
        assert!(checked_path(&"a".repeat(4096), "t").is_err());
    }
}
