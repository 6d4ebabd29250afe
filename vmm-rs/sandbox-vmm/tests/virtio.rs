//! KVM integration tests of the virtio devices, driven by tiny C guests built at test time
//! (`sandbox_vmm::guests`): real MMIO exits into the transport, real ioeventfds and irqfds, the
//! device thread, and the guest reading what the devices wrote into its memory.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use sandbox_vmm::config::Disk;
use sandbox_vmm::devices::manager::DeviceSpec;
use sandbox_vmm::guests::BLOCK_C;
use sandbox_vmm::vstate::stop::StopReason;
use sandbox_vmm::vstate::vm::{Vm, VmSpec};

use common::{build_c_guest, StateDir};

fn spec(kernel: &Path, cmdline: &str, state: &StateDir, devices: DeviceSpec) -> VmSpec {
    VmSpec {
        kernel: kernel.to_path_buf(),
        initrd: None,
        cmdline: cmdline.into(),
        vcpus: 1,
        memory_mib: 64,
        serial_log: state.0.join("serial.log"),
        serial_log_max: 1 << 20,
        devices,
    }
}

/// Runs the guest until it resets; returns what it printed.
fn run_to_reset(vm: &mut Vm, state: &StateDir, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    while vm.stop_signal().reason().is_none() {
        assert!(Instant::now() < deadline, "the guest did not finish in {timeout:?}; it printed:\n{}", serial(state));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Reset, "{}", serial(state));
    serial(state)
}

fn serial(state: &StateDir) -> String {
    std::fs::read_to_string(state.0.join("serial.log")).unwrap_or_default()
}

#[test]
fn a_guest_reads_a_known_block_from_a_read_only_disk() {
    require_kvm!("a_guest_reads_a_known_block_from_a_read_only_disk");
    let state = StateDir::new();
    let disk = state.0.join("disk.img");
    let mut image = vec![0u8; 8 * 512];
    image[512..512 + 32].copy_from_slice(b"the second sector of the disk ok");
    std::fs::write(&disk, &image).unwrap();
    let guest = build_c_guest("block", BLOCK_C);
    let devices = DeviceSpec { disks: vec![Disk { path: disk.clone(), read_only: true }] };
    let mut vm = Vm::create(&spec(&guest, "sector=1", &state, devices)).unwrap();
    vm.start().unwrap();
    let out = run_to_reset(&mut vm, &state, Duration::from_secs(60));
    assert_eq!(out, "capacity 8\nread status 0: the second sector of the disk ok\nwrite status 1\nid disk0\n");
    assert_eq!(std::fs::read(&disk).unwrap(), image, "the read-only disk changed");
}
