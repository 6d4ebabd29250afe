//! Finding files by glob pattern below a directory (`GET /files/search`) and replacing text in
//! files (`POST /files/replace`).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::info::{file_info, Ownership};
use super::staged::Staged;
use super::{blocking, checked_path, io_error, open_regular};
use crate::http::{self, ApiError, ApiResult};

/// One element of a glob pattern.
enum Glob {
    /// `*` (within a path segment) or, with `crosses`, `**` (across `/` too).
    Star { crosses: bool },
    /// `?`: any one character but `/`.
    One,
    /// `[abc]`, `[a-z]`, `[!x]`: one character in (or, negated, not in) the set.
    Class { set: Vec<char>, negated: bool },
    Literal(char),
}

/// Parses a shell-style glob: `*` and `?` stop at `/`, `**` crosses it, `[abc]`/`[a-z]`/`[!x]`
/// classes (`]` right after the `[` or `[!` belongs to the set; a `[` never closed is literal).
fn parse_glob(pattern: &str) -> Vec<Glob> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (glob, width) = match chars[i] {
            '*' if chars.get(i + 1) == Some(&'*') => (Glob::Star { crosses: true }, 2),
            '*' => (Glob::Star { crosses: false }, 1),
            '?' => (Glob::One, 1),
            '[' => match class_end(&chars, i) {
                Some(close) => {
                    let set = &chars[i + 1..close];
                    let negated = matches!(set.first(), Some('!' | '^'));
                    (Glob::Class { set: set[usize::from(negated)..].to_vec(), negated }, close + 1 - i)
                }
                None => (Glob::Literal('['), 1),
            },
            c => (Glob::Literal(c), 1),
        };
        out.push(glob);
        i += width;
    }
    out
}

/// Where the class opened by the `[` at `open` closes: the first `]` after the one character
/// that may be `]` itself.
fn class_end(chars: &[char], open: usize) -> Option<usize> {
    chars.iter().skip(open + 2).position(|c| *c == ']').map(|p| open + 2 + p)
}

/// Whether `c` is in a class's set, with `a-z` ranges.
fn in_class(set: &[char], c: char) -> bool {
    let mut i = 0;
    while i < set.len() {
        if i + 2 < set.len() && set[i + 1] == '-' {
            if set[i] <= c && c <= set[i + 2] {
                return true;
            }
            i += 3;
        } else {
            if set[i] == c {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// Matches `text` against a parsed glob in O(text × pattern) steps, whatever the pattern: the
/// positions in the pattern the text so far can have reached are carried along together, where
/// trying one star's extent after another's (backtracking) takes exponential time on patterns
/// like `*a*a*a*a*b`.
fn glob_match(pattern: &[Glob], text: &str) -> bool {
    // reached[i]: the text read so far matches pattern[..i]. A star also matches nothing, so
    // reaching a star reaches what follows it.
    let close = |reached: &mut [bool]| {
        for i in 0..pattern.len() {
            if reached[i] && matches!(pattern[i], Glob::Star { .. }) {
                reached[i + 1] = true;
            }
        }
    };
    let mut reached = vec![false; pattern.len() + 1];
    reached[0] = true;
    close(&mut reached);
    for c in text.chars() {
        let mut next = vec![false; pattern.len() + 1];
        for (i, glob) in pattern.iter().enumerate().filter(|(i, _)| reached[*i]) {
            match glob {
                Glob::Star { crosses } => next[i] |= *crosses || c != '/',
                Glob::One => next[i + 1] |= c != '/',
                Glob::Class { set, negated } => next[i + 1] |= in_class(set, c) != *negated,
                Glob::Literal(l) => next[i + 1] |= *l == c,
            }
        }
        close(&mut next);
        if !next.contains(&true) {
            return false;
        }
        reached = next;
    }
    reached[pattern.len()]
}

/// Bytes of the JSON array gathered before they go to the client as one chunk.
const SEARCH_CHUNK_BYTES: usize = 64 * 1024;
/// A client that takes no chunk for this long has stopped reading: the search gives up its thread,
/// and the answer ends short of its closing `]`, which no JSON reader takes for a whole array.
const SEARCH_STALL: Duration = Duration::from_secs(60);

/// The matches stream out as a JSON array while the walk goes on, so a tree of millions of files
/// costs the service a few chunks of memory, not the whole answer; a client that reads slowly
/// slows the walk, and one that leaves (the body's receiver dropped) ends it at the next entry.
/// Once the answer has begun nothing can fail it: directories that cannot be read are passed over.
pub async fn search(req: Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(&req);
    let root = checked_path(&http::require_query(&pairs, "path")?, "query 'path'")?;
    let pattern = http::query_one(&pairs, "pattern").filter(|p| !p.is_empty()).unwrap_or_else(|| "*".into());
    let checked = root.clone();
    blocking(move || {
        let meta = fs::metadata(&checked).map_err(|e| io_error(&checked, e))?;
        if !meta.is_dir() {
            return Err(ApiError::bad_request("INVALID_FILE", format!("{}: is not a directory", checked.display())));
        }
        Ok(())
    })
    .await?;
    let (tx, body) = http::channel_body(4);
    let out = SearchOut { tx, runtime: tokio::runtime::Handle::current() };
    tokio::task::spawn_blocking(move || walk_matches(&root, &pattern, &out));
    let mut resp = hyper::Response::new(body);
    resp.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    Ok(resp)
}

/// Where a search's chunks go, from its blocking thread.
struct SearchOut {
    tx: mpsc::Sender<Bytes>,
    runtime: tokio::runtime::Handle,
}

impl SearchOut {
    /// Whether the client has gone.
    fn gone(&self) -> bool {
        self.tx.is_closed()
    }

    /// Sends a chunk once the client has room for it; false when it has gone or stopped reading.
    fn send(&self, chunk: Vec<u8>) -> bool {
        self.runtime.block_on(async { matches!(tokio::time::timeout(SEARCH_STALL, self.tx.send(Bytes::from(chunk))).await, Ok(Ok(()))) })
    }
}

/// Writes the FileInfo of every file below `root` that `pattern` matches to `out`, as one JSON array.
fn walk_matches(root: &Path, pattern: &str, out: &SearchOut) {
    let glob = parse_glob(pattern);
    // A pattern with a slash matches the path below the root, otherwise the file name.
    let by_path = pattern.contains('/');
    let mut chunk = Vec::with_capacity(SEARCH_CHUNK_BYTES + 4096);
    chunk.push(b'[');
    let mut first = true;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if out.gone() {
                return;
            }
            let path = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                stack.push(path.clone());
                continue;
            }
            let subject = if by_path { path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned() } else { entry.file_name().to_string_lossy().into_owned() };
            if !glob_match(&glob, &subject) {
                continue;
            }
            let Ok(info) = file_info(&path) else { continue };
            if !first {
                chunk.push(b',');
            }
            first = false;
            serde_json::to_writer(&mut chunk, &info).expect("a JSON value serializes");
            if chunk.len() >= SEARCH_CHUNK_BYTES && !out.send(std::mem::take(&mut chunk)) {
                return;
            }
        }
    }
    chunk.push(b']');
    out.send(chunk);
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
            let n = replace_in_file(&p, &item.old, &item.new)?;
            counts.insert(raw, json!({"replacedCount": n}));
        }
        Ok(counts)
    })
    .await?;
    Ok(if verbose { http::json(&Value::Object(counts)) } else { http::ok_empty() })
}

/// Replaces every `old` in the UTF-8 text file `path` with `new` and returns how many there
/// were. The file streams through a staged copy, so memory stays bounded whatever its size. The
/// copy then takes the file's place with its owner and mode, and readers see the old text or the
/// new, never a mix; but a file that is more than its name (`has_identity`) is written over in
/// place instead, as an editor does, so that its other links and its attributes see the new text.
/// A first pass only counts: a file without `old` (or not UTF-8 text) is left as it was, not
/// copied. A symlink at `path` is refused: a workload could point it at a file it may not write.
fn replace_in_file(path: &Path, old: &str, new: &str) -> Result<usize, ApiError> {
    let (mut src, meta) = open_regular(path, true)?;
    if splice_file(&mut src, path, old, new, &mut io::sink())? == 0 {
        return Ok(0);
    }
    src.seek(io::SeekFrom::Start(0)).map_err(|e| io_error(path, e))?;
    let staged = Staged::create(path, "replace")?;
    let mut out = io::BufWriter::new(&staged.file);
    let count = splice_file(&mut src, path, old, new, &mut out)?;
    out.flush().map_err(|e| io_error(path, e))?;
    drop(out);
    if has_identity(&src, &meta) {
        write_in_place(&src, path, &staged.file)?;
    } else {
        staged.commit(&Ownership::of(&meta))?;
    }
    Ok(count)
}

/// Whether a file is more than its name: other hard links, or extended attributes (ACLs, labels,
/// user attributes) that a new file taking its place would not carry.
fn has_identity(file: &fs::File, meta: &fs::Metadata) -> bool {
    // SAFETY: flistxattr on a descriptor `file` owns, asking only for the size of the list.
    meta.nlink() > 1 || unsafe { libc::flistxattr(file.as_raw_fd(), std::ptr::null_mut(), 0) } > 0
}

/// Writes `text` over the file open as `file` (named `path` in errors), which keeps its inode,
/// links and attributes. It is reopened for writing through its descriptor: the same file,
/// whatever a workload has put at `path` meanwhile.
fn write_in_place(file: &fs::File, path: &Path, mut text: &fs::File) -> Result<(), ApiError> {
    let mut target = fs::OpenOptions::new().write(true).open(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|e| io_error(path, e))?;
    text.seek(io::SeekFrom::Start(0)).map_err(|e| io_error(path, e))?;
    // Written over from the start, then cut to length: the file is never empty on the way.
    let written = io::copy(&mut text, &mut target).map_err(|e| io_error(path, e))?;
    target.set_len(written).map_err(|e| io_error(path, e))
}

/// How much of a file `POST /files/replace` reads at a time.
const REPLACE_CHUNK: usize = 1 << 20;

/// Streams `src` (named `path` in errors) to `out` with every `old` replaced by `new`; returns
/// how many there were.
fn splice_file(src: &mut fs::File, path: &Path, old: &str, new: &str, out: &mut impl Write) -> Result<usize, ApiError> {
    let mut splice = Splice { old, new, held: Vec::new(), count: 0 };
    let mut buf = vec![0u8; REPLACE_CHUNK];
    let spliced: io::Result<()> = (|| loop {
        let n = match src.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            read => read?,
        };
        splice.push(&buf[..n], out)?;
        if n == 0 {
            return Ok(());
        }
    })();
    spliced.map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => ApiError::bad_request("INVALID_FILE_CONTENT", format!("{}: not a UTF-8 text file", path.display())),
        _ => io_error(path, e),
    })?;
    Ok(splice.count)
}

/// Find-and-replace over UTF-8 text that arrives in pieces. What no match can still straddle
/// is written at once; only the rest (less than `old` and a character) is held for the next
/// piece. Matches are found as `str::replace` finds them: leftmost first, not overlapping.
struct Splice<'a> {
    old: &'a str,
    new: &'a str,
    held: Vec<u8>,
    count: usize,
}

impl Splice<'_> {
    /// Takes the next piece of input (empty at its end) and writes what is settled to `out`;
    /// input that is not UTF-8 is an `InvalidData` error.
    fn push(&mut self, input: &[u8], out: &mut impl Write) -> io::Result<()> {
        let end = input.is_empty();
        self.held.extend_from_slice(input);
        let valid = match std::str::from_utf8(&self.held) {
            Ok(text) => text.len(),
            // A character cut at the end of a piece is completed by the next one.
            Err(e) if e.error_len().is_none() && !end => e.valid_up_to(),
            Err(_) => return Err(io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
        };
        let text = std::str::from_utf8(&self.held[..valid]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        // A match starting before `settled` ends within `text`; one starting later might not.
        let mut settled = if end { valid } else { valid.saturating_sub(self.old.len() - 1) };
        while !text.is_char_boundary(settled) {
            settled -= 1;
        }
        let mut done = 0;
        for (at, _) in text.match_indices(self.old).take_while(|(at, _)| *at < settled) {
            out.write_all(&text.as_bytes()[done..at])?;
            out.write_all(self.new.as_bytes())?;
            done = at + self.old.len();
            self.count += 1;
        }
        let settled = settled.max(done);
        out.write_all(&text.as_bytes()[done..settled])?;
        self.held.drain(..settled);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str, t: &str) -> bool {
        glob_match(&parse_glob(p), t)
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
        assert!(g("[]]", "]"));
        assert!(g("[x", "[x"));
        assert!(!g("?", "/"));
        assert!(g("a**", "a/b/c"));
        assert!(!g("a*", "a/b"));
        assert!(g("", ""));
        assert!(!g("", "a"));
    }

    /// The recursive matcher the linear one replaced, as the oracle it must agree with.
    fn backtracking(pattern: &[char], text: &[char]) -> bool {
        match pattern.first() {
            None => text.is_empty(),
            Some('*') if pattern.get(1) == Some(&'*') => (0..=text.len()).any(|i| backtracking(&pattern[2..], &text[i..])),
            Some('*') => (0..=text.len()).take_while(|i| *i == 0 || text[i - 1] != '/').any(|i| backtracking(&pattern[1..], &text[i..])),
            Some('?') => text.first().is_some_and(|c| *c != '/') && backtracking(&pattern[1..], &text[1..]),
            Some('[') => {
                let Some(close) = class_end(pattern, 0) else {
                    return text.first() == Some(&'[') && backtracking(&pattern[1..], &text[1..]);
                };
                let Some(c) = text.first() else { return false };
                let class = &pattern[1..close];
                let negated = matches!(class.first(), Some('!' | '^'));
                in_class(&class[usize::from(negated)..], *c) != negated && backtracking(&pattern[close + 1..], &text[1..])
            }
            Some(p) => text.first() == Some(p) && backtracking(&pattern[1..], &text[1..]),
        }
    }

    #[test]
    fn the_linear_matcher_agrees_with_backtracking_on_every_short_pattern() {
        let words = |alphabet: &'static [char], len: usize| -> Vec<Vec<char>> {
            let n = alphabet.len();
            (0..n.pow(len as u32)).map(|mut k| (0..len).map(|_| { let c = alphabet[k % n]; k /= n; c }).collect()).collect()
        };
        let texts: Vec<Vec<char>> = (0..=3).flat_map(|len| words(&['a', 'b', '/', '[', ']', '-'], len)).collect();
        for pattern in (0..=4).flat_map(|len| words(&['a', 'b', '/', '*', '?', '[', ']', '!', '-'], len)) {
            let parsed = parse_glob(&pattern.iter().collect::<String>());
            for text in &texts {
                let t: String = text.iter().collect();
                assert_eq!(glob_match(&parsed, &t), backtracking(&pattern, text), "pattern {pattern:?} text {t:?}");
            }
        }
    }

    #[test]
    fn many_stars_against_a_long_name_take_linear_time() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let name = "a".repeat(100);
            let _ = tx.send((g("*a*a*a*a*a*a*a*a*a*a*b", &name), g(&"*a".repeat(40), &name)));
        });
        // Backtracking takes longer than the age of the universe here.
        let got = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("the match did not finish within 5 s");
        assert_eq!(got, (false, true));
    }

    fn splice(input: &[&[u8]], old: &str, new: &str) -> io::Result<(String, usize)> {
        let mut s = Splice { old, new, held: Vec::new(), count: 0 };
        let mut out = Vec::new();
        for piece in input.iter().copied().chain(std::iter::once(&b""[..])) {
            s.push(piece, &mut out)?;
        }
        Ok((String::from_utf8(out).unwrap(), s.count))
    }

    #[test]
    fn splicing_in_pieces_replaces_as_str_replace_does() {
        let text = "héllo wörld, ö and öö: aaaa";
        for (old, new) in [("ö", "oe"), ("aa", "b"), ("wörld", ""), ("x", "y"), ("aaaa", "<4>"), ("é", "ééé")] {
            let want = (text.replace(old, new), text.matches(old).count());
            // Every way to cut the text in two, also inside a character.
            for cut in 0..=text.len() {
                let (a, b) = text.as_bytes().split_at(cut);
                assert_eq!(splice(&[a, b], old, new).unwrap(), want, "{old:?} cut at {cut}");
            }
            let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
            assert_eq!(splice(&bytes, old, new).unwrap(), want, "{old:?} byte by byte");
        }
    }

    #[test]
    fn splicing_refuses_what_is_not_utf8() {
        assert_eq!(splice(&[b"ab\xffcd"], "a", "b").unwrap_err().kind(), io::ErrorKind::InvalidData);
        // A character cut at the very end never completes.
        assert_eq!(splice(&[b"ab\xc3"], "a", "b").unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
