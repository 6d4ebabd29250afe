//! The `sandbox-vmm` binary as the daemon uses it: start frame on stdin, answers on stdout,
//! control.sock, the cgroup it must run in, and `preflight`.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use control_frame::{encode, write_frame, FrameReader, DEFAULT_MAX_FRAME};
use serde_json::{json, Value};

use common::{build_c_guest, build_guest, kvm_and_scratch_cgroup, scratch_cgroup, StateDir};
use sandbox_vmm::guests::{BLOCK_C, HELLO_ASM, SPIN_ASM};

const BIN: &str = env!("CARGO_BIN_EXE_sandbox-vmm");

struct Vmm {
    child: Child,
    stdout: FrameReader<ChildStdout>,
}

impl Vmm {
    /// Starts the binary and writes `stdin_bytes` as its whole stdin.
    fn spawn(stdin_bytes: &[u8]) -> Vmm {
        let mut child = Command::new(BIN).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin_bytes).unwrap();
        let stdout = FrameReader::new(child.stdout.take().unwrap(), DEFAULT_MAX_FRAME);
        Vmm { child, stdout }
    }

    fn start(config: &Value) -> Vmm {
        Vmm::spawn(&encode(config, DEFAULT_MAX_FRAME).unwrap())
    }

    fn frame(&mut self) -> Value {
        self.stdout.read_frame().unwrap().expect("a frame on stdout")
    }

    fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().expect("exited, not killed");
            }
            assert!(Instant::now() < deadline, "sandbox-vmm did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(kernel: &Path, state: &StateDir, cgroup: Value) -> Value {
    json!({
        "kernel": kernel, "cmdline": "console=ttyS0", "vcpus": 1, "memory_mib": 32,
        "state_dir": state.0, "cgroup": cgroup,
    })
}

fn control(path: &Path, request: Value) -> Value {
    let mut stream = UnixStream::connect(path).unwrap();
    write_frame(&mut stream, &request, DEFAULT_MAX_FRAME).unwrap();
    FrameReader::new(stream, DEFAULT_MAX_FRAME).read_frame().unwrap().expect("an answer")
}

fn error_of(frame: &Value) -> (&str, &str) {
    assert_eq!(frame["ok"], json!(false), "{frame}");
    (frame["error"]["code"].as_str().unwrap(), frame["error"]["field"].as_str().unwrap_or(""))
}

#[test]
fn config_errors_are_answered_on_stdout_with_the_field() {
    let state = StateDir::new();
    let plain = fs::metadata(&state.0).unwrap();
    let cgroup = json!({ "path": state.0, "device": plain.dev(), "inode": plain.ino() });
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "(start frame)"),
        (b"\x00\x00\x00\x03{x}".to_vec(), "(start frame)"),
        (encode(&json!({"vcpus": 1}), DEFAULT_MAX_FRAME).unwrap(), "kernel"),
        (encode(&json!({ "kernel": "/k", "vcpus": 0, "memory_mib": 32, "state_dir": state.0, "cgroup": cgroup }), DEFAULT_MAX_FRAME).unwrap(), "vcpus"),
        (encode(&json!({ "kernel": "/k", "vcpus": 1, "memory_mib": 32, "state_dir": state.0, "cgroup": cgroup, "gpu": true }), DEFAULT_MAX_FRAME).unwrap(), "gpu"),
    ];
    for (stdin, field) in cases {
        let mut vmm = Vmm::spawn(&stdin);
        let frame = vmm.frame();
        assert_eq!(error_of(&frame), ("invalid_config", field), "{frame}");
        assert!(frame["error"]["message"].as_str().unwrap().contains(field.trim_matches(|c| c == '(' || c == ')')));
        assert_eq!(vmm.exit_code(), 2);
    }
}

#[test]
fn refuses_to_run_outside_its_cgroup_before_creating_anything() {
    let state = StateDir::new();
    let plain = fs::metadata(&state.0).unwrap();
    // Another directory's identity (a replaced cgroup looks like this), then a directory with
    // the right identity that is not a cgroup at all.
    for (cgroup, needle) in [
        (json!({ "path": state.0, "device": plain.dev(), "inode": plain.ino() + 1 }), "expected device"),
        (json!({ "path": state.0, "device": plain.dev(), "inode": plain.ino() }), "not on cgroup2"),
    ] {
        let mut vmm = Vmm::start(&config(Path::new("/nonexistent/vmlinux"), &state, cgroup));
        let frame = vmm.frame();
        assert_eq!(error_of(&frame), ("cgroup_identity", "cgroup.path"), "{frame}");
        assert!(frame["error"]["message"].as_str().unwrap().contains(needle), "{frame}");
        assert_eq!(vmm.exit_code(), 4);
        // Refused before the kernel was even opened or any file made.
        assert_eq!(fs::read_dir(&state.0).unwrap().count(), 0);
    }
}

#[test]
fn a_missing_kernel_is_reported_after_joining_the_cgroup() {
    let Some(cg) = kvm_and_scratch_cgroup("a_missing_kernel_is_reported_after_joining_the_cgroup") else { return };
    let state = StateDir::new();
    let mut vmm = Vmm::start(&config(Path::new("/nonexistent/vmlinux"), &state, cg.json()));
    let frame = vmm.frame();
    assert_eq!(error_of(&frame), ("invalid_config", "kernel"), "{frame}");
    assert!(frame["error"]["message"].as_str().unwrap().contains("/nonexistent/vmlinux"));
    assert_eq!(vmm.exit_code(), 2);
}

#[test]
fn guest_reset_ends_the_process_cleanly() {
    let Some(cg) = kvm_and_scratch_cgroup("guest_reset_ends_the_process_cleanly") else { return };
    let state = StateDir::new();
    let guest = build_guest("hello", HELLO_ASM);
    let mut vmm = Vmm::start(&config(&guest, &state, cg.json()));
    let ready = vmm.frame();
    assert_eq!((ready["ok"].clone(), ready["state"].clone(), ready["entry"].clone()), (json!(true), json!("running"), json!("linux64")), "{ready}");
    assert_eq!(vmm.frame(), json!({ "event": "stopped", "reason": "reset" }));
    assert_eq!(vmm.exit_code(), 0);
    assert_eq!(fs::read_to_string(state.0.join("serial.log")).unwrap(), "hello from long mode 1\n");
    assert!(!state.0.join("control.sock").exists(), "control.sock is removed on exit");
}

#[test]
fn the_start_frame_s_devices_reach_the_guest_and_a_missing_file_is_named() {
    let Some(cg) = kvm_and_scratch_cgroup("the_start_frame_s_devices_reach_the_guest_and_a_missing_file_is_named") else { return };
    let state = StateDir::new();
    let guest = build_c_guest("block", BLOCK_C);
    let mut cfg = config(&guest, &state, cg.json());
    cfg["disks"] = json!([{ "path": "/nonexistent/root.ext4", "read_only": true }]);
    let mut vmm = Vmm::start(&cfg);
    let frame = vmm.frame();
    assert_eq!(error_of(&frame), ("invalid_config", "disks[0].path"), "{frame}");
    assert_eq!(vmm.exit_code(), 2);
    let mut taken = config(&guest, &state, cg.json());
    taken["vsock_socket"] = json!(state.0.join("serial.log"));
    fs::write(state.0.join("serial.log"), "").unwrap();
    let mut vmm = Vmm::start(&taken);
    let frame = vmm.frame();
    assert_eq!(error_of(&frame), ("invalid_config", "vsock_socket"), "{frame}");
    assert_eq!(vmm.exit_code(), 2);
    let mut no_passt = config(&guest, &state, cg.json());
    no_passt["net"] = json!({ "passt": "/nonexistent/passt" });
    let mut vmm = Vmm::start(&no_passt);
    let frame = vmm.frame();
    assert_eq!(error_of(&frame), ("invalid_config", "net.passt"), "{frame}");
    assert_eq!(vmm.exit_code(), 2);

    let disk = state.0.join("disk.img");
    let mut image = vec![0u8; 4 * 512];
    image[512..516].copy_from_slice(b"root");
    fs::write(&disk, &image).unwrap();
    cfg["disks"] = json!([{ "path": disk, "read_only": true }]);
    let mut vmm = Vmm::start(&cfg);
    assert_eq!(vmm.frame()["ok"], json!(true));
    assert_eq!(vmm.frame(), json!({ "event": "stopped", "reason": "reset" }));
    assert_eq!(vmm.exit_code(), 0);
    let serial = fs::read_to_string(state.0.join("serial.log")).unwrap();
    assert!(serial.starts_with("capacity 4\nread status 0: root....") && serial.ends_with("write status 1\nid disk0\n"), "{serial}");

    // A guest that stays up: inspect counts what its disk served (one sector read, the write
    // refused).
    cfg["cmdline"] = json!("sector=1 hold=1");
    let mut vmm = Vmm::start(&cfg);
    let ready = vmm.frame();
    assert_eq!(ready["ok"], json!(true), "{ready}");
    let sock = PathBuf::from(ready["control_socket"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fs::read_to_string(state.0.join("serial.log")).unwrap_or_default().contains("id disk0") {
        assert!(Instant::now() < deadline, "the guest did not get its disk's ID");
        std::thread::sleep(Duration::from_millis(5));
    }
    let inspect = control(&sock, json!({"op": "inspect"}));
    assert_eq!(inspect["disks"], json!([{ "read_bytes": 512, "reads": 1, "write_bytes": 0, "errors": 1 }]), "{inspect}");
    assert_eq!(control(&sock, json!({"op": "terminate"}))["ok"], json!(true));
}

fn serial_len(state: &StateDir) -> u64 {
    fs::metadata(state.0.join("serial.log")).map(|m| m.len()).unwrap_or(0)
}

fn wait_for_growth(state: &StateDir, from: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while serial_len(state) <= from {
        assert!(Instant::now() < deadline, "the serial log did not grow past {from}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn control_socket_pauses_resumes_inspects_and_terminates() {
    let Some(cg) = kvm_and_scratch_cgroup("control_socket_pauses_resumes_inspects_and_terminates") else { return };
    let state = StateDir::new();
    let guest = build_guest("spin", SPIN_ASM);
    let mut cfg = config(&guest, &state, cg.json());
    cfg["vcpus"] = json!(2);
    let mut vmm = Vmm::start(&cfg);
    let ready = vmm.frame();
    assert_eq!(ready["ok"], json!(true), "{ready}");
    let sock = PathBuf::from(ready["control_socket"].as_str().unwrap());
    assert_eq!(sock, state.0.join("control.sock"));
    assert_eq!(fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);

    // The process runs inside the cgroup it was given.
    let pid = ready["pid"].as_u64().unwrap();
    let procs = fs::read_to_string(cg.path.join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == pid.to_string()), "pid {pid} not in {procs:?}");

    let inspect = control(&sock, json!({"op": "inspect", "id": 7}));
    assert_eq!((inspect["ok"].clone(), inspect["state"].clone(), inspect["vcpus"].clone(), inspect["id"].clone()), (json!(true), json!("running"), json!(2), json!(7)));

    wait_for_growth(&state, 0);
    assert_eq!(control(&sock, json!({"op": "pause"})), json!({"ok": true, "state": "paused"}));
    let frozen = serial_len(&state);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(serial_len(&state), frozen, "the guest ran while paused");
    assert_eq!(control(&sock, json!({"op": "inspect"}))["state"], json!("paused"));

    assert_eq!(control(&sock, json!({"op": "resume"})), json!({"ok": true, "state": "running"}));
    wait_for_growth(&state, frozen);

    let bad = control(&sock, json!({"op": "snapshot"}));
    assert_eq!((bad["ok"].clone(), bad["error"]["code"].clone(), bad["state"].clone()), (json!(false), json!("bad_request"), json!("running")));

    assert_eq!(control(&sock, json!({"op": "terminate"})), json!({"ok": true, "state": "stopped", "reason": "terminated"}));
    assert_eq!(vmm.frame(), json!({ "event": "stopped", "reason": "terminated" }));
    assert_eq!(vmm.exit_code(), 0);
    assert!(!sock.exists());
}

#[test]
fn control_socket_answers_pipelined_requests_and_hangs_up_on_a_bad_frame() {
    let Some(cg) = kvm_and_scratch_cgroup("control_socket_answers_pipelined_requests_and_hangs_up_on_a_bad_frame") else { return };
    let state = StateDir::new();
    let guest = build_guest("spin", SPIN_ASM);
    let mut vmm = Vmm::start(&config(&guest, &state, cg.json()));
    let sock = PathBuf::from(vmm.frame()["control_socket"].as_str().unwrap().to_owned());

    // Two requests in one write, answered in order on the same connection.
    let mut stream = UnixStream::connect(&sock).unwrap();
    let mut bytes = encode(&json!({"op": "pause", "id": "a"}), DEFAULT_MAX_FRAME).unwrap();
    bytes.extend(encode(&json!({"op": "inspect", "id": "b"}), DEFAULT_MAX_FRAME).unwrap());
    stream.write_all(&bytes).unwrap();
    let mut answers = FrameReader::new(stream.try_clone().unwrap(), DEFAULT_MAX_FRAME);
    assert_eq!(answers.read_frame().unwrap().unwrap(), json!({"ok": true, "state": "paused", "id": "a"}));
    let inspect = answers.read_frame().unwrap().unwrap();
    assert_eq!((inspect["state"].clone(), inspect["id"].clone()), (json!("paused"), json!("b")));

    // A second client is served while the first stays connected.
    assert_eq!(control(&sock, json!({"op": "resume"})), json!({"ok": true, "state": "running"}));

    // A frame that is not JSON: answered with bad_frame, then the connection is closed.
    stream.write_all(b"\x00\x00\x00\x02{]").unwrap();
    let bad = answers.read_frame().unwrap().unwrap();
    assert_eq!((bad["ok"].clone(), bad["error"]["code"].clone()), (json!(false), json!("bad_frame")));
    assert!(answers.read_frame().unwrap().is_none(), "the connection stays open after a bad frame");

    // A request without an op names the missing field; the VM is unaffected.
    let missing = control(&sock, json!({"operation": "pause"}));
    assert_eq!(missing["error"]["code"], json!("bad_request"));
    assert!(missing["error"]["message"].as_str().unwrap().starts_with("op:"));
    assert_eq!(control(&sock, json!({"op": "terminate"}))["state"], json!("stopped"));
    assert_eq!(vmm.exit_code(), 0);
}

#[test]
fn the_serial_log_stops_at_its_cap_and_inspect_counts_the_rest() {
    let Some(cg) = kvm_and_scratch_cgroup("the_serial_log_stops_at_its_cap_and_inspect_counts_the_rest") else { return };
    let state = StateDir::new();
    let guest = build_guest("spin", SPIN_ASM);
    let mut cfg = config(&guest, &state, cg.json());
    cfg["serial_log_max_bytes"] = json!(5);
    let mut vmm = Vmm::start(&cfg);
    let sock = PathBuf::from(vmm.frame()["control_socket"].as_str().unwrap().to_owned());
    let deadline = Instant::now() + Duration::from_secs(30);
    let inspect = loop {
        let inspect = control(&sock, json!({"op": "inspect"}));
        if inspect["serial_log_dropped"].as_u64().unwrap() > 0 {
            break inspect;
        }
        assert!(Instant::now() < deadline, "the guest never passed the cap: {inspect}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(inspect["serial_log_bytes"], json!(5));
    assert_eq!(fs::read_to_string(state.0.join("serial.log")).unwrap(), ".....");
    control(&sock, json!({"op": "terminate"}));
    assert_eq!(vmm.exit_code(), 0);
}

#[test]
fn sigterm_terminates_the_vm_in_order() {
    let Some(cg) = kvm_and_scratch_cgroup("sigterm_terminates_the_vm_in_order") else { return };
    let state = StateDir::new();
    let guest = build_guest("spin", SPIN_ASM);
    let mut vmm = Vmm::start(&config(&guest, &state, cg.json()));
    let ready = vmm.frame();
    assert_eq!(ready["state"], json!("running"), "{ready}");
    // SAFETY: kill(2) on the child we started.
    assert_eq!(unsafe { libc::kill(vmm.child.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(vmm.frame(), json!({ "event": "stopped", "reason": "terminated" }));
    assert_eq!(vmm.exit_code(), 0);
    assert!(!state.0.join("control.sock").exists());
}

#[test]
fn preflight_reports_what_the_host_lacks_as_json() {
    let out = Command::new(BIN).arg("preflight").output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems: Vec<&str> = report["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(report["ok"], json!(problems.is_empty()));
    assert_eq!(out.status.code(), Some(if problems.is_empty() { 0 } else { 6 }));
    for key in ["kvm", "virtualization", "cgroup"] {
        assert!(report[key].is_object(), "{key} missing from {report}");
    }
    if report["kvm"]["accessible"] == json!(true) {
        assert_eq!(report["kvm"]["api_version"], json!(12));
        assert_eq!(report["kvm"]["capabilities"]["IMMEDIATE_EXIT"], json!(true));
    }
    // On a PVM host the report must say that guests are not hardware-virtualized.
    if Path::new("/sys/module/kvm_pvm").exists() {
        assert_eq!(report["virtualization"]["mode"], json!("pvm"));
        assert!(problems.iter().any(|p| p.contains("guests run by emulation")), "{problems:?}");
        assert_eq!(report["virtualization"]["probe"]["native"], json!(false), "{report}");
    }
    let missing: Vec<&str> = report["cgroup"]["missing_controllers"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    for controller in &missing {
        assert!(problems.iter().any(|p| p.contains(&format!("controller {controller} "))), "{problems:?}");
    }

    let missing_kvm = Command::new(BIN).args(["preflight", "--kvm", "/nonexistent/kvm"]).output().unwrap();
    let report: Value = serde_json::from_slice(&missing_kvm.stdout).unwrap();
    assert_eq!(report["kvm"]["accessible"], json!(false));
    assert!(report["problems"].as_array().unwrap().iter().any(|p| p.as_str().unwrap().starts_with("/nonexistent/kvm: cannot open")));
    assert_eq!(missing_kvm.status.code(), Some(6));

    let bad = Command::new(BIN).args(["preflight", "--bogus"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--bogus"));
}

#[test]
fn preflight_probes_cgroup_kill_in_a_delegated_root() {
    let Some(cg) = scratch_cgroup("preflight_probes_cgroup_kill_in_a_delegated_root") else { return };
    let out = Command::new(BIN).arg("preflight").arg("--cgroup-root").arg(&cg.path).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cgroup"]["root"], json!(cg.path));
    assert_eq!(report["cgroup"]["cgroup2"], json!(true));
    assert_eq!(report["cgroup"]["kill"], json!(true), "{report}");
    // The probe group is gone again.
    assert_eq!(fs::read_dir(&cg.path).unwrap().filter(|e| e.as_ref().unwrap().file_type().unwrap().is_dir()).count(), 0);

    let plain = StateDir::new();
    let out = Command::new(BIN).arg("preflight").arg("--cgroup-root").arg(&plain.0).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["cgroup"]["cgroup2"], json!(false));
    assert!(report["problems"].as_array().unwrap().iter().any(|p| p.as_str().unwrap().contains("is not a cgroup v2 directory")));
}
