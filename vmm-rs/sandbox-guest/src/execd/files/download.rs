//! `GET /files/download`: the file streamed from disk in fixed-size chunks (whole, a byte range,
//! or a range of lines), so memory stays bounded whatever the file size (or line length) and
//! the client's pace sets the download's through HTTP back-pressure.

use std::io;
use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{blocking, checked_path, io_error, open_regular};
use crate::http::{self, ApiError, ApiResult, Resp};

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
    let window = line_window(http::query_one(&pairs, "offset"), http::query_one(&pairs, "limit"))?;
    let opened = path.clone();
    let (file, meta) = blocking(move || open_regular(&opened, false)).await?;
    let mut file = tokio::fs::File::from_std(file);
    if let Some(window) = window {
        if range_header.is_some() {
            return Err(ApiError::bad_request("INVALID_REQUEST_BODY", "use either a Range header or offset/limit, not both"));
        }
        return Ok(lines(file, window));
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

/// The lines a line-mode download sends: `skip` lines are passed over, then `take` are sent
/// (all the rest when `None`). Counted as the file streams by, so no line is ever held whole.
#[derive(Debug, PartialEq)]
struct LineWindow {
    skip: u64,
    take: Option<u64>,
}

/// The window `offset` and `limit` ask for, `None` when neither is given.
fn line_window(offset: Option<String>, limit: Option<String>) -> Result<Option<LineWindow>, ApiError> {
    if offset.is_none() && limit.is_none() {
        return Ok(None);
    }
    let parse = |name: &str, v: Option<String>| -> Result<Option<u64>, ApiError> {
        v.map(|s| s.parse::<u64>().map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", format!("query '{name}': '{s}' is not an integer from 0 to {}", u64::MAX))))
            .transpose()
    };
    Ok(Some(LineWindow { skip: parse("offset", offset)?.unwrap_or(0), take: parse("limit", limit)? }))
}

impl LineWindow {
    /// Takes the file's next `chunk`: the part of it to send, and whether the window is done.
    fn select(&mut self, chunk: &[u8]) -> (Range<usize>, bool) {
        let line_end = |from: usize| chunk[from..].iter().position(|b| *b == b'\n').map(|i| from + i + 1);
        let mut start = 0;
        while self.skip > 0 && self.take != Some(0) {
            let Some(end) = line_end(start) else { return (chunk.len()..chunk.len(), false) };
            start = end;
            self.skip -= 1;
        }
        let Some(take) = self.take.as_mut() else { return (start..chunk.len(), false) };
        let mut end = start;
        while *take > 0 {
            let Some(next) = line_end(end) else { return (start..chunk.len(), false) };
            end = next;
            *take -= 1;
        }
        (start..end, true)
    }
}

/// Line-mode download: the lines of `window` streamed as text (the last line of the file
/// counts even without its newline).
fn lines(file: tokio::fs::File, window: LineWindow) -> Resp {
    let state = (file, window, vec![0u8; DOWNLOAD_CHUNK], false);
    let stream = futures_util::stream::try_unfold(state, |(mut file, mut window, mut buf, done)| async move {
        if done {
            return Ok(None);
        }
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                return Ok(None);
            }
            let (send, done) = window.select(&buf[..n]);
            if !send.is_empty() {
                let frame = Frame::data(Bytes::copy_from_slice(&buf[send]));
                return Ok(Some((frame, (file, window, buf, done))));
            }
            if done {
                return Ok(None);
            }
        }
    });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
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

    /// Everything `window` sends of `text` fed in pieces of `size` bytes.
    fn window_of(mut window: LineWindow, text: &str, size: usize) -> String {
        let mut out = Vec::new();
        for piece in text.as_bytes().chunks(size) {
            let (send, done) = window.select(piece);
            out.extend_from_slice(&piece[send]);
            if done {
                break;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn line_windows_count_lines_across_chunks() {
        let text = "l1\nl2\nl3\nlast";
        for size in [1, 2, 3, 5, 64] {
            let w = |skip, take| window_of(LineWindow { skip, take }, text, size);
            assert_eq!(w(0, None), text, "size {size}");
            assert_eq!(w(1, Some(1)), "l2\n", "size {size}");
            assert_eq!(w(1, Some(u64::MAX)), "l2\nl3\nlast", "size {size}");
            assert_eq!(w(3, None), "last", "size {size}");
            assert_eq!(w(u64::MAX, Some(2)), "", "size {size}");
            assert_eq!(w(0, Some(0)), "", "size {size}");
        }
    }

    #[test]
    fn line_window_queries_are_checked() {
        assert_eq!(line_window(None, None).unwrap(), None);
        assert_eq!(line_window(Some("1".into()), Some(u64::MAX.to_string())).unwrap(), Some(LineWindow { skip: 1, take: Some(u64::MAX) }));
        assert_eq!(line_window(None, Some("18446744073709551616".into())).unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(line_window(Some("-1".into()), None).unwrap_err().status, StatusCode::BAD_REQUEST);
    }
}
