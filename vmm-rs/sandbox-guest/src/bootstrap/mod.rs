//! The bootstrap: the image manifest's entrypoint, long-lived (PID 1 after init's exec).
//!
//! 1. Fetches its configuration from the host over the control channel (vsock, or a Unix
//!    socket stand-in for tests) with `control-frame` frames:
//!    guest `{"type":"hello","version":1}` → host `{"type":"config","version":1,"env":{..},
//!    "execd_token":str|null,"egress_token":str|null,"cwd":str?}`; later guest
//!    `{"type":"ready"}` once both services answer, and `{"type":"exited","code":N}` when the
//!    workload ends.
//! 2. Starts the execution and egress services on guest loopback (restarted with back-off when
//!    they die), the workload (argv after `--`, the given environment only, no shell), and
//!    byte-for-byte bridges from AF_VSOCK ports 44772/18080 to the services. The services'
//!    tokens go to them in files of a private directory (never in the environment, which every
//!    command would inherit); a config frame without both tokens is refused unless
//!    `--dev-no-token` says this is a development set-up. The descriptor limit is raised first,
//!    for the bootstrap and everything it starts.
//! 3. Forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 to the workload, reaps every child
//!    (orphans included: it is PID 1 or a child subreaper) and exits with the workload's status.
//!
//! The control channel is in [`control`], the bridges in [`bridge`] over the AF_VSOCK sockets
//! of [`vsock`]; the options, readiness and supervision are here.

mod bridge;
mod control;
mod vsock;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};

use crate::config::parse_flags;
use control::{exchange_config, send, ControlStream, HostConfig};

pub const EXECD_PORT: u16 = 44772;
pub const EGRESS_PORT: u16 = 18080;
/// Host side of the control channel: vsock CID 2 (the host), this port.
pub const CONTROL_PORT: u32 = 44770;
const VMADDR_CID_HOST: u32 = 2;
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A service that stayed up this long starts the next back-off from the beginning.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(10);

const HELP: &str = "usage: sandbox-guest bootstrap [flags] -- WORKLOAD ARGV...
  --control vsock[:CID:PORT] | unix:PATH | file:PATH
                                           where the host's configuration comes from (default vsock:2:44770);
                                           file: holds the config frame's JSON and nothing is reported back
  --listen vsock | unix:DIR                bridge listeners: AF_VSOCK ports 44772/18080, or DIR/44772.sock and
                                           DIR/18080.sock (stand-in where AF_VSOCK is unavailable)
  --execd-port N, --egress-port N          loopback ports of the services (44772, 18080)
  --runtime-dir DIR                        private directory for token files and service state (/run/sandbox-guest)
  --ready-timeout-ms N                     give up reporting ready after this long (60000)
  --dev-no-token                           development only: run the services without tokens when the host
                                           sends none (they then accept every request)";

#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    Vsock { cid: u32, port: u32 },
    Unix(PathBuf),
    /// The config frame's JSON in a file, nothing reported back (boot tests without vsock).
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Listen {
    Vsock,
    Unix(PathBuf),
}

#[derive(Debug)]
pub struct Options {
    pub control: Control,
    pub listen: Listen,
    pub execd_port: u16,
    pub egress_port: u16,
    pub runtime_dir: PathBuf,
    pub ready_timeout: Duration,
    pub dev_no_token: bool,
    pub workload: Vec<String>,
}

pub fn parse_options(args: &[String]) -> Result<Options, String> {
    let split = args.iter().position(|a| a == "--").ok_or("the workload argv must follow `--` (it may be empty)")?;
    let mut flags = parse_flags(&args[..split], &["dev-no-token"])?;
    let control = match flags.remove("control").as_deref() {
        None | Some("vsock") => Control::Vsock { cid: VMADDR_CID_HOST, port: CONTROL_PORT },
        Some(v) if v.starts_with("vsock:") => {
            let parts: Vec<&str> = v["vsock:".len()..].split(':').collect();
            match parts.as_slice() {
                [cid, port] => Control::Vsock {
                    cid: cid.parse().map_err(|_| format!("--control: bad CID in '{v}'"))?,
                    port: port.parse().map_err(|_| format!("--control: bad port in '{v}'"))?,
                },
                _ => return Err(format!("--control: expected vsock:CID:PORT, got '{v}'")),
            }
        }
        Some(v) if v.starts_with("unix:") => Control::Unix(PathBuf::from(&v["unix:".len()..])),
        Some(v) if v.starts_with("file:") => Control::File(PathBuf::from(&v["file:".len()..])),
        Some(v) => return Err(format!("--control: expected vsock[:CID:PORT], unix:PATH or file:PATH, got '{v}'")),
    };
    let listen = match flags.remove("listen").as_deref() {
        None | Some("vsock") => Listen::Vsock,
        Some(v) if v.starts_with("unix:") => Listen::Unix(PathBuf::from(&v["unix:".len()..])),
        Some(v) => return Err(format!("--listen: expected vsock or unix:DIR, got '{v}'")),
    };
    let port = |flags: &mut BTreeMap<String, String>, name: &str, default: u16| -> Result<u16, String> {
        flags.remove(name).map(|p| p.parse::<u16>().ok().filter(|p| *p > 0).ok_or(format!("--{name}: '{p}' is not a port"))).unwrap_or(Ok(default))
    };
    let execd_port = port(&mut flags, "execd-port", EXECD_PORT)?;
    let egress_port = port(&mut flags, "egress-port", EGRESS_PORT)?;
    let runtime_dir = flags.remove("runtime-dir").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/sandbox-guest"));
    let ready_timeout = match flags.remove("ready-timeout-ms") {
        Some(v) => Duration::from_millis(v.parse().map_err(|_| format!("--ready-timeout-ms: '{v}' is not a number"))?),
        None => Duration::from_secs(60),
    };
    let dev_no_token = flags.remove("dev-no-token").is_some();
    if let Some(unknown) = flags.keys().next() {
        return Err(format!("unknown flag --{unknown}\n{HELP}"));
    }
    Ok(Options { control, listen, execd_port, egress_port, runtime_dir, ready_timeout, dev_no_token, workload: args[split + 1..].to_vec() })
}

/// The kernel was started for a sandbox: our init's key is on its command line.
fn booted_by_sandbox_init() -> bool {
    std::fs::read_to_string("/proc/cmdline").is_ok_and(|c| c.split_whitespace().any(|w| w.starts_with("sandbox.exec=")))
}

/// `ip link set lo up`, with the two ioctls it amounts to.
fn loopback_up() -> std::io::Result<()> {
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------- readiness

/// One HTTP/1.1 GET on loopback; returns the status and at most 16 KiB of body.
fn probe(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.take(16 * 1024).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

pub fn services_ready(execd_port: u16, egress_port: u16) -> bool {
    let ping = matches!(probe(execd_port, "/ping"), Some((200, _)));
    let ready = probe(execd_port, "/ready")
        .filter(|(s, _)| *s == 200)
        .and_then(|(_, b)| serde_json::from_str::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["initialized"] == json!(true));
    let health = matches!(probe(egress_port, "/healthz"), Some((200, _)));
    ping && ready && health
}

// ---------------------------------------------------------------- supervision

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Execd,
    Egress,
}

struct Service {
    role: Role,
    pid: Option<i32>,
    started: Instant,
    backoff: Duration,
}

fn write_private(path: &Path, contents: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(contents).map_err(|e| format!("{}: {e}", path.display()))
}

struct Plan {
    exe: PathBuf,
    env: BTreeMap<String, String>,
    runtime_dir: PathBuf,
    execd_port: u16,
    egress_port: u16,
    has_execd_token: bool,
    has_egress_token: bool,
}

impl Plan {
    fn spawn(&self, role: Role) -> std::io::Result<i32> {
        let mut cmd = std::process::Command::new(&self.exe);
        let (name, port, token, file) = match role {
            Role::Execd => ("execd", self.execd_port, self.has_execd_token, "execd.token"),
            Role::Egress => ("egress", self.egress_port, self.has_egress_token, "egress.token"),
        };
        cmd.args([name, "--bind", "127.0.0.1", "--port", &port.to_string()]);
        if token {
            // A file in a directory only root may enter, not an environment variable: commands
            // run by execd inherit its environment.
            cmd.arg("--token-file").arg(self.runtime_dir.join(file));
        } else {
            cmd.arg("--dev-no-token");
        }
        if role == Role::Execd {
            cmd.arg("--state-dir").arg(self.runtime_dir.join("execd"));
        }
        // Commands run through execd see the sandbox's environment, like the workload, plus a
        // default PATH when the image gives none (users type `ls`, not `/bin/ls`).
        cmd.env_clear().envs(&self.env).current_dir("/").stdin(Stdio::null());
        if !self.env.contains_key("PATH") {
            cmd.env("PATH", DEFAULT_PATH);
        }
        // The child is reaped by the bootstrap's own waitpid(-1) loop, never through `Child`.
        Ok(cmd.spawn()?.id() as i32)
    }
}

fn exit_status_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        -1
    }
}

/// The limit on open descriptors the bootstrap raises itself and its children to (where the
/// hard limit allows; as the guest's root it does).
const FD_LIMIT: u64 = 65536;

/// Reaps every exited child; returns (pid, exit code) pairs.
fn reap() -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    loop {
        let mut status = 0;
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return out;
        }
        out.push((pid, exit_status_code(status)));
    }
}

pub fn main(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--help" || a == "-h") && !args.contains(&"--".to_string()) {
        println!("{HELP}");
        return Ok(());
    }
    let opts = parse_options(args)?;
    // In a fresh guest the loopback interface is down and the services could not bind to it.
    if let Err(e) = loopback_up() {
        eprintln!("sandbox-guest bootstrap: cannot bring up lo: {e}");
    }
    // Orphans of the workload must come to us to be reaped when we are not PID 1 already.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    crate::http::raise_fd_limit(FD_LIMIT);

    let (config, control) = exchange_config(&opts.control)?;
    if (config.execd_token.is_none() || config.egress_token.is_none()) && !opts.dev_no_token {
        let message = "the host sent no execd_token or no egress_token; the services will not run without both (--dev-no-token allows it for development)";
        send(&control, json!({"type": "failed", "message": message}));
        return Err(message.into());
    }

    std::fs::create_dir_all(&opts.runtime_dir).map_err(|e| format!("--runtime-dir {}: {e}", opts.runtime_dir.display()))?;
    std::fs::set_permissions(&opts.runtime_dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).map_err(|e| e.to_string())?;
    if let Some(t) = &config.execd_token {
        write_private(&opts.runtime_dir.join("execd.token"), t.as_bytes())?;
    }
    if let Some(t) = &config.egress_token {
        write_private(&opts.runtime_dir.join("egress.token"), t.as_bytes())?;
    }
    let plan = Plan {
        exe: std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?,
        env: config.env.clone(),
        runtime_dir: opts.runtime_dir.clone(),
        execd_port: opts.execd_port,
        egress_port: opts.egress_port,
        has_execd_token: config.execd_token.is_some(),
        has_egress_token: config.egress_token.is_some(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())?;
    let code = runtime.block_on(supervise(opts, config, plan, control))?;
    if std::process::id() == 1 && booted_by_sandbox_init() {
        // PID 1 exiting would panic the guest kernel: the sandbox ends by powering off; the
        // host learned the exit code from the `exited` frame. (As PID 1 of a PID namespace on
        // a host, the tests' case, it just exits.)
        eprintln!("sandbox-guest bootstrap: workload exit code {code}; powering off");
        unsafe {
            libc::sync();
            libc::reboot(libc::RB_POWER_OFF);
        }
    }
    // Leave the runtime's threads behind: the process ends here with the workload's status.
    std::process::exit(code);
}

async fn supervise(opts: Options, config: HostConfig, plan: Plan, control: ControlStream) -> Result<i32, String> {
    // Signal streams first, so no SIGCHLD of an early child is missed.
    let mut sigchld = signal(SignalKind::child()).map_err(|e| e.to_string())?;
    let forwarded = [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
    ];
    let (sig_tx, mut sig_rx) = tokio::sync::mpsc::channel::<i32>(16);
    for kind in forwarded {
        let mut stream = signal(kind).map_err(|e| e.to_string())?;
        let tx = sig_tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                let _ = tx.send(kind.as_raw_value()).await;
            }
        });
    }

    for (port, target) in [(EXECD_PORT, opts.execd_port), (EGRESS_PORT, opts.egress_port)] {
        let listener = bridge::open_listener(&opts.listen, port)?;
        tokio::spawn(bridge::serve(listener, target));
    }

    let mut services = [Role::Execd, Role::Egress].map(|role| Service { role, pid: None, started: Instant::now(), backoff: BACKOFF_START });
    for s in services.iter_mut() {
        s.pid = Some(plan.spawn(s.role).map_err(|e| format!("cannot start {:?}: {e}", s.role))?);
        s.started = Instant::now();
    }

    // Readiness runs beside supervision and reports once.
    {
        let control = control.clone();
        let (execd_port, egress_port, timeout) = (opts.execd_port, opts.egress_port, opts.ready_timeout);
        tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            while start.elapsed() < timeout {
                if services_ready(execd_port, egress_port) {
                    eprintln!("sandbox-guest bootstrap: ready");
                    send(&control, json!({"type": "ready"}));
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            send(&control, json!({"type": "failed", "message": format!("services not ready after {} ms", timeout.as_millis())}));
        });
    }

    let workload_pid = if opts.workload.is_empty() {
        None
    } else {
        let mut cmd = std::process::Command::new(&opts.workload[0]);
        cmd.args(&opts.workload[1..]).env_clear().envs(&config.env).current_dir(config.cwd.as_deref().unwrap_or("/")).stdin(Stdio::null());
        match cmd.spawn() {
            Ok(child) => Some(child.id() as i32),
            Err(e) => {
                let message = format!("cannot start workload {}: {e}", opts.workload[0]);
                eprintln!("sandbox-guest bootstrap: {message}");
                send(&control, json!({"type": "exited", "code": 127, "error": message}));
                stop_services(&mut services).await;
                return Ok(127);
            }
        }
    };

    let (restart_tx, mut restart_rx) = tokio::sync::mpsc::channel::<Role>(4);
    loop {
        tokio::select! {
            _ = sigchld.recv() => {
                for (pid, code) in reap() {
                    if Some(pid) == workload_pid {
                        eprintln!("sandbox-guest bootstrap: workload exited with {code}");
                        send(&control, json!({"type": "exited", "code": code}));
                        stop_services(&mut services).await;
                        return Ok(code);
                    }
                    if let Some(s) = services.iter_mut().find(|s| s.pid == Some(pid)) {
                        s.pid = None;
                        if s.started.elapsed() >= BACKOFF_RESET_AFTER {
                            s.backoff = BACKOFF_START;
                        }
                        eprintln!("sandbox-guest bootstrap: {:?} exited with {code}; restarting in {} ms", s.role, s.backoff.as_millis());
                        let (role, delay, tx) = (s.role, s.backoff, restart_tx.clone());
                        s.backoff = (s.backoff * 2).min(BACKOFF_MAX);
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = tx.send(role).await;
                        });
                    }
                }
            }
            Some(role) = restart_rx.recv() => {
                let s = services.iter_mut().find(|s| s.role == role).expect("known role");
                match plan.spawn(role) {
                    Ok(pid) => { s.pid = Some(pid); s.started = Instant::now(); }
                    Err(e) => {
                        eprintln!("sandbox-guest bootstrap: cannot restart {role:?}: {e}");
                        let (delay, tx) = (s.backoff, restart_tx.clone());
                        s.backoff = (s.backoff * 2).min(BACKOFF_MAX);
                        tokio::spawn(async move { tokio::time::sleep(delay).await; let _ = tx.send(role).await; });
                    }
                }
            }
            Some(sig) = sig_rx.recv() => match workload_pid {
                Some(pid) => { unsafe { libc::kill(pid, sig) }; }
                // Without a workload the signal is for the bootstrap itself.
                None if sig == libc::SIGTERM || sig == libc::SIGINT => {
                    stop_services(&mut services).await;
                    return Ok(128 + sig);
                }
                None => {}
            },
        }
    }
}

/// SIGTERM to both services, SIGKILL after two seconds, reaping as they go.
async fn stop_services(services: &mut [Service]) {
    for s in services.iter() {
        if let Some(pid) = s.pid {
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while services.iter().any(|s| s.pid.is_some()) && Instant::now() < deadline {
        for (pid, _) in reap() {
            for s in services.iter_mut().filter(|s| s.pid == Some(pid)) {
                s.pid = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in services.iter_mut() {
        if let Some(pid) = s.pid.take() {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    reap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_and_workload_split() {
        let o = parse_options(&args(&["--listen", "unix:/tmp/x", "--control", "unix:/tmp/c.sock", "--", "python3", "-c", "print(1)"])).unwrap();
        assert_eq!(o.listen, Listen::Unix("/tmp/x".into()));
        assert_eq!(o.control, Control::Unix("/tmp/c.sock".into()));
        assert_eq!(o.workload, args(&["python3", "-c", "print(1)"]));
        let o = parse_options(&args(&["--"])).unwrap();
        assert_eq!(o.control, Control::Vsock { cid: 2, port: CONTROL_PORT });
        assert_eq!((o.execd_port, o.egress_port), (44772, 18080));
        assert!(o.workload.is_empty());
        // The workload's own flags are never taken as the bootstrap's.
        let o = parse_options(&args(&["--", "app", "--listen", "x"])).unwrap();
        assert_eq!(o.workload, args(&["app", "--listen", "x"]));
    }

    #[test]
    fn bad_options_are_named() {
        assert!(parse_options(&args(&["app"])).unwrap_err().contains("--"));
        assert!(parse_options(&args(&["--control", "tcp:1", "--"])).unwrap_err().contains("--control"));
        assert!(parse_options(&args(&["--execd-port", "0", "--"])).unwrap_err().contains("--execd-port"));
        assert!(parse_options(&args(&["--bogus", "1", "--"])).unwrap_err().contains("--bogus"));
    }
}
