//! An upload's multipart body as multer reads it, within bounds. multer keeps what arrives
//! until it finds what it is looking for, so a part header that never ends, or a body without
//! its boundary, would grow its buffer for as long as the client sends. Here multer is fed
//! more of the body only once what it holds gives nothing, and the upload fails when it has
//! taken in [`MAX_UNPARSED`] bytes without giving a part or any content; content streams
//! through as before.

use std::error::Error;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use hyper::body::{Body, Incoming};
use hyper::StatusCode;

use crate::http::{self, ApiError};

/// Bytes multer may take in without giving anything: part headers, boundaries and the text
/// before the first boundary, a few hundred bytes in any real upload.
const MAX_UNPARSED: usize = 64 * 1024;

/// Largest `metadata` part: it is held whole to be parsed.
const MAX_METADATA: u64 = 1 << 20;

pub(super) type Part = multer::Field<'static>;

pub(super) struct Form {
    parts: multer::Multipart<'static>,
    shared: Arc<Shared>,
}

/// What the form and the body feeding multer share.
struct Shared {
    /// The request body; taken back to be drained when the upload fails.
    body: Mutex<Option<Incoming>>,
    /// Bytes fed to multer since it last gave something.
    unparsed: AtomicUsize,
    /// multer has just given something: it tries what it still holds before being fed more.
    gave: AtomicBool,
}

/// The request body as the stream multer reads.
struct Feed {
    shared: Arc<Shared>,
    /// multer was stopped at [`MAX_UNPARSED`] to try what it holds; stopped again without
    /// having given anything, it never will.
    paused: bool,
}

#[derive(Debug)]
struct TooFarAhead;

impl fmt::Display for TooFarAhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "multipart part headers, or the text before the first boundary, run past {} KiB", MAX_UNPARSED / 1024)
    }
}

impl Error for TooFarAhead {}

impl Stream for Feed {
    type Item = Result<Bytes, Box<dyn Error + Send + Sync>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let shared = &this.shared;
        // Returning Pending with the task woken makes multer work on what it holds and come back.
        if shared.gave.swap(false, Ordering::Relaxed) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if shared.unparsed.load(Ordering::Relaxed) >= MAX_UNPARSED {
            if this.paused {
                return Poll::Ready(Some(Err(Box::new(TooFarAhead))));
            }
            this.paused = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.paused = false;
        let mut body = shared.body.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(body) = body.as_mut() else { return Poll::Ready(None) };
        loop {
            match ready!(Pin::new(&mut *body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    // Trailers carry nothing multer reads.
                    if let Ok(data) = frame.into_data() {
                        shared.unparsed.fetch_add(data.len(), Ordering::Relaxed);
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(Box::new(e)))),
                None => return Poll::Ready(None),
            }
        }
    }
}

impl Form {
    pub(super) fn new(body: Incoming, boundary: String) -> Form {
        let shared = Arc::new(Shared { body: Mutex::new(Some(body)), unparsed: AtomicUsize::new(0), gave: AtomicBool::new(false) });
        let feed = Feed { shared: shared.clone(), paused: false };
        let limits = multer::Constraints::new().size_limit(multer::SizeLimit::new().for_field("metadata", MAX_METADATA));
        Form { parts: multer::Multipart::with_constraints(feed, boundary, limits), shared }
    }

    /// The next part, `None` after the last.
    pub(super) async fn next_part(&mut self) -> Result<Option<Part>, ApiError> {
        let part = self.parts.next_field().await.map_err(|e| refusal(e, "INVALID_FILE", "malformed multipart body"))?;
        self.gave();
        Ok(part)
    }

    /// The next piece of `part`'s content, `None` at its end; a malformed one is `code`, named
    /// `what` in the message.
    pub(super) async fn chunk(&self, part: &mut Part, code: &'static str, what: &str) -> Result<Option<Bytes>, ApiError> {
        let chunk = part.chunk().await.map_err(|e| refusal(e, code, &format!("cannot read {what}")))?;
        self.gave();
        Ok(chunk)
    }

    fn gave(&self) {
        self.shared.unparsed.store(0, Ordering::Relaxed);
        self.shared.gave.store(true, Ordering::Relaxed);
    }

    /// Reads and discards the rest of the body, within [`http::drain`]'s bounds.
    pub(super) async fn drain(self) {
        let body = self.shared.body.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(body) = body {
            http::drain(body).await;
        }
    }
}

fn refusal(e: multer::Error, code: &'static str, context: &str) -> ApiError {
    match e {
        multer::Error::FieldSizeExceeded { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_FILE_METADATA", format!("a 'metadata' part is larger than {} MiB", MAX_METADATA >> 20))
        }
        multer::Error::StreamReadFailed(e) if e.is::<TooFarAhead>() => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "INVALID_FILE", e.to_string()),
        e => ApiError::bad_request(code, format!("{context}: {e}")),
    }
}
