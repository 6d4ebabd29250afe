//! `GET /files/download`: the file streamed from disk in fixed-size chunks (whole, a byte range,
//! or a range of lines), so memory stays bounded whatever the file size and the client's pace
//! sets the download's through HTTP back-pressure.

use std::io;
use std::path::Path;

use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{blocking, checked_path, io_error, open_regular};
use crate::http::{self, ApiError, ApiResult};

/// Chunk size of downloads: large enough for throughput, small enough to bound memory.
const DOWNLOAD_CHUNK: usize = 256 * 1024;

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
    let opened = path.clone();
    let mut file = tokio::fs::File::from_std(blocking(move || open_regular(&opened, false)).await?);
    let meta = file.metadata().await.map_err(|e| io_error(&path, e))?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
