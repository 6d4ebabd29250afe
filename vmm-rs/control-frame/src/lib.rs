//! Control framing shared by the daemon (TypeScript, `daemon/framing.ts`), the VMM and the
//! guest: each frame is a `u32` big-endian byte length followed by that many bytes of UTF-8
//! JSON. A frame longer than the agreed maximum is rejected from its header alone, before any
//! of its body is buffered, so a peer cannot make us allocate more than the maximum.
//!
//! [`Decoder`] is sans-IO (push bytes, pull frames) so that blocking readers, async runtimes
//! and tests share one implementation; [`FrameReader`] wraps it around any [`std::io::Read`].

use std::fmt;
use std::io::{self, Read, Write};

use serde_json::Value;

/// Bytes in the length prefix.
pub const HEADER_LEN: usize = 4;
/// Default largest body accepted: 1 MiB is far above any control message.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

#[derive(Debug)]
pub enum FrameError {
    /// The declared body length exceeds the maximum.
    Oversized { len: usize, max: usize },
    /// The stream ended inside a frame.
    Truncated { expected: usize, got: usize },
    /// The body is not valid UTF-8.
    NotUtf8,
    /// The body is UTF-8 but not one JSON value.
    NotJson(String),
    Io(io::Error),
}

impl FrameError {
    /// The stable name used by the shared test vectors (`testdata/framing/vectors.json`).
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::Oversized { .. } => "oversized",
            FrameError::Truncated { .. } => "truncated",
            FrameError::NotUtf8 => "not_utf8",
            FrameError::NotJson(_) => "not_json",
            FrameError::Io(_) => "io",
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Oversized { len, max } => write!(f, "frame of {len} bytes exceeds the maximum of {max}"),
            FrameError::Truncated { expected, got } => {
                write!(f, "stream ended inside a frame: {got} of {expected} bytes")
            }
            FrameError::NotUtf8 => write!(f, "frame body is not valid UTF-8"),
            FrameError::NotJson(reason) => write!(f, "frame body is not JSON: {reason}"),
            FrameError::Io(e) => write!(f, "frame I/O: {e}"),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Encodes one value as a frame (compact JSON, object keys in insertion order).
pub fn encode(value: &Value, max: usize) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(value).map_err(|e| FrameError::NotJson(e.to_string()))?;
    if body.len() > max {
        return Err(FrameError::Oversized { len: body.len(), max });
    }
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    // The check above bounds the length well below u32::MAX for any sane maximum.
    frame.extend_from_slice(&u32::try_from(body.len()).map_err(|_| FrameError::Oversized { len: body.len(), max })?.to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes one frame and flushes it.
pub fn write_frame<W: Write>(writer: &mut W, value: &Value, max: usize) -> Result<(), FrameError> {
    writer.write_all(&encode(value, max)?)?;
    writer.flush()?;
    Ok(())
}

/// Parses a frame body.
fn parse_body(body: &[u8]) -> Result<Value, FrameError> {
    let text = std::str::from_utf8(body).map_err(|_| FrameError::NotUtf8)?;
    serde_json::from_str(text).map_err(|e| FrameError::NotJson(e.to_string()))
}

/// Sans-IO decoder: feed it bytes as they arrive, in pieces of any size, and take whole frames out.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    max: usize,
}

impl Decoder {
    pub fn new(max: usize) -> Self {
        Decoder { buf: Vec::new(), max }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The body length of the frame at the front, once its header is complete.
    fn declared_len(&self) -> Result<Option<usize>, FrameError> {
        let Some(header) = self.buf.get(..HEADER_LEN) else { return Ok(None) };
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if len > self.max {
            return Err(FrameError::Oversized { len, max: self.max });
        }
        Ok(Some(len))
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Value>, FrameError> {
        let Some(len) = self.declared_len()? else { return Ok(None) };
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let value = parse_body(&self.buf[HEADER_LEN..HEADER_LEN + len]);
        self.buf.drain(..HEADER_LEN + len);
        value.map(Some)
    }

    /// Bytes still needed to complete the frame at the front (0 when none is started).
    pub fn needed(&self) -> Result<usize, FrameError> {
        Ok(match self.declared_len()? {
            None if self.buf.is_empty() => 0,
            None => HEADER_LEN - self.buf.len(),
            Some(len) => (HEADER_LEN + len).saturating_sub(self.buf.len()),
        })
    }

    /// Call at end of stream: an unfinished frame is an error.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let expected = match self.declared_len()? {
            Some(len) => HEADER_LEN + len,
            None => HEADER_LEN,
        };
        Err(FrameError::Truncated { expected, got: self.buf.len() })
    }
}

/// Reads frames from a blocking reader, never reading past the frame it returns.
pub struct FrameReader<R> {
    inner: R,
    decoder: Decoder,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        FrameReader { inner, decoder: Decoder::new(max) }
    }

    /// The next frame; `Ok(None)` at a clean end of stream between frames.
    pub fn read_frame(&mut self) -> Result<Option<Value>, FrameError> {
        loop {
            if let Some(value) = self.decoder.next_frame()? {
                return Ok(Some(value));
            }
            let want = self.decoder.needed()?.max(HEADER_LEN);
            // Read only what the current frame still needs: whatever follows it on the stream
            // (for example a socket handed over after the start frame) stays unread.
            let mut chunk = vec![0u8; want.min(64 * 1024)];
            let n = match self.inner.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                self.decoder.finish()?;
                return Ok(None);
            }
            self.decoder.push(&chunk[..n]);
        }
    }

    pub fn into_inner(self) -> R {
        self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let value = json!({"op": "inspect", "n": 1, "nested": {"z": [1, "二"], "a": null}});
        let frame = encode(&value, DEFAULT_MAX_FRAME).unwrap();
        let mut reader = FrameReader::new(&frame[..], DEFAULT_MAX_FRAME);
        assert_eq!(reader.read_frame().unwrap(), Some(value));
        assert!(reader.read_frame().unwrap().is_none());
    }

    #[test]
    fn encode_refuses_oversized() {
        let err = encode(&json!("x".repeat(100)), 10).unwrap_err();
        assert_eq!(err.kind(), "oversized");
    }

    #[test]
    fn oversized_header_is_rejected_before_the_body_arrives() {
        let mut decoder = Decoder::new(16);
        decoder.push(&[0, 0, 0, 17]);
        assert_eq!(decoder.next_frame().unwrap_err().kind(), "oversized");
    }

    #[test]
    fn reader_does_not_consume_past_its_frame() {
        let mut bytes = encode(&json!({"a": 1}), 64).unwrap();
        bytes.extend_from_slice(b"rest");
        let mut reader = FrameReader::new(&bytes[..], 64);
        assert_eq!(reader.read_frame().unwrap(), Some(json!({"a": 1})));
        let mut rest = String::new();
        reader.into_inner().read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "rest");
    }
}
