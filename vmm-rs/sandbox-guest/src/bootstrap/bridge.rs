//! The byte-for-byte bridges from the host-facing listeners (AF_VSOCK ports, or Unix sockets
//! where AF_VSOCK is unavailable) to the services on guest loopback.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::{vsock, Listen};

/// Concurrent connections per bridge.
const MAX_BRIDGE_CONNECTIONS: usize = 128;

pub enum Listener {
    Vsock(tokio::io::unix::AsyncFd<OwnedFd>),
    Unix(tokio::net::UnixListener),
}

impl Listener {
    async fn accept(&self) -> std::io::Result<tokio::net::UnixStream> {
        match self {
            Listener::Unix(l) => l.accept().await.map(|(s, _)| s),
            Listener::Vsock(fd) => loop {
                let mut guard = fd.readable().await?;
                let rc = unsafe { libc::accept4(fd.get_ref().as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
                if rc >= 0 {
                    let stream = unsafe { StdUnixStream::from_raw_fd(rc as RawFd) };
                    return tokio::net::UnixStream::from_std(stream);
                }
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::WouldBlock {
                    guard.clear_ready();
                    continue;
                }
                return Err(err);
            },
        }
    }
}

pub fn open_listener(listen: &Listen, port: u16) -> Result<Listener, String> {
    match listen {
        Listen::Vsock => {
            let fd = vsock::listen(u32::from(port)).map_err(|e| format!("cannot listen on vsock port {port}: {e}"))?;
            // SAFETY: the descriptor is owned by the AsyncFd from here on and nothing else
            // registers or closes it.
            let fd = unsafe { tokio::io::unix::AsyncFd::register(fd) }.map_err(|e| e.to_string())?;
            Ok(Listener::Vsock(fd))
        }
        Listen::Unix(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("--listen unix:{}: {e}", dir.display()))?;
            let path = dir.join(format!("{port}.sock"));
            let _ = std::fs::remove_file(&path);
            tokio::net::UnixListener::bind(&path).map(Listener::Unix).map_err(|e| format!("cannot listen on {}: {e}", path.display()))
        }
    }
}

/// Copies bytes both ways between each accepted connection and the service on loopback.
pub async fn serve(listener: Listener, target: u16) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_BRIDGE_CONNECTIONS));
    loop {
        let permit = slots.clone().acquire_owned().await.expect("semaphore never closes");
        let mut inbound = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sandbox-guest bootstrap: bridge {target}: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, target)).await {
                Ok(mut outbound) => {
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                // The service is (re)starting: closing tells the client to retry.
                Err(_) => {
                    let _ = inbound.shutdown().await;
                }
            }
        });
    }
}
