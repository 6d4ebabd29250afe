//! The 8250 UART on COM1 (vm-superio's): the guest console, written to a capped log file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use vm_superio::Serial;

use super::IrqTrigger;

/// The serial log: bytes past `max` are dropped (and counted) so a chatty or hostile guest
/// cannot fill the host's disk.
pub struct CappedLog {
    file: File,
    written: u64,
    max: u64,
    dropped: u64,
}

impl CappedLog {
    pub fn create(path: &Path, max: u64) -> io::Result<Self> {
        let file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).custom_flags(libc::O_CLOEXEC).open(path)?;
        Ok(CappedLog { file, written: 0, max, dropped: 0 })
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Write for CappedLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.max.saturating_sub(self.written) as usize;
        let take = buf.len().min(room);
        if take > 0 {
            // Unbuffered on purpose: every byte the guest wrote is in the file when a reader
            // looks, and each byte already cost a VM exit, so a write(2) per byte is noise.
            self.file.write_all(&buf[..take])?;
            self.written += take as u64;
        }
        self.dropped += (buf.len() - take) as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

pub type ConsoleSerial = Serial<IrqTrigger, vm_superio::serial::NoEvents, CappedLog>;
