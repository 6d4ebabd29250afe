//! sandbox-vmm benchmark: the KVM exit round trip, confirmed pause/resume latency with 1 and 2
//! vCPUs, VM create-to-first-serial-byte, vsock echo through the hybrid socket and virtio-blk
//! reads, each beside a baseline measured in the same run.
//!
//!   cargo run --release -p sandbox-vmm --example vm_bench [-- virtio [--vsock-mib N] [--blk-mib N]]
//!       tiny guests built on the spot (GNU as/ld, gcc); any host with a usable /dev/kvm;
//!       `virtio` runs only the device figures
//!   cargo run --release -p sandbox-vmm --example vm_bench -- boot --kernel PATH
//!           [--initrd PATH] [--cmdline TEXT] [--until TEXT] [--runs N] [--vcpus N] [--memory-mib N]
//!           [--disk PATH] [--vsock-echo PORT] [--blk-start TEXT --blk-end TEXT]
//!       boot time of a real guest to its first console byte and to the line `--until` (for
//!       example the guest bootstrap's ready line), then, in the last run: the virtio-blk read
//!       throughput of what the guest read from its first disk between the console marks
//!       `--blk-start` and `--blk-end` (its workload running dd, say), pause/resume latency of
//!       the booted guest and, with `--vsock-echo`, the same vsock echo figures against an echo
//!       service the guest runs on PORT; meant for hosts with hardware virtualization
//!
//! Figures are medians of repeated runs; nothing here asserts on time.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use control_frame::{write_frame, FrameReader, DEFAULT_MAX_FRAME};
use sandbox_vmm::config::Disk;
use sandbox_vmm::control::{bind_private, ControlServer};
use sandbox_vmm::devices::manager::DeviceSpec;
use sandbox_vmm::guests;
use sandbox_vmm::host::preflight;
use sandbox_vmm::vstate::stop::StopReason;
use sandbox_vmm::vstate::vm::{Vm, VmSpec};
use serde_json::json;

struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("svmm-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spec(kernel: &Path, vcpus: u8, memory_mib: u64, scratch: &Scratch) -> VmSpec {
    VmSpec {
        kernel: kernel.to_path_buf(),
        initrd: None,
        cmdline: "console=ttyS0".into(),
        vcpus,
        memory_mib,
        serial_log: scratch.0.join("serial.log"),
        serial_log_max: 16 << 20,
        devices: Default::default(),
    }
}

/// Blocks until the VM's stop eventfd fires.
fn wait_stopped(vm: &Vm, timeout: Duration) {
    let mut fds = libc::pollfd { fd: vm.stop_signal().evt.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut fds, 1, timeout.as_millis() as i32) };
    assert!(n == 1, "the guest did not stop within {timeout:?}");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs a guest that ends with a reset; returns start-to-stop time.
fn run_to_reset(kernel: &Path, scratch: &Scratch) -> Duration {
    let mut vm = Vm::create(&spec(kernel, 1, 32, scratch)).unwrap();
    let t0 = Instant::now();
    vm.start().unwrap();
    wait_stopped(&vm, Duration::from_secs(120));
    let elapsed = t0.elapsed();
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Reset);
    elapsed
}

fn exit_round_trip(scratch: &Scratch) {
    const N: u32 = 20_000;
    let with_exits = guests::build(&scratch.0, "exits", &guests::exit_loop_asm(N)).unwrap();
    let baseline = guests::build(&scratch.0, "nops", &guests::nop_loop_asm(N)).unwrap();
    let a = median((0..5).map(|_| run_to_reset(&with_exits, scratch)).collect());
    let b = median((0..5).map(|_| run_to_reset(&baseline, scratch)).collect());
    println!("KVM exit round trip (port write handled by the VMM's bus, {N} per run, median of 5):");
    println!("  loop with exits   {:>10.1} ms", a.as_secs_f64() * 1e3);
    println!("  baseline (nop)    {:>10.1} ms   ratio {:.1}x", b.as_secs_f64() * 1e3, a.as_secs_f64() / b.as_secs_f64());
    println!("  per exit          {:>10.2} us", us(a.saturating_sub(b)) / N as f64);
}

/// Ping-pong between two threads over mpsc: the hand-off the pause protocol is built on,
/// without KVM.
fn channel_round_trip() -> Duration {
    let (to, from_main) = mpsc::channel::<()>();
    let (ack, acks) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        while from_main.recv().is_ok() {
            ack.send(()).unwrap();
        }
    });
    let samples: Vec<Duration> = (0..200)
        .map(|_| {
            let t0 = Instant::now();
            to.send(()).unwrap();
            acks.recv().unwrap();
            t0.elapsed()
        })
        .collect();
    drop(to);
    t.join().unwrap();
    median(samples)
}

fn pause_resume_latency(vm: &mut Vm, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    let (mut pauses, mut resumes) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t0 = Instant::now();
        vm.pause(Duration::from_secs(10)).unwrap();
        let t1 = Instant::now();
        vm.resume(Duration::from_secs(10)).unwrap();
        pauses.push(t1 - t0);
        resumes.push(t1.elapsed());
        std::thread::sleep(Duration::from_millis(2));
    }
    (pauses, resumes)
}

fn print_pause_resume(label: &str, pauses: Vec<Duration>, resumes: Vec<Duration>, baseline: Duration) {
    let p50 = pct(pauses.clone(), 0.5);
    println!(
        "  {label:<10} pause p50 {:>8.1} us  p90 {:>8.1} us ({:.0}x baseline) | resume p50 {:>8.1} us  p90 {:>8.1} us",
        us(p50),
        us(pct(pauses, 0.9)),
        us(p50) / us(baseline),
        us(pct(resumes.clone(), 0.5)),
        us(pct(resumes, 0.9)),
    );
}

fn pause_resume(scratch: &Scratch) {
    let spin = guests::build(&scratch.0, "spin", guests::SPIN_ASM).unwrap();
    let baseline = channel_round_trip();
    println!("Confirmed pause/resume (every vCPU out of KVM_RUN and acknowledged; 100 rounds):");
    println!("  baseline: thread channel round trip p50 {:.1} us", us(baseline));
    for vcpus in [1u8, 2] {
        let mut vm = Vm::create(&spec(&spin, vcpus, 32, scratch)).unwrap();
        vm.start().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let (p, r) = pause_resume_latency(&mut vm, 100);
        print_pause_resume(&format!("{vcpus} vCPU{}", if vcpus > 1 { "s" } else { "" }), p, r, baseline);
        vm.halt(StopReason::Terminated);
    }
}

fn request(stream: &mut UnixStream, op: &str) -> Duration {
    let t0 = Instant::now();
    write_frame(stream, &json!({ "op": op }), DEFAULT_MAX_FRAME).unwrap();
    let answer = FrameReader::new(&mut *stream, DEFAULT_MAX_FRAME).read_frame().unwrap().unwrap();
    assert_eq!(answer["ok"], json!(true), "{answer}");
    t0.elapsed()
}

/// What the daemon sees: pause and resume answered over control.sock, against an inspect
/// (a round trip through the same socket and loop that touches no vCPU) as the baseline.
fn control_socket(scratch: &Scratch) {
    let spin = guests::build(&scratch.0, "spin", guests::SPIN_ASM).unwrap();
    println!("Through control.sock (request written to confirmed answer read; 100 rounds):");
    for vcpus in [1u8, 2] {
        let path = scratch.0.join("control.sock");
        let mut vm = Vm::create(&spec(&spin, vcpus, 32, scratch)).unwrap();
        let listener = bind_private(&path).unwrap();
        let mut server = ControlServer::new(path.clone(), listener, &vm).unwrap();
        vm.start().unwrap();
        let serving = std::thread::spawn(move || {
            server.serve(&mut vm).unwrap();
        });
        let mut stream = UnixStream::connect(&path).unwrap();
        let inspect: Vec<Duration> = (0..100).map(|_| request(&mut stream, "inspect")).collect();
        let (mut pauses, mut resumes) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            pauses.push(request(&mut stream, "pause"));
            resumes.push(request(&mut stream, "resume"));
            std::thread::sleep(Duration::from_millis(2));
        }
        request(&mut stream, "terminate");
        serving.join().unwrap();
        let baseline = median(inspect);
        println!("  baseline: inspect p50 {:.1} us", us(baseline));
        print_pause_resume(&format!("{vcpus} vCPU{}", if vcpus > 1 { "s" } else { "" }), pauses, resumes, baseline);
    }
}

/// Create (KVM VM, memory, devices, kernel load, vCPU setup) and start-to-first-byte times.
#[allow(clippy::too_many_arguments)]
fn first_byte(kernel: &Path, vcpus: u8, memory_mib: u64, initrd: Option<&Path>, cmdline: &str, until: Option<&str>, devices: DeviceSpec, scratch: &Scratch) -> (Duration, Duration, Option<Duration>, Vm) {
    let mut spec = spec(kernel, vcpus, memory_mib, scratch);
    spec.devices = devices;
    spec.initrd = initrd.map(Path::to_path_buf);
    spec.cmdline = cmdline.into();
    let t0 = Instant::now();
    let mut vm = Vm::create(&spec).unwrap();
    let created = t0.elapsed();
    vm.start().unwrap();
    while vm.serial_log_counts().0 == 0 {
        assert!(t0.elapsed() < Duration::from_secs(600), "no serial output in 10 minutes");
        std::hint::spin_loop();
    }
    let first = t0.elapsed();
    let reached = until.map(|text| wait_console(&vm, &spec.serial_log, text).duration_since(t0));
    (created, first, reached, vm)
}

/// Waits until the console shows `text`; returns when it was seen (polled every 200 us).
fn wait_console(vm: &Vm, log: &Path, text: &str) -> Instant {
    let t0 = Instant::now();
    let mut seen = u64::MAX;
    loop {
        let (written, _) = vm.serial_log_counts();
        if written != seen {
            seen = written;
            if String::from_utf8_lossy(&std::fs::read(log).unwrap()).contains(text) {
                return Instant::now();
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "{text:?} not on the console in 10 minutes");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The booted guest's disk reads between two console marks, as the first disk's device counted
/// them: what its workload read (say `dd if=/dev/vda of=/dev/null bs=1M`) from the VMM's point of
/// view, so reads its page cache answered are not counted.
fn blk_report(vm: &Vm, log: &Path, start: &str, end: &str) {
    let metrics = vm.disk_metrics().first().expect("--blk-start needs --disk").clone();
    let t_start = wait_console(vm, log, start);
    let (bytes0, reads0, ..) = metrics.snapshot();
    let t_end = wait_console(vm, log, end);
    let (bytes1, reads1, _, errors) = metrics.snapshot();
    let (mib, secs) = ((bytes1 - bytes0) as f64 / f64::from(1 << 20), t_end.duration_since(t_start).as_secs_f64());
    println!("virtio-blk reads by the booted guest between {start:?} and {end:?} on its console (first disk):");
    println!(
        "  {mib:.1} MiB in {} requests ({:.0} KiB each) over {:.1} ms: {:>8.1} MiB/s ({errors} requests failed since boot)",
        reads1 - reads0,
        if reads1 > reads0 { (bytes1 - bytes0) as f64 / 1024.0 / (reads1 - reads0) as f64 } else { 0.0 },
        secs * 1e3,
        mib / secs
    );
}

fn create_to_first_byte(scratch: &Scratch) {
    let guest = guests::build(&scratch.0, "first", guests::FIRST_BYTE_ASM).unwrap();
    let mut creates = Vec::new();
    let mut firsts = Vec::new();
    for _ in 0..10 {
        let (created, first, _, mut vm) = first_byte(&guest, 1, 32, None, "", None, DeviceSpec::default(), scratch);
        vm.halt(StopReason::Terminated);
        creates.push(created);
        firsts.push(first);
    }
    let bin = std::env::current_exe().unwrap();
    let spawn: Vec<Duration> = (0..10)
        .map(|_| {
            let t0 = Instant::now();
            // The process baseline: starting any program and reaping it.
            std::process::Command::new(&bin).arg("--baseline-exit").status().unwrap();
            t0.elapsed()
        })
        .collect();
    let (c, f) = (median(creates), median(firsts));
    println!("VM create to first serial byte (tiny guest, 32 MiB, median of 10):");
    println!("  create (VM, memory, irqchip, devices, load, vCPU state) {:>8.2} ms", c.as_secs_f64() * 1e3);
    println!("  create + start to first byte                            {:>8.2} ms", f.as_secs_f64() * 1e3);
    let s = median(spawn);
    println!("  baseline: spawn and reap a process                      {:>8.2} ms   ratio {:.1}x", s.as_secs_f64() * 1e3, f.as_secs_f64() / s.as_secs_f64());
}

fn boot(args: &[String]) {
    let mut kernel = None;
    let mut initrd = None;
    let mut cmdline = "console=ttyS0 reboot=k panic=1 i8042.noaux i8042.nomux i8042.dumbkbd".to_string();
    let mut until = None;
    let (mut runs, mut vcpus, mut memory_mib) = (3usize, 2u8, 512u64);
    let mut devices = DeviceSpec::default();
    let mut echo_port = None;
    let (mut blk_start, mut blk_end) = (None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--kernel" => kernel = Some(PathBuf::from(value)),
            "--initrd" => initrd = Some(PathBuf::from(value)),
            "--cmdline" => cmdline = value.clone(),
            "--until" => until = Some(value.clone()),
            "--runs" => runs = value.parse().expect("--runs: a number"),
            "--vcpus" => vcpus = value.parse().expect("--vcpus: a number"),
            "--memory-mib" => memory_mib = value.parse().expect("--memory-mib: a number"),
            "--disk" => devices.disks.push(Disk { path: PathBuf::from(value), read_only: true }),
            "--vsock-echo" => echo_port = Some(value.parse::<u32>().expect("--vsock-echo: a port")),
            "--blk-start" => blk_start = Some(value.clone()),
            "--blk-end" => blk_end = Some(value.clone()),
            other => panic!("unknown flag {other}"),
        }
    }
    let kernel = kernel.expect("boot needs --kernel");
    assert_eq!(blk_start.is_some(), blk_end.is_some(), "--blk-start and --blk-end go together");
    assert!(blk_start.is_none() || !devices.disks.is_empty(), "--blk-start needs --disk");
    let scratch = Scratch::new();
    let socket = scratch.0.join("v.sock");
    if echo_port.is_some() {
        devices.vsock = Some(socket.clone());
    }
    let baseline = channel_round_trip();
    println!("Boot of {} ({vcpus} vCPUs, {memory_mib} MiB), {runs} runs:", kernel.display());
    for run in 0..runs {
        let (created, first, reached, mut vm) = first_byte(&kernel, vcpus, memory_mib, initrd.as_deref(), &cmdline, until.as_deref(), devices.clone(), &scratch);
        print!("  run {run}: create {:.1} ms, first console byte {:.1} ms", created.as_secs_f64() * 1e3, first.as_secs_f64() * 1e3);
        if let (Some(t), Some(text)) = (reached, &until) {
            print!(", {text:?} at {:.1} ms ({:.1}x first byte)", t.as_secs_f64() * 1e3, t.as_secs_f64() / first.as_secs_f64());
        }
        println!();
        if run == runs - 1 {
            if let (Some(start), Some(end)) = (&blk_start, &blk_end) {
                blk_report(&vm, &scratch.0.join("serial.log"), start, end);
            }
            let (p, r) = pause_resume_latency(&mut vm, 50);
            print_pause_resume("booted", p, r, baseline);
            if let Some(port) = echo_port {
                echo_report(&format!("the booted guest's echo on port {port}"), &|| vsock_connect(&socket, port), 32, &scratch);
            }
        }
        vm.halt(StopReason::Terminated);
    }
}

fn require_kvm() {
    if let Err(reason) = preflight::kvm_usable(Path::new("/dev/kvm")) {
        eprintln!("vm_bench: KVM is not usable here: {reason}");
        std::process::exit(6);
    }
    let virt = preflight::virtualization();
    println!("host virtualization: {} (native speed: {})\n", virt["mode"], virt["native_speed"]);
}

/// `CONNECT port` through the hybrid socket, as the daemon's proxy opens a connection; retried
/// for up to a minute while the guest's driver is not up yet (the VMM then closes the socket).
fn vsock_connect(socket: &Path, port: u32) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut stream = UnixStream::connect(socket).unwrap();
        writeln!(stream, "CONNECT {port}").unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        if line.starts_with("OK ") {
            return stream;
        }
        assert!(Instant::now() < deadline, "CONNECT {port}: no OK within a minute");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Round trips of 64 bytes through an echo (p50, p99), and echo throughput of `mib` MiB sent
/// in 64 KiB writes while another thread reads it back (MiB/s).
fn echo_figures(connect: &dyn Fn() -> UnixStream, mib: usize) -> (Duration, Duration, f64) {
    let mut stream = connect();
    let mut buf = [0u8; 64];
    let rounds: Vec<Duration> = (0..2000)
        .map(|i| {
            buf[0] = i as u8;
            let t0 = Instant::now();
            stream.write_all(&buf).unwrap();
            stream.read_exact(&mut buf).unwrap();
            t0.elapsed()
        })
        .collect();
    drop(stream);
    let stream = connect();
    let total = mib << 20;
    let mut writer = stream.try_clone().unwrap();
    let t0 = Instant::now();
    let sending = std::thread::spawn(move || {
        let chunk = vec![0x5au8; 64 << 10];
        for _ in 0..total / chunk.len() {
            writer.write_all(&chunk).unwrap();
        }
    });
    let mut got = 0;
    let mut chunk = vec![0u8; 64 << 10];
    while got < total {
        got += (&stream).read(&mut chunk).unwrap();
    }
    let elapsed = t0.elapsed();
    sending.join().unwrap();
    (pct(rounds.clone(), 0.5), pct(rounds, 0.99), mib as f64 / elapsed.as_secs_f64())
}

/// An echo server on a host Unix socket: the baseline of the vsock path.
fn host_echo(path: &Path) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    })
}

fn echo_report(label: &str, connect: &dyn Fn() -> UnixStream, mib: usize, scratch: &Scratch) {
    let (p50, p99, rate) = echo_figures(connect, mib);
    let path = scratch.0.join("echo.sock");
    let _ = std::fs::remove_file(&path);
    let server = host_echo(&path);
    let (b50, b99, brate) = echo_figures(&|| UnixStream::connect(&path).unwrap(), mib);
    server.join().unwrap();
    println!("vsock echo through the hybrid socket, {label} (64-byte round trips x 2000; {mib} MiB streamed):");
    println!("  round trip p50 {:>9.1} us  p99 {:>9.1} us   throughput {:>8.1} MiB/s", us(p50), us(p99), rate);
    println!("  baseline: a host Unix-socket echo thread");
    println!("  round trip p50 {:>9.1} us  p99 {:>9.1} us   throughput {:>8.1} MiB/s   ({:.0}x the latency, {:.2}x the throughput)", us(b50), us(b99), brate, us(p50) / us(b50), rate / brate);
}

/// Runs the block guest over `disk` reading `mib` MiB; returns start-to-reset time, having
/// checked that the device served every byte the guest asked for.
fn block_run(guest: &Path, disk: &Path, mib: usize, scratch: &Scratch) -> Duration {
    let mut spec = spec(guest, 1, 64, scratch);
    spec.cmdline = format!("sector=0 bench_mib={mib}");
    spec.devices.disks.push(Disk { path: disk.to_path_buf(), read_only: true });
    let mut vm = Vm::create(&spec).unwrap();
    let t0 = Instant::now();
    vm.start().unwrap();
    wait_stopped(&vm, Duration::from_secs(600));
    let elapsed = t0.elapsed();
    assert_eq!(vm.halt(StopReason::Terminated), StopReason::Reset);
    let serial = std::fs::read_to_string(&spec.serial_log).unwrap();
    assert!(mib == 0 || serial.contains("bench done"), "{serial}");
    // Sector 0 first, then the benchmark's requests.
    assert_eq!(vm.disk_metrics()[0].snapshot().0, 512 + ((mib as u64) << 20), "bytes the device read");
    elapsed
}

/// The virtio figures: vsock echo with the tiny guest, virtio-blk reads with the tiny guest.
fn virtio(args: &[String], scratch: &Scratch) {
    let (mut vsock_mib, mut blk_mib) = (32usize, 256usize);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value: usize = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--vsock-mib" => vsock_mib = value,
            "--blk-mib" => blk_mib = value,
            other => panic!("unknown flag {other}"),
        }
    }
    let echo = guests::build_c(&scratch.0, "vsock", guests::VSOCK_C).unwrap();
    let socket = scratch.0.join("v.sock");
    let mut spec = spec(&echo, 1, 64, scratch);
    spec.cmdline = "listen=44772".into();
    spec.devices.vsock = Some(socket.clone());
    let mut vm = Vm::create(&spec).unwrap();
    vm.start().unwrap();
    echo_report("tiny guest echo on port 44772", &|| vsock_connect(&socket, 44772), vsock_mib, scratch);
    vm.halt(StopReason::Terminated);
    println!();

    // A 64 MiB disk of non-zero data, read `blk_mib` MiB over in 1 MiB requests (from the
    // host's page cache after the first pass).
    let disk = scratch.0.join("disk.img");
    let file = std::fs::File::options().read(true).write(true).create(true).truncate(true).open(&disk).unwrap();
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    for i in 0..64u64 {
        file.write_all_at(&chunk, i << 20).unwrap();
    }
    let block = guests::build_c(&scratch.0, "block", guests::BLOCK_C).unwrap();
    let idle = median((0..3).map(|_| block_run(&block, &disk, 0, scratch)).collect());
    let busy = median((0..3).map(|_| block_run(&block, &disk, blk_mib, scratch)).collect());
    let reading = busy.saturating_sub(idle);
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..blk_mib as u64 {
        file.read_exact_at(&mut buf, (i % 64) << 20).unwrap();
    }
    let host = t0.elapsed();
    println!("virtio-blk reads by the tiny guest ({blk_mib} MiB in 1 MiB requests over a 64 MiB disk, median of 3):");
    println!("  guest run {:>8.1} ms, of which reading {:>8.1} ms (the same guest reading nothing: {:.1} ms)", busy.as_secs_f64() * 1e3, reading.as_secs_f64() * 1e3, idle.as_secs_f64() * 1e3);
    println!("  throughput {:>8.1} MiB/s", blk_mib as f64 / reading.as_secs_f64());
    println!("  baseline: pread of the same file on the host {:>8.1} MiB/s ({:.2}x)", blk_mib as f64 / host.as_secs_f64(), (blk_mib as f64 / reading.as_secs_f64()) / (blk_mib as f64 / host.as_secs_f64()));
    let _ = std::fs::remove_file(&disk);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--baseline-exit") => {}
        Some("boot") => boot(&args[1..]),
        Some("virtio") => {
            require_kvm();
            virtio(&args[1..], &Scratch::new());
        }
        None => {
            require_kvm();
            let scratch = Scratch::new();
            exit_round_trip(&scratch);
            println!();
            pause_resume(&scratch);
            println!();
            control_socket(&scratch);
            println!();
            create_to_first_byte(&scratch);
            println!();
            virtio(&[], &scratch);
        }
        Some(other) => {
            eprintln!("vm_bench: unknown argument {other:?} (no arguments, virtio [...], or boot --kernel PATH ...)");
            std::process::exit(2);
        }
    }
}
