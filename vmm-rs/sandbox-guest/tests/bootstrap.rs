//! The bootstrap as a real process, in a fresh PID and mount namespace when `unshare` allows it
//! (there it is PID 1, as in the guest), with the Unix-socket stand-ins for vsock: the test
//! plays the host on the control channel and reaches the services through the bridges.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-guest");
const TOKEN: &str = "bootstrap-test-token-0123456789abcdef";
const EGRESS_TOKEN: &str = "bootstrap-egress-token-fedcba9876543210";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sg-boot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn unshare_works() -> bool {
    Command::new("unshare").args(["-Urpf", "--mount-proc", "true"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

struct Guest {
    child: Child,
    /// Host PID of the bootstrap itself (unshare's child when namespaced).
    pid: i32,
    control: UnixStream,
    bridges: PathBuf,
    runtime: PathBuf,
    /// The guest's scratch directory, removed when the test is done with the guest.
    dir: PathBuf,
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_frame(stream: &mut UnixStream) -> Value {
    let mut reader = control_frame::FrameReader::new(stream.try_clone().unwrap(), control_frame::DEFAULT_MAX_FRAME);
    reader.read_frame().expect("frame").expect("control channel closed")
}

fn start(name: &str, workload: &[&str], env: Value) -> Guest {
    start_with(name, workload, json!({"type": "config", "version": 1, "env": env, "execd_token": TOKEN, "egress_token": EGRESS_TOKEN}), &[])
}

/// Starts the bootstrap with `flags` and answers its hello with `config` (its cwd filled in).
fn start_with(name: &str, workload: &[&str], mut config: Value, flags: &[&str]) -> Guest {
    let dir = scratch(name);
    let control_path = dir.join("control.sock");
    let listener = UnixListener::bind(&control_path).unwrap();
    let bridges = dir.join("bridges");
    std::fs::create_dir_all(&bridges).unwrap();
    let runtime = dir.join("run");
    let mut args: Vec<String> = vec![
        "bootstrap".into(),
        "--control".into(),
        format!("unix:{}", control_path.display()),
        "--listen".into(),
        format!("unix:{}", bridges.display()),
        "--execd-port".into(),
        free_port().to_string(),
        "--egress-port".into(),
        free_port().to_string(),
        "--runtime-dir".into(),
        runtime.display().to_string(),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    args.push("--".into());
    args.extend(workload.iter().map(|s| s.to_string()));
    let namespaced = unshare_works();
    let mut cmd = if namespaced {
        let mut c = Command::new("unshare");
        c.args(["-Urpf", "--mount-proc", BIN]).args(&args);
        c
    } else {
        eprintln!("unshare is not permitted here: running the bootstrap as a plain process");
        let mut c = Command::new(BIN);
        c.args(&args);
        c
    };
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    listener.set_nonblocking(false).unwrap();
    let (mut control, _) = listener.accept().unwrap();
    control.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let hello = read_frame(&mut control);
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["version"], 1);
    // Found before the config goes out: the bootstrap waits for it, while a refused config
    // ends the process at once and would leave unshare with no child to name.
    let pid = if namespaced {
        let children = format!("/proc/{0}/task/{0}/children", child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let text = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(p) = text.split_whitespace().next() {
                break p.parse().unwrap();
            }
            assert!(Instant::now() < deadline, "unshare has no child");
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        child.id() as i32
    };
    config["cwd"] = json!(dir.display().to_string());
    control_frame::write_frame(&mut control, &config, control_frame::DEFAULT_MAX_FRAME).unwrap();
    Guest { child, pid, control, bridges, runtime, dir }
}

/// One HTTP/1.1 request through a bridge socket; returns (status, raw response text).
fn request(bridges: &Path, port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Option<(u16, String)> {
    let mut s = UnixStream::connect(bridges.join(format!("{port}.sock"))).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: guest\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "\r\n";
    req += body;
    s.write_all(req.as_bytes()).ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text))
}

fn run_command(g: &Guest, command: &str) -> (u16, String) {
    let body = json!({"command": command}).to_string();
    request(&g.bridges, 44772, "POST", "/command", &[("X-EXECD-ACCESS-TOKEN", TOKEN), ("Content-Type", "application/json")], &body).expect("bridge answered")
}

fn wait_ping(g: &Guest, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if request(&g.bridges, 44772, "GET", "/ping", &[], "").is_some_and(|(s, _)| s == 200) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn finish(mut g: Guest) -> (i32, String, String) {
    let status = g.child.wait().unwrap();
    let mut out = String::new();
    let mut err = String::new();
    g.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    g.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code().unwrap_or(-1), out, err)
}

#[test]
fn bootstrap_supervises_bridges_forwards_signals_and_reaps() {
    // The workload leaves an orphan behind, which only a reaping PID 1 / subreaper collects.
    let script = "env > workload.env; trap 'echo got-term; exit 7' TERM; (sleep 0.2 &); while :; do sleep 0.05; done";
    let mut g = start("main", &["/bin/sh", "-c", script], json!({"PATH": "/usr/bin:/bin", "GREETING": "grüezi"}));

    let ready = read_frame(&mut g.control);
    assert_eq!(ready["type"], "ready", "{ready}");
    let mode = std::fs::metadata(g.runtime.join("execd.token")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Both services answer through the bridges; the token is enforced.
    let (status, _) = request(&g.bridges, 18080, "GET", "/healthz", &[], "").unwrap();
    assert_eq!(status, 200);
    let (status, body) = request(&g.bridges, 44772, "POST", "/command", &[], r#"{"command":"true"}"#).unwrap();
    assert_eq!(status, 401, "{body}");
    let (status, body) = run_command(&g, "echo \"$GREETING\"");
    assert_eq!(status, 200);
    assert!(body.contains("grüezi"), "{body}");
    let (status, _) = request(&g.bridges, 18080, "GET", "/policy", &[], "").unwrap();
    assert_eq!(status, 401);
    let (status, body) = request(&g.bridges, 18080, "GET", "/policy", &[("OPENSANDBOX-EGRESS-AUTH", EGRESS_TOKEN)], "").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("allow_all"), "{body}");
    // Commands see the sandbox environment, never the services' tokens, in env or argv.
    let (_, body) = run_command(&g, "env; cat /proc/$PPID/cmdline | tr '\\0' ' '");
    assert!(body.contains("GREETING=grüezi"), "{body}");
    assert!(!body.contains(TOKEN) && !body.contains(EGRESS_TOKEN), "a token leaked: {body}");

    // The services may hold as many descriptors as the hard limit allows (the bootstrap raised
    // it to 65536 where it may).
    let (_, body) = run_command(&g, "grep 'Max open files' /proc/$PPID/limits");
    let words: Vec<&str> = body.split("Max open files").nth(1).unwrap_or_default().split_whitespace().collect();
    let (soft, hard) = (words[0].parse::<u64>().unwrap(), words[1].parse::<u64>().unwrap());
    assert!(soft == hard && soft > 1024, "{body}");

    // The workload got exactly the given environment, and the configured cwd.
    let env = std::fs::read_to_string(g.runtime.parent().unwrap().join("workload.env")).unwrap();
    assert!(env.contains("GREETING=grüezi"), "{env}");
    assert!(!env.contains("HOME="), "host environment leaked: {env}");

    // No zombie child of the bootstrap survives: the orphaned sleep was reaped. The bootstrap
    // is the parent of execd, whose child this command is; a zombie can exist for an instant
    // between a child's exit and its reaping, so only one that stays counts.
    std::thread::sleep(Duration::from_millis(400));
    let scan = r#"read -r l < /proc/$PPID/stat; set -- ${l##*) }; boot=$2
for i in 1 2 3 4 5; do z=""; for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; set -- ${l##*) }; [ "$1" = Z ] && [ "$2" = "$boot" ] && z="$z ${s}"; done; [ -z "$z" ] && break; sleep 0.2; done
echo "checked bootstrap=$boot zombies=[$z]""#;
    let (_, body) = run_command(&g, scan);
    assert!(body.contains("checked bootstrap="), "{body}");
    assert!(body.contains("zombies=[]"), "{body}");
    if unshare_works() {
        assert!(body.contains("checked bootstrap=1 "), "the bootstrap is PID 1 in its namespace: {body}");
    }

    // A killed execution service comes back.
    // The service dies under this very request, so there may be no answer at all.
    let _ = request(&g.bridges, 44772, "POST", "/command", &[("X-EXECD-ACCESS-TOKEN", TOKEN)], r#"{"command":"kill -9 $PPID"}"#);
    assert!(wait_ping(&g, Duration::from_secs(15)), "execd did not come back after being killed");
    let (status, body) = run_command(&g, "echo back");
    assert_eq!(status, 200);
    assert!(body.contains("back"), "{body}");

    // SIGTERM goes to the workload; its exit ends the bootstrap with its status.
    unsafe { libc::kill(g.pid, libc::SIGTERM) };
    let exited = read_frame(&mut g.control);
    assert_eq!(exited, json!({"type": "exited", "code": 7}));
    let (code, out, err) = finish(g);
    assert_eq!(code, 7, "stderr: {err}");
    assert!(out.contains("got-term"), "{out}");
    assert!(err.contains("Execd exited"), "{err}");
}

#[test]
fn a_workload_that_cannot_start_is_reported() {
    let mut g = start("missing", &["/no/such/program", "arg"], json!({}));
    let frame = read_frame(&mut g.control);
    // `ready` may come first: the services do not wait for the workload.
    let frame = if frame["type"] == "ready" { read_frame(&mut g.control) } else { frame };
    assert_eq!(frame["type"], "exited");
    assert_eq!(frame["code"], 127);
    assert!(frame["error"].as_str().unwrap().contains("/no/such/program"));
    let (code, _, _) = finish(g);
    assert_eq!(code, 127);
}

#[test]
fn a_config_without_tokens_is_refused_unless_for_development() {
    let mut g = start_with("notoken", &["/bin/true"], json!({"type": "config", "version": 1, "execd_token": TOKEN}), &[]);
    let frame = read_frame(&mut g.control);
    assert_eq!(frame["type"], "failed", "{frame}");
    assert!(frame["message"].as_str().unwrap().contains("egress_token"), "{frame}");
    let (code, _, err) = finish(g);
    assert_eq!(code, 2, "{err}");

    let mut g = start_with("devnotoken", &["/bin/sleep", "30"], json!({"type": "config", "version": 1}), &["--dev-no-token"]);
    assert_eq!(read_frame(&mut g.control)["type"], "ready");
    let (status, _) = request(&g.bridges, 44772, "POST", "/command", &[], r#"{"command":"true"}"#).unwrap();
    assert_eq!(status, 200, "development services accept every request");
}
