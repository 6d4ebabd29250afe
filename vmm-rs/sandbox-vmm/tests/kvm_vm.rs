//! KVM integration tests of the VM runtime itself, with tiny guests assembled at test time.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use sandbox_vmm::arch::x86_64::boot::EntryMode;
use sandbox_vmm::error_code::ErrorCode;
use sandbox_vmm::vstate::stop::{Shutdown, StopReason};
use sandbox_vmm::vstate::vm::{Vm, VmSpec, VmState};
use vm_memory::{Bytes, GuestAddress};

use common::{build_guest, StateDir};
use sandbox_vmm::guests::{BOOT_PARAMS_ASM, COUNTER_ADDR, HELLO_ASM, PVH_ASM, SPIN_ASM, TRIPLE_FAULT_ASM};

fn spec(kernel: &Path, vcpus: u8, state: &StateDir) -> VmSpec {
    VmSpec {
        kernel: kernel.to_path_buf(),
        initrd: None,
        cmdline: "console=ttyS0".into(),
        vcpus,
        memory_mib: 32,
        serial_log: state.0.join("serial.log"),
        serial_log_max: 1 << 20,
        devices: Default::default(),
    }
}

/// Assembles one of the tiny guests and starts it; the state directory holds its serial log.
fn start_guest(name: &str, asm: &str, vcpus: u8) -> (StateDir, Vm) {
    let state = StateDir::new();
    let guest = build_guest(name, asm);
    let mut vm = Vm::create(&spec(&guest, vcpus, &state)).unwrap();
    vm.start().unwrap();
    (state, vm)
}

fn counter(vm: &Vm) -> u64 {
    vm.memory().read_obj(GuestAddress(COUNTER_ADDR)).unwrap()
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn long_mode_guest_prints_to_serial_and_resets_through_the_i8042() {
    require_kvm!("long_mode_guest_prints_to_serial_and_resets_through_the_i8042");
    let (state, mut vm) = start_guest("hello", HELLO_ASM, 1);
    wait_until("the guest's reset", Duration::from_secs(30), || vm.stop_signal().reason().is_some());
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Reset, "the guest's reset is the recorded reason");
    assert_eq!(vm.state(), VmState::Stopped);
    assert_eq!(std::fs::read_to_string(state.0.join("serial.log")).unwrap(), "hello from long mode 1\n");
}

/// Runs a guest that ends by resetting, returning what it printed.
fn run_to_reset(guest: &Path, cmdline: &str, initrd: Option<&[u8]>, expected_mode: EntryMode) -> String {
    run_to_reset_with_memory(guest, cmdline, initrd, expected_mode, 32)
}

fn run_to_reset_with_memory(guest: &Path, cmdline: &str, initrd: Option<&[u8]>, expected_mode: EntryMode, memory_mib: u64) -> String {
    let state = StateDir::new();
    let mut spec = spec(guest, 1, &state);
    spec.memory_mib = memory_mib;
    spec.cmdline = cmdline.into();
    if let Some(bytes) = initrd {
        let path = state.0.join("initrd");
        std::fs::write(&path, bytes).unwrap();
        spec.initrd = Some(path);
    }
    let mut vm = Vm::create(&spec).unwrap();
    assert_eq!(vm.entry_mode(), expected_mode);
    vm.start().unwrap();
    wait_until("the guest's reset", Duration::from_secs(30), || vm.stop_signal().reason().is_some());
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Reset);
    std::fs::read_to_string(state.0.join("serial.log")).unwrap()
}

#[test]
fn linux_boot_protocol_hands_over_zero_page_cmdline_acpi_e820_and_initrd() {
    require_kvm!("linux_boot_protocol_hands_over_zero_page_cmdline_acpi_e820_and_initrd");
    let guest = build_guest("bootparams", BOOT_PARAMS_ASM);
    // 32 MiB: conventional RAM, the reserved BIOS area, RAM from 1 MiB.
    assert_eq!(run_to_reset(&guest, "console=ttyS0 reboot=k", None, EntryMode::Linux64), "console=ttyS0 reboot=k|RSD PTR |3|\n");
    assert_eq!(
        run_to_reset(&guest, "rdinit=/init", Some(b"initramfs bytes"), EntryMode::Linux64),
        "rdinit=/init|RSD PTR |3|initramfs bytes\n"
    );
}

#[test]
fn memory_above_the_32bit_hole_is_a_second_region_and_e820_entry() {
    require_kvm!("memory_above_the_32bit_hole_is_a_second_region_and_e820_entry");
    let guest = build_guest("bootparams", BOOT_PARAMS_ASM);
    // 4 GiB: 3 GiB below the MMIO hole, 1 GiB from 4 GiB (mapped lazily; the guest touches little).
    let out = run_to_reset_with_memory(&guest, "x", None, EntryMode::Linux64, 4096);
    assert_eq!(out, "x|RSD PTR |4|\n");
}

#[test]
fn an_elf_with_a_pvh_note_is_entered_in_protected_mode_with_start_info() {
    require_kvm!("an_elf_with_a_pvh_note_is_entered_in_protected_mode_with_start_info");
    let guest = build_guest("pvh", PVH_ASM);
    assert_eq!(run_to_reset(&guest, "init=/bin/sh", None, EntryMode::Pvh), "pvh init=/bin/sh\n");
}

fn pause_resume(vcpus: u8) {
    let (_state, mut vm) = start_guest("spin", SPIN_ASM, vcpus);
    wait_until("the counter to move", Duration::from_secs(30), || counter(&vm) > 1000);

    assert_eq!(vm.pause(Duration::from_secs(10)).unwrap(), VmState::Paused);
    let frozen = counter(&vm);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(counter(&vm), frozen, "the counter moved while paused");
    // Pausing again is confirmed at once.
    assert_eq!(vm.pause(Duration::from_secs(10)).unwrap(), VmState::Paused);

    assert_eq!(vm.resume(Duration::from_secs(10)).unwrap(), VmState::Running);
    wait_until("the counter to move after resume", Duration::from_secs(30), || counter(&vm) > frozen + 1000);
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Terminated);
}

#[test]
fn spinning_counter_stops_while_paused_and_continues_after_resume() {
    require_kvm!("spinning_counter_stops_while_paused_and_continues_after_resume");
    pause_resume(1);
}

#[test]
fn pause_and_resume_are_confirmed_by_every_vcpu() {
    require_kvm!("pause_and_resume_are_confirmed_by_every_vcpu");
    // The second vCPU waits for INIT/SIPI inside KVM_RUN; it too must be kicked out and ack.
    pause_resume(2);
}

#[test]
fn terminate_while_running() {
    require_kvm!("terminate_while_running");
    let (_state, mut vm) = start_guest("spin", SPIN_ASM, 2);
    wait_until("the counter to move", Duration::from_secs(30), || counter(&vm) > 0);
    let started = Instant::now();
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Terminated);
    assert!(started.elapsed() < Duration::from_secs(5), "terminate took {:?}", started.elapsed());
    assert_eq!(vm.state(), VmState::Stopped);
    let after = counter(&vm);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(counter(&vm), after);
    assert!(vm.pause(Duration::from_secs(1)).is_err(), "a stopped VM cannot be paused");
}

#[test]
fn a_kernel_that_is_neither_elf_nor_bzimage_is_refused_with_its_field() {
    require_kvm!("a_kernel_that_is_neither_elf_nor_bzimage_is_refused_with_its_field");
    let state = StateDir::new();
    let junk = state.0.join("junk");
    std::fs::write(&junk, vec![0x90u8; 8192]).unwrap();
    let err = Vm::create(&spec(&junk, 1, &state)).err().expect("junk must be refused");
    assert_eq!((err.code(), err.field().as_deref()), (ErrorCode::InvalidConfig, Some("kernel")));
}

#[test]
fn a_triple_fault_stops_the_vm_as_a_shutdown() {
    require_kvm!("a_triple_fault_stops_the_vm_as_a_shutdown");
    let (_state, mut vm) = start_guest("triple", TRIPLE_FAULT_ASM, 1);
    wait_until("the triple fault", Duration::from_secs(30), || vm.stop_signal().reason().is_some());
    let reason = vm.halt(StopReason::Terminated);
    assert_eq!(reason, StopReason::Shutdown(Shutdown::TripleFault { vcpu: 0 }));
    assert_eq!(reason.detail().as_deref(), Some("vcpu0: triple fault"));
}

#[test]
fn terminate_while_paused() {
    require_kvm!("terminate_while_paused");
    let (_state, mut vm) = start_guest("spin", SPIN_ASM, 2);
    wait_until("the counter to move", Duration::from_secs(30), || counter(&vm) > 0);
    assert_eq!(vm.pause(Duration::from_secs(10)).unwrap(), VmState::Paused);
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Terminated);
    assert_eq!(vm.state(), VmState::Stopped);
    assert!(vm.resume(Duration::from_secs(1)).is_err(), "a stopped VM cannot be resumed");
}
