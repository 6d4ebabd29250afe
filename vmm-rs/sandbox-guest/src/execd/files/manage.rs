//! Deleting files (`DELETE /files`) and moving them (`POST /files/mv`).

use std::fs;

use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;

use super::{blocking, checked_path, io_error, query_paths};
use crate::http::{self, ApiError, ApiResult};

pub async fn delete_files(req: Request<Incoming>) -> ApiResult {
    let paths = query_paths(&req)?;
    blocking(move || {
        for p in paths {
            let meta = fs::symlink_metadata(&p).map_err(|e| io_error(&p, e))?;
            if meta.is_dir() {
                return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is a directory; use DELETE /directories", p.display())));
            }
            fs::remove_file(&p).map_err(|e| io_error(&p, e))?;
        }
        Ok(())
    })
    .await?;
    Ok(http::ok_empty())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveItem {
    src: String,
    dest: String,
}

pub async fn move_files(req: Request<Incoming>) -> ApiResult {
    let items: Vec<MoveItem> = http::read_json(req).await?;
    blocking(move || {
        for item in items {
            let src = checked_path(&item.src, "field 'src'")?;
            let dest = checked_path(&item.dest, "field 'dest'")?;
            fs::symlink_metadata(&src).map_err(|e| io_error(&src, e))?;
            if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
            }
            match fs::rename(&src, &dest) {
                Ok(()) => {}
                // Across filesystems (overlay upper vs a mounted volume) rename cannot work.
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) && src.is_file() => {
                    fs::copy(&src, &dest).map_err(|e| io_error(&dest, e))?;
                    fs::remove_file(&src).map_err(|e| io_error(&src, e))?;
                }
                Err(e) => return Err(io_error(&src, e)),
            }
        }
        Ok(())
    })
    .await?;
    Ok(http::ok_empty())
}
