//! Streaming a child's output to a client as server-sent events: one JSON event per chunk the
//! moment a read returns, text never split inside a UTF-8 character, and the closing event
//! with the exit status. Commands, sessions and the metrics watch all answer this way.

use std::time::Instant;

use bytes::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::http::{self, Body};

/// One SSE event: bare JSON followed by a blank line, as the reference execution service writes.
pub fn event(mut value: Value) -> Bytes {
    value["timestamp"] = json!(http::now_ms());
    let mut line = serde_json::to_vec(&value).unwrap_or_default();
    line.extend_from_slice(b"\n\n");
    Bytes::from(line)
}

pub fn exit_event(code: i32, started: Instant, note: Option<String>) -> Bytes {
    if code == 0 {
        event(json!({"type": "execution_complete", "execution_time": started.elapsed().as_millis() as u64}))
    } else {
        let traceback: Vec<String> = note.into_iter().collect();
        event(json!({"type": "error", "error": {"ename": "CommandExecError", "evalue": code.to_string(), "traceback": traceback}}))
    }
}

pub fn sse_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Splits a byte stream into UTF-8 text without cutting a character in two: the bytes of an
/// incomplete trailing character wait for the next chunk; invalid bytes become U+FFFD.
#[derive(Default)]
pub struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    pub fn push(&mut self, chunk: &[u8]) -> String {
        self.pending.extend_from_slice(chunk);
        let cut = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let rest = self.pending.split_off(cut);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Sleeps until `deadline`, or for ever without one: a `select!` arm for an optional timer.
pub async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Forwards a pipe as chunks of raw bytes until it closes.
pub fn pump<R: tokio::io::AsyncRead + Unpin + Send + 'static>(mut pipe: R, which: Stream, tx: mpsc::Sender<(Stream, Vec<u8>)>) {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 32 * 1024];
        let mut listening = true;
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                // Once nobody listens, keep draining: a background process that inherited the
                // pipe would otherwise die of SIGPIPE on its next write.
                Ok(n) if listening => listening = tx.send((which, buf[..n].to_vec())).await.is_ok(),
                Ok(_) => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_carry_never_splits_a_character() {
        let bytes = "añ€😀".as_bytes();
        for cut in 0..bytes.len() {
            let mut c = Utf8Carry::default();
            let mut out = c.push(&bytes[..cut]);
            out += &c.push(&bytes[cut..]);
            out += &c.finish();
            assert_eq!(out, "añ€😀", "cut at {cut}");
        }
        let mut c = Utf8Carry::default();
        assert_eq!(c.push(&[0xff, b'a']), "\u{fffd}a");
    }

    #[test]
    fn events_are_one_json_line_then_a_blank_line() {
        let e = event(json!({"type": "stdout", "text": "a\nb"}));
        let s = std::str::from_utf8(&e).unwrap();
        assert!(s.ends_with("}\n\n"));
        assert_eq!(s.matches('\n').count(), 2);
        let v: Value = serde_json::from_str(s.trim()).unwrap();
        assert_eq!(v["text"], "a\nb");
        assert!(v["timestamp"].as_u64().unwrap() > 0);
    }
}
