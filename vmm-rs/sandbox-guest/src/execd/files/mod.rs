//! File and directory routes, one module per job: `upload` and `download` move file contents,
//! `info` describes files and sets their owners and modes, `manage` deletes and moves them,
//! `search` finds files and replaces text in them, `dirs` lists, makes and deletes
//! directories. This module holds what they share: API errors for I/O errors, path checks, and
//! running blocking filesystem work off the async threads.

mod dirs;
mod download;
mod info;
mod manage;
mod search;
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
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use crate::http::{self, ApiError};

fn io_error(path: &Path, e: io::Error) -> ApiError {
    let shown = path.display();
    match e.kind() {
        io::ErrorKind::NotFound => ApiError::not_found("FILE_NOT_FOUND", format!("{shown}: no such file or directory")),
        io::ErrorKind::PermissionDenied => ApiError::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", format!("{shown}: permission denied")),
        _ => ApiError::runtime(format!("{shown}: {e}")),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::runtime(format!("worker failed: {e}")))?
}

/// Opens `path` for reading (and writing) only if it is a regular file. The open itself does
/// not block (O_NONBLOCK): a FIFO would otherwise hold a worker until some writer appeared, and
/// a device or socket is not a file to read. Checked on the opened descriptor, so a path
/// swapped after a check cannot slip through; the descriptor is blocking again afterwards.
fn open_regular(path: &Path, write: bool) -> Result<fs::File, ApiError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| io_error(path, e))?;
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
    Ok(file)
}

fn checked_path(raw: &str, what: &str) -> Result<PathBuf, ApiError> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("{what}: invalid path '{raw}'")));
    }
    Ok(PathBuf::from(raw))
}

fn query_paths(req: &Request<Incoming>) -> Result<Vec<PathBuf>, ApiError> {
    let pairs = http::query_pairs(req);
    let paths = http::query_all(&pairs, "path");
    if paths.is_empty() {
        return Err(ApiError::bad_request("MISSING_QUERY", "missing query parameter 'path'"));
    }
    paths.iter().map(|p| checked_path(p, "query 'path'")).collect()
}
