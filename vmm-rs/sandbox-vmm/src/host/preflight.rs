//! `sandbox-vmm preflight`: what this host lacks to run sandboxes, as one JSON report.
//!
//! The report lists every problem rather than stopping at the first, because an operator
//! fixing a host wants the whole list; `problems` is empty exactly when `ok` is true.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use kvm_ioctls::{Cap, Kvm};
use serde_json::{json, Map, Value};

use super::cgroup::{self, CGROUP2_SUPER_MAGIC};
use crate::vstate::stop::StopReason;
use crate::vstate::vm::{Vm, VmError, VmSpec};

/// The KVM API version every KVM since 2.6.22 reports; anything else is not KVM as we know it.
pub const KVM_API_VERSION: i32 = 12;

/// Capabilities the VMM cannot run without.
pub const REQUIRED_CAPS: &[(&str, Cap)] = &[
    ("USER_MEMORY", Cap::UserMemory),
    ("SET_TSS_ADDR", Cap::SetTssAddr),
    ("EXT_CPUID", Cap::ExtCpuid),
    ("IRQCHIP", Cap::Irqchip),
    ("PIT2", Cap::Pit2),
    ("IRQFD", Cap::Irqfd),
    ("IOEVENTFD", Cap::Ioeventfd),
    // Confirmed pause: the kick must make KVM_RUN return even if the signal lands just before it.
    ("IMMEDIATE_EXIT", Cap::ImmediateExit),
];
/// Capabilities whose absence degrades the guest but does not stop it.
pub const OPTIONAL_CAPS: &[(&str, Cap)] = &[
    ("KVMCLOCK_CTRL", Cap::KvmclockCtrl),
    ("TSC_DEADLINE_TIMER", Cap::TscDeadlineTimer),
    ("XSAVE", Cap::Xsave),
];
/// cgroup v2 controllers the daemon enforces hard limits with.
pub const REQUIRED_CONTROLLERS: &[&str] = &["cpu", "memory", "pids"];

pub struct Options {
    pub kvm_path: PathBuf,
    /// The delegated cgroup v2 tree; defaults to the first cgroup2 mount.
    pub cgroup_root: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options { kvm_path: PathBuf::from("/dev/kvm"), cgroup_root: None }
    }
}

/// One thing this host lacks: an entry of the report's `problems`.
#[derive(Debug)]
pub enum Problem {
    KvmOpen { device: PathBuf, error: kvm_ioctls::Error },
    KvmApiVersion(i32),
    MissingCapability(&'static str),
    CreateVm(kvm_ioctls::Error),
    /// The probe guest ran at `iterations_per_second`: emulated, not hardware-virtualized.
    Emulated { mode: String, iterations_per_second: f64 },
    Probe(ProbeError),
    NoCgroup2Mount,
    NotCgroup2 { root: PathBuf },
    CgroupRoot { root: PathBuf, error: io::Error },
    MissingController { controller: &'static str, root: PathBuf },
    NotDelegated { root: PathBuf },
    NoCgroupKill,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::KvmOpen { device, error } => write!(f, "{}: cannot open: {error}", device.display()),
            Problem::KvmApiVersion(version) => write!(f, "KVM API version is {version}, expected {KVM_API_VERSION}"),
            Problem::MissingCapability(name) => write!(f, "KVM lacks the required capability KVM_CAP_{name}"),
            Problem::CreateVm(e) => write!(f, "KVM_CREATE_VM failed: {e}"),
            Problem::Emulated { mode, iterations_per_second } => write!(
                f,
                "guests run by emulation, not hardware virtualization (mode {mode}; a tiny guest's loop ran {:.1} M iterations/s): stock kernels run about 1000x slower",
                iterations_per_second / 1e6
            ),
            Problem::Probe(e) => write!(f, "the tiny-guest probe failed: {e}"),
            Problem::NoCgroup2Mount => write!(f, "no cgroup v2 hierarchy is mounted"),
            Problem::NotCgroup2 { root } => write!(f, "{} is not a cgroup v2 directory", root.display()),
            Problem::CgroupRoot { root, error } => write!(f, "{}: {error}", root.display()),
            Problem::MissingController { controller, root } => write!(f, "cgroup v2 controller {controller} is not available in {}", root.display()),
            Problem::NotDelegated { root } => write!(f, "{} is not writable by this user: not a delegated hierarchy", root.display()),
            Problem::NoCgroupKill => write!(f, "cgroup.kill is not available (needs Linux 5.14 or later)"),
        }
    }
}

impl std::error::Error for Problem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Problem::KvmOpen { error, .. } | Problem::CreateVm(error) => Some(error),
            Problem::Probe(e) => Some(e),
            Problem::CgroupRoot { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why the tiny-guest probe could not measure anything.
#[derive(Debug)]
pub enum ProbeError {
    Scratch { path: PathBuf, source: io::Error },
    Vm(VmError),
    /// The guest did not reach its reset within the bound; how the VM stopped instead.
    DidNotFinish(StopReason),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Scratch { path, source } => write!(f, "{}: {source}", path.display()),
            ProbeError::Vm(e) => write!(f, "{e}"),
            ProbeError::DidNotFinish(reason) => write!(f, "the probe guest did not finish within 10 s ({reason:?})"),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProbeError::Scratch { source, .. } => Some(source),
            ProbeError::Vm(e) => Some(e),
            ProbeError::DidNotFinish(_) => None,
        }
    }
}

/// Why KVM cannot run the tiny test guests here: the problems its report found.
#[derive(Debug)]
pub struct KvmUnusable(pub Vec<Problem>);

impl fmt::Display for KvmUnusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for KvmUnusable {}

/// How guests execute on this host.
pub fn virtualization() -> Value {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags").and_then(|r| r.split_once(':')).map(|(_, f)| f))
        .unwrap_or("")
        .split_whitespace()
        .filter(|f| ["vmx", "svm", "hypervisor"].contains(f))
        .collect();
    let modules: Vec<&str> =
        ["kvm", "kvm_intel", "kvm_amd", "kvm_pvm"].into_iter().filter(|m| Path::new("/sys/module").join(m).exists()).collect();
    // PVM (a software KVM for nested sandboxes) registers its own module; without vmx/svm in
    // the CPU flags no hardware-assisted KVM can be loaded, so guests are at best emulated.
    let mode = if modules.contains(&"kvm_pvm") {
        "pvm"
    } else if modules.contains(&"kvm_intel") || modules.contains(&"kvm_amd") {
        "hardware"
    } else if flags.contains(&"vmx") || flags.contains(&"svm") {
        "hardware-kvm-not-loaded"
    } else {
        "none"
    };
    json!({ "mode": mode, "native_speed": mode == "hardware", "cpu_flags": flags, "modules": modules })
}

fn kvm_report(path: &Path, problems: &mut Vec<Problem>) -> Value {
    let mut report = Map::new();
    report.insert("device".into(), json!(path));
    let opened = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| kvm_ioctls::Error::new(libc::EINVAL))
        .and_then(|c| Kvm::open_with_cloexec_at(c, true));
    let fd = match opened {
        Ok(fd) => fd,
        Err(error) => {
            problems.push(Problem::KvmOpen { device: path.to_owned(), error });
            report.insert("accessible".into(), json!(false));
            report.insert("error".into(), json!(error.to_string()));
            return Value::Object(report);
        }
    };
    // SAFETY: fd was just opened on a KVM device node and is owned by nobody else.
    let kvm = unsafe { Kvm::from_raw_fd(fd) };
    report.insert("accessible".into(), json!(true));
    let version = kvm.get_api_version();
    report.insert("api_version".into(), json!(version));
    if version != KVM_API_VERSION {
        problems.push(Problem::KvmApiVersion(version));
    }
    let mut caps = Map::new();
    for (name, cap) in REQUIRED_CAPS {
        let present = kvm.check_extension(*cap);
        caps.insert((*name).into(), json!(present));
        if !present {
            problems.push(Problem::MissingCapability(name));
        }
    }
    let mut optional = Map::new();
    for (name, cap) in OPTIONAL_CAPS {
        optional.insert((*name).into(), json!(kvm.check_extension(*cap)));
    }
    report.insert("capabilities".into(), Value::Object(caps));
    report.insert("optional_capabilities".into(), Value::Object(optional));
    report.insert("max_vcpus".into(), json!(kvm.get_max_vcpus()));
    match kvm.create_vm() {
        Ok(_) => report.insert("create_vm".into(), json!(true)),
        Err(e) => {
            problems.push(Problem::CreateVm(e));
            report.insert("create_vm".into(), json!(false))
        }
    };
    Value::Object(report)
}

fn words(path: &Path) -> Option<Vec<String>> {
    fs::read_to_string(path).ok().map(|s| s.split_whitespace().map(str::to_owned).collect())
}

fn cgroup_report(root: Option<&Path>, problems: &mut Vec<Problem>) -> Value {
    let explicit = root.is_some();
    let root = match root {
        Some(r) => r.to_path_buf(),
        None => match cgroup::cgroup2_mounts().ok().and_then(|m| m.into_iter().next()) {
            Some(m) => m.mount_point,
            None => {
                problems.push(Problem::NoCgroup2Mount);
                return json!({ "cgroup2": false });
            }
        },
    };
    let mut report = Map::new();
    report.insert("root".into(), json!(root));
    let magic = fs::File::open(&root).map(OwnedFd::from).and_then(|fd| cgroup::fs_magic(&fd));
    match magic {
        Ok(CGROUP2_SUPER_MAGIC) => {}
        Ok(_) => {
            problems.push(Problem::NotCgroup2 { root });
            report.insert("cgroup2".into(), json!(false));
            return Value::Object(report);
        }
        Err(error) => {
            problems.push(Problem::CgroupRoot { root, error });
            report.insert("cgroup2".into(), json!(false));
            return Value::Object(report);
        }
    }
    report.insert("cgroup2".into(), json!(true));
    let available = words(&root.join("cgroup.controllers")).unwrap_or_default();
    let delegated = words(&root.join("cgroup.subtree_control")).unwrap_or_default();
    let missing: Vec<&str> = REQUIRED_CONTROLLERS.iter().copied().filter(|c| !available.iter().any(|a| a == c)).collect();
    for &controller in &missing {
        problems.push(Problem::MissingController { controller, root: root.clone() });
    }
    report.insert("controllers".into(), json!(available));
    report.insert("subtree_control".into(), json!(delegated));
    report.insert("missing_controllers".into(), json!(missing));
    // SAFETY: access(2) on a NUL-terminated path.
    let writable = std::ffi::CString::new(root.as_os_str().as_encoded_bytes())
        .map(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
        .unwrap_or(false);
    report.insert("writable".into(), json!(writable));
    if !writable {
        problems.push(Problem::NotDelegated { root: root.clone() });
    }
    // cgroup.kill exists only in non-root groups, so an explicitly named (delegated) root is
    // probed with a throw-away child; the system root is never written to.
    let kill = if explicit && writable {
        let probe = root.join(format!(".sandbox-vmm-preflight-{}", std::process::id()));
        let found = fs::create_dir(&probe).map(|_| probe.join("cgroup.kill").exists()).unwrap_or(false);
        let _ = fs::remove_dir(&probe);
        found
    } else {
        root.join("cgroup.kill").exists() || kernel_at_least(5, 14)
    };
    report.insert("kill".into(), json!(kill));
    if !kill {
        problems.push(Problem::NoCgroupKill);
    }
    Value::Object(report)
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// Iterations of the probe guest's loop; about 1 ms natively, under a second when emulated.
const PROBE_ITERATIONS: u32 = 1_000_000;
/// Natively the loop runs at around a billion iterations a second, emulated at a few million.
const NATIVE_ITERATIONS_PER_SECOND: f64 = 100e6;

/// A minimal ELF64 whose code counts `iterations` down and then resets through the i8042:
/// `mov ecx, N; 1: dec ecx; jnz 1b; mov al, 0xfe; out 0x64, al; 2: hlt; jmp 2b`. Hand-encoded
/// so that the product binary needs no assembler.
pub fn probe_elf(iterations: u32) -> Vec<u8> {
    const LOAD: u64 = 0x20_0000;
    const CODE_OFFSET: u64 = 64 + 56;
    let mut code = vec![0xb9];
    code.extend_from_slice(&iterations.to_le_bytes());
    code.extend_from_slice(&[0xff, 0xc9, 0x75, 0xfc, 0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0xeb, 0xfd]);
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0"); // 64-bit, little endian, SysV
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&(LOAD + CODE_OFFSET).to_le_bytes()); // entry
    elf.extend_from_slice(&64u64.to_le_bytes()); // program headers right after this header
    elf.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    elf.extend_from_slice(&0u32.to_le_bytes());
    for half in [64u16, 56, 1, 64, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    let size = CODE_OFFSET + code.len() as u64;
    elf.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for word in [0, LOAD, LOAD, size, size, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes()); // offset, vaddr, paddr, filesz, memsz, align
    }
    elf.extend_from_slice(&code);
    elf
}

/// Times a tiny guest's loop: measured, not inferred from module names, whether this host runs
/// guests natively or by emulation.
fn emulation_probe() -> Result<Value, ProbeError> {
    let dir = std::env::temp_dir().join(format!("sandbox-vmm-probe-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|source| ProbeError::Scratch { path: dir.clone(), source })?;
    let result = (|| {
        let kernel = dir.join("probe.elf");
        fs::write(&kernel, probe_elf(PROBE_ITERATIONS)).map_err(|source| ProbeError::Scratch { path: kernel.clone(), source })?;
        let spec = VmSpec {
            kernel,
            initrd: None,
            cmdline: String::new(),
            vcpus: 1,
            memory_mib: 16,
            serial_log: dir.join("serial.log"),
            serial_log_max: 0,
            devices: Default::default(),
        };
        let mut vm = Vm::create(&spec).map_err(ProbeError::Vm)?;
        let started = std::time::Instant::now();
        vm.start().map_err(ProbeError::Vm)?;
        let deadline = started + std::time::Duration::from_secs(10);
        while vm.stop_signal().reason().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        let elapsed = started.elapsed().as_secs_f64();
        match vm.halt(StopReason::Terminated) {
            StopReason::Reset => {}
            other => return Err(ProbeError::DidNotFinish(other)),
        }
        let rate = PROBE_ITERATIONS as f64 / elapsed;
        Ok(json!({ "loop_iterations_per_second": rate.round(), "native": rate >= NATIVE_ITERATIONS_PER_SECOND }))
    })();
    let _ = fs::remove_dir_all(&dir);
    result
}

/// Runs every check; the report's `problems` list says exactly what the host lacks.
pub fn run(options: &Options) -> Value {
    let mut problems = Vec::new();
    let kvm = kvm_report(&options.kvm_path, &mut problems);
    let mut virt = virtualization();
    if kvm.get("accessible") == Some(&json!(true)) && options.kvm_path == Path::new("/dev/kvm") {
        match emulation_probe() {
            Ok(probe) => {
                if probe["native"] == json!(false) {
                    problems.push(Problem::Emulated {
                        mode: virt["mode"].as_str().unwrap_or("?").to_owned(),
                        iterations_per_second: probe["loop_iterations_per_second"].as_f64().unwrap_or(0.0),
                    });
                }
                virt["native_speed"] = probe["native"].clone();
                virt["probe"] = probe;
            }
            Err(e) => problems.push(Problem::Probe(e)),
        }
    }
    let cgroup = cgroup_report(options.cgroup_root.as_deref(), &mut problems);
    let problems: Vec<String> = problems.iter().map(Problem::to_string).collect();
    json!({ "ok": problems.is_empty(), "kvm": kvm, "virtualization": virt, "cgroup": cgroup, "problems": problems })
}

/// Whether KVM can run the tiny test guests here; the reason when it cannot.
pub fn kvm_usable(path: &Path) -> Result<(), KvmUnusable> {
    let mut problems = Vec::new();
    let report = kvm_report(path, &mut problems);
    if report["accessible"] == json!(true) && problems.is_empty() {
        Ok(())
    } else {
        Err(KvmUnusable(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    #[test]
    fn the_probe_elf_loads_with_its_code_at_the_entry() {
        let dir = std::env::temp_dir().join(format!("sandbox-vmm-probe-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("probe.elf");
        fs::write(&path, probe_elf(7)).unwrap();
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap();
        let (_, entry) = crate::arch::x86_64::boot::load_kernel(&mem, &path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(entry.mode, crate::arch::x86_64::boot::EntryMode::Linux64);
        assert_eq!(entry.rip, 0x20_0000 + 120);
        let mut code = [0u8; 16];
        mem.read_slice(&mut code, GuestAddress(entry.rip)).unwrap();
        assert_eq!(code, [0xb9, 7, 0, 0, 0, 0xff, 0xc9, 0x75, 0xfc, 0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0xeb, 0xfd]);
    }
}
