//! The i8042 keyboard controller (vm-superio's), present for one job: its CPU-reset command is
//! how a Linux guest booted with `reboot=k` ends the VM.

use std::convert::Infallible;
use std::sync::Arc;

use vm_superio::Trigger;

use crate::vstate::stop::{StopReason, StopSignal};

/// The i8042's CPU-reset line: ends the VM with [`StopReason::Reset`].
pub struct ResetTrigger(pub Arc<StopSignal>);

impl Trigger for ResetTrigger {
    type E = Infallible;
    fn trigger(&self) -> Result<(), Infallible> {
        self.0.stop(StopReason::Reset);
        Ok(())
    }
}
