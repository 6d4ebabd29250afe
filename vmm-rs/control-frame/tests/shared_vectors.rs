//! The framing must agree byte for byte with the TypeScript codec in `daemon/framing.ts`;
//! both are tested against `testdata/framing/vectors.json`.

use std::io::{self, Read};
use std::path::PathBuf;

use control_frame::{encode, Decoder, FrameError, FrameReader};
use serde_json::Value;

struct Vector {
    name: String,
    bytes: Vec<u8>,
    frames: Vec<Value>,
    error: Option<String>,
    encode: bool,
}

fn load() -> (usize, Vec<Vector>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/framing/vectors.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("vectors file")).unwrap();
    let max = doc["max_frame_size"].as_u64().unwrap() as usize;
    let vectors = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector {
            name: v["name"].as_str().unwrap().to_owned(),
            bytes: unhex(v["hex"].as_str().unwrap()),
            frames: v["frames"].as_array().unwrap().clone(),
            error: v.get("error").and_then(Value::as_str).map(str::to_owned),
            encode: v.get("encode").and_then(Value::as_bool).unwrap_or(false),
        })
        .collect();
    (max, vectors)
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

/// A reader that hands out at most `step` bytes per call, to exercise partial reads.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn read_all(data: &[u8], step: usize, max: usize) -> (Vec<Value>, Option<FrameError>) {
    let mut reader = FrameReader::new(Trickle { data, step }, max);
    let mut frames = Vec::new();
    loop {
        match reader.read_frame() {
            Ok(Some(v)) => frames.push(v),
            Ok(None) => return (frames, None),
            Err(e) => return (frames, Some(e)),
        }
    }
}

fn decode_in_chunks(data: &[u8], chunk: usize, max: usize) -> (Vec<Value>, Option<FrameError>) {
    let mut decoder = Decoder::new(max);
    let mut frames = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        decoder.push(piece);
        loop {
            match decoder.next_frame() {
                Ok(Some(v)) => frames.push(v),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, decoder.finish().err())
}

#[test]
fn decoding_agrees_with_the_vectors_under_any_read_sizes() {
    let (max, vectors) = load();
    assert!(vectors.len() >= 15);
    for v in &vectors {
        for step in [1, 3, 7, 4096] {
            for (how, (frames, error)) in
                [("reader", read_all(&v.bytes, step, max)), ("decoder", decode_in_chunks(&v.bytes, step, max))]
            {
                assert_eq!(frames, v.frames, "{} ({how}, step {step}): frames", v.name);
                assert_eq!(error.as_ref().map(FrameError::kind), v.error.as_deref(), "{} ({how}, step {step}): error", v.name);
            }
        }
    }
}

#[test]
fn encoding_agrees_with_the_vectors() {
    let (max, vectors) = load();
    let mut checked = 0;
    for v in vectors.iter().filter(|v| v.encode) {
        let bytes: Vec<u8> = v.frames.iter().flat_map(|f| encode(f, max).unwrap()).collect();
        assert_eq!(bytes, v.bytes, "{}", v.name);
        checked += 1;
    }
    assert!(checked >= 5);
}
