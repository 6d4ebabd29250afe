//! The processes commands and sessions run: the shell that runs a command string, exit codes
//! as a shell reports them, and killing a command's whole process group.

/// Exit code as a shell reports it: signals become 128 + signal number.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

pub fn kill_group(pgid: i32) {
    if pgid > 0 {
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// The shell that runs command strings.
pub fn shell() -> &'static str {
    if std::path::Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}
