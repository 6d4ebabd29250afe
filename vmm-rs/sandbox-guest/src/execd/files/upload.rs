//! `POST /files/upload`: multipart parts stream from the body to disk, each file written beside
//! its target and renamed into place, so memory stays bounded whatever the file size and the
//! client's pace sets the upload's through HTTP back-pressure.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::Request;
use serde::Deserialize;

use super::info::{apply_permission, mode_from_api, Permission};
use super::{blocking, checked_path, io_error};
use crate::http::{self, ApiError, ApiResult};

/// Largest `metadata` part accepted.
const MAX_METADATA: usize = 64 * 1024;

#[derive(Deserialize)]
struct UploadMetadata {
    path: String,
    #[serde(flatten)]
    perm: Permission,
}

pub async fn upload(req: Request<Incoming>) -> ApiResult {
    let ctype = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let boundary = multer::parse_boundary(&ctype)
        .map_err(|_| ApiError::bad_request("INVALID_FILE", "the upload must be multipart/form-data with a boundary"))?;
    let stream = req.into_body().into_data_stream();
    let mut form = multer::Multipart::new(stream, boundary);
    let result = receive_parts(&mut form).await;
    if result.is_err() {
        // Read what the client is still sending before answering: closing on a client in the
        // middle of its upload resets the connection and the client never sees the error.
        let mut budget: usize = 64 << 20;
        while let Ok(Some(mut field)) = form.next_field().await {
            while let Ok(Some(chunk)) = field.chunk().await {
                budget = budget.saturating_sub(chunk.len());
                if budget == 0 {
                    return result;
                }
            }
        }
    }
    result
}

async fn receive_parts(form: &mut multer::Multipart<'_>) -> ApiResult {
    let mut pending: std::collections::VecDeque<UploadMetadata> = Default::default();
    let mut written = 0usize;
    while let Some(mut field) = form
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request("INVALID_FILE", format!("malformed multipart body: {e}")))?
    {
        match field.name() {
            Some("metadata") => {
                let mut raw = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(|e| ApiError::bad_request("INVALID_FILE_METADATA", format!("cannot read metadata part: {e}")))? {
                    raw.extend_from_slice(&chunk);
                    if raw.len() > MAX_METADATA {
                        return Err(ApiError::bad_request("INVALID_FILE_METADATA", "metadata part is larger than 64 KiB"));
                    }
                }
                let meta: UploadMetadata = serde_json::from_slice(&raw)
                    .map_err(|e| ApiError::bad_request("INVALID_FILE_METADATA", format!("metadata part is not valid metadata JSON: {e}")))?;
                checked_path(&meta.path, "metadata 'path'").map_err(|e| ApiError::bad_request("INVALID_FILE_METADATA", e.message))?;
                if let Some(mode) = meta.perm.mode {
                    mode_from_api(mode).map_err(|e| ApiError::bad_request("INVALID_FILE_METADATA", e.message))?;
                }
                pending.push_back(meta);
            }
            Some("file") => {
                // Parts pair by position: the n-th file belongs to the n-th metadata part.
                let meta = pending.pop_front().ok_or_else(|| {
                    ApiError::bad_request("INVALID_FILE_METADATA", "a 'file' part came without a preceding 'metadata' part")
                })?;
                write_part(&mut field, &meta).await?;
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

async fn write_part(field: &mut multer::Field<'_>, meta: &UploadMetadata) -> Result<(), ApiError> {
    let target = PathBuf::from(&meta.path);
    let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    tokio::fs::create_dir_all(&parent).await.map_err(|e| io_error(&parent, e))?;
    let name = target.file_name().ok_or_else(|| ApiError::bad_request("INVALID_FILE_METADATA", format!("metadata 'path': '{}' names no file", meta.path)))?;
    // Write beside the target and rename, so readers never see a half-written file.
    let tmp = parent.join(format!(".{}.upload-{}", name.to_string_lossy(), crate::execd::random_id()));
    let result = async {
        // One blocking thread owns the file for the whole part: tokio::fs would hand every
        // write to the blocking pool separately, which costs more than the write itself.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(16);
        let path = tmp.clone();
        let writer = tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
            let file = fs::File::create(&path).map_err(|e| io_error(&path, e))?;
            let mut out = io::BufWriter::with_capacity(1 << 20, file);
            while let Some(chunk) = rx.blocking_recv() {
                io::Write::write_all(&mut out, &chunk).map_err(|e| io_error(&path, e))?;
            }
            io::Write::flush(&mut out).map_err(|e| io_error(&path, e))
        });
        let mut read_error = None;
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => {
                    if tx.send(chunk).await.is_err() {
                        break; // the writer failed; its error is reported below
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    read_error = Some(ApiError::bad_request("INVALID_FILE_CONTENT", format!("cannot read file part: {e}")));
                    break;
                }
            }
        }
        drop(tx);
        writer.await.map_err(|e| ApiError::runtime(format!("writer failed: {e}")))??;
        if let Some(e) = read_error {
            return Err(e);
        }
        let perm = meta.perm.clone();
        let tmp2 = tmp.clone();
        blocking(move || apply_permission(&tmp2, &perm)).await?;
        tokio::fs::rename(&tmp, &target).await.map_err(|e| io_error(&target, e))
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}
