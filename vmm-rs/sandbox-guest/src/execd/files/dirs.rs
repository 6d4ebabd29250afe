//! Directories: listing them to a depth (`GET /directories/list`), making them with their
//! owners and modes (`POST /directories`) and deleting them with their contents
//! (`DELETE /directories`).

use std::collections::BTreeMap;
use std::fs;

use hyper::body::Incoming;
use hyper::Request;
use serde_json::Value;

use super::info::{apply_to, file_info, Permission};
use super::{blocking, checked_path, io_error, open_with, query_paths, refuse_root};
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
    let plan = map.iter().map(|(raw, perm)| Ok((checked_path(raw, "request key")?, perm.resolve()?))).collect::<Result<Vec<_>, ApiError>>()?;
    blocking(move || {
        for (p, own) in plan {
            fs::create_dir_all(&p).map_err(|e| io_error(&p, e))?;
            if !own.is_empty() {
                // Owner and mode go to the directory opened here, not followed through a symlink
                // a workload may have put where the directory was to be made.
                let dir = open_with(&p, libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
                apply_to(&dir, &p, &own)?;
            }
        }
        Ok(())
    })
    .await?;
    Ok(http::ok_empty())
}

pub async fn delete_directories(req: Request<Incoming>) -> ApiResult {
    let paths = query_paths(&req)?;
    blocking(move || {
        // Every path is checked before any is deleted: one refused fails the whole request.
        for (_, p) in &paths {
            let meta = fs::symlink_metadata(p).map_err(|e| io_error(p, e))?;
            refuse_root(p, "delete")?;
            if !meta.is_dir() {
                return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is not a directory; use DELETE /files", p.display())));
            }
        }
        paths.iter().try_for_each(|(_, p)| fs::remove_dir_all(p).map_err(|e| io_error(p, e)))
    })
    .await?;
    Ok(http::ok_empty())
}
