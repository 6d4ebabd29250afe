//! Deleting files (`DELETE /files`) and moving them (`POST /files/mv`).

use std::fs;
use std::io;
use std::path::Path;

use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;

use super::info::Ownership;
use super::staged::Staged;
use super::{blocking, checked_path, io_error, open_regular, query_paths, refuse_root};
use crate::http::{self, ApiError, ApiResult};

pub async fn delete_files(req: Request<Incoming>) -> ApiResult {
    let paths = query_paths(&req)?;
    blocking(move || {
        for (_, p) in paths {
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
            let meta = fs::symlink_metadata(&src).map_err(|e| io_error(&src, e))?;
            refuse_root(&src, "move")?;
            refuse_root(&dest, "replace")?;
            if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
            }
            match fs::rename(&src, &dest) {
                Ok(()) => {}
                // Across filesystems (overlay upper vs a mounted volume) rename cannot work.
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) && meta.is_file() => {
                    copy_across(&src, &dest)?;
                    fs::remove_file(&src).map_err(|e| io_error(&src, e))?;
                }
                Err(e) => return Err(rename_error(&src, &dest, e)),
            }
        }
        Ok(())
    })
    .await?;
    Ok(http::ok_empty())
}

/// A failed rename names both ends: which one is at fault depends on the error (a missing
/// source; a directory, or a non-empty one, at the destination).
fn rename_error(src: &Path, dest: &Path, e: io::Error) -> ApiError {
    io_error(Path::new(&format!("{} -> {}", src.display(), dest.display())), e)
}

/// Copies the regular file `src` to `dest` on another filesystem, with its owner and mode, as
/// rename would have moved it: written beside `dest` and renamed over it, so a symlink a
/// workload put at `dest` is replaced rather than written through.
fn copy_across(src: &Path, dest: &Path) -> Result<(), ApiError> {
    let (mut from, meta) = open_regular(src, true)?;
    let staged = Staged::create(dest, "move")?;
    io::copy(&mut from, &mut &staged.file).map_err(|e| io_error(dest, e))?;
    staged.commit(&Ownership::of(&meta))
}
