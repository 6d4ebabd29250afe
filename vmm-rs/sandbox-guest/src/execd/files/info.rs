//! What a file is and who may use it: the FileInfo of `GET /files/info` (and of search and
//! directory listings), and owners, groups and modes as the API writes them, set by
//! `POST /files/permissions`, uploads and new directories.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{blocking, checked_path, io_error, query_paths};
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

fn resolve_uid(name: &str) -> Result<u32, ApiError> {
    if let Ok(n) = name.parse() {
        return Ok(n);
    }
    let c = CString::new(name).map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", "owner contains NUL"))?;
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'owner': unknown user '{name}'")));
    }
    Ok(unsafe { (*pw).pw_uid })
}

fn resolve_gid(name: &str) -> Result<u32, ApiError> {
    if let Ok(n) = name.parse() {
        return Ok(n);
    }
    let c = CString::new(name).map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", "group contains NUL"))?;
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if gr.is_null() {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'group': unknown group '{name}'")));
    }
    Ok(unsafe { (*gr).gr_gid })
}

/// The API writes modes as the decimal digits of the octal value (`644` means `0o644`).
pub(super) fn mode_from_api(mode: u32) -> Result<u32, ApiError> {
    u32::from_str_radix(&mode.to_string(), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'mode': {mode} is not an octal permission like 644")))
}

fn mode_to_api(mode: u32) -> u32 {
    format!("{:o}", mode & 0o7777).parse().unwrap_or(0)
}

#[derive(Deserialize, Default, Clone)]
pub struct Permission {
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    pub(super) mode: Option<u32>,
}

pub(super) fn apply_permission(path: &Path, perm: &Permission) -> Result<(), ApiError> {
    if let Some(mode) = perm.mode {
        let bits = mode_from_api(mode)?;
        fs::set_permissions(path, fs::Permissions::from_mode(bits)).map_err(|e| io_error(path, e))?;
    }
    if perm.owner.is_some() || perm.group.is_some() {
        let uid = perm.owner.as_deref().map(resolve_uid).transpose()?;
        let gid = perm.group.as_deref().map(resolve_gid).transpose()?;
        std::os::unix::fs::chown(path, uid, gid).map_err(|e| io_error(path, e))?;
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
        for p in paths {
            map.insert(p.to_string_lossy().into_owned(), file_info(&p)?);
        }
        Ok(map)
    })
    .await?;
    Ok(http::json(&Value::Object(map)))
}

pub async fn set_permissions(req: Request<Incoming>) -> ApiResult {
    let map: BTreeMap<String, Permission> = http::read_json(req).await?;
    blocking(move || {
        for (raw, perm) in map {
            let p = checked_path(&raw, "request key")?;
            fs::symlink_metadata(&p).map_err(|e| io_error(&p, e))?;
            apply_permission(&p, &perm)?;
        }
        Ok(())
    })
    .await?;
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
