//! KVM integration tests of the virtio devices, driven by tiny C guests built at test time
//! (`sandbox_vmm::guests`): real MMIO exits into the transport, real ioeventfds and irqfds, the
//! device thread, and the guest reading what the devices wrote into its memory.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use sandbox_vmm::config::Disk;
use sandbox_vmm::devices::manager::{DeviceSpec, NetSpec};
use sandbox_vmm::guests::{BLOCK_C, NET_C, VSOCK_C};
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
    let devices = DeviceSpec { disks: vec![Disk { path: disk.clone(), read_only: true }], ..Default::default() };
    let mut vm = Vm::create(&spec(&guest, "sector=1", &state, devices)).unwrap();
    vm.start().unwrap();
    let out = run_to_reset(&mut vm, &state, Duration::from_secs(60));
    assert_eq!(out, "capacity 8\nread status 0: the second sector of the disk ok\nwrite status 1\nid disk0\n");
    // One sector read, the refused write counted as an error (GET_ID is neither).
    assert_eq!(vm.disk_metrics()[0].snapshot(), (512, 1, 0, 1));
    assert_eq!(std::fs::read(&disk).unwrap(), image, "the read-only disk changed");
}

/// passt from Debian, or why the test cannot use it.
fn passt() -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from("/usr/bin/passt");
    if path.exists() {
        Ok(path)
    } else {
        Err("passt is not installed (apt-get install passt)".into())
    }
}

#[test]
fn a_guest_gets_a_dhcp_offer_and_an_arp_reply_from_a_real_passt() {
    require_kvm!("a_guest_gets_a_dhcp_offer_and_an_arp_reply_from_a_real_passt");
    let passt = match passt() {
        Ok(p) => p,
        Err(reason) => return common::skip("a_guest_gets_a_dhcp_offer_and_an_arp_reply_from_a_real_passt", &reason),
    };
    let state = StateDir::new();
    let guest = build_c_guest("net", NET_C);
    let devices = DeviceSpec { net: Some(NetSpec { passt, log: state.0.join("passt.log") }), ..Default::default() };
    let mut vm = Vm::create(&spec(&guest, "", &state, devices)).unwrap();
    vm.start().unwrap();
    let out = run_to_reset(&mut vm, &state, Duration::from_secs(60));
    // passt offers the host's own address and routes through the host's gateway, which differ
    // from host to host; the shape of the answers does not.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let offer: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!((offer[0], offer[1], offer[3]), ("dhcp", "offer", "router"), "{out}");
    for ip in [offer[2], offer[4]] {
        assert!(ip.parse::<std::net::Ipv4Addr>().is_ok_and(|a| !a.is_unspecified()), "{out}");
    }
    assert!(lines[1].starts_with(&format!("arp {} is-at ", offer[4])), "{out}");
    assert_eq!(lines[1].rsplit(' ').next().unwrap().len(), 17, "{out}");
    drop(vm);
    // passt was the VM's child and went with it.
    assert!(!std::fs::read_to_string(state.0.join("passt.log")).unwrap_or_default().contains("rror"), "passt logged an error");
}

/// Opens a host connection to guest `port` through the hybrid socket: `CONNECT port` and the
/// `OK <local port>` answer, or None when the guest refused (the socket closes instead).
fn connect_guest(socket: &Path, port: u32) -> Option<(UnixStream, u32)> {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    writeln!(stream, "CONNECT {port}").unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).ok()?;
    let local = line.strip_prefix("OK ")?.trim_end().parse().ok()?;
    Some((stream, local))
}

#[test]
fn the_host_reaches_a_guest_echo_service_through_the_hybrid_socket() {
    require_kvm!("the_host_reaches_a_guest_echo_service_through_the_hybrid_socket");
    let state = StateDir::new();
    let socket = state.0.join("v.sock");
    let guest = build_c_guest("vsock", VSOCK_C);
    let devices = DeviceSpec { vsock: Some(socket.clone()), ..Default::default() };
    let mut vm = Vm::create(&spec(&guest, "listen=44772 conns=1", &state, devices)).unwrap();
    vm.start().unwrap();
    // A port nobody listens on: the guest's RST closes the socket without an OK.
    assert!(connect_guest(&socket, 9999).is_none(), "port 9999 was accepted");
    // The guest's driver may not be up yet: the VMM then closes the socket after 2 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (stream, local) = loop {
        if let Some(accepted) = connect_guest(&socket, 44772) {
            break accepted;
        }
        assert!(Instant::now() < deadline, "the echo service never accepted");
    };
    assert!(local >= 1 << 30, "local port {local}");
    // More than the credit either side gives at once, so both directions wait for updates.
    let payload: Vec<u8> = (0..400_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let writer = {
        let (mut stream, payload) = (stream.try_clone().unwrap(), payload.clone());
        std::thread::spawn(move || stream.write_all(&payload).unwrap())
    };
    let mut echoed = vec![0u8; payload.len()];
    (&stream).read_exact(&mut echoed).unwrap();
    writer.join().unwrap();
    assert!(echoed == payload, "the echo differs");
    drop(stream);
    let out = run_to_reset(&mut vm, &state, Duration::from_secs(60));
    assert_eq!(out, "echo done 1\n");
    drop(vm);
    assert!(!socket.exists(), "the hybrid socket is removed with the VM");
}

#[test]
fn a_guest_connects_out_to_the_host_through_path_underscore_port() {
    require_kvm!("a_guest_connects_out_to_the_host_through_path_underscore_port");
    let state = StateDir::new();
    let socket = state.0.join("v.sock");
    let listener = UnixListener::bind(state.0.join("v.sock_5000")).unwrap();
    let guest = build_c_guest("vsock", VSOCK_C);
    let devices = DeviceSpec { vsock: Some(socket), ..Default::default() };
    let mut vm = Vm::create(&spec(&guest, "connect=5000", &state, devices)).unwrap();
    vm.start().unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line).unwrap();
    assert_eq!(line, "hello from the guest\n");
    conn.write_all(b"hello from the host\n").unwrap();
    // The guest shuts the connection down: the host sees EOF.
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    let out = run_to_reset(&mut vm, &state, Duration::from_secs(60));
    assert_eq!(out, "connected to host port 5000\nhost says: hello from the host\nclosed\n");
}
