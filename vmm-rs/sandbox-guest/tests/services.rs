//! The execution service as an attacker inside the sandbox meets it: a command running as
//! `nobody` looking for the service's token, a flood of idle half-sent connections (against
//! the egress service too), a full connection table, a FIFO offered for download, a service
//! started without a token, session commands that redirect the shell's own output or leave
//! their client, sessions deleted mid-run or outliving the service, client mistakes that must
//! not pass for server faults, and who may read background command logs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

mod common;
use common::scratch::Scratch;
use common::{is_root, skip, Service, BIN};

const TOKEN: &str = "services-test-token-0123456789abcdef0123456789";

/// Starts `sandbox-guest execd` on an ephemeral port with `args` and `env`.
fn execd(name: &str, args: &[&str], env: &[(&str, &str)]) -> Service {
    service("execd", name, args, env)
}

/// Starts `sandbox-guest <kind>` (execd or egress) on an ephemeral port with `args` and `env`.
fn service(kind: &str, name: &str, args: &[&str], env: &[(&str, &str)]) -> Service {
    let dir = Scratch::new(&format!("svc-{name}"));
    let mut cmd = Command::new(BIN);
    cmd.args([kind, "--port", "0", "--announce"]);
    if kind == "execd" {
        cmd.arg("--state-dir").arg(dir.join("state"));
    }
    cmd.args(args);
    // The soft descriptor limit a process starts with on Linux (1,024), whatever this test
    // raised its own to: the service has to raise it itself.
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur = limit.rlim_max.min(1024);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    cmd.env_clear().env("PATH", "/usr/bin:/bin").envs(env.iter().copied());
    Service::start(cmd, dir)
}

/// One request; returns (status, body).
fn request(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    request_within(addr, method, path, token, body, Duration::from_secs(30))
}

/// One request that must be answered within `within` (else status 0).
fn request_within(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str, within: Duration) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(within)).unwrap();
    let auth = token.map(|t| format!("X-EXECD-ACCESS-TOKEN: {t}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    if read.as_ref().is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)) {
        return (0, format!("no complete answer within {within:?}; got: {body}"));
    }
    let status = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, body)
}

/// Runs `command` through execd (as `uid` when given); returns everything it printed.
fn run(svc: &Service, command: &str, uid: Option<u32>) -> String {
    let mut req = json!({ "command": command });
    if let Some(uid) = uid {
        req["uid"] = json!(uid);
    }
    let (status, body) = request(&svc.addr, "POST", "/command", Some(TOKEN), &req.to_string());
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn a_service_without_a_token_refuses_to_start_unless_told_it_is_for_development() {
    let out = Command::new(BIN).args(["execd", "--port", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no access token"), "{out:?}");
    let out = Command::new(BIN).args(["egress", "--port", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let svc = execd("devflag", &["--dev-no-token"], &[]);
    assert_eq!(request(&svc.addr, "GET", "/metrics", None, "").0, 200, "the development flag accepts every request");
}

#[test]
fn no_command_finds_the_token_given_in_the_environment_or_a_file_even_as_nobody() {
    if !is_root() {
        return skip("no_command_finds_the_token_given_in_the_environment_or_a_file_even_as_nobody", "needs root to run a command as uid 65534");
    }
    // Everything a process may read about its parent and the rest of the system, searched
    // for the token (the test knows its shape; an attacker would read the same bytes). The
    // pattern finds itself in the command lines of the shell and grep, without the token's
    // digits.
    let snoop = "id -u; { env; for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; done; cat \"$TOKEN_FILE\"; } \
                 | tr '\\0' '\\n' | grep -a -o 'services-test-token[-0-9a-f]*'; echo scanned";
    let by_env = execd("byenv", &["--token-env", "EXECD_SECRET"], &[("EXECD_SECRET", TOKEN)]);
    let environ = std::fs::read(format!("/proc/{}/environ", by_env.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains(TOKEN), "the token is still in /proc/PID/environ");
    for uid in [Some(65534), None] {
        let out = run(&by_env, snoop, uid);
        let id = if uid.is_some() { r#""text":"65534\n""# } else { r#""text":"0\n""# };
        assert!(out.contains(id) && out.contains("scanned"), "{out}");
        assert!(!out.contains(TOKEN), "the token leaked to uid {uid:?}:\n{out}");
    }

    // A token file in a directory only root may enter, as the bootstrap writes it.
    let dir = Scratch::new("svc-byfile");
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.join("execd.token");
    std::fs::write(&file, TOKEN).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let by_file = execd("byfile-svc", &["--token-file", file.to_str().unwrap()], &[("TOKEN_FILE", file.to_str().unwrap())]);
    let out = run(&by_file, snoop, Some(65534));
    assert!(out.contains("Permission denied") && out.contains("scanned"), "{out}");
    assert!(!out.contains(TOKEN), "the token leaked to nobody:\n{out}");
    // And nobody cannot have the service act for it without the token.
    assert_eq!(request(&by_file.addr, "POST", "/command", None, r#"{"command":"id"}"#).0, 401);
}

/// Raises this test process's own descriptor limit to its hard limit.
fn raise_own_fd_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid rlimit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
    limit.rlim_cur
}

#[test]
fn two_thousand_idle_half_sent_connections_do_not_starve_ping() {
    flood("execd", "/ping", "two_thousand_idle_half_sent_connections_do_not_starve_ping");
}

#[test]
fn two_thousand_idle_half_sent_connections_do_not_starve_egress_healthz() {
    flood("egress", "/healthz", "two_thousand_idle_half_sent_connections_do_not_starve_egress_healthz");
}

/// Holds 2,000 idle connections with half-sent headers open against the service `kind`, then
/// asks its unauthenticated health path, which must answer within a second.
fn flood(kind: &str, health: &str, test: &str) {
    const IDLE: usize = 2000;
    if raise_own_fd_limit() < (IDLE + 200) as u64 {
        return skip(test, "the hard descriptor limit is below 2200");
    }
    let svc = service(kind, &format!("flood-{kind}"), &["--token-env", "T"], &[("T", TOKEN)]);
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        let mut s = TcpStream::connect(&svc.addr).unwrap();
        // Headers started, never finished.
        s.write_all(b"POST /command HTTP/1.1\r\nHost: x\r\nContent-Length: 10").unwrap();
        idle.push(s);
    }
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, _) = request(&svc.addr, "GET", health, None, "");
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(1), "{kind} {health} took {took:?} beside {IDLE} idle connections");
    drop(idle);
    // The service raised its own limit from the 1,024 it started with.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", svc.child.id())).unwrap();
    let open_files = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let soft: u64 = open_files.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(soft > IDLE as u64, "{open_files}");
}

#[test]
fn half_sent_requests_time_out_and_at_the_cap_the_longest_waiting_connection_makes_room() {
    let svc = execd("limits", &["--dev-no-token", "--header-timeout-ms", "300", "--idle-timeout-ms", "600", "--max-connections", "2"], &[]);
    let closed_within = |s: &mut TcpStream, within: Duration| {
        s.set_read_timeout(Some(within)).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 256];
        // A close may come with a 408 answer first; what counts is that it ends.
        loop {
            match s.read(&mut buf) {
                Ok(0) => return started.elapsed(),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return started.elapsed(),
                Err(e) => panic!("not closed within {within:?}: {e}"),
            }
        }
    };
    let mut slow = TcpStream::connect(&svc.addr).unwrap();
    slow.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n").unwrap();
    let mut quiet = TcpStream::connect(&svc.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Two connections wait for their headers: a third is served, the one waiting longest
    // making room, and the header timeout ends the other.
    assert_eq!(request(&svc.addr, "GET", "/ping", None, "").0, 200);
    assert!(closed_within(&mut slow, Duration::from_secs(1)) < Duration::from_millis(500));
    assert!(closed_within(&mut quiet, Duration::from_secs(3)) < Duration::from_secs(2));
    // The slots are free again.
    assert_eq!(request(&svc.addr, "GET", "/ping", None, "").0, 200);

    // A download nobody reads: nothing moves, and the idle timeout ends it.
    let big = svc.dir.join("big");
    std::fs::write(&big, vec![0u8; 32 << 20]).unwrap();
    let mut stalled = TcpStream::connect(&svc.addr).unwrap();
    write!(stalled, "GET /files/download?path={} HTTP/1.1\r\nHost: x\r\n\r\n", big.display()).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    stalled.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut total = 0;
    let mut head = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    while let Ok(n) = stalled.read(&mut buf) {
        if n == 0 {
            break;
        }
        if head.is_empty() {
            head.extend_from_slice(&buf[..n.min(64)]);
        }
        total += n;
    }
    // The download did start (an error answer would be short whatever the timeout did).
    assert!(head.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&head));
    assert!(total < 32 << 20, "the whole download arrived although the client stalled");
}

#[test]
fn a_fifo_is_refused_by_download_and_replace_instead_of_blocking_a_worker() {
    let svc = execd("fifo", &["--dev-no-token"], &[]);
    let fifo = svc.dir.join("pipe");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
    let started = Instant::now();
    let (status, body) = request(&svc.addr, "GET", &format!("/files/download?path={}", fifo.display()), None, "");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("INVALID_FILE") && body.contains("not a regular file"), "{body}");
    let replace = json!({ fifo.to_str().unwrap(): { "old": "a", "new": "b" } }).to_string();
    let (status, body) = request(&svc.addr, "POST", "/files/replace", None, &replace);
    assert_eq!(status, 400, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Regular files still download.
    std::fs::write(svc.dir.join("plain"), "content").unwrap();
    let (status, body) = request(&svc.addr, "GET", &format!("/files/download?path={}", svc.dir.join("plain").display()), None, "");
    assert_eq!((status, body.as_str()), (200, "content"));
}

/// Reads `s` until `needle` shows up (or the connection ends) within `within`; returns what came.
fn read_until(s: &mut TcpStream, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {needle:?} within {within:?}; got: {}", String::from_utf8_lossy(&seen));
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no {needle:?} within {within:?} ({e}); got: {}", String::from_utf8_lossy(&seen)),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// Whether the peer closed `s` within `within` (whatever it sent before).
fn closed(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// Sends `POST path` with a JSON `body` on a connection of its own and returns it, the
/// response (an event stream) still to be read.
fn open_stream(svc: &Service, path: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    write!(s, "POST {path} HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    s
}

/// The first number a command printed on stdout (a pid the test asked for).
fn first_number(events: &str) -> i32 {
    let start = r#""type":"stdout","text":""#;
    let at = events.find(start).unwrap_or_else(|| panic!("no stdout in {events}")) + start.len();
    events[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or_else(|_| panic!("no number in {events}"))
}

/// Whether process `pid` has ended (a zombie has) within `within`.
fn gone_within(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if matches!(state, None | Some('Z')) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills a process a test started through the service, should the service have left it.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !gone_within(self.0, Duration::ZERO) {
            // SAFETY: kill with a pid this test learnt from the command itself.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}

fn new_session(svc: &Service) -> String {
    let (status, body) = request(&svc.addr, "POST", "/session", Some(TOKEN), "{}");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["session_id"].as_str().unwrap().to_string()
}

/// Runs `command` in session `id`; the run must end within `within`.
fn session_run(svc: &Service, id: &str, command: &str, within: Duration) -> (u16, String) {
    request_within(&svc.addr, "POST", &format!("/session/{id}/run"), Some(TOKEN), &json!({ "command": command }).to_string(), within)
}

#[test]
fn a_session_run_ends_with_its_command_whatever_it_does_with_stdout_and_stderr() {
    let svc = execd("sess-fds", &["--token-env", "T"], &[("T", TOKEN)]);
    let id = new_session(&svc);
    let runs = [
        ("exec 2>&1; echo hi", r#""type":"stdout","text":"hi\n""#),
        // The redirection stays for the session, as in a terminal.
        ("echo to-stderr >&2", r#""type":"stdout","text":"to-stderr\n""#),
        // An unbalanced quote cannot swallow what the session sends after the command.
        ("echo \"unterminated", r#""evalue":"2""#),
        ("echo after", r#""text":"after\n""#),
        ("exec >/dev/null 2>&-; echo gone", "execution_complete"),
        ("false", r#""evalue":"1""#),
    ];
    for (command, expected) in runs {
        let (status, body) = session_run(&svc, &id, command, Duration::from_secs(8));
        assert_eq!(status, 200, "{command}: {body}");
        assert!(body.contains(expected), "{command}: {body}");
        assert!(!body.contains("gone"), "{command}: {body}");
    }
    assert_eq!(request(&svc.addr, "DELETE", &format!("/session/{id}"), Some(TOKEN), "").0, 200);
}

#[test]
fn a_session_run_whose_client_goes_away_is_cancelled_and_the_session_serves_the_next() {
    let svc = execd("sess-gone", &["--token-env", "T", "--ping-interval-ms", "200"], &[("T", TOKEN)]);
    let id = new_session(&svc);
    let mut run = open_stream(&svc, &format!("/session/{id}/run"), r#"{"command":"sh -c 'echo $$; exec sleep 601'"}"#);
    let sleeper = KillOnDrop(first_number(&read_until(&mut run, r#""type":"stdout""#, Duration::from_secs(10))));
    drop(run);
    assert!(gone_within(sleeper.0, Duration::from_secs(5)), "the command outlived its client");
    let (status, body) = session_run(&svc, &id, "echo next", Duration::from_secs(8));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""text":"next\n""#) && body.contains("execution_complete"), "{body}");
}

#[test]
fn deleting_a_session_kills_its_shell_and_command_even_while_a_run_streams() {
    let svc = execd("sess-delete", &["--token-env", "T"], &[("T", TOKEN)]);
    let id = new_session(&svc);
    let shell = KillOnDrop(first_number(&session_run(&svc, &id, "echo $$", Duration::from_secs(8)).1));
    let mut run = open_stream(&svc, &format!("/session/{id}/run"), r#"{"command":"sh -c 'echo $$; exec sleep 602'"}"#);
    let sleeper = KillOnDrop(first_number(&read_until(&mut run, r#""type":"stdout""#, Duration::from_secs(10))));
    let started = Instant::now();
    let (status, body) = request_within(&svc.addr, "DELETE", &format!("/session/{id}"), Some(TOKEN), "", Duration::from_secs(8));
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5), "DELETE took {:?}", started.elapsed());
    assert!(gone_within(sleeper.0, Duration::from_secs(2)) && gone_within(shell.0, Duration::from_secs(2)));
    // The run's client learns that its session ended.
    let rest = read_until(&mut run, r#""type":"error""#, Duration::from_secs(5));
    assert!(rest.contains("deleted"), "{rest}");
    assert_eq!(request(&svc.addr, "DELETE", &format!("/session/{id}"), Some(TOKEN), "").0, 404);
}

#[test]
fn session_shells_do_not_outlive_the_service() {
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let mut svc = execd("sess-exit", &["--token-env", "T"], &[("T", TOKEN)]);
        let id = new_session(&svc);
        let shell = KillOnDrop(first_number(&session_run(&svc, &id, "echo $$", Duration::from_secs(8)).1));
        let job = KillOnDrop(first_number(&session_run(&svc, &id, "sleep 603 >/dev/null 2>&1 & echo $!", Duration::from_secs(8)).1));
        // The shell is busy with a command when the service goes.
        let mut run = open_stream(&svc, &format!("/session/{id}/run"), r#"{"command":"sh -c 'echo $$; exec sleep 604'"}"#);
        let sleeper = KillOnDrop(first_number(&read_until(&mut run, r#""type":"stdout""#, Duration::from_secs(10))));
        // SAFETY: kill with the pid of the service this test started.
        unsafe { libc::kill(svc.child.id() as i32, signal) };
        assert!(gone_within(shell.0, Duration::from_secs(3)), "the session's shell outlived the service (signal {signal})");
        if signal == libc::SIGTERM {
            // Asked to stop, the service ends each session's whole process group, then exits.
            assert!(gone_within(sleeper.0, Duration::from_secs(3)) && gone_within(job.0, Duration::from_secs(3)));
            let exited = (0..150).find_map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                svc.child.try_wait().unwrap()
            });
            assert_eq!(exited.and_then(|s| s.code()), Some(0), "the service did not exit on SIGTERM");
        }
    }
}

#[test]
fn at_the_connection_cap_the_longest_idle_connection_makes_room_for_a_new_one() {
    const CAP: usize = 50;
    let svc = execd("cap", &["--token-env", "T", "--max-connections", "50"], &[("T", TOKEN)]);
    // Keep-alive connections that asked for /ping (no token needed) and now wait for more.
    let mut idle: Vec<TcpStream> = (0..CAP)
        .map(|_| {
            let mut s = TcpStream::connect(&svc.addr).unwrap();
            s.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            assert!(read_until(&mut s, "\r\n\r\n", Duration::from_secs(5)).starts_with("HTTP/1.1 200"));
            s
        })
        .collect();
    let (status, body) = request(&svc.addr, "GET", "/metrics", Some(TOKEN), "");
    assert_eq!(status, 200, "an authenticated client found no room: {body}");
    assert!(closed(&mut idle[0], Duration::from_secs(2)), "the longest idle connection was not the one closed");
    assert!(!closed(&mut idle[1], Duration::from_millis(200)));
    drop(idle);

    // Connections with a response streaming are never closed for a newcomer: it is.
    let svc = execd("cap-busy", &["--token-env", "T", "--max-connections", "2"], &[("T", TOKEN)]);
    let mut busy: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut s = open_stream(&svc, "/command", r#"{"command":"sleep 1; echo done"}"#);
            read_until(&mut s, r#""type":"init""#, Duration::from_secs(5));
            s
        })
        .collect();
    let mut newcomer = TcpStream::connect(&svc.addr).unwrap();
    assert!(closed(&mut newcomer, Duration::from_secs(1)), "a newcomer beyond the cap was served");
    for s in busy.iter_mut() {
        assert!(read_until(s, "execution_complete", Duration::from_secs(5)).contains(r#""text":"done\n""#));
    }
}

#[test]
fn client_mistakes_in_commands_and_sessions_are_400_naming_the_field() {
    let svc = execd("mistakes", &["--token-env", "T"], &[("T", TOKEN)]);
    let file = svc.dir.join("plain");
    std::fs::write(&file, "x").unwrap();
    let id = new_session(&svc);
    let run = format!("/session/{id}/run");
    let long = "a".repeat(200_000);
    let mut cases = vec![
        ("/command", json!({"command": "echo a\u{0}b"}), "'command'"),
        ("/command", json!({"command": "env", "envs": {"A": "x\u{0}y"}}), "'envs'"),
        ("/command", json!({"command": "id", "uid": 4294967295u64}), "'uid'"),
        ("/command", json!({"command": "id", "uid": 0, "gid": 4294967295u64}), "'gid'"),
        ("/command", json!({"command": "id", "uid": -1}), "'uid'"),
        ("/command", json!({"command": "id", "uid": 4294967296u64}), "'uid'"),
        ("/command", json!({"command": format!("echo {long}")}), "'command'"),
        ("/command", json!({"command": "env", "envs": {"A": long}}), "'envs'"),
        ("/command", json!({"command": "pwd", "cwd": "/nonexistent-sandbox-guest"}), "'cwd'"),
        ("/command", json!({"command": "pwd", "cwd": file}), "'cwd'"),
        ("/session", json!({"cwd": "a\u{0}b"}), "'cwd'"),
        (&run, json!({"command": "echo a\u{0}b"}), "'command'"),
        (&run, json!({"command": "pwd", "cwd": file}), "'cwd'"),
    ];
    let private = svc.dir.join("private");
    if is_root() {
        // A directory the command's user may not enter.
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        cases.push(("/command", json!({"command": "pwd", "cwd": private, "uid": 65534}), "'cwd'"));
    }
    for (path, body, field) in cases {
        let body = body.to_string();
        let (status, answer) = request(&svc.addr, "POST", path, Some(TOKEN), &body);
        let shown = &body[..body.len().min(120)];
        assert_eq!(status, 400, "{path} {shown}: {answer}");
        assert!(answer.contains(r#""code":"INVALID_REQUEST_BODY""#) && answer.contains(field), "{path} {shown}: {answer}");
    }
    // The session is still usable.
    assert!(session_run(&svc, &id, "echo ok", Duration::from_secs(8)).1.contains(r#""text":"ok\n""#));
}

#[test]
fn background_command_logs_are_private_to_the_service() {
    // Without --state-dir the service keeps its state in the temp directory ($TMPDIR).
    let tmp = Scratch::new("svc-tmpdir");
    let mut cmd = Command::new(BIN);
    cmd.args(["execd", "--port", "0", "--announce", "--dev-no-token"]).env_clear().env("PATH", "/usr/bin:/bin").env("TMPDIR", &*tmp);
    let svc = Service::start(cmd, tmp);
    let state = svc.dir.join(format!("sandbox-guest-execd-{}", svc.child.id()));
    let (status, body) = request(&svc.addr, "POST", "/command", None, r#"{"command":"echo secret-output","background":true}"#);
    assert_eq!(status, 200, "{body}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&state), 0o700, "{}", state.display());
    assert_eq!(mode(&state.join("commands")), 0o700);
    let log = std::fs::read_dir(state.join("commands")).unwrap().next().unwrap().unwrap().path();
    assert_eq!(mode(&log), 0o600, "{}", log.display());

    // A state directory of its own is made private; one that is not its own is refused.
    let mine = svc.dir.join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o755)).unwrap();
    drop(execd_with_state("state-mine", &mine));
    assert_eq!(mode(&mine), 0o700);
    let link = svc.dir.join("link");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let out = Command::new(BIN).args(["execd", "--port", "0", "--dev-no-token", "--state-dir"]).arg(&link).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a symbolic link as state directory: {out:?}");
    if is_root() {
        let theirs = svc.dir.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let out = Command::new(BIN).args(["execd", "--port", "0", "--dev-no-token", "--state-dir"]).arg(&theirs).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "another user's state directory: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--state-dir"), "{out:?}");
    }
}

/// Starts execd with `--state-dir dir` (and reads its address, so it has set the directory up).
fn execd_with_state(name: &str, dir: &std::path::Path) -> Service {
    let mut cmd = Command::new(BIN);
    cmd.args(["execd", "--port", "0", "--announce", "--dev-no-token", "--state-dir"]).arg(dir);
    Service::start(cmd, Scratch::new(name))
}
