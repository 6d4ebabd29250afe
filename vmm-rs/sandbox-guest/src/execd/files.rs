//! File and directory routes. Uploads stream from the multipart body to disk and downloads
//! stream from disk to the socket in fixed-size chunks, so memory stays bounded whatever the
//! file size; both follow the client's pace through HTTP back-pressure.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::http::{self, ApiError, ApiResult};

/// Largest `metadata` part accepted.
const MAX_METADATA: usize = 64 * 1024;
/// Chunk size of downloads: large enough for throughput, small enough to bound memory.
const DOWNLOAD_CHUNK: usize = 256 * 1024;

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

// ---------------------------------------------------------------- owners, modes, FileInfo

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
fn mode_from_api(mode: u32) -> Result<u32, ApiError> {
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
    mode: Option<u32>,
}

fn apply_permission(path: &Path, perm: &Permission) -> Result<(), ApiError> {
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

fn file_info(path: &Path) -> Result<Value, ApiError> {
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

// ---------------------------------------------------------------- upload

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
    let tmp = parent.join(format!(".{}.upload-{}", name.to_string_lossy(), super::command::random_id()));
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

// ---------------------------------------------------------------- download

/// Parses a single `bytes=` range against a file of `len` bytes: `Ok(None)` when the header
/// should be ignored, `Err(())` when it is unsatisfiable.
fn parse_range(header: &str, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = header.trim().strip_prefix("bytes=") else { return Ok(None) };
    // Several ranges would need a multipart/byteranges reply; serving the whole file is allowed.
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        let n: u64 = b.parse().map_err(|_| ())?;
        if n == 0 || len == 0 {
            return Err(());
        }
        (len.saturating_sub(n), len - 1)
    } else {
        let start: u64 = a.parse().map_err(|_| ())?;
        let end = if b.is_empty() { len.saturating_sub(1) } else { b.parse::<u64>().map_err(|_| ())?.min(len.saturating_sub(1)) };
        if start >= len || end < start {
            return Err(());
        }
        (start, end)
    };
    Ok(Some(range))
}

fn content_disposition(path: &Path) -> HeaderValue {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "download".into());
    let ascii: String = name.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' { c } else { '_' }).collect();
    let encoded: String = name
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    HeaderValue::from_str(&format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")).unwrap_or(HeaderValue::from_static("attachment"))
}

pub async fn download(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let path = checked_path(&http::require_query(&pairs, "path")?, "query 'path'")?;
    let range_header = req.headers().get(hyper::header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let offset = http::query_one(&pairs, "offset");
    let limit = http::query_one(&pairs, "limit");
    let mut file = tokio::fs::File::open(&path).await.map_err(|e| io_error(&path, e))?;
    let meta = file.metadata().await.map_err(|e| io_error(&path, e))?;
    if meta.is_dir() {
        return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is a directory", path.display())));
    }
    if offset.is_some() || limit.is_some() {
        if range_header.is_some() {
            return Err(ApiError::bad_request("INVALID_REQUEST_BODY", "use either a Range header or offset/limit, not both"));
        }
        return lines(file, &path, offset, limit).await;
    }
    let len = meta.len();
    let (status, start, count) = match range_header.as_deref().map(|h| parse_range(h, len)) {
        Some(Err(())) => {
            let mut resp = ApiError::new(StatusCode::RANGE_NOT_SATISFIABLE, "INVALID_RANGE", format!("range {} is outside the file's {len} bytes", range_header.unwrap_or_default())).into_response();
            resp.headers_mut().insert(hyper::header::CONTENT_RANGE, HeaderValue::from_str(&format!("bytes */{len}")).unwrap());
            return Ok(resp);
        }
        Some(Ok(Some((a, b)))) => (StatusCode::PARTIAL_CONTENT, a, b - a + 1),
        _ => (StatusCode::OK, 0, len),
    };
    file.seek(io::SeekFrom::Start(start)).await.map_err(|e| io_error(&path, e))?;
    let reader = tokio_util::io::ReaderStream::with_capacity(file.take(count), DOWNLOAD_CHUNK);
    let body = BodyExt::boxed(StreamBody::new(reader.map(|r| r.map(Frame::data))));
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(CONTENT_LENGTH, HeaderValue::from(count));
    h.insert(hyper::header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(hyper::header::CONTENT_DISPOSITION, content_disposition(&path));
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(hyper::header::CONTENT_RANGE, HeaderValue::from_str(&format!("bytes {}-{}/{len}", start, start + count - 1)).unwrap());
    }
    Ok(resp)
}

/// Line-based reading: skip `offset` lines, return at most `limit` lines (all when absent).
async fn lines(file: tokio::fs::File, path: &Path, offset: Option<String>, limit: Option<String>) -> ApiResult {
    let parse = |name: &str, v: Option<String>| -> Result<Option<usize>, ApiError> {
        v.map(|s| s.parse::<usize>().map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", format!("query '{name}': '{s}' is not a non-negative integer")))).transpose()
    };
    let skip = parse("offset", offset)?.unwrap_or(0);
    let take = parse("limit", limit)?;
    let mut reader = tokio::io::BufReader::new(file);
    let mut out = Vec::new();
    let mut line = Vec::new();
    let mut index = 0usize;
    loop {
        line.clear();
        let n = tokio::io::AsyncBufReadExt::read_until(&mut reader, b'\n', &mut line).await.map_err(|e| io_error(path, e))?;
        if n == 0 || take.is_some_and(|t| index >= skip + t) {
            break;
        }
        if index >= skip {
            out.extend_from_slice(&line);
        }
        index += 1;
    }
    Ok(http::text(StatusCode::OK, out))
}

// ---------------------------------------------------------------- metadata routes

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

/// Shell-style glob: `*` and `?` stop at `/`, `**` crosses it, `[abc]`/`[a-z]`/`[!x]` classes.
fn glob_match(pattern: &[char], text: &[char]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some('*') if pattern.get(1) == Some(&'*') => {
            let rest = &pattern[2..];
            (0..=text.len()).any(|i| glob_match(rest, &text[i..]))
        }
        Some('*') => {
            let rest = &pattern[1..];
            for i in 0..=text.len() {
                if glob_match(rest, &text[i..]) {
                    return true;
                }
                if text.get(i) == Some(&'/') {
                    break;
                }
            }
            false
        }
        Some('?') => text.first().is_some_and(|c| *c != '/') && glob_match(&pattern[1..], &text[1..]),
        Some('[') => {
            let Some(close) = pattern.iter().skip(2).position(|c| *c == ']').map(|i| i + 2) else {
                return text.first() == Some(&'[') && glob_match(&pattern[1..], &text[1..]);
            };
            let Some(c) = text.first() else { return false };
            let mut class = &pattern[1..close];
            let negate = matches!(class.first(), Some('!') | Some('^'));
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= class[i] <= *c && *c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == *c;
                    i += 1;
                }
            }
            hit != negate && glob_match(&pattern[close + 1..], &text[1..])
        }
        Some(p) => text.first() == Some(p) && glob_match(&pattern[1..], &text[1..]),
    }
}

pub async fn search(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let root = checked_path(&http::require_query(&pairs, "path")?, "query 'path'")?;
    let pattern = http::query_one(&pairs, "pattern").filter(|p| !p.is_empty()).unwrap_or_else(|| "*".into());
    let found = blocking(move || {
        let meta = fs::metadata(&root).map_err(|e| io_error(&root, e))?;
        if !meta.is_dir() {
            return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is not a directory", root.display())));
        }
        let pat: Vec<char> = pattern.chars().collect();
        // A pattern with a slash matches the path below the root, otherwise the file name.
        let by_path = pattern.contains('/');
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(ft) = entry.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(path.clone());
                    continue;
                }
                let subject = if by_path {
                    path.strip_prefix(&root).unwrap_or(&path).to_string_lossy().into_owned()
                } else {
                    entry.file_name().to_string_lossy().into_owned()
                };
                if glob_match(&pat, &subject.chars().collect::<Vec<_>>()) {
                    if let Ok(info) = file_info(&path) {
                        out.push(info);
                    }
                }
            }
        }
        Ok(out)
    })
    .await?;
    Ok(http::json(&Value::Array(found)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceItem {
    old: String,
    new: String,
}

pub async fn replace(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let verbose = http::query_one(&pairs, "verbose").is_some_and(|v| v == "true" || v == "1");
    let map: BTreeMap<String, ReplaceItem> = http::read_json(req).await?;
    let counts = blocking(move || {
        let mut counts = serde_json::Map::new();
        for (raw, item) in map {
            let p = checked_path(&raw, "request key")?;
            if item.old.is_empty() {
                return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("{raw}: field 'old' is empty")));
            }
            let bytes = fs::read(&p).map_err(|e| io_error(&p, e))?;
            let text = String::from_utf8(bytes).map_err(|_| ApiError::bad_request("INVALID_FILE_CONTENT", format!("{raw}: not a UTF-8 text file")))?;
            let n = text.matches(&item.old).count();
            if n > 0 {
                fs::write(&p, text.replace(&item.old, &item.new)).map_err(|e| io_error(&p, e))?;
            }
            counts.insert(raw, json!({"replacedCount": n}));
        }
        Ok(counts)
    })
    .await?;
    Ok(if verbose { http::json(&Value::Object(counts)) } else { http::ok_empty() })
}

// ---------------------------------------------------------------- directories

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

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str, t: &str) -> bool {
        glob_match(&p.chars().collect::<Vec<_>>(), &t.chars().collect::<Vec<_>>())
    }

    #[test]
    fn globs() {
        assert!(g("*.py", "main.py"));
        assert!(!g("*.py", "main.pyc"));
        assert!(g("fil?.txt", "file.txt"));
        assert!(g("[a-c]x", "bx"));
        assert!(!g("[!a-c]x", "bx"));
        assert!(!g("*.py", "a/b.py"));
        assert!(g("**/*.py", "a/b/c.py"));
        assert!(g("データ*", "データ.csv"));
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Ok(Some((0, 9))));
        assert_eq!(parse_range("bytes=90-", 100), Ok(Some((90, 99))));
        assert_eq!(parse_range("bytes=-10", 100), Ok(Some((90, 99))));
        assert_eq!(parse_range("bytes=50-500", 100), Ok(Some((50, 99))));
        assert_eq!(parse_range("bytes=100-", 100), Err(()));
        assert_eq!(parse_range("bytes=5-1", 100), Err(()));
        assert_eq!(parse_range("bytes=0-1,4-5", 100), Ok(None));
        assert_eq!(parse_range("items=0-1", 100), Ok(None));
    }

    #[test]
    fn modes_are_octal_digits() {
        assert_eq!(mode_from_api(644).unwrap(), 0o644);
        assert_eq!(mode_from_api(4755).unwrap(), 0o4755);
        assert!(mode_from_api(689).is_err());
        assert_eq!(mode_to_api(0o100755), 755);
    }
}
