//! Directories: listing them to a depth (`GET /directories/list`), making them with their
//! owners and modes (`POST /directories`) and deleting them with their contents
//! (`DELETE /directories`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;

use hyper::body::Incoming;
use hyper::Request;
use serde_json::Value;

use super::info::{apply_permission, file_info, mode_from_api, Permission};
use super::{blocking, checked_path, io_error, query_paths};
use crate::http::{self, ApiError, ApiResult};

pub async fn list_directory(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let root = checked_path(&http::require_query(&pairs, "path")?, "query 'path'")?;
    let depth = match http::query_one(&pairs, "depth") {
        Some(d) => d.parse::<usize>().ok().filter(|d| *d >= 1).ok_or_else(|| ApiError::bad_request("INVALID_REQUEST_BODY", format!("query 'depth': '{d}' is not a positive integer")))?,
        None => 1,
    };
    let entries = blocking(move || {
        let meta = fs::metadata(&root).map_err(|e| io_error(&root, e))?;
        if !meta.is_dir() {
            return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is not a directory", root.display())));
        }
        let mut out = Vec::new();
        let mut stack = vec![(root.clone(), 1usize)];
        while let Some((dir, level)) = stack.pop() {
            let mut entries: Vec<_> = fs::read_dir(&dir).map_err(|e| io_error(&dir, e))?.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let path = entry.path();
                out.push(file_info(&path)?);
                if level < depth && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((path, level + 1));
                }
            }
        }
        Ok(out)
    })
    .await?;
    Ok(http::json(&Value::Array(entries)))
}

pub async fn make_directories(req: Request<Incoming>) -> ApiResult {
    let map: BTreeMap<String, Permission> = http::read_json(req).await?;
    blocking(move || {
        for (raw, perm) in map {
            let p = checked_path(&raw, "request key")?;
            if let Some(mode) = perm.mode {
                mode_from_api(mode)?;
            }
            fs::create_dir_all(&p).map_err(|e| io_error(&p, e))?;
            apply_permission(&p, &perm)?;
        }
        Ok(())
    })
    .await?;
    Ok(http::ok_empty())
}

pub async fn delete_directories(req: Request<Incoming>) -> ApiResult {
    let paths = query_paths(&req)?;
    blocking(move || {
        for p in paths {
            let meta = fs::symlink_metadata(&p).map_err(|e| io_error(&p, e))?;
            if !meta.is_dir() {
                return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is not a directory; use DELETE /files", p.display())));
            }
            if p.as_os_str().as_bytes() == b"/" {
                return Err(ApiError::bad_request("INVALID_FILE", "refusing to delete /"));
            }
            fs::remove_dir_all(&p).map_err(|e| io_error(&p, e))?;
        }
        Ok(())
    })
    .await?;
    Ok(http::ok_empty())
}
