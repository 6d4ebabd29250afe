//! Bash sessions: one long-lived `bash` per session, so `cd`, variables and functions carry
//! from one run to the next. The shell keeps private copies of its stdout and stderr (fds
//! `OUT_FD` and `ERR_FD`, closed while the command runs); after each command it prints a
//! random end marker with the exit status on both, so the streams are forwarded up to the
//! markers, which arrive whatever the command did with its own fds 1 and 2.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::command::{check_command, check_cwd, check_no_nul};
use super::output::{event, exit_event, pump, sleep_until, sse_response, Stream, Utf8Carry};
use super::process::{self, kill_group, single_quote};
use super::{random_id, Execd};
use crate::http::{self, ApiError, ApiResult};

/// The shell's private copies of its stdout and stderr, where the end markers go. Above the
/// single digits scripts use; bash and busybox sh take them (dash would not, but where
/// /bin/bash is missing /bin/sh is busybox).
const OUT_FD: u32 = 61;
const ERR_FD: u32 = 62;
/// How long a run whose client went away waits, once its command was killed, for the shell to
/// finish the run before the session is given up.
const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How long ending a session waits for its shell, and then for the rest of its process group,
/// to go.
const REAP_WITHIN: Duration = Duration::from_secs(2);

struct Session {
    /// The shell's process group (its pid): the shell and every command it runs.
    pgid: i32,
    /// The shell until the session ends; whoever ends the session takes and reaps it.
    shell: Mutex<Option<tokio::process::Child>>,
    /// The shell's input and output, held by the run in progress (runs queue for it).
    io: tokio::sync::Mutex<Io>,
}

struct Io {
    stdin: tokio::process::ChildStdin,
    output: mpsc::Receiver<(Stream, Vec<u8>)>,
}

impl Session {
    fn ended(&self) -> bool {
        self.shell.lock().unwrap().is_none()
    }

    /// Kills the shell and its whole process group and waits, bounded, for them to go. It
    /// never waits for a run: the run in progress sees the shell's output end and says so.
    async fn end(&self) {
        let Some(mut shell) = self.shell.lock().unwrap().take() else { return };
        // Before the reap, while the group's number cannot have been reused.
        kill_group(self.pgid);
        let _ = tokio::time::timeout(REAP_WITHIN, shell.wait()).await;
        process::wait_group_gone(self.pgid, REAP_WITHIN).await;
    }
}

#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn get(&self, id: &str) -> Result<Arc<Session>, ApiError> {
        self.map.lock().unwrap().get(id).cloned().ok_or_else(|| not_found(id))
    }

    fn remove(&self, id: &str) -> Option<Arc<Session>> {
        self.map.lock().unwrap().remove(id)
    }

    /// Ends every session: the service is stopping, and no shell may outlive it.
    pub async fn end_all(&self) {
        let all: Vec<Arc<Session>> = self.map.lock().unwrap().drain().map(|(_, s)| s).collect();
        futures_util::future::join_all(all.iter().map(|s| s.end())).await;
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found("SESSION_NOT_FOUND", format!("no bash session with id '{id}'"))
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
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    process::die_with_service(&mut cmd);
    if let Some(cwd) = &body.cwd {
        check_cwd(cwd)?;
        cmd.current_dir(cwd);
    }
    state.env_file.apply(&mut cmd)?;
    let mut child = cmd.spawn().map_err(|e| ApiError::runtime(format!("cannot start {shell}: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin
        .write_all(format!("exec {OUT_FD}>&1 {ERR_FD}>&2\n").as_bytes())
        .await
        .map_err(|e| ApiError::runtime(format!("{shell} did not start: {e}")))?;
    let (tx, output) = mpsc::channel(4);
    pump(child.stdout.take().expect("piped"), Stream::Stdout, tx.clone());
    pump(child.stderr.take().expect("piped"), Stream::Stderr, tx);
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let session = Session { pgid, shell: Mutex::new(Some(child)), io: tokio::sync::Mutex::new(Io { stdin, output }) };
    let id = random_id();
    state.sessions.map.lock().unwrap().insert(id.clone(), Arc::new(session));
    Ok(http::json(&json!({"session_id": id})))
}

/// Ends the session at once, also while a run is in progress (that run reports it).
pub async fn delete(state: &Execd, id: &str) -> ApiResult {
    state.sessions.remove(id).ok_or_else(|| not_found(id))?.end().await;
    Ok(http::ok_empty())
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

/// What the shell reads for one run. The command is one quoted word for `eval`, so no quote
/// or brace it leaves open can swallow what follows; its stdin is /dev/null, so it cannot eat
/// the lines after it either; the private fds are closed while it runs (bash puts them back
/// afterwards), so only a command naming them could write there. `command` skips any function
/// the user named `eval` or `printf`.
fn script(body: &RunRequest, marker: &str) -> String {
    let cd = body.cwd.as_deref().map(|c| format!("cd -- {} && ", single_quote(c))).unwrap_or_default();
    let command = single_quote(&body.command);
    format!(
        "{cd}{{ command eval {command}\n}} </dev/null {OUT_FD}>&- {ERR_FD}>&-\n\
         __sg_rc=$?; command printf '%s%d\\n' '{marker}' \"$__sg_rc\" >&{OUT_FD}; \
         command printf '%s%d\\n' '{marker}' \"$__sg_rc\" >&{ERR_FD}\n"
    )
}

fn validate(body: &RunRequest) -> Result<(), ApiError> {
    check_command(&body.command, body.timeout)?;
    match &body.cwd {
        // A relative cwd is relative to where the session's shell is: `cd` judges it.
        Some(cwd) if cwd.starts_with('/') => check_cwd(cwd),
        Some(cwd) => check_no_nul("cwd", cwd),
        None => Ok(()),
    }
}

/// How a run ended.
enum Ending {
    /// The command ended with this status; the session goes on.
    Exited(i32),
    /// It ran past its timeout.
    TimedOut,
    /// The shell's output ended: the shell exited, or the session was deleted.
    Lost,
    /// The client went away and the shell did not finish the run in time.
    Abandoned,
}

pub async fn run(state: Arc<Execd>, id: &str, req: Request<Incoming>) -> ApiResult {
    let session = state.sessions.get(id)?;
    let body: RunRequest = http::read_json(req).await?;
    validate(&body)?;
    let marker = format!("__SANDBOX_GUEST_END_{}__", random_id());
    let script = script(&body, &marker);
    let ping_every = Duration::from_millis(state.config.ping_interval_ms);
    let (tx, resp_body) = http::channel_body(8);
    let id = id.to_string();
    tokio::spawn(async move {
        let started = Instant::now();
        let mut io = session.io.lock().await;
        if session.ended() {
            let _ = tx.send(event(json!({"type": "error", "error": {"ename": "SessionClosed", "evalue": "-1", "traceback": ["the session was deleted"]}}))).await;
            return;
        }
        // Output a previous command left behind (background jobs) does not belong to this run.
        while io.output.try_recv().is_ok() {}
        let _ = tx.send(event(json!({"type": "init", "text": id}))).await;
        let ending = match io.stdin.write_all(script.as_bytes()).await {
            Ok(()) => forward(&mut io.output, &marker, &tx, body.timeout, ping_every, session.pgid).await,
            Err(_) => Ending::Lost,
        };
        drop(io);
        let (code, note) = match ending {
            Ending::Exited(code) => (code, None),
            // A shell in an unknown state cannot run the next command: end the session.
            Ending::TimedOut => (137, Some(format!("command timed out after {} ms; the session was closed", body.timeout.unwrap_or(0)))),
            Ending::Lost if session.ended() => (-1, Some("the session was deleted".to_string())),
            Ending::Lost => (-1, Some("the session's shell has exited".to_string())),
            Ending::Abandoned => (-1, None),
        };
        if !matches!(ending, Ending::Exited(_)) {
            state.sessions.remove(&id);
            session.end().await;
        }
        let _ = tx.send(exit_event(code, started, note)).await;
    });
    Ok(sse_response(resp_body))
}

/// Forwards the shell's output to the client up to the end markers. When the client goes away
/// (an event or a ping cannot be sent), the command and everything it started are killed and
/// the shell gets `CANCEL_GRACE` to finish the run, so the session survives its client.
async fn forward(
    output: &mut mpsc::Receiver<(Stream, Vec<u8>)>,
    marker: &str,
    tx: &mpsc::Sender<Bytes>,
    timeout: Option<u64>,
    ping_every: Duration,
    pgid: i32,
) -> Ending {
    let mut scans = [MarkerScan::new(marker), MarkerScan::new(marker)];
    let mut carry = [Utf8Carry::default(), Utf8Carry::default()];
    let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_millis(t));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    let mut abandon_at = None;
    let ending = loop {
        if let (Some(code), Some(_)) = (scans[0].done, scans[1].done) {
            break Ending::Exited(code);
        }
        let listening = abandon_at.is_none();
        let sent = tokio::select! {
            chunk = output.recv() => match chunk {
                Some((which, bytes)) => {
                    let i = which as usize;
                    let text = carry[i].push(&scans[i].push(&bytes));
                    !listening || text.is_empty() || tx.send(event(json!({"type": which.name(), "text": text}))).await.is_ok()
                }
                None => break Ending::Lost,
            },
            _ = ticker.tick(), if listening => tx.send(event(json!({"type": "ping"}))).await.is_ok(),
            // The connection closed (its response body dropped): known now, not at the next ping.
            () = tx.closed(), if listening => false,
            _ = sleep_until(deadline) => break Ending::TimedOut,
            _ = sleep_until(abandon_at) => break Ending::Abandoned,
        };
        if !sent {
            let _ = tokio::task::spawn_blocking(move || process::kill_group_but_leader(pgid)).await;
            abandon_at = Some(tokio::time::Instant::now() + CANCEL_GRACE);
        }
    };
    if abandon_at.is_none() {
        for (i, which) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
            let text = carry[i].finish();
            if !text.is_empty() {
                let _ = tx.send(event(json!({"type": which.name(), "text": text}))).await;
            }
        }
    }
    ending
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
