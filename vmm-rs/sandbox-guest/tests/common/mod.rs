//! What the service tests share: the binary, skips as the project's runner counts them, and a
//! service process started with `--announce`, killed when the test is done with it.

#![allow(dead_code)] // each test crate uses its own part of this module

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

#[path = "../../src/scratch.rs"]
pub mod scratch;
use scratch::Scratch;

pub const BIN: &str = env!("CARGO_BIN_EXE_sandbox-guest");

/// Reports a skipped test as the project's runner counts it.
pub fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP: {test}: {reason}");
}

/// The test process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

pub fn is_root() -> bool {
    euid() == 0
}

/// A running service and its scratch directory.
pub struct Service {
    pub child: Child,
    pub addr: String,
    pub dir: Scratch,
}

impl Service {
    /// Spawns `cmd` (a service started with `--announce`) and reads the address it listens on.
    pub fn start(mut cmd: Command, dir: Scratch) -> Service {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let addr = announced(&mut child);
        Service { child, addr, dir }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address a service started with `--announce` prints.
fn announced(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    line.strip_prefix("listening ").unwrap_or_else(|| panic!("the service did not start: {line:?}")).trim().to_string()
}
