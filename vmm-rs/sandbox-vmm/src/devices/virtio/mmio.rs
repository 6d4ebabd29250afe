//! The virtio-mmio transport, version 2 (virtio 1.2, 4.2.2): the register window the guest's
//! driver reads and writes, feature negotiation, the device status state machine and each
//! queue's registers, in front of one [`VirtioDevice`].
//!
//! It runs on the vCPU thread that took the MMIO exit, under the transport's lock; the device
//! behind it is shared with the device thread, so every call into it takes the device's lock
//! briefly. Registers the driver may not write in the current status (queue registers after
//! DRIVER_OK, driver features after FEATURES_OK) are ignored, as the specification requires of
//! the driver and Firecracker enforces on it.

use std::sync::{Arc, Mutex};

use vm_memory::GuestMemoryMmap;

use super::queue::QueueConfig;
use super::{interrupt, regs, status, ActivateError, Activation, Interrupt, VirtioDevice, FEATURE_VERSION_1};

pub struct MmioTransport {
    device: Arc<Mutex<dyn VirtioDevice>>,
    mem: GuestMemoryMmap,
    interrupt: Arc<Interrupt>,
    device_type: u32,
    features: u64,
    features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    queue_sel: u32,
    queues: Vec<QueueConfig>,
    status: u32,
}

impl MmioTransport {
    pub fn new(device: Arc<Mutex<dyn VirtioDevice>>, mem: GuestMemoryMmap, interrupt: Arc<Interrupt>) -> Self {
        let (device_type, features, queues) = {
            let d = device.lock().unwrap();
            (d.device_type(), d.features(), d.queue_max_sizes().iter().map(|max| QueueConfig::new(*max)).collect())
        };
        MmioTransport {
            device,
            mem,
            interrupt,
            device_type,
            features,
            features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            queue_sel: 0,
            queues,
            status: 0,
        }
    }

    /// The status register as the driver reads it.
    pub fn status(&self) -> u32 {
        if self.interrupt.is_broken() {
            self.status | status::DEVICE_NEEDS_RESET
        } else {
            self.status
        }
    }

    fn has(&self, set: u32, clear: u32) -> bool {
        self.status & set == set && self.status & clear == 0
    }

    fn selected_queue(&mut self) -> Option<&mut QueueConfig> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    fn half(value: u64, select: u32) -> u32 {
        match select {
            0 => value as u32,
            1 => (value >> 32) as u32,
            _ => 0,
        }
    }

    /// A guest read of `data.len()` bytes at `offset` into the window.
    pub fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= regs::CONFIG {
            self.device.lock().unwrap().read_config(offset - regs::CONFIG, data);
            return;
        }
        // The registers take aligned 32-bit accesses only (4.2.2.2); anything else reads 0.
        if data.len() != 4 || offset % 4 != 0 {
            data.fill(0);
            return;
        }
        let value = match offset {
            regs::MAGIC_VALUE => regs::MAGIC,
            regs::VERSION => regs::VERSION_MODERN,
            regs::DEVICE_ID => self.device_type,
            regs::VENDOR_ID => 0,
            regs::DEVICE_FEATURES => Self::half(self.features, self.features_sel),
            regs::QUEUE_NUM_MAX => self.queues.get(self.queue_sel as usize).map_or(0, |q| u32::from(q.max_size)),
            regs::QUEUE_READY => self.queues.get(self.queue_sel as usize).map_or(0, |q| u32::from(q.ready)),
            regs::INTERRUPT_STATUS => self.interrupt.status(),
            regs::STATUS => self.status(),
            // No device here ever changes its config space, so no read of it can be torn.
            regs::CONFIG_GENERATION => 0,
            _ => 0,
        };
        data.copy_from_slice(&value.to_le_bytes());
    }

    /// A guest write of `data` at `offset` into the window.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        // No device here has a writable config space; writes to it are dropped.
        if offset >= regs::CONFIG || data.len() != 4 || offset % 4 != 0 {
            return;
        }
        let value = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        let queue_setup = self.has(status::FEATURES_OK, status::DRIVER_OK | status::FAILED);
        let set_low = |field: &mut u64, v: u32| *field = (*field & !0xffff_ffff) | u64::from(v);
        let set_high = |field: &mut u64, v: u32| *field = (*field & 0xffff_ffff) | (u64::from(v) << 32);
        match offset {
            regs::DEVICE_FEATURES_SEL => self.features_sel = value,
            regs::DRIVER_FEATURES if self.has(status::DRIVER, status::FEATURES_OK | status::FAILED) => match self.driver_features_sel {
                0 => set_low(&mut self.driver_features, value),
                1 => set_high(&mut self.driver_features, value),
                _ => {}
            },
            regs::DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            regs::QUEUE_SEL => self.queue_sel = value,
            regs::QUEUE_NUM if queue_setup => {
                if let Some(q) = self.selected_queue() {
                    q.size = value as u16;
                }
            }
            regs::QUEUE_READY if queue_setup => {
                if let Some(q) = self.selected_queue() {
                    q.ready = value == 1;
                }
            }
            regs::QUEUE_DESC_LOW | regs::QUEUE_DESC_HIGH | regs::QUEUE_DRIVER_LOW | regs::QUEUE_DRIVER_HIGH | regs::QUEUE_DEVICE_LOW
            | regs::QUEUE_DEVICE_HIGH
                if queue_setup =>
            {
                if let Some(q) = self.selected_queue() {
                    let field = match offset {
                        regs::QUEUE_DESC_LOW | regs::QUEUE_DESC_HIGH => &mut q.desc_table,
                        regs::QUEUE_DRIVER_LOW | regs::QUEUE_DRIVER_HIGH => &mut q.avail_ring,
                        _ => &mut q.used_ring,
                    };
                    if matches!(offset, regs::QUEUE_DESC_LOW | regs::QUEUE_DRIVER_LOW | regs::QUEUE_DEVICE_LOW) {
                        set_low(field, value);
                    } else {
                        set_high(field, value);
                    }
                }
            }
            // Normally an ioeventfd takes these writes in the kernel; one that reaches userspace
            // (a value no ioeventfd matches, or a host without ioeventfds) goes the same way.
            regs::QUEUE_NOTIFY => {
                let device = self.device.lock().unwrap();
                if let Some(evt) = device.queue_events().get(value as usize) {
                    let _ = evt.write(1);
                }
            }
            regs::INTERRUPT_ACK => self.interrupt.ack(value & (interrupt::USED_BUFFER | interrupt::CONFIG_CHANGE)),
            regs::STATUS => self.set_status(value),
            _ => {}
        }
    }

    /// The status state machine: 0 resets; otherwise each step adds exactly the next bit of
    /// ACKNOWLEDGE, DRIVER, FEATURES_OK, DRIVER_OK, and FAILED may be added at any time.
    /// Anything else leaves the status as it was.
    fn set_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let adding = value & !self.status;
        let from = self.status;
        const ACK: u32 = status::ACKNOWLEDGE;
        const ACK_DRV: u32 = status::ACKNOWLEDGE | status::DRIVER;
        const ACK_DRV_FEAT: u32 = ACK_DRV | status::FEATURES_OK;
        match (adding, from) {
            (status::ACKNOWLEDGE, 0) | (status::DRIVER, ACK) => self.status = value,
            (status::FEATURES_OK, ACK_DRV) => {
                // The driver may accept only what was offered, and must accept version 1
                // (this transport has no legacy interface). Otherwise FEATURES_OK stays clear,
                // which is how the driver learns the device refuses (3.1.1).
                let offered = self.driver_features & !self.features == 0;
                if offered && self.driver_features & FEATURE_VERSION_1 != 0 {
                    self.status = value;
                }
            }
            (status::DRIVER_OK, ACK_DRV_FEAT) => {
                self.status = value;
                if let Err(e) = self.activate() {
                    eprintln!("sandbox-vmm: virtio device type {}: cannot activate: {e}", self.device_type);
                    self.interrupt.needs_reset();
                }
            }
            (adding, _) if adding & status::FAILED != 0 => self.status |= status::FAILED,
            _ => {}
        }
    }

    fn activate(&mut self) -> Result<(), ActivateError> {
        let queues = self
            .queues
            .iter()
            .enumerate()
            .map(|(index, q)| q.build(&self.mem).map_err(|source| ActivateError::Queue { index, source }))
            .collect::<Result<Vec<_>, _>>()?;
        let activation = Activation { mem: self.mem.clone(), queues, features: self.driver_features, interrupt: self.interrupt.clone() };
        let mut device = self.device.lock().unwrap();
        device.activate(activation)?;
        // Queue work the driver announced before DRIVER_OK would otherwise wait for the next
        // notification: wake the device thread for every queue.
        for evt in device.queue_events() {
            let _ = evt.write(1);
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.device.lock().unwrap().reset();
        self.interrupt.clear();
        self.status = 0;
        self.features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
        self.queue_sel = 0;
        for q in &mut self.queues {
            *q = QueueConfig::new(q.max_size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::virtio::testing::{memory, Driver};
    use crate::devices::virtio::read_config_bytes;
    use event_manager::{EventOps, Events, MutEventSubscriber};
    use vmm_sys_util::eventfd::EventFd;

    /// A device with two queues and an 8-byte config space that records what the transport does.
    pub struct Probe {
        evts: Vec<EventFd>,
        pub activated: Option<Activation>,
        pub resets: usize,
        pub refuse: bool,
    }

    impl MutEventSubscriber for Probe {
        fn process(&mut self, _: Events, _: &mut EventOps) {}
        fn init(&mut self, _: &mut EventOps) {}
    }

    impl VirtioDevice for Probe {
        fn device_type(&self) -> u32 {
            super::super::device_type::BLOCK
        }
        fn queue_max_sizes(&self) -> &[u16] {
            &[16, 8]
        }
        fn queue_events(&self) -> &[EventFd] {
            &self.evts
        }
        fn features(&self) -> u64 {
            FEATURE_VERSION_1 | 1 << 5
        }
        fn read_config(&self, offset: u64, data: &mut [u8]) {
            read_config_bytes(&0x1122_3344_5566_7788u64.to_le_bytes(), offset, data);
        }
        fn activate(&mut self, activation: Activation) -> Result<(), ActivateError> {
            if self.refuse {
                return Err(ActivateError::Backend(std::io::Error::other("refused")));
            }
            self.activated = Some(activation);
            Ok(())
        }
        fn reset(&mut self) {
            self.activated = None;
            self.resets += 1;
        }
    }

    fn transport() -> (MmioTransport, Arc<Mutex<Probe>>) {
        let probe = Arc::new(Mutex::new(Probe {
            evts: (0..2).map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap()).collect(),
            activated: None,
            resets: 0,
            refuse: false,
        }));
        let interrupt = Interrupt::new(EventFd::new(libc::EFD_NONBLOCK).unwrap());
        (MmioTransport::new(probe.clone(), memory(), interrupt), probe)
    }

    fn read(t: &mut MmioTransport, offset: u64) -> u32 {
        let mut data = [0u8; 4];
        t.read(offset, &mut data);
        u32::from_le_bytes(data)
    }

    fn write(t: &mut MmioTransport, offset: u64, value: u32) {
        t.write(offset, &value.to_le_bytes());
    }

    fn negotiate(t: &mut MmioTransport) {
        write(t, regs::STATUS, status::ACKNOWLEDGE);
        write(t, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
        write(t, regs::DRIVER_FEATURES_SEL, 1);
        write(t, regs::DRIVER_FEATURES, 1);
        write(t, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    }

    fn set_up_queue(t: &mut MmioTransport, index: u32, driver: &Driver) {
        write(t, regs::QUEUE_SEL, index);
        write(t, regs::QUEUE_NUM, u32::from(driver.size));
        write(t, regs::QUEUE_DESC_LOW, driver.desc as u32);
        write(t, regs::QUEUE_DESC_HIGH, (driver.desc >> 32) as u32);
        write(t, regs::QUEUE_DRIVER_LOW, driver.avail as u32);
        write(t, regs::QUEUE_DEVICE_LOW, driver.used as u32);
        write(t, regs::QUEUE_READY, 1);
    }

    const ALL: u32 = status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK;

    #[test]
    fn identification_registers() {
        let (mut t, _) = transport();
        assert_eq!(read(&mut t, regs::MAGIC_VALUE), regs::MAGIC);
        assert_eq!(read(&mut t, regs::VERSION), 2);
        assert_eq!(read(&mut t, regs::DEVICE_ID), super::super::device_type::BLOCK);
        write(&mut t, regs::DEVICE_FEATURES_SEL, 0);
        assert_eq!(read(&mut t, regs::DEVICE_FEATURES), 1 << 5);
        write(&mut t, regs::DEVICE_FEATURES_SEL, 1);
        assert_eq!(read(&mut t, regs::DEVICE_FEATURES), 1);
        write(&mut t, regs::DEVICE_FEATURES_SEL, 7);
        assert_eq!(read(&mut t, regs::DEVICE_FEATURES), 0);
        write(&mut t, regs::QUEUE_SEL, 1);
        assert_eq!(read(&mut t, regs::QUEUE_NUM_MAX), 8);
        write(&mut t, regs::QUEUE_SEL, 2);
        assert_eq!(read(&mut t, regs::QUEUE_NUM_MAX), 0, "a queue that does not exist");
        // Config space at any width, zero past its end; registers only as aligned words.
        let mut two = [0u8; 2];
        t.read(regs::CONFIG + 6, &mut two);
        assert_eq!(two, [0x22, 0x11]);
        t.read(regs::CONFIG + 7, &mut two);
        assert_eq!(two, [0x11, 0]);
        t.read(regs::MAGIC_VALUE, &mut two);
        assert_eq!(two, [0, 0]);
        let mut word = [0u8; 4];
        t.read(regs::MAGIC_VALUE + 1, &mut word);
        assert_eq!(word, [0; 4]);
    }

    #[test]
    fn a_full_bring_up_activates_the_device_with_its_queues() {
        let (mut t, probe) = transport();
        negotiate(&mut t);
        assert_eq!(read(&mut t, regs::STATUS), status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
        let (q0, q1) = (Driver::new(0x1000, 16), Driver::new(0x4000, 8));
        set_up_queue(&mut t, 0, &q0);
        set_up_queue(&mut t, 1, &q1);
        write(&mut t, regs::QUEUE_SEL, 0);
        assert_eq!(read(&mut t, regs::QUEUE_READY), 1);
        write(&mut t, regs::STATUS, ALL);
        assert_eq!(read(&mut t, regs::STATUS), ALL);
        let p = probe.lock().unwrap();
        let activation = p.activated.as_ref().expect("activated");
        assert_eq!(activation.features, FEATURE_VERSION_1);
        assert_eq!(activation.queues.len(), 2);
        // Activation wakes the device thread for every queue.
        assert_eq!(p.evts[0].read().unwrap(), 1);
        assert_eq!(p.evts[1].read().unwrap(), 1);
    }

    #[test]
    fn out_of_order_status_writes_are_ignored() {
        let (mut t, probe) = transport();
        write(&mut t, regs::STATUS, status::DRIVER);
        assert_eq!(read(&mut t, regs::STATUS), 0);
        write(&mut t, regs::STATUS, ALL);
        assert_eq!(read(&mut t, regs::STATUS), 0);
        write(&mut t, regs::STATUS, status::ACKNOWLEDGE);
        write(&mut t, regs::STATUS, status::ACKNOWLEDGE | status::FEATURES_OK);
        assert_eq!(read(&mut t, regs::STATUS), status::ACKNOWLEDGE);
        write(&mut t, regs::STATUS, status::ACKNOWLEDGE | status::FAILED);
        assert_eq!(read(&mut t, regs::STATUS), status::ACKNOWLEDGE | status::FAILED);
        assert!(probe.lock().unwrap().activated.is_none());
    }

    #[test]
    fn features_not_offered_or_without_version_1_are_refused() {
        for (low, high) in [(1 << 6, 1), (0, 0), (1 << 5, 0)] {
            let (mut t, _) = transport();
            write(&mut t, regs::STATUS, status::ACKNOWLEDGE);
            write(&mut t, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
            write(&mut t, regs::DRIVER_FEATURES_SEL, 0);
            write(&mut t, regs::DRIVER_FEATURES, low);
            write(&mut t, regs::DRIVER_FEATURES_SEL, 1);
            write(&mut t, regs::DRIVER_FEATURES, high);
            write(&mut t, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
            assert_eq!(read(&mut t, regs::STATUS) & status::FEATURES_OK, 0, "{low:#x} {high:#x}");
        }
    }

    #[test]
    fn queue_registers_are_frozen_outside_set_up() {
        let (mut t, _) = transport();
        // Before FEATURES_OK.
        write(&mut t, regs::QUEUE_SEL, 0);
        write(&mut t, regs::QUEUE_READY, 1);
        assert_eq!(read(&mut t, regs::QUEUE_READY), 0);
        negotiate(&mut t);
        let (q0, q1) = (Driver::new(0x1000, 16), Driver::new(0x4000, 8));
        set_up_queue(&mut t, 0, &q0);
        set_up_queue(&mut t, 1, &q1);
        write(&mut t, regs::STATUS, ALL);
        // After DRIVER_OK.
        write(&mut t, regs::QUEUE_SEL, 0);
        write(&mut t, regs::QUEUE_READY, 0);
        assert_eq!(read(&mut t, regs::QUEUE_READY), 1);
    }

    #[test]
    fn an_unusable_queue_set_up_marks_the_device_needs_reset_and_reset_clears_it() {
        let (mut t, probe) = transport();
        negotiate(&mut t);
        let q0 = Driver::new(0x1000, 16);
        set_up_queue(&mut t, 0, &q0);
        // Queue 1 stays unready, then one with a used ring outside guest memory.
        write(&mut t, regs::STATUS, ALL);
        assert_ne!(read(&mut t, regs::STATUS) & status::DEVICE_NEEDS_RESET, 0);
        assert_eq!(read(&mut t, regs::INTERRUPT_STATUS), interrupt::CONFIG_CHANGE);
        assert!(probe.lock().unwrap().activated.is_none());
        write(&mut t, regs::STATUS, 0);
        assert_eq!(read(&mut t, regs::STATUS), 0);
        assert_eq!(read(&mut t, regs::INTERRUPT_STATUS), 0);
        assert_eq!(probe.lock().unwrap().resets, 1);

        negotiate(&mut t);
        set_up_queue(&mut t, 0, &q0);
        let mut far = Driver::new(0x4000, 8);
        far.used = crate::devices::virtio::testing::MEM_SIZE;
        set_up_queue(&mut t, 1, &far);
        write(&mut t, regs::STATUS, ALL);
        assert_ne!(read(&mut t, regs::STATUS) & status::DEVICE_NEEDS_RESET, 0);
    }

    #[test]
    fn a_device_that_refuses_activation_needs_reset() {
        let (mut t, probe) = transport();
        probe.lock().unwrap().refuse = true;
        negotiate(&mut t);
        set_up_queue(&mut t, 0, &Driver::new(0x1000, 16));
        set_up_queue(&mut t, 1, &Driver::new(0x4000, 8));
        write(&mut t, regs::STATUS, ALL);
        assert_ne!(read(&mut t, regs::STATUS) & status::DEVICE_NEEDS_RESET, 0);
    }

    #[test]
    fn notify_and_interrupt_ack() {
        let (mut t, probe) = transport();
        write(&mut t, regs::QUEUE_NOTIFY, 1);
        write(&mut t, regs::QUEUE_NOTIFY, 9);
        assert_eq!(probe.lock().unwrap().evts[1].read().unwrap(), 1);
        t.interrupt.used_buffer();
        t.interrupt.needs_reset();
        assert_eq!(read(&mut t, regs::INTERRUPT_STATUS), interrupt::USED_BUFFER | interrupt::CONFIG_CHANGE);
        write(&mut t, regs::INTERRUPT_ACK, interrupt::USED_BUFFER);
        assert_eq!(read(&mut t, regs::INTERRUPT_STATUS), interrupt::CONFIG_CHANGE);
        assert_eq!(t.interrupt.irq().read().unwrap(), 2);
    }

    #[test]
    fn fuzz_random_register_writes_never_panic() {
        let mut rng = crate::devices::virtio::testing::Rng::from_env(0x5eed_0003);
        for _ in 0..200 {
            let (mut t, _) = transport();
            for _ in 0..200 {
                let offset = rng.below(0x140) & !if rng.chance(90) { 3 } else { 0 };
                let len = [1usize, 2, 4, 8][rng.below(4) as usize];
                let value = if rng.chance(50) { rng.below(16) as u32 } else { rng.next() as u32 };
                let bytes = u64::from(value).to_le_bytes();
                if rng.chance(50) {
                    t.write(offset, &bytes[..len]);
                } else {
                    let mut data = vec![0u8; len];
                    t.read(offset, &mut data);
                }
            }
        }
    }
}
