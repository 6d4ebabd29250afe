//! The processes commands and sessions run: the shell that runs a command string, exit codes
//! as a shell reports them, tying a child's life to the service's, and killing a command's
//! whole process group.

use std::time::{Duration, Instant};

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

/// Kills every process of group `pgid` but its leader: a session's command and whatever it
/// started, while the session's shell (the leader) lives on. A process forked while a pass
/// reads /proc is found by the next pass; the passes are bounded so a fork bomb cannot keep
/// the caller here.
pub fn kill_group_but_leader(pgid: i32) {
    for _ in 0..4 {
        let members: Vec<i32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            // SAFETY: getpgid only reads; a pid that is gone yields -1.
            .filter(|&pid| pid != pgid && unsafe { libc::getpgid(pid) } == pgid)
            .collect();
        if members.is_empty() {
            return;
        }
        for pid in members {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Waits until no process is left in group `pgid`, for at most `within`. Call it only once
/// the leader is reaped (a zombie leader still counts as a member) and with a group that
/// surely existed, as the number may be reused once the group is gone.
pub async fn wait_group_gone(pgid: i32, within: Duration) {
    let deadline = Instant::now() + within;
    // SAFETY: signal 0 only checks that some process of the group exists.
    while pgid > 0 && unsafe { libc::kill(-pgid, 0) } == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Has the child killed when the service dies, however it dies: its clients are gone then,
/// and nobody could reach or end it any more. The kernel sends the signal when the thread that
/// forked exits; the service spawns from its runtime's worker threads, which live as long as
/// the process.
pub fn die_with_service(cmd: &mut tokio::process::Command) {
    let service = std::process::id() as i32;
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The service may have died before the prctl, and then no signal will come.
            if libc::getppid() != service {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
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

/// `s` as one single-quoted shell word, whatever it holds.
pub fn single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
