//! The execution service as an attacker inside the sandbox meets it: a command running as
//! `nobody` looking for the service's token, a flood of idle half-sent connections (against
//! the egress service too), a FIFO offered for download, and a service started without a token.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

#[path = "../src/scratch.rs"]
mod scratch;
use scratch::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-guest");
const TOKEN: &str = "services-test-token-0123456789abcdef0123456789";

/// Reports a skipped test as the project's runner counts it.
fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {reason}");
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

struct Service {
    child: Child,
    addr: String,
    dir: Scratch,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.strip_prefix("listening ").unwrap_or_else(|| panic!("{kind} did not start: {line:?}")).trim().to_string();
    Service { child, addr, dir }
}

/// One request; returns (status, body).
fn request(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token.map(|t| format!("X-EXECD-ACCESS-TOKEN: {t}\r\n")).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
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
fn half_sent_requests_time_out_and_connections_beyond_the_cap_are_closed() {
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
    // Two connections are open: a third is closed on arrival.
    let mut third = TcpStream::connect(&svc.addr).unwrap();
    assert!(closed_within(&mut third, Duration::from_secs(2)) < Duration::from_millis(500));
    assert!(closed_within(&mut slow, Duration::from_secs(3)) < Duration::from_secs(2));
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
