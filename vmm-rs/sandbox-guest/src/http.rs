//! HTTP plumbing shared by the execution and egress services: one body type, the `{code,
//! message}` error envelope, query parsing, bounded request bodies, token checks, the
//! descriptor limit and the accept loop with its limits.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

use crate::config::Limits;

pub type Body = BoxBody<Bytes, io::Error>;
pub type Resp = Response<Body>;

/// A request failure that becomes `{code, message}` with its status.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "RUNTIME_ERROR", message)
    }
    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, "NOT_SUPPORTED", message)
    }
    pub fn into_response(self) -> Resp {
        let body = serde_json::json!({"code": self.code, "message": self.message});
        let mut resp = json_with_status(self.status, &body);
        // An error may answer before the request body was read; the connection then cannot
        // carry another request, and saying so keeps clients from reusing it mid-close.
        resp.headers_mut().insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }
}

pub type ApiResult = Result<Resp, ApiError>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never: Infallible| match never {}).boxed()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never: Infallible| match never {}).boxed()
}

/// Bare 200: the reference's "bodyless success".
pub fn ok_empty() -> Resp {
    Response::new(empty())
}

pub fn json_with_status(status: StatusCode, value: &Value) -> Resp {
    let mut resp = Response::new(full(serde_json::to_vec(value).unwrap_or_default()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub fn json(value: &Value) -> Resp {
    json_with_status(StatusCode::OK, value)
}

pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// A response whose body is fed chunk by chunk through the returned sender; the channel is
/// small so a slow client slows the producer instead of growing a buffer.
pub fn channel_body(capacity: usize) -> (mpsc::Sender<Bytes>, Body) {
    let (tx, rx) = mpsc::channel::<Bytes>(capacity);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (Ok::<_, io::Error>(Frame::data(chunk)), rx))
    });
    (tx, StreamBody::new(stream).boxed())
}

/// Query parameters in order, repeated keys kept.
pub fn query_pairs(req: &Request<Incoming>) -> Vec<(String, String)> {
    req.uri().query().map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default()
}

pub fn query_one(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

pub fn query_all(pairs: &[(String, String)], key: &str) -> Vec<String> {
    pairs.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone()).collect()
}

pub fn require_query(pairs: &[(String, String)], key: &str) -> Result<String, ApiError> {
    match query_one(pairs, key) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(ApiError::bad_request("MISSING_QUERY", format!("missing query parameter '{key}'"))),
    }
}

/// Largest JSON request body accepted: requests are small control messages.
pub const MAX_JSON_BODY: usize = 8 << 20;

/// Reads and parses a JSON body, refusing bodies above `MAX_JSON_BODY`.
pub async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, ApiError> {
    let bytes = read_bytes(req).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request("INVALID_REQUEST_BODY", format!("invalid JSON body: {e}")))
}

/// Like [`read_json`], but an empty body means the default value (all fields optional).
pub async fn read_json_or_default<T: serde::de::DeserializeOwned + Default>(req: Request<Incoming>) -> Result<T, ApiError> {
    let bytes = read_bytes(req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request("INVALID_REQUEST_BODY", format!("invalid JSON body: {e}")))
}

async fn read_bytes(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_JSON_BODY);
    let bytes = limited
        .collect()
        .await
        .map_err(|e| ApiError::bad_request("INVALID_REQUEST_BODY", format!("cannot read request body: {e}")))?
        .to_bytes();
    Ok(bytes)
}

/// Reads and discards what a client is still sending (at most 64 MiB, at most 5 s) so that an
/// early error answer reaches it instead of a connection reset.
pub async fn drain(mut body: Incoming) {
    let mut budget: usize = 64 << 20;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(Ok(frame)) = body.frame().await {
            budget = budget.saturating_sub(frame.data_ref().map_or(0, |d| d.len()));
            if budget == 0 {
                break;
            }
        }
    })
    .await;
}

/// Compares a presented token with the configured one in time independent of where they differ.
pub fn token_matches(presented: &[u8], expected: &[u8]) -> bool {
    // Lengths are not secret (the token is a fixed-length random value), so an early length
    // check leaks nothing useful; the content comparison touches every byte.
    if presented.len() != expected.len() {
        return false;
    }
    let diff = presented.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

/// Raises the soft limit on open descriptors to the hard limit, first raising the hard limit to
/// `at_least` where this process may (root may). Each client holds a socket and each command
/// pipes and log files: the usual soft limit of 1024 runs out long before memory does.
pub fn raise_fd_limit(at_least: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        if limit.rlim_max < at_least {
            let raised = libc::rlimit { rlim_cur: at_least, rlim_max: at_least };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return;
            }
        }
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// A connection's socket that notes when a byte last went either way, for the idle timeout.
struct Tracked {
    stream: TcpStream,
    started: Instant,
    /// Milliseconds from `started` to the last read or write.
    last: Arc<AtomicU64>,
}

impl Tracked {
    fn touch(&self) {
        self.last.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if polled.is_ready() {
            self.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if polled.is_ready() {
            self.touch();
        }
        polled
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if polled.is_ready() {
            self.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Resolves once nothing moved on the connection for `timeout`.
async fn idle(started: Instant, last: Arc<AtomicU64>, timeout: Duration) {
    loop {
        let quiet = started.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
        if quiet >= timeout {
            return;
        }
        tokio::time::sleep(timeout - quiet).await;
    }
}

/// The connections being served, for the cap. When it is reached, the connection that has
/// waited longest for its next request's headers makes room for the newcomer: a client that
/// holds idle keep-alive connections (no token needed for `/ping`) cannot keep everyone else
/// out, and the evicted client loses no request, only its connection.
struct Connections {
    max: usize,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    last_id: u64,
    slots: HashMap<u64, Slot>,
}

struct Slot {
    /// Requests being answered, until their response bodies are sent.
    busy: usize,
    /// When the connection last started waiting for a request (arrival, or its last response).
    idle_since: Instant,
    /// Woken when the connection must close to make room.
    evict: Arc<Notify>,
}

impl Connections {
    /// Takes a slot for a new connection, first evicting the longest idle connection when at
    /// the cap; None when every connection is busy. Returns the slot's id and eviction signal.
    fn admit(&self) -> Option<(u64, Arc<Notify>)> {
        let mut table = self.table.lock().unwrap();
        if table.slots.len() >= self.max {
            let oldest = table.slots.iter().filter(|(_, s)| s.busy == 0).min_by_key(|(_, s)| s.idle_since).map(|(id, _)| *id)?;
            if let Some(evicted) = table.slots.remove(&oldest) {
                evicted.evict.notify_one();
            }
        }
        table.last_id += 1;
        let id = table.last_id;
        let evict = Arc::new(Notify::new());
        table.slots.insert(id, Slot { busy: 0, idle_since: Instant::now(), evict: evict.clone() });
        Some((id, evict))
    }

    /// Marks connection `id` busy with a request until the returned guard is dropped.
    fn busy(self: &Arc<Self>, id: u64) -> Busy {
        if let Some(slot) = self.table.lock().unwrap().slots.get_mut(&id) {
            slot.busy += 1;
        }
        Busy { connections: self.clone(), id }
    }

    fn leave(&self, id: u64) {
        self.table.lock().unwrap().slots.remove(&id);
    }
}

struct Busy {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(slot) = self.connections.table.lock().unwrap().slots.get_mut(&self.id) {
            slot.busy -= 1;
            if slot.busy == 0 {
                slot.idle_since = Instant::now();
            }
        }
    }
}

/// A response body that keeps its connection marked busy until it is sent (or dropped).
struct BusyBody {
    body: Body,
    _busy: Busy,
}

impl hyper::body::Body for BusyBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves HTTP/1.1 connections from `listener` with `handler` until the process ends, within
/// `limits`: a client that has not sent its request headers in time (which also bounds how
/// long a kept-alive connection waits for the next request), or whose connection stays quiet
/// too long, is disconnected, and at the connection cap the longest idle connection makes
/// room for a new one (a new one is closed on arrival only when every connection is busy), so
/// idle or half-sent connections cannot take every descriptor and starve the health checks or
/// the clients with a token.
pub async fn serve<H, F>(listener: TcpListener, limits: Limits, handler: H) -> io::Result<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = Resp> + Send + 'static,
{
    let handler = Arc::new(handler);
    let connections = Arc::new(Connections { max: limits.max_connections, table: Mutex::default() });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            // Running out of descriptors is transient: back off instead of dying.
            Err(e) => {
                eprintln!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some((id, evict)) = connections.admit() else {
            // Every connection is busy: closing at once is cheaper for everyone than a queue.
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let connections = connections.clone();
        tokio::spawn(async move {
            let service = {
                let connections = connections.clone();
                hyper::service::service_fn(move |req| {
                    let handler = handler.clone();
                    let busy = connections.busy(id);
                    async move {
                        let resp = handler(req, peer).await;
                        Ok::<_, Infallible>(resp.map(|body| BusyBody { body, _busy: busy }.boxed()))
                    }
                })
            };
            let started = Instant::now();
            let last = Arc::new(AtomicU64::new(0));
            let io = TokioIo::new(Tracked { stream, started, last: last.clone() });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true)
                .serve_connection(io, service);
            // Dropping the connection closes its socket.
            tokio::select! {
                _ = connection => {}
                _ = idle(started, last, limits.idle_timeout) => {}
                _ = evict.notified() => {}
            }
            connections.leave(id);
        });
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// RFC 3339 UTC timestamp with milliseconds for a time in ms since the epoch.
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_798_761_599_999), "2026-12-31T23:59:59.999Z");
    }

    #[test]
    fn token_comparison() {
        assert!(token_matches(b"abc", b"abc"));
        assert!(!token_matches(b"abd", b"abc"));
        assert!(!token_matches(b"ab", b"abc"));
        assert!(!token_matches(b"", b"abc"));
    }
}
