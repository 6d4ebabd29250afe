//! `sandbox-guest prepare-image`: makes a root filesystem directory into a prepared image.
//! It installs a static build of this binary as `/sbin/sandbox-guest` inside the rootfs and
//! writes `<images_dir>/<key>.json` with `rootfs`, `entrypoint` (the bootstrap), `cmd`, `env`
//! and `library_dir`, the prepared image manifest of the sandboxd spec.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::parse_flags;

/// Where the bootstrap goes inside the image, and the entrypoint that runs it.
pub const GUEST_BINARY: &str = "/sbin/sandbox-guest";

const USAGE: &str = "usage: sandbox-guest prepare-image --rootfs DIR --images-dir DIR --key KEY
       [--cmd JSON_ARRAY] [--env JSON_OBJECT] [--library-dir DIR] [--binary STATIC_SANDBOX_GUEST]";

fn valid_key(key: &str) -> bool {
    (1..=128).contains(&key.len()) && !key.starts_with('.') && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// True when the ELF file asks for a program interpreter, i.e. is dynamically linked.
pub fn elf_is_dynamic(bytes: &[u8]) -> Result<bool, String> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[32..40].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let Some(header) = bytes.get(at..at + 4) else { return Err("truncated program headers".into()) };
        // PT_INTERP = 3
        if u32::from_le_bytes(header.try_into().unwrap()) == 3 {
            return Ok(true);
        }
    }
    Ok(false)
}

pub struct Request {
    pub rootfs: PathBuf,
    pub images_dir: PathBuf,
    pub key: String,
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub library_dir: Option<PathBuf>,
    pub binary: PathBuf,
}

pub fn prepare(req: &Request) -> Result<PathBuf, String> {
    if !valid_key(&req.key) {
        return Err(format!("--key: '{}' must be 1-128 of [A-Za-z0-9._-], not starting with '.'", req.key));
    }
    for (flag, path) in [("--rootfs", Some(&req.rootfs)), ("--images-dir", Some(&req.images_dir)), ("--library-dir", req.library_dir.as_ref())] {
        if let Some(p) = path {
            if !p.is_absolute() {
                return Err(format!("{flag}: '{}' is not an absolute path", p.display()));
            }
        }
    }
    let rootfs = req.rootfs.canonicalize().map_err(|e| format!("--rootfs {}: {e}", req.rootfs.display()))?;
    if rootfs == Path::new("/") {
        return Err("--rootfs: the host root cannot be an image".into());
    }
    if !rootfs.is_dir() {
        return Err(format!("--rootfs {}: not a directory", rootfs.display()));
    }
    let images_dir = req.images_dir.canonicalize().map_err(|e| format!("--images-dir {}: {e}", req.images_dir.display()))?;
    if images_dir.starts_with(&rootfs) || rootfs.starts_with(&images_dir) {
        return Err("--images-dir and --rootfs must not contain one another".into());
    }
    if let Some(bad) = req.env.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
        return Err(format!("--env: invalid variable name '{bad}'"));
    }
    let binary = std::fs::read(&req.binary).map_err(|e| format!("--binary {}: {e}", req.binary.display()))?;
    // The image may have no C library at all (busybox): the bootstrap must not need one.
    if elf_is_dynamic(&binary).map_err(|e| format!("--binary {}: {e}", req.binary.display()))? {
        return Err(format!(
            "--binary {}: dynamically linked; build a static one: RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --release --target x86_64-unknown-linux-gnu -p sandbox-guest",
            req.binary.display()
        ));
    }
    let installed = rootfs.join(GUEST_BINARY.trim_start_matches('/'));
    std::fs::create_dir_all(installed.parent().unwrap()).map_err(|e| format!("{}: {e}", installed.display()))?;
    write_atomically(&installed, &binary, 0o755)?;
    let mut manifest = json!({
        "rootfs": rootfs.display().to_string(),
        "entrypoint": [GUEST_BINARY, "bootstrap", "--"],
        "cmd": req.cmd,
        "env": req.env,
    });
    if let Some(lib) = &req.library_dir {
        manifest["library_dir"] = json!(lib.display().to_string());
    }
    let path = images_dir.join(format!("{}.json", req.key));
    let text = serde_json::to_string_pretty(&manifest).unwrap() + "\n";
    write_atomically(&path, text.as_bytes(), 0o644)?;
    Ok(path)
}

fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| format!("{}: {e}", path.display()))
}

pub fn main(args: &[String]) -> Result<(), String> {
    let mut flags = parse_flags(args, &[])?;
    let required = |flags: &mut BTreeMap<String, String>, name: &str| flags.remove(name).ok_or(format!("--{name} is required\n{USAGE}"));
    let rootfs = PathBuf::from(required(&mut flags, "rootfs")?);
    let images_dir = PathBuf::from(required(&mut flags, "images-dir")?);
    let key = required(&mut flags, "key")?;
    let cmd = match flags.remove("cmd") {
        Some(v) => serde_json::from_str(&v).map_err(|e| format!("--cmd: expected a JSON array of strings: {e}"))?,
        None => Vec::new(),
    };
    let env = match flags.remove("env") {
        Some(v) => serde_json::from_str(&v).map_err(|e| format!("--env: expected a JSON object of strings: {e}"))?,
        None => BTreeMap::new(),
    };
    let library_dir = flags.remove("library-dir").map(PathBuf::from);
    let binary = match flags.remove("binary") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(|e| e.to_string())?,
    };
    if let Some(unknown) = flags.keys().next() {
        return Err(format!("unknown flag --{unknown}\n{USAGE}"));
    }
    let path = prepare(&Request { rootfs, images_dir, key, cmd, env, library_dir, binary })?;
    println!("{}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 header with one program header of the given type.
    fn elf(ptype: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        b[64..68].copy_from_slice(&ptype.to_le_bytes());
        b
    }

    #[test]
    fn detects_dynamic_elf() {
        assert_eq!(elf_is_dynamic(&elf(3)), Ok(true));
        assert_eq!(elf_is_dynamic(&elf(1)), Ok(false));
        assert!(elf_is_dynamic(b"#!/bin/sh\n").is_err());
        // This test binary itself is a normal dynamically linked build.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_is_dynamic(&me), Ok(true));
    }

    #[test]
    fn writes_the_manifest_and_installs_the_bootstrap() {
        let base = crate::scratch::Scratch::new("prepare");
        let (rootfs, images) = (base.join("rootfs"), base.join("images"));
        std::fs::create_dir_all(&rootfs).unwrap();
        std::fs::create_dir_all(&images).unwrap();
        std::fs::write(base.join("static-bin"), elf(1)).unwrap();
        std::fs::write(base.join("dynamic-bin"), elf(3)).unwrap();
        let mut req = Request {
            rootfs: rootfs.clone(),
            images_dir: images.clone(),
            key: "tiny-busybox".into(),
            cmd: vec!["/bin/sh".into(), "-c".into(), "sleep infinity".into()],
            env: BTreeMap::from([("PATH".to_string(), "/bin".to_string())]),
            library_dir: Some("/opt/fw".into()),
            binary: base.join("static-bin"),
        };
        let path = prepare(&req).unwrap();
        assert_eq!(path, images.canonicalize().unwrap().join("tiny-busybox.json"));
        let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            manifest,
            json!({
                "rootfs": rootfs.canonicalize().unwrap().display().to_string(),
                "entrypoint": ["/sbin/sandbox-guest", "bootstrap", "--"],
                "cmd": ["/bin/sh", "-c", "sleep infinity"],
                "env": {"PATH": "/bin"},
                "library_dir": "/opt/fw",
            })
        );
        assert_eq!(std::fs::read(rootfs.join("sbin/sandbox-guest")).unwrap(), elf(1));

        req.binary = base.join("dynamic-bin");
        assert!(prepare(&req).unwrap_err().contains("dynamically linked"));
        req.binary = base.join("static-bin");
        req.key = "../escape".into();
        assert!(prepare(&req).unwrap_err().contains("--key"));
        req.key = "ok".into();
        req.rootfs = "/".into();
        assert!(prepare(&req).unwrap_err().contains("host root"));
        req.rootfs = "relative/dir".into();
        assert!(prepare(&req).unwrap_err().contains("absolute"));
        req.rootfs = images.join("inside");
        std::fs::create_dir_all(&req.rootfs).unwrap();
        assert!(prepare(&req).unwrap_err().contains("contain one another"));
    }
}
