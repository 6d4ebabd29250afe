//! Legacy port-I/O devices: the 8250 console (COM1) and the i8042 controller, both from
//! vm-superio, behind a small port bus. The bus is a match on port ranges rather than a
//! generic device tree because these are the only two port devices and their ports are fixed.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use vm_superio::{I8042Device, Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::layout::{COM1_PORT, I8042_PORT};

/// Why the VM stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The guest reset the machine through the i8042 (`reboot=k`).
    Reset,
    /// The guest triple-faulted or asked KVM for a shutdown/reset system event.
    Shutdown(String),
    /// The control channel asked for it.
    Terminated,
    /// A vCPU failed (KVM internal error, failed entry, an unexpected ioctl error).
    Error(String),
}

impl StopReason {
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Reset => "reset",
            StopReason::Shutdown(_) => "shutdown",
            StopReason::Terminated => "terminated",
            StopReason::Error(_) => "error",
        }
    }

    pub fn detail(&self) -> Option<&str> {
        match self {
            StopReason::Shutdown(d) | StopReason::Error(d) => Some(d),
            _ => None,
        }
    }
}

/// The first stop reason wins; the eventfd wakes the control loop.
pub struct StopSignal {
    reason: Mutex<Option<StopReason>>,
    pub evt: EventFd,
}

impl StopSignal {
    pub fn new() -> io::Result<Arc<Self>> {
        Ok(Arc::new(StopSignal { reason: Mutex::new(None), evt: EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)? }))
    }

    pub fn stop(&self, reason: StopReason) {
        let mut slot = self.reason.lock().unwrap();
        if slot.is_none() {
            *slot = Some(reason);
        }
        // A full counter only means a wake-up is already pending.
        let _ = self.evt.write(1);
    }

    pub fn reason(&self) -> Option<StopReason> {
        self.reason.lock().unwrap().clone()
    }
}

/// The i8042's CPU-reset line: ends the VM with [`StopReason::Reset`].
pub struct ResetTrigger(pub Arc<StopSignal>);

impl Trigger for ResetTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        self.0.stop(StopReason::Reset);
        Ok(())
    }
}

/// An interrupt line: an eventfd registered with KVM as an irqfd.
pub struct IrqTrigger(pub EventFd);

impl Trigger for IrqTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        self.0.write(1)
    }
}

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

/// The port-I/O devices shared by all vCPU threads.
pub struct PortBus {
    pub serial: Mutex<ConsoleSerial>,
    pub i8042: Mutex<I8042Device<ResetTrigger>>,
}

const COM1_LEN: u16 = 8;
const I8042_LEN: u16 = 5;

impl PortBus {
    pub fn new(serial_irq: EventFd, log: CappedLog, stop: Arc<StopSignal>) -> Self {
        PortBus {
            serial: Mutex::new(Serial::new(IrqTrigger(serial_irq), log)),
            i8042: Mutex::new(I8042Device::new(ResetTrigger(stop))),
        }
    }

    pub fn write(&self, port: u16, data: &[u8]) -> io::Result<()> {
        let Some(&value) = data.first() else { return Ok(()) };
        if (COM1_PORT..COM1_PORT + COM1_LEN).contains(&port) {
            self.serial.lock().unwrap().write((port - COM1_PORT) as u8, value).map_err(|e| io::Error::other(format!("serial: {e:?}")))
        } else if (I8042_PORT..I8042_PORT + I8042_LEN).contains(&port) {
            self.i8042.lock().unwrap().write((port - I8042_PORT) as u8, value)
        } else {
            // Unclaimed ports (PCI config probes, POST codes, other UARTs) are ignored, as on
            // real hardware with nothing decoding them.
            Ok(())
        }
    }

    pub fn read(&self, port: u16, data: &mut [u8]) {
        let value = if (COM1_PORT..COM1_PORT + COM1_LEN).contains(&port) {
            self.serial.lock().unwrap().read((port - COM1_PORT) as u8)
        } else if (I8042_PORT..I8042_PORT + I8042_LEN).contains(&port) {
            self.i8042.lock().unwrap().read((port - I8042_PORT) as u8)
        } else {
            0xff // floating bus
        };
        data.fill(value);
    }

    /// (bytes in the serial log, bytes dropped past its cap)
    pub fn serial_log_counts(&self) -> (u64, u64) {
        let serial = self.serial.lock().unwrap();
        (serial.writer().written(), serial.writer().dropped())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus(max: u64) -> (PortBus, Arc<StopSignal>, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("sandbox-vmm-serial-{}-{max}", std::process::id()));
        let stop = StopSignal::new().unwrap();
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        (PortBus::new(irq, CappedLog::create(&path, max).unwrap(), stop.clone()), stop, path)
    }

    #[test]
    fn serial_output_is_capped() {
        let (bus, _, path) = bus(4);
        for b in b"hello" {
            bus.write(COM1_PORT, &[*b]).unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"hell");
        assert_eq!(bus.serial_log_counts(), (4, 1));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn i8042_reset_stops_the_vm_and_other_writes_do_not() {
        let (bus, stop, path) = bus(16);
        bus.write(I8042_PORT + 4, &[0x20]).unwrap();
        bus.write(I8042_PORT, &[0xfe]).unwrap();
        assert_eq!(stop.reason(), None);
        bus.write(I8042_PORT + 4, &[0xfe]).unwrap();
        assert_eq!(stop.reason(), Some(StopReason::Reset));
        assert_eq!(stop.evt.read().unwrap(), 1);
        let mut data = [0u8; 1];
        bus.read(0x2f8, &mut data);
        assert_eq!(data, [0xff]);
        std::fs::remove_file(path).unwrap();
    }
}
