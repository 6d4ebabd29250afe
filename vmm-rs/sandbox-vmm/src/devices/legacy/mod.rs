//! Legacy port-I/O devices, both from vm-superio: the 8250 console (COM1) and the i8042
//! controller, with the interrupt line they raise through KVM.

pub mod i8042;
pub mod serial;

use std::io;

use vm_superio::Trigger;
use vmm_sys_util::eventfd::EventFd;

/// An interrupt line: an eventfd registered with KVM as an irqfd.
pub struct IrqTrigger(pub EventFd);

impl Trigger for IrqTrigger {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        self.0.write(1)
    }
}
