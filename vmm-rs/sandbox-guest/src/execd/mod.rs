//! The execution service (guest port 44772): commands, bash sessions, files, directories and
//! metrics, compatible with the OpenSandbox execution service API the public SDKs speak.

mod command;
mod cwd;
mod env_file;
mod files;
mod metrics;
mod output;
mod process;
mod session;

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::json;

use crate::config::ServiceConfig;
use crate::http::{self, ApiError, ApiResult, Resp};

pub const TOKEN_HEADER: &str = "x-execd-access-token";

pub struct Execd {
    pub config: ServiceConfig,
    pub commands: command::Registry,
    pub sessions: session::Sessions,
    /// What every command and new session starts with: `$EXECD_ENVS`, where `set_env` writes.
    pub env_file: env_file::EnvFile,
    pub metrics: metrics::Sampler,
}

pub async fn run(config: ServiceConfig) -> Result<(), String> {
    private_dir(&config.state_dir).map_err(|e| format!("--state-dir {}: {e}", config.state_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(config.addr).await.map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    if config.announce {
        println!("listening {bound}");
    }
    let limits = config.limits;
    let state = Arc::new(Execd {
        commands: command::Registry::new(config.state_dir.join("commands")),
        sessions: session::Sessions::default(),
        env_file: env_file::EnvFile::new(&config.state_dir),
        metrics: metrics::Sampler::start(),
        config,
    });
    let serving = {
        let state = state.clone();
        http::serve(listener, limits, move |req, peer| handle(state.clone(), req, peer))
    };
    tokio::select! {
        served = serving => served.map_err(|e| e.to_string()),
        () = stop_requested() => {
            state.sessions.end_all().await;
            state.commands.kill_foreground();
            Ok(())
        }
    }
}

/// Resolves on SIGTERM (how the bootstrap stops the service) or SIGINT (a terminal's ^C).
async fn stop_requested() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        },
        // Without handlers the signals keep their default action: the service just dies.
        _ => std::future::pending().await,
    }
}

/// Makes `dir` the service's private directory, for what commands print in the background
/// (whatever a command run as root printed). Missing, it is made with mode 0700; present, it
/// must be a directory of the service's own user, not a symbolic link (the default lies in
/// the shared temp directory under a predictable name), and loses any group or other access.
/// Checked on the opened directory, so a path swapped after a check cannot slip through.
fn private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        made => made?,
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::other("is a symbolic link; give the directory itself"),
            _ => e,
        })?;
    let meta = opened.metadata()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(io::Error::other(format!("belongs to uid {}, not to this service's uid {me}", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        opened.set_permissions(std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

async fn handle(state: Arc<Execd>, req: Request<Incoming>, _peer: SocketAddr) -> Resp {
    if needs_token(req.uri().path()) {
        if let Err(err) = check_token(&state, &req) {
            http::drain(req.into_body()).await;
            return err.into_response();
        }
    }
    match route(state, req).await {
        Ok(resp) => resp,
        Err(err) => err.into_response(),
    }
}

/// Health routes answer without a token: they reveal nothing and the SDK's readiness poll of
/// `/ping` carries only the endpoint headers.
fn needs_token(path: &str) -> bool {
    !matches!(path, "/ping" | "/ready")
}

fn check_token(state: &Execd, req: &Request<Incoming>) -> Result<(), ApiError> {
    let Some(expected) = &state.config.token else { return Ok(()) };
    let presented = req.headers().get(TOKEN_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    if http::token_matches(presented, expected) {
        Ok(())
    } else {
        Err(ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "invalid or missing header X-EXECD-ACCESS-TOKEN"))
    }
}

async fn route(state: Arc<Execd>, req: Request<Incoming>) -> ApiResult {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (segments.as_slice(), &method) {
        (["ping"], &Method::GET) => Ok(http::ok_empty()),
        (["ready"], &Method::GET) => Ok(http::json(&json!({"initialized": true}))),
        (["metrics"], &Method::GET) => Ok(http::json(&state.metrics.snapshot())),
        (["metrics", "watch"], &Method::GET) => Ok(metrics::watch(state.metrics.clone())),

        (["command"], &Method::POST) => command::run(state, req).await,
        (["command"], &Method::DELETE) => command::interrupt(&state, &req),
        (["command", "status", id], &Method::GET) => command::status(&state, id),
        ([ "command", id, "logs"], &Method::GET) => command::logs(&state, id, &req).await,

        (["session"], &Method::POST) => session::create(state, req).await,
        (["session", id, "run"], &Method::POST) => {
            let id = id.to_string();
            session::run(state, &id, req).await
        }
        (["session", id], &Method::DELETE) => session::delete(&state, id).await,

        (["files", "upload"], &Method::POST) => files::upload(req).await,
        (["files", "download"], &Method::GET) => files::download(req).await,
        (["files", "info"], &Method::GET) => files::info(req).await,
        (["files"], &Method::DELETE) => files::delete_files(req).await,
        (["files", "mv"], &Method::POST) => files::move_files(req).await,
        (["files", "permissions"], &Method::POST) => files::set_permissions(req).await,
        (["files", "search"], &Method::GET) => files::search(req).await,
        (["files", "replace"], &Method::POST) => files::replace(req).await,
        (["directories", "list"], &Method::GET) => files::list_directory(req).await,
        (["directories"], &Method::POST) => files::make_directories(req).await,
        (["directories"], &Method::DELETE) => files::delete_directories(req).await,

        // Code interpreting needs a Jupyter kernel the guest does not ship.
        (["code", ..], _) => Err(ApiError::not_supported(
            "code interpreting is not supported by this execution service; run commands with POST /command",
        )),
        // Pseudo-terminals, port proxying and isolated sessions are not part of this product.
        (["pty", ..], _) | (["proxy", ..], _) | (["v1", ..], _) => {
            Err(ApiError::not_supported(format!("{path} is not supported by this execution service")))
        }
        _ if known_path(&segments) => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            format!("method {method} is not allowed on {path}"),
        )),
        _ => Err(ApiError::not_found("NOT_FOUND", format!("no route {method} {path}"))),
    }
}

/// A fresh 128-bit id in hex: names commands, sessions and upload temporaries.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    // getrandom(2) never fails for 16 bytes once the pool is initialised.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    assert_eq!(n, 16, "getrandom failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn known_path(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["ping"] | ["ready"] | ["metrics"] | ["metrics", "watch"] | ["command"] | ["command", "status", _]
            | ["command", _, "logs"] | ["session"] | ["session", _] | ["session", _, "run"] | ["files"]
            | ["files", "upload" | "download" | "info" | "mv" | "permissions" | "search" | "replace"]
            | ["directories"] | ["directories", "list"]
    )
}
