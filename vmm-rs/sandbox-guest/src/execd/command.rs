//! `POST /command` and friends. Output is forwarded as SSE events the moment a read returns,
//! so a client sees a line as soon as the command writes it; the response channel is small so
//! a slow client applies back-pressure to the command instead of growing a buffer.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::Request;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::output::{event, exit_event, pump, sleep_until, sse_response, Stream, Utf8Carry};
use super::process::{die_with_service, exit_code, kill_group, shell, single_quote};
use super::env_file::EnvFile;
use super::{random_id, Execd};
use crate::http::{self, ApiError, ApiResult};

/// Finished command records kept for status queries; older finished ones are dropped first.
const MAX_RECORDS: usize = 4096;
/// Largest slice of a background log returned by one `logs` call; the cursor pages on.
const MAX_LOG_SLICE: u64 = 4 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Shell text; `argv` is the other way to name what to run, and exactly one is given.
    #[serde(default)]
    pub command: Option<String>,
    /// A program and its literal arguments, run without a shell (newer SDKs send a list as this).
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub background: bool,
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Wider than an id so that an out-of-range value is refused naming its field.
    #[serde(default)]
    pub uid: Option<i64>,
    #[serde(default)]
    pub gid: Option<i64>,
    #[serde(default)]
    pub envs: Option<HashMap<String, String>>,
}

#[derive(Default)]
struct Outcome {
    running: bool,
    exit_code: Option<i32>,
    error: Option<String>,
    finished_at: Option<u64>,
}

pub struct Record {
    command: String,
    started_at: u64,
    /// Process group id (the command leads its own group) so a kill reaches its children too.
    pgid: i32,
    log: Option<PathBuf>,
    outcome: Mutex<Outcome>,
}

pub struct Registry {
    log_dir: PathBuf,
    records: Mutex<HashMap<String, Arc<Record>>>,
}

impl Registry {
    pub fn new(log_dir: PathBuf) -> Self {
        Registry { log_dir, records: Mutex::new(HashMap::new()) }
    }

    fn insert(&self, id: String, record: Arc<Record>) {
        let mut records = self.records.lock().unwrap();
        if records.len() >= MAX_RECORDS {
            let mut finished: Vec<(u64, String)> = records
                .iter()
                .filter_map(|(k, r)| r.outcome.lock().unwrap().finished_at.map(|t| (t, k.clone())))
                .collect();
            finished.sort();
            for (_, k) in finished.into_iter().take(MAX_RECORDS / 4) {
                if let Some(r) = records.remove(&k) {
                    if let Some(log) = &r.log {
                        let _ = std::fs::remove_file(log);
                    }
                }
            }
        }
        records.insert(id, record);
    }

    fn get(&self, id: &str) -> Result<Arc<Record>, ApiError> {
        self.records
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::not_found("COMMAND_NOT_FOUND", format!("no command with id '{id}'")))
    }

    /// Kills every foreground command: the service is stopping and their clients with it.
    /// Background commands were started to outlive their request (a server, say) and stay.
    pub fn kill_foreground(&self) {
        for record in self.records.lock().unwrap().values() {
            if record.log.is_none() && record.outcome.lock().unwrap().running {
                kill_group(record.pgid);
            }
        }
    }

    /// A new log file for command `id`, readable by the service's user only: it may hold
    /// whatever a command run as root printed.
    fn create_log(&self, id: &str) -> io::Result<(PathBuf, std::fs::File)> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.log_dir)?;
        let path = self.log_dir.join(format!("{id}.log"));
        let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        Ok((path, file))
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::bad_request("INVALID_REQUEST_BODY", message)
}

/// Refuses a NUL byte, which no argument, variable or path can hold.
pub fn check_no_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        return Err(invalid(format!("field '{field}' contains a NUL byte")));
    }
    Ok(())
}

pub fn check_cwd(cwd: &str) -> Result<(), ApiError> {
    if !std::path::Path::new(cwd).is_dir() {
        return Err(invalid(format!("field 'cwd': '{cwd}' is not a directory")));
    }
    Ok(())
}

/// A user or group id: 0 to 2^32 - 2, as (uid_t)-1 means "unchanged" to the kernel.
fn check_id(field: &str, id: Option<i64>) -> Result<Option<u32>, ApiError> {
    match id {
        Some(n) if !(0..i64::from(u32::MAX)).contains(&n) => Err(invalid(format!("field '{field}': {n} is not an id from 0 to {}", u32::MAX - 1))),
        _ => Ok(id.map(|n| n as u32)),
    }
}

/// The checks a command and a session run share: a command that is there, and a timeout that
/// leaves it time to run.
pub fn check_command(command: &str, timeout: Option<u64>) -> Result<(), ApiError> {
    if command.trim().is_empty() {
        return Err(invalid("field 'command' is empty".into()));
    }
    check_no_nul("command", command)?;
    check_timeout(timeout)
}

fn check_timeout(timeout: Option<u64>) -> Result<(), ApiError> {
    if timeout == Some(0) {
        return Err(invalid("field 'timeout' must be at least 1 (milliseconds)".into()));
    }
    Ok(())
}

fn check_argv(argv: &[String]) -> Result<(), ApiError> {
    match argv.first() {
        None => return Err(invalid("field 'argv' is empty: it needs at least the program to run".into())),
        Some(program) if program.is_empty() => return Err(invalid("field 'argv[0]' is empty: it names the program to run".into())),
        _ => {}
    }
    argv.iter().enumerate().try_for_each(|(i, arg)| check_no_nul(&format!("argv[{i}]"), arg))
}

/// What a request runs: shell text, or a program with literal arguments.
enum Program<'a> {
    Shell(&'a str),
    Argv(&'a [String]),
}

impl RunRequest {
    fn program(&self) -> Program<'_> {
        match (&self.command, &self.argv) {
            (Some(command), _) => Program::Shell(command),
            (None, Some(argv)) => Program::Argv(argv),
            (None, None) => unreachable!("validate refuses a request without command or argv"),
        }
    }

    /// What a status query shows as the command: the text, or the arguments as a shell would read them.
    fn content(&self) -> String {
        match self.program() {
            Program::Shell(command) => command.to_string(),
            Program::Argv(argv) => argv.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" "),
        }
    }
}

/// One argument as a shell word: as it is when nothing in it is special, else single-quoted.
fn shell_word(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        arg.to_string()
    } else {
        single_quote(arg)
    }
}

/// Checks a request; returns the user and group ids to run as.
fn validate(req: &RunRequest) -> Result<(Option<u32>, Option<u32>), ApiError> {
    match (&req.command, &req.argv) {
        (Some(command), None) => check_command(command, req.timeout)?,
        (None, Some(argv)) => {
            check_argv(argv)?;
            check_timeout(req.timeout)?;
        }
        _ => return Err(invalid("give exactly one of 'command' and 'argv': shell text, or a program and its arguments".into())),
    }
    if req.gid.is_some() && req.uid.is_none() {
        return Err(invalid("field 'gid' needs 'uid'".into()));
    }
    if let Some(envs) = &req.envs {
        if let Some(bad) = envs.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
            return Err(invalid(format!("field 'envs': invalid variable name '{bad}'")));
        }
        if let Some(bad) = envs.iter().find_map(|(k, v)| v.contains('\0').then_some(k)) {
            return Err(invalid(format!("field 'envs': the value of '{bad}' contains a NUL byte")));
        }
    }
    Ok((check_id("uid", req.uid)?, check_id("gid", req.gid)?))
}

/// What a failed start means: the request's fault where the error can only come from what it
/// asked for (checked above but for what only the kernel knows), else the service's.
fn spawn_error(e: io::Error, req: &RunRequest) -> ApiError {
    match e.raw_os_error() {
        Some(libc::E2BIG) => invalid("field 'command' (or 'argv') or 'envs': the command and its environment are longer than the system allows a new process (E2BIG)".into()),
        // The directory is entered after switching user: that user may not enter it.
        Some(libc::EACCES) if req.cwd.is_some() && req.uid.is_some() => {
            invalid(format!("field 'cwd': user {} may not enter '{}'", req.uid.unwrap_or_default(), req.cwd.as_deref().unwrap_or_default()))
        }
        // Without a shell, a program that is not there (or cannot be run) fails the start itself.
        Some(libc::ENOENT | libc::EACCES | libc::ENOEXEC | libc::ENOTDIR) if req.argv.is_some() => {
            invalid(format!("field 'argv[0]': cannot run '{}': {e}", req.argv.as_deref().and_then(|a| a.first()).map(String::as_str).unwrap_or_default()))
        }
        // An id the kernel cannot map (a user namespace without it).
        Some(libc::EINVAL) if req.uid.is_some() => invalid(format!("field 'uid' or 'gid': the system cannot switch to these ids ({e})")),
        _ => ApiError::runtime(format!("cannot start command: {e}")),
    }
}

fn primary_gid(uid: u32) -> Option<u32> {
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        None
    } else {
        Some(unsafe { (*pw).pw_gid })
    }
}

fn build(req: &RunRequest, uid: Option<u32>, gid: Option<u32>, env_file: &EnvFile) -> Result<tokio::process::Command, ApiError> {
    let mut cmd = match req.program() {
        Program::Shell(command) => {
            let mut cmd = tokio::process::Command::new(shell());
            cmd.arg("-c").arg(command);
            cmd
        }
        // A bare name is looked up in the command's PATH (envs may set it); a relative path from its cwd.
        Program::Argv(argv) => {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            cmd
        }
    };
    cmd.stdin(Stdio::null()).process_group(0).kill_on_drop(false);
    if !req.background {
        die_with_service(&mut cmd);
    }
    env_file.apply(&mut cmd)?;
    if let Some(envs) = &req.envs {
        cmd.envs(envs);
    }
    if let Some(cwd) = &req.cwd {
        check_no_nul("cwd", cwd)?;
        // From the environment the command gets: what was set on it (its request's envs over the env file's), else the service's own.
        let lookup = |name: &str| {
            let set = cmd.as_std().get_envs().find(|(k, _)| *k == std::ffi::OsStr::new(name)).and_then(|(_, v)| v);
            set.map(|v| v.to_string_lossy().into_owned()).or_else(|| std::env::var(name).ok())
        };
        let cwd = super::cwd::expand(cwd, lookup).map_err(|what| invalid(format!("field 'cwd': {what}")))?;
        check_cwd(&cwd)?;
        cmd.current_dir(cwd);
    }
    if let Some(uid) = uid {
        // Without an explicit gid the user's primary group applies, as login would.
        let gid = gid.or_else(|| primary_gid(uid)).unwrap_or(uid);
        cmd.uid(uid).gid(gid);
    }
    Ok(cmd)
}

pub async fn run(state: Arc<Execd>, req: Request<Incoming>) -> ApiResult {
    let body: RunRequest = http::read_json(req).await?;
    let (uid, gid) = validate(&body)?;
    let id = random_id();
    let mut cmd = build(&body, uid, gid, &state.env_file)?;
    let log = if body.background {
        let (path, file) = state.commands.create_log(&id).map_err(|e| ApiError::runtime(format!("cannot create command log: {e}")))?;
        let dup = file.try_clone().map_err(|e| ApiError::runtime(e.to_string()))?;
        // Both streams go straight to one file: the kernel interleaves them in write order.
        cmd.stdout(Stdio::from(file)).stderr(Stdio::from(dup));
        Some(path)
    } else {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        None
    };
    let mut child = cmd.spawn().map_err(|e| {
        // A command that never started has no log to keep.
        if let Some(path) = &log {
            let _ = std::fs::remove_file(path);
        }
        spawn_error(e, &body)
    })?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let record = Arc::new(Record {
        command: body.content(),
        started_at: http::now_ms(),
        pgid,
        log,
        outcome: Mutex::new(Outcome { running: true, ..Outcome::default() }),
    });
    state.commands.insert(id.clone(), record.clone());
    let started = Instant::now();
    let timeout = body.timeout.map(Duration::from_millis);
    let (tx, resp_body) = http::channel_body(8);
    let init = event(json!({"type": "init", "text": id}));

    if body.background {
        tokio::spawn(async move {
            let (code, note) = wait_with_timeout(&mut child, pgid, timeout).await;
            finish(&record, code, note);
        });
        let _ = tx.send(init).await;
        let _ = tx.send(event(json!({"type": "execution_complete", "execution_time": 0}))).await;
        return Ok(sse_response(resp_body));
    }

    let ping_every = Duration::from_millis(state.config.ping_interval_ms);
    let (out_tx, mut out_rx) = mpsc::channel(4);
    pump(child.stdout.take().expect("piped stdout"), Stream::Stdout, out_tx.clone());
    pump(child.stderr.take().expect("piped stderr"), Stream::Stderr, out_tx);
    tokio::spawn(async move {
        let mut client_gone = tx.send(init).await.is_err();
        let mut carry = [Utf8Carry::default(), Utf8Carry::default()];
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        let mut timed_out = false;
        let mut exited = None;
        let mut grace = None;
        while !client_gone {
            tokio::select! {
                status = child.wait(), if exited.is_none() => {
                    exited = Some(status);
                    // Output still in the pipes arrives within moments; a process the command
                    // left running in the background may hold them open for good.
                    grace = Some(tokio::time::Instant::now() + Duration::from_millis(250));
                }
                _ = sleep_until(grace), if grace.is_some() => break,
                chunk = out_rx.recv() => match chunk {
                    Some((which, bytes)) => {
                        let text = carry[which as usize].push(&bytes);
                        if !text.is_empty() {
                            client_gone = tx.send(event(json!({"type": which.name(), "text": text}))).await.is_err();
                        }
                    }
                    None => break,
                },
                _ = ticker.tick() => {
                    client_gone = tx.send(event(json!({"type": "ping"}))).await.is_err();
                }
                // The connection closed (its response body dropped): known now, not at the next ping.
                () = tx.closed() => client_gone = true,
                _ = sleep_until(deadline), if !timed_out => {
                    timed_out = true;
                    kill_group(pgid);
                }
            }
        }
        if client_gone {
            // Nobody is listening to a foreground command any more: stop it.
            kill_group(pgid);
        }
        for (i, which) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
            let text = carry[i].finish();
            if !text.is_empty() {
                let _ = tx.send(event(json!({"type": which.name(), "text": text}))).await;
            }
        }
        let status = match exited {
            Some(status) => status,
            None => child.wait().await,
        };
        let (code, note) = match status {
            Ok(s) if timed_out => (exit_code(s), Some(format!("command timed out after {} ms", timeout.unwrap_or_default().as_millis()))),
            Ok(s) => (exit_code(s), None),
            Err(e) => (-1, Some(format!("cannot wait for command: {e}"))),
        };
        finish(&record, code, note.clone());
        let _ = tx.send(exit_event(code, started, note)).await;
    });
    Ok(sse_response(resp_body))
}

async fn wait_with_timeout(child: &mut tokio::process::Child, pgid: i32, timeout: Option<Duration>) -> (i32, Option<String>) {
    let waited = match timeout {
        Some(t) => match tokio::time::timeout(t, child.wait()).await {
            Ok(r) => r,
            Err(_) => {
                kill_group(pgid);
                let r = child.wait().await;
                return (r.map(exit_code).unwrap_or(-1), Some(format!("command timed out after {} ms", t.as_millis())));
            }
        },
        None => child.wait().await,
    };
    match waited {
        Ok(s) => (exit_code(s), None),
        Err(e) => (-1, Some(format!("cannot wait for command: {e}"))),
    }
}

fn finish(record: &Record, code: i32, note: Option<String>) {
    let mut o = record.outcome.lock().unwrap();
    o.running = false;
    o.exit_code = Some(code);
    o.error = note.or_else(|| (code != 0).then(|| format!("exit status {code}")));
    o.finished_at = Some(http::now_ms());
}

pub fn interrupt(state: &Execd, req: &Request<Incoming>) -> ApiResult {
    let pairs = http::query_pairs(req);
    let id = http::require_query(&pairs, "id")?;
    let record = state.commands.get(&id)?;
    if record.outcome.lock().unwrap().running {
        kill_group(record.pgid);
    }
    Ok(http::ok_empty())
}

pub fn status(state: &Execd, id: &str) -> ApiResult {
    let record = state.commands.get(id)?;
    let o = record.outcome.lock().unwrap();
    let mut body = json!({
        "id": id,
        "content": record.command,
        "running": o.running,
        "started_at": http::rfc3339_ms(record.started_at as i64),
    });
    if let Some(code) = o.exit_code {
        body["exit_code"] = json!(code);
    }
    if let Some(err) = &o.error {
        body["error"] = json!(err);
    }
    if let Some(t) = o.finished_at {
        body["finished_at"] = json!(http::rfc3339_ms(t as i64));
    }
    Ok(http::json(&body))
}

/// Background output from byte offset `cursor` on; the `EXECD-COMMANDS-TAIL-CURSOR` header
/// tells where the next call should start.
pub async fn logs(state: &Execd, id: &str, req: &Request<Incoming>) -> ApiResult {
    let record = state.commands.get(id)?;
    let pairs = http::query_pairs(req);
    let cursor = match http::query_one(&pairs, "cursor") {
        Some(c) => c.parse::<u64>().map_err(|_| ApiError::bad_request("INVALID_REQUEST_BODY", format!("query 'cursor': '{c}' is not a non-negative integer")))?,
        None => 0,
    };
    let (content, next) = match &record.log {
        Some(path) => {
            use tokio::io::AsyncSeekExt;
            let mut file = tokio::fs::File::open(path).await.map_err(|e| ApiError::runtime(format!("cannot open command log: {e}")))?;
            let len = file.metadata().await.map_err(|e| ApiError::runtime(e.to_string()))?.len();
            let start = cursor.min(len);
            let take = (len - start).min(MAX_LOG_SLICE);
            file.seek(std::io::SeekFrom::Start(start)).await.map_err(|e| ApiError::runtime(e.to_string()))?;
            let mut buf = vec![0u8; take as usize];
            file.read_exact(&mut buf).await.map_err(|e| ApiError::runtime(e.to_string()))?;
            (buf, start + take)
        }
        // Foreground output went to the client as it was produced and is not kept.
        None => (Vec::new(), cursor),
    };
    let mut resp = http::text(hyper::StatusCode::OK, content);
    resp.headers_mut().insert("execd-commands-tail-cursor", HeaderValue::from(next));
    Ok(resp)
}
