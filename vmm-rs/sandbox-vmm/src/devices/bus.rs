//! The buses the vCPUs route their exits to: the port-I/O bus of the legacy devices (a match on
//! port ranges rather than a generic device tree, because these are the only two port devices
//! and their ports are fixed) and the MMIO bus of the virtio-mmio windows.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};

use vm_superio::{I8042Device, Serial};
use vmm_sys_util::errno::Error as Errno;
use vmm_sys_util::eventfd::EventFd;

use super::legacy::i8042::ResetTrigger;
use super::legacy::serial::{CappedLog, ConsoleSerial};
use super::legacy::IrqTrigger;
use super::virtio::mmio::MmioTransport;
use crate::arch::x86_64::layout::{COM1_PORT, I8042_PORT, VIRTIO_MMIO_SIZE};
use crate::vstate::stop::{errno, StopSignal};

/// Why a port write failed. Only the serial port can fail: the i8042's one action, the reset,
/// cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusError {
    /// The serial port could not raise its interrupt.
    SerialInterrupt(Errno),
    /// The serial log could not be written.
    SerialLog(Errno),
    /// The serial port's receive FIFO is full (a write in loopback mode).
    SerialFifoFull,
}

impl From<vm_superio::serial::Error<io::Error>> for BusError {
    fn from(e: vm_superio::serial::Error<io::Error>) -> Self {
        match e {
            vm_superio::serial::Error::Trigger(e) => BusError::SerialInterrupt(errno(&e)),
            vm_superio::serial::Error::IOError(e) => BusError::SerialLog(errno(&e)),
            vm_superio::serial::Error::FullFifo => BusError::SerialFifoFull,
        }
    }
}

impl fmt::Display for BusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusError::SerialInterrupt(e) => write!(f, "serial: cannot raise the interrupt: {e}"),
            BusError::SerialLog(e) => write!(f, "serial: cannot write the log: {e}"),
            BusError::SerialFifoFull => write!(f, "serial: the FIFO is full"),
        }
    }
}

impl std::error::Error for BusError {}

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

    pub fn write(&self, port: u16, data: &[u8]) -> Result<(), BusError> {
        let Some(&value) = data.first() else { return Ok(()) };
        if (COM1_PORT..COM1_PORT + COM1_LEN).contains(&port) {
            Ok(self.serial.lock().unwrap().write((port - COM1_PORT) as u8, value)?)
        } else if (I8042_PORT..I8042_PORT + I8042_LEN).contains(&port) {
            self.i8042.lock().unwrap().write((port - I8042_PORT) as u8, value).unwrap_or_else(|never| match never {});
            Ok(())
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

/// The virtio-mmio windows, each [`VIRTIO_MMIO_SIZE`] bytes, sorted by base address.
#[derive(Default)]
pub struct MmioBus {
    windows: Vec<(u64, Mutex<MmioTransport>)>,
}

impl MmioBus {
    pub fn insert(&mut self, base: u64, transport: MmioTransport) {
        let at = self.windows.partition_point(|(b, _)| *b < base);
        self.windows.insert(at, (base, Mutex::new(transport)));
    }

    fn find(&self, addr: u64) -> Option<(u64, &Mutex<MmioTransport>)> {
        let at = self.windows.partition_point(|(b, _)| *b <= addr).checked_sub(1)?;
        let (base, transport) = &self.windows[at];
        (addr - base < VIRTIO_MMIO_SIZE).then_some((addr - base, transport))
    }

    pub fn read(&self, addr: u64, data: &mut [u8]) {
        match self.find(addr) {
            Some((offset, transport)) => transport.lock().unwrap().read(offset, data),
            // Nothing decodes the address: the bus floats high.
            None => data.fill(0xff),
        }
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        if let Some((offset, transport)) = self.find(addr) {
            transport.lock().unwrap().write(offset, data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::vstate::stop::StopReason;

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
