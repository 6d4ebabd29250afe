//! AF_VSOCK stream sockets through libc (the guest's side of the host's hybrid vsock): a
//! connection to the host and listeners for the services' bridges.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;

/// Listen on every address of this guest.
const VMADDR_CID_ANY: u32 = u32::MAX;

fn sockaddr_vm(cid: u32, port: u32) -> libc::sockaddr_vm {
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_cid = cid;
    addr.svm_port = port;
    addr
}

fn socket(nonblocking: bool) -> std::io::Result<OwnedFd> {
    let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    let fd = unsafe { libc::socket(libc::AF_VSOCK, flags, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A connected vsock stream. Reads and writes on a connected stream socket are the same
/// system calls whatever its family, so the Unix stream types carry it.
pub fn connect(cid: u32, port: u32) -> std::io::Result<StdUnixStream> {
    let fd = socket(false)?;
    let addr = sockaddr_vm(cid, port);
    let rc = unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_vm).cast(), std::mem::size_of::<libc::sockaddr_vm>() as u32) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(StdUnixStream::from(fd))
}

pub fn listen(port: u32) -> std::io::Result<OwnedFd> {
    let fd = socket(true)?;
    let addr = sockaddr_vm(VMADDR_CID_ANY, port);
    let rc = unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_vm).cast(), std::mem::size_of::<libc::sockaddr_vm>() as u32) };
    if rc < 0 || unsafe { libc::listen(fd.as_raw_fd(), 128) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}
