//! Service configuration: flags, or a JSON config file named by `--config`, with flags winning.
//!
//! The access token is never a flag value: it comes from a file (`--token-file`) or from an
//! environment variable whose *name* is given (`--token-env`), so it never shows in argv. A
//! variable is scrubbed from the process as soon as it is read (from the environment children
//! inherit and from the copy /proc/PID/environ shows), so no command the service runs can find
//! it. A service refuses to start without a token unless `--dev-no-token` says it is a
//! development set-up that accepts every request.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// How long a client may take and how many may be connected at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From a connection's start, or the end of its previous response, to the end of the next
    /// request's headers (and so also how long a kept-alive connection may sit idle).
    pub header_timeout: Duration,
    /// With no byte read or written on a connection for this long, it is closed (an upload
    /// that stalls, a download nobody reads).
    pub idle_timeout: Duration,
    /// Connections served at once. At the cap a new connection takes the place of the one
    /// that has waited longest for its next request; it is closed on arrival only when every
    /// connection is busy with a request.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { header_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(300), max_connections: 4096 }
    }
}

/// Settings shared by the execution and egress services.
#[derive(Clone)]
pub struct ServiceConfig {
    pub addr: SocketAddr,
    /// None only with `--dev-no-token`: every request is then accepted.
    pub token: Option<Vec<u8>>,
    pub limits: Limits,
    /// Keep-alive `ping` interval of SSE streams (execution service).
    pub ping_interval_ms: u64,
    /// Where background command logs go (execution service); the service keeps it private
    /// (0700, its own user's) and refuses one of another user.
    pub state_dir: PathBuf,
    /// Print the bound address as `listening <addr>` on stdout (tests bind port 0).
    pub announce: bool,
}

// Written by hand so that a `{:?}` of the settings (a panic message, a log line) never shows the token.
impl std::fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("limits", &self.limits)
            .field("ping_interval_ms", &self.ping_interval_ms)
            .field("state_dir", &self.state_dir)
            .field("announce", &self.announce)
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    bind: Option<String>,
    port: Option<u16>,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    ping_interval_ms: Option<u64>,
    state_dir: Option<PathBuf>,
    header_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
}

/// Splits `--flag value` / `--flag=value` / `--switch` arguments. `switches` take no value.
pub fn parse_flags(args: &[String], switches: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some(name) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument '{arg}'"));
        };
        let (name, value) = match name.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None if switches.contains(&name) => (name.to_string(), "true".to_string()),
            None => {
                let v = it.next().ok_or_else(|| format!("flag --{name} needs a value"))?;
                (name.to_string(), v.clone())
            }
        };
        if out.insert(name.clone(), value).is_some() {
            return Err(format!("flag --{name} given twice"));
        }
    }
    Ok(out)
}

fn read_token(file: Option<PathBuf>, env: Option<String>) -> Result<Option<Vec<u8>>, String> {
    let token = match (file, env) {
        (Some(_), Some(_)) => return Err("give only one of --token-file and --token-env".into()),
        (Some(path), None) => {
            let raw = std::fs::read(&path).map_err(|e| format!("--token-file {}: {e}", path.display()))?;
            // A trailing newline from `echo token > file` is not part of the token.
            let trimmed = raw.strip_suffix(b"\n").unwrap_or(&raw);
            trimmed.strip_suffix(b"\r").unwrap_or(trimmed).to_vec()
        }
        (None, Some(name)) => match std::env::var_os(&name) {
            Some(v) => {
                scrub_env(&name);
                v.into_encoded_bytes()
            }
            None => return Err(format!("--token-env {name}: environment variable is not set")),
        },
        (None, None) => return Ok(None),
    };
    if token.is_empty() {
        return Err("the access token is empty".into());
    }
    Ok(Some(token))
}

/// Removes the variable `name` from this process: from the environment children inherit, and
/// from the initial environment block that /proc/PID/environ shows (which unsetenv leaves as it
/// was), by overwriting its value there. Call it before any other thread exists.
fn scrub_env(name: &str) {
    let Ok(c_name) = CString::new(name) else { return };
    // SAFETY: getenv returns null or a NUL-terminated string in the (writable) environment
    // block or heap; overwriting its bytes in place keeps its length, and no other thread is
    // reading the environment yet.
    unsafe {
        let value = libc::getenv(c_name.as_ptr());
        if !value.is_null() {
            std::ptr::write_bytes(value, 0, libc::strlen(value));
        }
    }
    std::env::remove_var(name);
}

/// The positive integer flag `--name` when given, else the config file's value (`file`).
fn positive<T: std::str::FromStr + Default + PartialOrd>(flags: &mut BTreeMap<String, String>, name: &str, file: Option<T>) -> Result<Option<T>, String> {
    match flags.remove(name) {
        Some(v) => v.parse::<T>().ok().filter(|n| *n > T::default()).map(Some).ok_or_else(|| format!("--{name}: '{v}' is not a positive integer")),
        None => Ok(file),
    }
}

/// Builds the configuration of a service from its flags; `default_port` differs per service.
pub fn service_config(args: &[String], default_port: u16) -> Result<ServiceConfig, String> {
    let mut flags = parse_flags(args, &["announce", "dev-no-token"])?;
    let file: FileConfig = match flags.remove("config") {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("--config {path}: {e}"))?;
            serde_json::from_str(&text).map_err(|e| format!("--config {path}: {e}"))?
        }
        None => FileConfig::default(),
    };
    let bind = flags.remove("bind").or(file.bind).unwrap_or_else(|| "127.0.0.1".into());
    let ip: IpAddr = bind.parse().map_err(|_| format!("--bind: '{bind}' is not an IP address"))?;
    let port = match flags.remove("port") {
        Some(p) => p.parse::<u16>().map_err(|_| format!("--port: '{p}' is not a port number"))?,
        None => file.port.unwrap_or(default_port),
    };
    let token_file = flags.remove("token-file").map(PathBuf::from).or(file.token_file);
    let token_env = flags.remove("token-env").or(file.token_env);
    let token = read_token(token_file, token_env)?;
    let dev_no_token = flags.remove("dev-no-token").is_some();
    let defaults = Limits::default();
    let limits = Limits {
        header_timeout: positive(&mut flags, "header-timeout-ms", file.header_timeout_ms)?.map_or(defaults.header_timeout, Duration::from_millis),
        idle_timeout: positive(&mut flags, "idle-timeout-ms", file.idle_timeout_ms)?.map_or(defaults.idle_timeout, Duration::from_millis),
        max_connections: positive(&mut flags, "max-connections", file.max_connections)?.unwrap_or(defaults.max_connections),
    };
    let ping_interval_ms = positive(&mut flags, "ping-interval-ms", file.ping_interval_ms)?.unwrap_or(10_000);
    let state_dir = flags
        .remove("state-dir")
        .map(PathBuf::from)
        .or(file.state_dir)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("sandbox-guest-execd-{}", std::process::id())));
    let announce = flags.remove("announce").is_some();
    if let Some(unknown) = flags.keys().next() {
        return Err(format!("unknown flag --{unknown}"));
    }
    match (&token, dev_no_token) {
        (None, false) => {
            return Err("no access token: give --token-file or --token-env (or --dev-no-token for a development set-up that accepts every request)".into())
        }
        (Some(_), true) => return Err("--dev-no-token and a token exclude one another".into()),
        _ => {}
    }
    Ok(ServiceConfig { addr: SocketAddr::new(ip, port), token, limits, ping_interval_ms, state_dir, announce })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_to_loopback_and_default_port() {
        let c = service_config(&args(&["--dev-no-token"]), 44772).unwrap();
        assert_eq!(c.addr.to_string(), "127.0.0.1:44772");
        assert!(c.token.is_none());
        assert_eq!(c.limits, Limits::default());
    }

    #[test]
    fn a_token_is_required_unless_the_development_flag_says_otherwise() {
        let err = service_config(&[], 44772).unwrap_err();
        assert!(err.contains("no access token") && err.contains("--dev-no-token"), "{err}");
        std::env::set_var("SG_TEST_TOKEN_B", "t");
        let err = service_config(&args(&["--token-env", "SG_TEST_TOKEN_B", "--dev-no-token"]), 1).unwrap_err();
        assert!(err.contains("exclude"), "{err}");
    }

    #[test]
    fn limits_from_flags_and_file() {
        let dir = crate::scratch::Scratch::new("cfg3");
        let path = dir.join("c.json");
        std::fs::write(&path, r#"{"header_timeout_ms":500,"max_connections":7}"#).unwrap();
        let c = service_config(&args(&["--dev-no-token", "--config", path.to_str().unwrap(), "--idle-timeout-ms", "900"]), 1).unwrap();
        assert_eq!(c.limits, Limits { header_timeout: Duration::from_millis(500), idle_timeout: Duration::from_millis(900), max_connections: 7 });
        assert!(service_config(&args(&["--dev-no-token", "--max-connections", "0"]), 1).unwrap_err().contains("--max-connections"));
        for (flag, bad) in [("--header-timeout-ms", "0"), ("--idle-timeout-ms", "-5"), ("--ping-interval-ms", "x"), ("--max-connections", "1.5")] {
            let err = service_config(&args(&["--dev-no-token", flag, bad]), 1).unwrap_err();
            assert_eq!(err, format!("{flag}: '{bad}' is not a positive integer"));
        }
        assert_eq!(service_config(&args(&["--dev-no-token", "--ping-interval-ms", "250"]), 1).unwrap().ping_interval_ms, 250);
    }

    #[test]
    fn token_from_named_env_var_and_file() {
        std::env::set_var("SG_TEST_TOKEN_A", "s3cret");
        let c = service_config(&args(&["--token-env", "SG_TEST_TOKEN_A", "--port=0"]), 1).unwrap();
        assert_eq!(c.token.as_deref(), Some(&b"s3cret"[..]));
        // Read once, then gone from the environment.
        assert!(std::env::var_os("SG_TEST_TOKEN_A").is_none());
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<redacted>"), "{shown}");
        let dir = crate::scratch::Scratch::new("cfg");
        std::fs::write(dir.join("t"), "filetoken\n").unwrap();
        let c = service_config(&args(&["--token-file", dir.join("t").to_str().unwrap()]), 1).unwrap();
        assert_eq!(c.token.as_deref(), Some(&b"filetoken"[..]));
    }

    #[test]
    fn config_file_with_flag_override() {
        let dir = crate::scratch::Scratch::new("cfg2");
        let path = dir.join("c.json");
        std::fs::write(&path, r#"{"bind":"0.0.0.0","port":9000}"#).unwrap();
        let c = service_config(&args(&["--dev-no-token", "--config", path.to_str().unwrap(), "--port", "9001"]), 1).unwrap();
        assert_eq!(c.addr.to_string(), "0.0.0.0:9001");
        std::fs::write(&path, r#"{"token":"inline"}"#).unwrap();
        let err = service_config(&args(&["--dev-no-token", "--config", path.to_str().unwrap()]), 1).unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }

    #[test]
    fn bad_flags_name_the_flag() {
        assert!(service_config(&args(&["--port", "x"]), 1).unwrap_err().contains("--port"));
        assert!(service_config(&args(&["--token", "x"]), 1).unwrap_err().contains("unknown flag --token"));
        assert!(service_config(&args(&["--bind", "nope"]), 1).unwrap_err().contains("--bind"));
        assert!(service_config(&args(&["--token-env", "SG_TEST_UNSET_VAR"]), 1).unwrap_err().contains("SG_TEST_UNSET_VAR"));
        assert!(service_config(&args(&["--token", "x"]), 1).unwrap_err().contains("--token"));
        assert!(service_config(&args(&["--port"]), 1).unwrap_err().contains("needs a value"));
    }
}
