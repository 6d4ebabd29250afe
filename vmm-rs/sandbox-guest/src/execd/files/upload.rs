//! `POST /files/upload`: multipart parts stream from the body to disk, each file written beside
//! its target and renamed into place, so memory stays bounded whatever the file size and the
//! client's pace sets the upload's through HTTP back-pressure.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::PathBuf;

use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::Request;
use serde::Deserialize;

use super::form::{Form, Part};
use super::info::{Ownership, Permission};
use super::staged::Staged;
use super::{blocking, checked_path, io_error};
use crate::http::{self, ApiError, ApiResult};

/// Most `metadata` parts waiting for their `file` parts. Each holds a path shorter than
/// PATH_MAX and numeric ids, so this bounds what an upload keeps besides the file it streams.
const MAX_PENDING: usize = 1024;

#[derive(Deserialize)]
struct UploadMetadata {
    path: String,
    #[serde(flatten)]
    perm: Permission,
}

/// A checked `metadata` part: where its file goes and the owner and mode it gets.
struct Target {
    path: PathBuf,
    own: Ownership,
}

pub async fn upload(req: Request<Incoming>) -> ApiResult {
    let ctype = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let boundary = multer::parse_boundary(&ctype)
        .map_err(|_| ApiError::bad_request("INVALID_FILE", "the upload must be multipart/form-data with a boundary"))?;
    let mut form = Form::new(req.into_body(), boundary);
    let result = receive_parts(&mut form).await;
    // The client may still be sending: the rest of a refused upload, or what follows the closing
    // boundary (the end of a chunked body at least). Answering before the body ends would close
    // the connection under it, and a reset can lose the answer.
    form.drain().await;
    result
}

async fn receive_parts(form: &mut Form) -> ApiResult {
    let mut pending: VecDeque<Target> = VecDeque::new();
    let mut written = 0usize;
    while let Some(mut part) = form.next_part().await? {
        match part.name() {
            Some("metadata") => {
                if pending.len() == MAX_PENDING {
                    return Err(ApiError::bad_request("INVALID_FILE_METADATA", format!("more than {MAX_PENDING} 'metadata' parts wait for their 'file' parts")));
                }
                let mut raw = Vec::new();
                while let Some(chunk) = form.chunk(&mut part, "INVALID_FILE_METADATA", "metadata part").await? {
                    raw.extend_from_slice(&chunk);
                }
                pending.push_back(target(&raw)?);
            }
            Some("file") => {
                // Parts pair by position: the n-th file belongs to the n-th metadata part.
                let target = pending.pop_front().ok_or_else(|| {
                    ApiError::bad_request("INVALID_FILE_METADATA", "a 'file' part came without a preceding 'metadata' part")
                })?;
                write_part(form, &mut part, target).await?;
                written += 1;
            }
            other => {
                return Err(ApiError::bad_request("INVALID_FILE", format!("unexpected multipart part '{}'; expected 'metadata' and 'file'", other.unwrap_or(""))));
            }
        }
    }
    if !pending.is_empty() {
        return Err(ApiError::bad_request("INVALID_FILE", format!("{} 'metadata' part(s) without a 'file' part", pending.len())));
    }
    if written == 0 {
        return Err(ApiError::bad_request("INVALID_FILE", "the upload has no 'file' part"));
    }
    Ok(http::ok_empty())
}

/// Parses and checks a `metadata` part. Path, owner, group and mode are all checked here,
/// before the file part streams: a bad one should not cost the client its whole upload.
fn target(raw: &[u8]) -> Result<Target, ApiError> {
    let invalid = |e: ApiError| ApiError::bad_request("INVALID_FILE_METADATA", e.message);
    let meta: UploadMetadata = serde_json::from_slice(raw)
        .map_err(|e| ApiError::bad_request("INVALID_FILE_METADATA", format!("metadata part is not valid metadata JSON: {e}")))?;
    let path = checked_path(&meta.path, "metadata 'path'").map_err(invalid)?;
    // A path ending in `/`, `.` or `..` names a directory, not a file to write.
    if matches!(meta.path.rsplit('/').next(), Some("" | "." | "..")) {
        return Err(ApiError::bad_request("INVALID_FILE_METADATA", format!("metadata 'path': '{}' names a directory, not a file", meta.path)));
    }
    Ok(Target { path, own: meta.perm.resolve().map_err(invalid)? })
}

async fn write_part(form: &Form, part: &mut Part, target: Target) -> Result<(), ApiError> {
    let Target { path, own } = target;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(parent).await.map_err(|e| io_error(parent, e))?;
    }
    // One blocking thread owns the file for the whole part: tokio::fs would hand every write to
    // the blocking pool separately, which costs more than the write itself.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(16);
    let writer = tokio::task::spawn_blocking(move || -> Result<Staged, ApiError> {
        let staged = Staged::create(&path, "upload")?;
        let mut out = io::BufWriter::with_capacity(1 << 20, &staged.file);
        let shown = |e| io_error(&path, e);
        while let Some(chunk) = rx.blocking_recv() {
            out.write_all(&chunk).map_err(shown)?;
        }
        out.flush().map_err(shown)?;
        drop(out);
        Ok(staged)
    });
    let mut read_error = None;
    loop {
        match form.chunk(part, "INVALID_FILE_CONTENT", "file part").await {
            Ok(Some(chunk)) => {
                if tx.send(chunk).await.is_err() {
                    break; // the writer failed; its error is reported below
                }
            }
            Ok(None) => break,
            Err(e) => {
                read_error = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let staged = writer.await.map_err(|e| ApiError::runtime(format!("writer failed: {e}")))??;
    // A part cut short leaves nothing behind: the staged file is removed as it is dropped.
    blocking(move || match read_error {
        Some(e) => Err(e),
        None => staged.commit(&own),
    })
    .await
}
