//! Bash sessions: one long-lived `bash` per session, so `cd`, variables and functions carry
//! from one run to the next. After each command the session prints a random end marker with
//! the exit status on stdout and on stderr; the streams are forwarded up to the marker.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::output::{event, exit_event, pump, sse_response, Stream, Utf8Carry};
use super::process::{self, kill_group};
use super::{random_id, Execd};
use crate::http::{self, ApiError, ApiResult};

struct Session {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    output: mpsc::Receiver<(Stream, Vec<u8>)>,
    pgid: i32,
}

type Shared = Arc<tokio::sync::Mutex<Option<Session>>>;

#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Shared>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    #[serde(default)]
    cwd: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunRequest {
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    timeout: Option<u64>,
}

pub async fn create(state: Arc<Execd>, req: Request<Incoming>) -> ApiResult {
    let body: CreateRequest = http::read_json_or_default(req).await?;
    let shell = process::shell();
    let mut cmd = tokio::process::Command::new(shell);
    // bash without profiles; plain sh (busybox images) takes no such flags.
    if shell.ends_with("bash") {
        cmd.args(["--noprofile", "--norc"]);
    }
    cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &body.cwd {
        if !std::path::Path::new(cwd).is_dir() {
            return Err(ApiError::bad_request("INVALID_REQUEST_BODY", format!("field 'cwd': '{cwd}' is not a directory")));
        }
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn().map_err(|e| ApiError::runtime(format!("cannot start {shell}: {e}")))?;
    let (tx, output) = mpsc::channel(4);
    pump(child.stdout.take().expect("piped"), Stream::Stdout, tx.clone());
    pump(child.stderr.take().expect("piped"), Stream::Stderr, tx);
    let stdin = child.stdin.take().expect("piped");
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let id = random_id();
    let session = Session { child, stdin, output, pgid };
    state.sessions.map.lock().unwrap().insert(id.clone(), Arc::new(tokio::sync::Mutex::new(Some(session))));
    Ok(http::json(&json!({"session_id": id})))
}

fn lookup(state: &Execd, id: &str) -> Result<Shared, ApiError> {
    state
        .sessions
        .map
        .lock()
        .unwrap()
        .get(id)
        .cloned()
        .ok_or_else(|| ApiError::not_found("SESSION_NOT_FOUND", format!("no bash session with id '{id}'")))
}

pub async fn delete(state: &Execd, id: &str) -> ApiResult {
    let shared = lookup(state, id)?;
    state.sessions.map.lock().unwrap().remove(id);
    if let Some(mut s) = shared.lock().await.take() {
        kill_group(s.pgid);
        let _ = s.child.wait().await;
    }
    Ok(http::ok_empty())
}

fn single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Finds the end marker in one stream. Bytes that might be the start of a marker are held
/// back until the next chunk shows whether they are.
struct MarkerScan {
    marker: Vec<u8>,
    held: Vec<u8>,
    done: Option<i32>,
}

impl MarkerScan {
    fn new(marker: &str) -> Self {
        MarkerScan { marker: marker.as_bytes().to_vec(), held: Vec::new(), done: None }
    }

    /// Returns the bytes that are surely command output.
    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done.is_some() {
            return Vec::new();
        }
        self.held.extend_from_slice(chunk);
        if let Some(at) = find(&self.held, &self.marker) {
            let tail = &self.held[at + self.marker.len()..];
            if let Some(nl) = tail.iter().position(|b| *b == b'\n') {
                let code = std::str::from_utf8(&tail[..nl]).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
                self.done = Some(code);
                let out = self.held[..at].to_vec();
                self.held.clear();
                return out;
            }
            // Marker seen, status line not complete yet: keep everything from the marker on.
            let out = self.held[..at].to_vec();
            self.held.drain(..at);
            return out;
        }
        let keep = (self.marker.len() - 1).min(self.held.len());
        // Only a suffix that is a prefix of the marker can be the start of one.
        let mut hold_from = self.held.len();
        for k in (1..=keep).rev() {
            if self.held.ends_with(&self.marker[..k]) {
                hold_from = self.held.len() - k;
                break;
            }
        }
        let out = self.held[..hold_from].to_vec();
        self.held.drain(..hold_from);
        out
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub async fn run(state: Arc<Execd>, id: &str, req: Request<Incoming>) -> ApiResult {
    let shared = lookup(&state, id)?;
    let body: RunRequest = http::read_json(req).await?;
    if body.command.trim().is_empty() {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", "field 'command' is empty"));
    }
    if body.timeout == Some(0) {
        return Err(ApiError::bad_request("INVALID_REQUEST_BODY", "field 'timeout' must be at least 1 (milliseconds)"));
    }
    let marker = format!("__SANDBOX_GUEST_END_{}__", random_id());
    let cd = body.cwd.as_deref().map(|c| format!("cd -- {} && ", single_quote(c))).unwrap_or_default();
    // stdin of the command is /dev/null so it cannot swallow the marker lines that follow.
    let script = format!(
        "{cd}{{ {}\n}} </dev/null\n__sg_rc=$?; printf '%s%d\\n' '{marker}' \"$__sg_rc\"; printf '%s%d\\n' '{marker}' \"$__sg_rc\" >&2\n",
        body.command
    );
    let ping_every = Duration::from_millis(state.config.ping_interval_ms);
    let (tx, resp_body) = http::channel_body(8);
    let id = id.to_string();
    tokio::spawn(async move {
        let started = Instant::now();
        let mut guard = shared.lock().await;
        let Some(session) = guard.as_mut() else {
            let _ = tx.send(event(json!({"type": "error", "error": {"ename": "SessionClosed", "evalue": "-1", "traceback": ["the session was deleted"]}}))).await;
            return;
        };
        // Output a previous command left behind (background jobs) does not belong to this run.
        while session.output.try_recv().is_ok() {}
        let _ = tx.send(event(json!({"type": "init", "text": id}))).await;
        if session.stdin.write_all(script.as_bytes()).await.is_err() {
            *guard = None;
            state.sessions.map.lock().unwrap().remove(&id);
            let _ = tx.send(exit_event(-1, started, Some("the session's shell has exited".into()))).await;
            return;
        }
        let mut scans = [MarkerScan::new(&marker), MarkerScan::new(&marker)];
        let mut carry = [Utf8Carry::default(), Utf8Carry::default()];
        let deadline = body.timeout.map(|t| tokio::time::Instant::now() + Duration::from_millis(t));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        let mut dead = None;
        while scans.iter().any(|s| s.done.is_none()) {
            tokio::select! {
                chunk = session.output.recv() => match chunk {
                    Some((which, bytes)) => {
                        let i = which as usize;
                        let text = carry[i].push(&scans[i].push(&bytes));
                        if !text.is_empty() && tx.send(event(json!({"type": which.name(), "text": text}))).await.is_err() {
                            dead = Some((130, "the client went away".to_string()));
                            break;
                        }
                    }
                    None => { dead = Some((-1, "the session's shell has exited".to_string())); break; }
                },
                _ = ticker.tick() => { let _ = tx.send(event(json!({"type": "ping"}))).await; }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    dead = Some((137, format!("command timed out after {} ms; the session was closed", body.timeout.unwrap_or(0))));
                    break;
                }
            }
        }
        for (i, which) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
            let text = carry[i].finish();
            if !text.is_empty() {
                let _ = tx.send(event(json!({"type": which.name(), "text": text}))).await;
            }
        }
        match dead {
            Some((code, note)) => {
                // A shell in an unknown state cannot run the next command: end the session.
                kill_group(session.pgid);
                let _ = session.child.wait().await;
                *guard = None;
                state.sessions.map.lock().unwrap().remove(&id);
                let _ = tx.send(exit_event(code, started, Some(note))).await;
            }
            None => {
                let code = scans[0].done.unwrap_or(0);
                let _ = tx.send(exit_event(code, started, None)).await;
            }
        }
    });
    Ok(sse_response(resp_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_found_across_chunk_boundaries() {
        let marker = "__END_x__";
        let stream = b"hello __E wor__END_x__3\nrest";
        for cut in 0..stream.len() {
            let mut scan = MarkerScan::new(marker);
            let mut out = scan.push(&stream[..cut]);
            out.extend(scan.push(&stream[cut..]));
            assert_eq!(String::from_utf8(out).unwrap(), "hello __E wor", "cut at {cut}");
            assert_eq!(scan.done, Some(3));
        }
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(single_quote("a'b"), r"'a'\''b'");
    }
}
