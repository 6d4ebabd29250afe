//! What a file is and who may use it: the FileInfo of `GET /files/info` (and of search and
//! directory listings), and owners, groups and modes as the API writes them, set by
//! `POST /files/permissions`, uploads and new directories.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{blocking, checked_path, io_error, open_with, query_paths};
use crate::http::{self, ApiError, ApiResult};

fn user_name(uid: u32) -> String {
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        return uid.to_string();
    }
    unsafe { std::ffi::CStr::from_ptr((*pw).pw_name) }.to_string_lossy().into_owned()
}

fn group_name(gid: u32) -> String {
    let gr = unsafe { libc::getgrgid(gid) };
    if gr.is_null() {
        return gid.to_string();
    }
    unsafe { std::ffi::CStr::from_ptr((*gr).gr_name) }.to_string_lossy().into_owned()
}

/// A numeric id as owner or group; `u32::MAX` is refused, as chown reads it as "leave unchanged".
fn numeric_id(name: &str, field: &str) -> Option<Result<u32, ApiError>> {
    let n: u32 = name.parse().ok()?;
    Some(if n == u32::MAX { Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("field '{field}': {n} is not an id"))) } else { Ok(n) })
}

fn resolve_uid(name: &str) -> Result<u32, ApiError> {
    if let Some(id) = numeric_id(name, "owner") {
        return id;
    }
    let c = CString::new(name).map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", "owner contains NUL"))?;
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'owner': unknown user '{name}'")));
    }
    Ok(unsafe { (*pw).pw_uid })
}

fn resolve_gid(name: &str) -> Result<u32, ApiError> {
    if let Some(id) = numeric_id(name, "group") {
        return id;
    }
    let c = CString::new(name).map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", "group contains NUL"))?;
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if gr.is_null() {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'group': unknown group '{name}'")));
    }
    Ok(unsafe { (*gr).gr_gid })
}

/// The API writes modes as the decimal digits of the octal value (`644` means `0o644`).
fn mode_from_api(mode: u32) -> Result<u32, ApiError> {
    u32::from_str_radix(&mode.to_string(), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'mode': {mode} is not an octal permission like 644")))
}

fn mode_to_api(mode: u32) -> u32 {
    format!("{:o}", mode & 0o7777).parse().unwrap_or(0)
}

#[derive(Deserialize, Default)]
pub struct Permission {
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    mode: Option<u32>,
}

impl Permission {
    /// Resolves names to ids and the mode to bits before any file is touched, so a bad field
    /// fails the request instead of leaving it half done (or an upload half streamed).
    pub(super) fn resolve(&self) -> Result<Ownership, ApiError> {
        Ok(Ownership {
            uid: self.owner.as_deref().map(resolve_uid).transpose()?,
            gid: self.group.as_deref().map(resolve_gid).transpose()?,
            mode: self.mode.map(mode_from_api).transpose()?,
        })
    }
}

/// Owner, group and mode bits to give a file; `None` leaves each as it is.
#[derive(Clone, Copy)]
pub(super) struct Ownership {
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) mode: Option<u32>,
}

impl Ownership {
    /// The owner, group and mode `meta` shows: what a rewritten copy takes over from its original.
    pub(super) fn of(meta: &fs::Metadata) -> Ownership {
        Ownership { uid: Some(meta.uid()), gid: Some(meta.gid()), mode: Some(meta.mode() & 0o7777) }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.uid.is_none() && self.gid.is_none() && self.mode.is_none()
    }
}

/// Gives the open `file` (named `path` in errors) its owner and mode through the descriptor,
/// which stays the file the request meant whatever a workload does to the path meanwhile. The
/// owner goes first: a chown clears set-user-ID and set-group-ID bits the mode may ask for.
pub(super) fn apply_to(file: &fs::File, path: &Path, own: &Ownership) -> Result<(), ApiError> {
    if own.uid.is_some() || own.gid.is_some() {
        std::os::unix::fs::fchown(file, own.uid, own.gid).map_err(|e| io_error(path, e))?;
    }
    if let Some(mode) = own.mode {
        file.set_permissions(fs::Permissions::from_mode(mode)).map_err(|e| io_error(path, e))?;
    }
    Ok(())
}

/// Gives `path` itself its owner and mode, never what a symlink there points to: a workload
/// may plant one where the client expects its file. The inode is held by an O_PATH descriptor,
/// which opens any kind of file without side effects; a symlink may change owner but has no
/// mode of its own, so a mode for one is refused.
fn apply_nofollow(path: &Path, own: &Ownership) -> Result<(), ApiError> {
    let fd = open_with(path, libc::O_PATH | libc::O_NOFOLLOW)?;
    let meta = fd.metadata().map_err(|e| io_error(path, e))?;
    if meta.file_type().is_symlink() && own.mode.is_some() {
        return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is a symbolic link; the mode of what it points to is not set through it", path.display())));
    }
    if own.uid.is_some() || own.gid.is_some() {
        // SAFETY: fchownat on a descriptor `fd` owns, with an empty C string; -1 (u32::MAX)
        // leaves an id unchanged.
        let rc = unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), own.uid.unwrap_or(u32::MAX), own.gid.unwrap_or(u32::MAX), libc::AT_EMPTY_PATH) };
        if rc != 0 {
            return Err(io_error(path, std::io::Error::last_os_error()));
        }
    }
    if let Some(mode) = own.mode {
        // An O_PATH descriptor takes no fchmod; its /proc/self/fd entry names the same inode.
        let inode = format!("/proc/self/fd/{}", fd.as_raw_fd());
        fs::set_permissions(inode, fs::Permissions::from_mode(mode)).map_err(|e| io_error(path, e))?;
    }
    Ok(())
}

pub(super) fn file_info(path: &Path) -> Result<Value, ApiError> {
    let meta = fs::symlink_metadata(path).map_err(|e| io_error(path, e))?;
    let ft = meta.file_type();
    let kind = if ft.is_file() {
        "file"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symlink"
    } else {
        "other"
    };
    let mtime = meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000;
    // Linux filesystems do not all record a birth time; fall back to the inode change time.
    let ctime = meta.created().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_millis() as i64).filter(|ms| *ms > 0).unwrap_or(meta.ctime() * 1000 + meta.ctime_nsec() / 1_000_000);
    Ok(json!({
        "path": path.to_string_lossy(),
        "type": kind,
        "size": meta.len(),
        "modified_at": http::rfc3339_ms(mtime),
        "created_at": http::rfc3339_ms(ctime),
        "owner": user_name(meta.uid()),
        "group": group_name(meta.gid()),
        "mode": mode_to_api(meta.mode()),
    }))
}

pub async fn info(req: Request<Incoming>) -> ApiResult {
    let paths = query_paths(&req)?;
    let map = blocking(move || {
        let mut map = serde_json::Map::new();
        for (raw, _) in paths {
            let info = file_info(Path::new(&raw))?;
            map.insert(raw, info);
        }
        Ok(map)
    })
    .await?;
    Ok(http::json(&Value::Object(map)))
}

pub async fn set_permissions(req: Request<Incoming>) -> ApiResult {
    let map: BTreeMap<String, Permission> = http::read_json(req).await?;
    let plan = map.iter().map(|(raw, perm)| Ok((checked_path(raw, "request key")?, perm.resolve()?))).collect::<Result<Vec<_>, ApiError>>()?;
    blocking(move || plan.iter().try_for_each(|(p, own)| apply_nofollow(p, own))).await?;
    Ok(http::ok_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_digits() {
        assert_eq!(mode_from_api(644).unwrap(), 0o644);
        assert_eq!(mode_from_api(4755).unwrap(), 0o4755);
        assert!(mode_from_api(689).is_err());
        assert_eq!(mode_to_api(0o100755), 755);
    }
}
