//! `init`: PID 1 of the firmware's initramfs. It loads the kernel modules the guest needs,
//! mounts the root image read-only under an overlay whose writable upper layer is a tmpfs
//! private to this sandbox, switches root and executes the manifest's entrypoint (the
//! bootstrap) with the workload's arguments.
//!
//! Everything it does is first written down as a [`Step`] list by [`plan`], a pure function of
//! the kernel command line, so the plan is unit-tested on any host; [`execute`] only carries
//! the steps out. Kernel command line keys:
//!
//! - `sandbox.root=/dev/vda` (default) and `sandbox.rootfstype=ext4` (default; `erofs`, `squashfs`…)
//! - `sandbox.upper_size=50%` tmpfs size of the private upper layer (default 50% of RAM)
//! - `sandbox.exec=<base64url of a JSON string array>`: entrypoint followed by the workload argv
//!   (the host computes it from the manifest and the request)

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Modules in load order: transports first, then the devices that sit on them. A name found
/// built into the kernel (`/sys/module/<name>`) is skipped.
pub const MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "virtio_blk",
    "failover",
    "net_failover",
    "virtio_net",
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
    "overlay",
];

/// Modules that may legitimately be absent (built in under another name, or not needed on
/// the machine model the VMM emulates).
const OPTIONAL_MODULES: &[&str] = &["virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci", "failover", "net_failover"];

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Mkdir(PathBuf),
    Mount { source: String, target: PathBuf, fstype: String, readonly: bool, data: String },
    LoadModules(Vec<String>),
    WaitForDevice(PathBuf),
    /// Move an existing mount to a new place (`mount --move`).
    Move { from: PathBuf, to: PathBuf },
    /// Make `root` the new `/` (chdir, move-mount onto `/`, chroot).
    SwitchRoot(PathBuf),
    Exec(Vec<String>),
}

#[derive(Debug, PartialEq)]
pub struct Cmdline {
    pub root: String,
    pub rootfstype: String,
    pub upper_size: String,
    pub exec: Vec<String>,
}

fn base64url_decode(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return Err(format!("invalid base64 character '{}'", c as char)),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

pub fn parse_cmdline(text: &str) -> Result<Cmdline, String> {
    let mut c = Cmdline { root: "/dev/vda".into(), rootfstype: "ext4".into(), upper_size: "50%".into(), exec: Vec::new() };
    for word in text.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else { continue };
        match key {
            "sandbox.root" => c.root = value.to_string(),
            "sandbox.rootfstype" => c.rootfstype = value.to_string(),
            "sandbox.upper_size" => c.upper_size = value.to_string(),
            "sandbox.exec" => {
                let raw = base64url_decode(value).map_err(|e| format!("sandbox.exec: {e}"))?;
                c.exec = serde_json::from_slice(&raw).map_err(|e| format!("sandbox.exec: not a JSON string array: {e}"))?;
            }
            _ => {}
        }
    }
    if c.exec.is_empty() {
        return Err("kernel command line has no sandbox.exec (the entrypoint to run)".into());
    }
    if !c.exec[0].starts_with('/') {
        return Err(format!("sandbox.exec: the entrypoint '{}' is not an absolute path", c.exec[0]));
    }
    if c.upper_size.contains(',') {
        return Err(format!("sandbox.upper_size: '{}' must be a single size", c.upper_size));
    }
    Ok(c)
}

/// The whole boot as data.
pub fn plan(c: &Cmdline) -> Vec<Step> {
    let m = |source: &str, target: &str, fstype: &str, readonly: bool, data: &str| Step::Mount {
        source: source.into(),
        target: target.into(),
        fstype: fstype.into(),
        readonly,
        data: data.into(),
    };
    let mut steps = vec![
        Step::Mkdir("/proc".into()),
        Step::Mkdir("/sys".into()),
        Step::Mkdir("/dev".into()),
        m("proc", "/proc", "proc", false, ""),
        m("sysfs", "/sys", "sysfs", false, ""),
        m("devtmpfs", "/dev", "devtmpfs", false, ""),
        Step::LoadModules(MODULES.iter().map(|s| s.to_string()).collect()),
    ];
    // A block device appears asynchronously after its driver loads; a virtio-fs tag does not
    // appear as a file at all.
    if c.root.starts_with("/dev/") {
        steps.push(Step::WaitForDevice(c.root.clone().into()));
    }
    steps.extend([
        Step::Mkdir("/lower".into()),
        Step::Mkdir("/rw".into()),
        Step::Mkdir("/newroot".into()),
        m(&c.root, "/lower", &c.rootfstype, true, ""),
        // The writable layer lives in guest RAM: private to this sandbox, gone with it.
        m("tmpfs", "/rw", "tmpfs", false, &format!("mode=0755,size={}", c.upper_size)),
        Step::Mkdir("/rw/upper".into()),
        Step::Mkdir("/rw/work".into()),
        m("overlay", "/newroot", "overlay", false, "lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work"),
        Step::Mkdir("/newroot/proc".into()),
        Step::Mkdir("/newroot/sys".into()),
        Step::Mkdir("/newroot/dev".into()),
        Step::Move { from: "/proc".into(), to: "/newroot/proc".into() },
        Step::Move { from: "/sys".into(), to: "/newroot/sys".into() },
        Step::Move { from: "/dev".into(), to: "/newroot/dev".into() },
        Step::SwitchRoot("/newroot".into()),
        Step::Exec(c.exec.clone()),
    ]);
    steps
}

/// The file of module `name` under `dir` (`name.ko`, compressed variants, `-`/`_` spelled
/// either way), searched recursively as Debian lays modules out in subdirectories.
pub fn find_module(dir: &Path, name: &str) -> Option<PathBuf> {
    let wanted: Vec<String> = ["ko", "ko.xz", "ko.zst", "ko.gz"].iter().map(|ext| format!("{}.{ext}", name.replace('-', "_"))).collect();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else if wanted.contains(&e.file_name().to_string_lossy().replace('-', "_")) {
                return Some(p);
            }
        }
    }
    None
}

fn cstr(s: impl AsRef<std::ffi::OsStr>) -> CString {
    use std::os::unix::ffi::OsStrExt;
    CString::new(s.as_ref().as_bytes()).expect("no NUL in paths")
}

fn os_err(what: String) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn load_module(dir: &Path, name: &str) -> Result<(), String> {
    if Path::new("/sys/module").join(name).exists() {
        return Ok(());
    }
    let Some(path) = find_module(dir, name) else {
        if OPTIONAL_MODULES.contains(&name) {
            return Ok(());
        }
        return Err(format!("module {name}: not built in and not found under {}", dir.display()));
    };
    let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // The kernel decompresses .xz/.zst/.gz modules itself when asked (MODULE_INIT_COMPRESSED_FILE).
    let flags = if path.extension().is_some_and(|e| e != "ko") { 4 } else { 0 };
    let params = cstr("");
    let rc = unsafe { libc::syscall(libc::SYS_finit_module, std::os::fd::AsRawFd::as_raw_fd(&file), params.as_ptr(), flags) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
        return Err(os_err(format!("loading {}", path.display())));
    }
    Ok(())
}

/// Loads modules in passes: one whose dependency is not loaded yet fails with "unknown
/// symbol" and is retried after the others, so the list order is a hint, not a contract.
fn load_modules(dir: &Path, names: &[String]) -> Result<(), String> {
    let mut pending: Vec<&String> = names.iter().collect();
    loop {
        let before = pending.len();
        let mut errors = Vec::new();
        pending.retain(|name| match load_module(dir, name) {
            Ok(()) => {
                eprintln!("sandbox-guest init: module {name} ready");
                false
            }
            Err(e) => {
                errors.push(e);
                true
            }
        });
        if pending.is_empty() {
            return Ok(());
        }
        if pending.len() == before {
            return Err(errors.join("; "));
        }
    }
}

pub fn execute(step: &Step, module_dir: &Path) -> Result<(), String> {
    match step {
        Step::Mkdir(p) => std::fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display())),
        Step::Mount { source, target, fstype, readonly, data } => {
            let flags = if *readonly { libc::MS_RDONLY } else { 0 };
            let (s, t, f, d) = (cstr(source), cstr(target), cstr(fstype), cstr(data));
            let rc = unsafe { libc::mount(s.as_ptr(), t.as_ptr(), f.as_ptr(), flags, d.as_ptr().cast()) };
            if rc != 0 {
                return Err(os_err(format!("mount {source} on {} ({fstype})", target.display())));
            }
            Ok(())
        }
        Step::LoadModules(names) => load_modules(module_dir, names),
        Step::WaitForDevice(p) => {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !p.exists() {
                if Instant::now() > deadline {
                    return Err(format!("root device {} did not appear within 10 s", p.display()));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        }
        Step::Move { from, to } => {
            let (f, t) = (cstr(from), cstr(to));
            let rc = unsafe { libc::mount(f.as_ptr(), t.as_ptr(), std::ptr::null(), libc::MS_MOVE, std::ptr::null()) };
            if rc != 0 {
                return Err(os_err(format!("move mount {} to {}", from.display(), to.display())));
            }
            Ok(())
        }
        Step::SwitchRoot(root) => {
            // The initramfs is rootfs and cannot be unmounted or pivoted away from: move the
            // new root over `/` and chroot into it, as switch_root(8) does.
            std::env::set_current_dir(root).map_err(|e| format!("chdir {}: {e}", root.display()))?;
            let (dot, slash) = (cstr("."), cstr("/"));
            if unsafe { libc::mount(dot.as_ptr(), slash.as_ptr(), std::ptr::null(), libc::MS_MOVE, std::ptr::null()) } != 0 {
                return Err(os_err("move new root onto /".into()));
            }
            if unsafe { libc::chroot(dot.as_ptr()) } != 0 {
                return Err(os_err("chroot".into()));
            }
            std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))
        }
        Step::Exec(argv) => {
            use std::os::unix::process::CommandExt;
            let err = std::process::Command::new(&argv[0]).args(&argv[1..]).env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").exec();
            Err(format!("exec {}: {err}", argv[0]))
        }
    }
}

pub fn main(args: &[String]) -> Result<(), String> {
    if let [flag, cmdline] = args {
        if flag == "--print-plan" {
            return print_plan(cmdline);
        }
    }
    if std::process::id() != 1 {
        // Mounting over `/` and chrooting is only right for the initramfs's PID 1.
        return Err("init must run as PID 1 of the initramfs; use `init --print-plan 'KERNEL CMDLINE'` to inspect the plan".into());
    }
    if !args.is_empty() {
        return Err(format!("init takes no arguments, got {args:?}"));
    }
    let text = std::fs::read_to_string("/proc/cmdline").or_else(|_| {
        // /proc is not mounted yet at the very start.
        execute(&Step::Mkdir("/proc".into()), Path::new("/"))?;
        execute(&Step::Mount { source: "proc".into(), target: "/proc".into(), fstype: "proc".into(), readonly: false, data: String::new() }, Path::new("/"))?;
        let t = std::fs::read_to_string("/proc/cmdline").map_err(|e| format!("/proc/cmdline: {e}"));
        unsafe { libc::umount2(cstr("/proc").as_ptr(), 0) };
        t
    })?;
    let cmdline = parse_cmdline(&text)?;
    let module_dir = PathBuf::from("/lib/modules");
    for step in plan(&cmdline) {
        if let Err(e) = execute(&step, &module_dir) {
            // PID 1 must not exit (the kernel would panic without a message): say why, then stop.
            eprintln!("sandbox-guest init: {e}");
            unsafe { libc::reboot(libc::RB_POWER_OFF) };
            return Err(e);
        }
    }
    unreachable!("the plan ends with exec")
}

/// `sandbox-guest init --print-plan CMDLINE` outside PID 1: shows the steps for a command line.
fn print_plan(cmdline: &str) -> Result<(), String> {
    for step in plan(&parse_cmdline(cmdline)?) {
        println!("{step:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec_arg(argv: &[&str]) -> String {
        // base64url without padding, written out by hand so the test checks the decoder.
        let json = serde_json::to_vec(argv).unwrap();
        let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in json.chunks(3) {
            let n = chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(table[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn cmdline_parsing() {
        let text = format!("console=ttyS0 sandbox.root=/dev/vdb sandbox.exec={} quiet", exec_arg(&["/sbin/sandbox-guest", "bootstrap", "--", "python3", "-c", "print('é')"]));
        let c = parse_cmdline(&text).unwrap();
        assert_eq!(c.root, "/dev/vdb");
        assert_eq!(c.rootfstype, "ext4");
        assert_eq!(c.exec, ["/sbin/sandbox-guest", "bootstrap", "--", "python3", "-c", "print('é')"]);
        assert!(parse_cmdline("console=ttyS0").unwrap_err().contains("sandbox.exec"));
        assert!(parse_cmdline(&format!("sandbox.exec={}", exec_arg(&["bootstrap"]))).unwrap_err().contains("absolute"));
        assert!(parse_cmdline("sandbox.exec=!!").unwrap_err().contains("base64"));
    }

    #[test]
    fn plan_mounts_root_readonly_under_a_private_overlay_then_execs() {
        let c = parse_cmdline(&format!("sandbox.rootfstype=erofs sandbox.upper_size=256m sandbox.exec={}", exec_arg(&["/init-bootstrap", "--"]))).unwrap();
        let steps = plan(&c);
        let pos = |s: &Step| steps.iter().position(|x| x == s).unwrap();
        let modules = pos(&Step::LoadModules(MODULES.iter().map(|s| s.to_string()).collect()));
        let root = steps
            .iter()
            .position(|s| matches!(s, Step::Mount { target, fstype, readonly: true, .. } if target == Path::new("/lower") && fstype == "erofs"))
            .expect("read-only root mount");
        let upper = steps
            .iter()
            .position(|s| matches!(s, Step::Mount { fstype, data, .. } if fstype == "tmpfs" && data.contains("size=256m")))
            .expect("tmpfs upper");
        let overlay = steps
            .iter()
            .position(|s| matches!(s, Step::Mount { fstype, data, .. } if fstype == "overlay" && data == "lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work"))
            .expect("overlay");
        let switch = pos(&Step::SwitchRoot("/newroot".into()));
        assert!(modules < root && root < overlay && upper < overlay && overlay < switch);
        assert_eq!(steps.last(), Some(&Step::Exec(vec!["/init-bootstrap".into(), "--".into()])));
        // The kernel's own filesystems follow the root: moved, not remounted.
        assert!(steps.contains(&Step::Move { from: "/dev".into(), to: "/newroot/dev".into() }));
    }

    #[test]
    fn a_virtiofs_root_is_not_waited_for_as_a_device() {
        let c = parse_cmdline(&format!("sandbox.root=rootfs sandbox.rootfstype=virtiofs sandbox.exec={}", exec_arg(&["/b"]))).unwrap();
        let steps = plan(&c);
        assert!(!steps.iter().any(|s| matches!(s, Step::WaitForDevice(_))));
        assert!(steps.iter().any(|s| matches!(s, Step::Mount { source, fstype, readonly: true, .. } if source == "rootfs" && fstype == "virtiofs")));
        let c = parse_cmdline(&format!("sandbox.exec={}", exec_arg(&["/b"]))).unwrap();
        assert!(plan(&c).contains(&Step::WaitForDevice("/dev/vda".into())));
    }

    #[test]
    fn module_list_covers_the_guest_devices_in_dependency_order() {
        for needed in ["virtio_mmio", "virtio_blk", "virtio_net", "vmw_vsock_virtio_transport", "overlay"] {
            assert!(MODULES.contains(&needed), "{needed}");
        }
        let at = |n: &str| MODULES.iter().position(|m| *m == n).unwrap();
        assert!(at("virtio") < at("virtio_mmio") && at("virtio_mmio") < at("virtio_blk"));
        assert!(at("vsock") < at("vmw_vsock_virtio_transport_common") && at("vmw_vsock_virtio_transport_common") < at("vmw_vsock_virtio_transport"));
    }

    #[test]
    fn modules_are_found_compressed_in_subdirectories() {
        let dir = crate::scratch::Scratch::new("mods");
        std::fs::create_dir_all(dir.join("kernel/drivers/block")).unwrap();
        std::fs::write(dir.join("kernel/drivers/block/virtio_blk.ko.xz"), b"").unwrap();
        std::fs::write(dir.join("kernel/overlay.ko"), b"").unwrap();
        assert_eq!(find_module(&dir, "virtio_blk"), Some(dir.join("kernel/drivers/block/virtio_blk.ko.xz")));
        assert_eq!(find_module(&dir, "overlay"), Some(dir.join("kernel/overlay.ko")));
        assert_eq!(find_module(&dir, "virtio_net"), None);
        // A required module that is neither built in nor shipped is a clear error.
        let err = load_module(&dir, "no_such_module_xyz").unwrap_err();
        assert!(err.contains("no_such_module_xyz") && err.contains("not found"), "{err}");
    }
}
