//! `sandbox-guest initramfs`: writes the firmware's initramfs, a `newc` cpio archive holding
//! `/init` (a static build of this binary, which runs as `init` when called by that name), the
//! kernel modules of [`crate::init::MODULES`] found in an unpacked kernel package, and
//! `/dev/console` so PID 1 has a console before devtmpfs is mounted. The archive is
//! reproducible: entries in a fixed order, owner 0, time 0, inode numbers from 1. A JSON
//! manifest lists what went in.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::parse_flags;
use crate::init::{find_module, MODULES};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

struct Cpio<W: Write> {
    out: W,
    ino: u32,
    written: u64,
}

impl<W: Write> Cpio<W> {
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) -> std::io::Result<()> {
        self.ino += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let header = format!(
            "070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
        );
        self.write(header.as_bytes())?;
        self.write(name.as_bytes())?;
        self.write(&[0])?;
        self.pad()?;
        self.write(data)?;
        self.pad()
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// newc aligns every header+name and every body to 4 bytes.
    fn pad(&mut self) -> std::io::Result<()> {
        let n = (4 - (self.written % 4) as usize) % 4;
        self.write(&[0u8; 3][..n])
    }

    fn finish(mut self) -> std::io::Result<W> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, (0, 0), &[])?;
        Ok(self.out)
    }
}

/// Writes the archive; returns the manifest.
pub fn build(init_binary: &Path, modules_dir: &Path, out: &Path) -> Result<serde_json::Value, String> {
    let init = std::fs::read(init_binary).map_err(|e| format!("--init-binary {}: {e}", init_binary.display()))?;
    let mut modules = Vec::new();
    for name in MODULES {
        if let Some(path) = find_module(modules_dir, name) {
            let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            modules.push((name.to_string(), file, path, data));
        }
    }
    let file = std::fs::File::create(out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    let mut cpio = Cpio { out: std::io::BufWriter::new(file), ino: 0, written: 0 };
    let io = |e: std::io::Error| format!("--out {}: {e}", out.display());
    for dir in [".", "dev", "lib", "lib/modules", "proc", "sys"] {
        cpio.entry(dir, S_IFDIR | 0o755, (0, 0), &[]).map_err(io)?;
    }
    cpio.entry("dev/console", S_IFCHR | 0o600, (5, 1), &[]).map_err(io)?;
    cpio.entry("init", S_IFREG | 0o755, (0, 0), &init).map_err(io)?;
    for (_, file, _, data) in &modules {
        cpio.entry(&format!("lib/modules/{file}"), S_IFREG | 0o644, (0, 0), data).map_err(io)?;
    }
    cpio.finish().map_err(io)?.flush().map_err(io)?;
    Ok(json!({
        "init": {"source": init_binary.display().to_string(), "size": init.len()},
        "modules": modules.iter().map(|(name, file, path, data)| json!({
            "name": name, "file": format!("lib/modules/{file}"), "source": path.display().to_string(), "size": data.len(),
        })).collect::<Vec<_>>(),
        "missing_modules": MODULES.iter().filter(|m| !modules.iter().any(|(n, ..)| n == *m)).collect::<Vec<_>>(),
    }))
}

pub fn main(args: &[String]) -> Result<(), String> {
    let mut flags = parse_flags(args, &[])?;
    let usage = "usage: sandbox-guest initramfs --modules-dir DIR --out FILE [--init-binary STATIC_BINARY] [--manifest FILE.json]";
    let modules_dir = flags.remove("modules-dir").map(PathBuf::from).ok_or(format!("--modules-dir is required\n{usage}"))?;
    let out = flags.remove("out").map(PathBuf::from).ok_or(format!("--out is required\n{usage}"))?;
    let init_binary = match flags.remove("init-binary") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(|e| e.to_string())?,
    };
    let manifest_path = flags.remove("manifest");
    if let Some(unknown) = flags.keys().next() {
        return Err(format!("unknown flag --{unknown}\n{usage}"));
    }
    let manifest = build(&init_binary, &modules_dir, &out)?;
    let text = serde_json::to_string_pretty(&manifest).unwrap();
    match manifest_path {
        Some(p) => std::fs::write(&p, text + "\n").map_err(|e| format!("--manifest {p}: {e}")),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_is_reproducible_newc_with_console_init_and_modules() {
        let dir = crate::scratch::Scratch::new("initramfs");
        std::fs::create_dir_all(dir.join("mods/kernel/fs")).unwrap();
        std::fs::write(dir.join("mods/kernel/fs/overlay.ko"), b"overlay-module").unwrap();
        std::fs::write(dir.join("init-bin"), b"\x7fELF-fake").unwrap();
        let a = dir.join("a.cpio");
        let b = dir.join("b.cpio");
        let manifest = build(&dir.join("init-bin"), &dir.join("mods"), &a).unwrap();
        build(&dir.join("init-bin"), &dir.join("mods"), &b).unwrap();
        let bytes = std::fs::read(&a).unwrap();
        assert_eq!(bytes, std::fs::read(&b).unwrap(), "same inputs, same archive");
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        let text = String::from_utf8_lossy(&bytes);
        for name in ["dev/console\0", "init\0", "lib/modules/overlay.ko\0", "TRAILER!!!\0"] {
            assert!(text.contains(name), "{name} missing");
        }
        assert!(text.contains("overlay-module"));
        assert_eq!(manifest["modules"][0]["name"], "overlay");
        assert!(manifest["missing_modules"].as_array().unwrap().iter().any(|m| m == "virtio_blk"));
        // The console is a character device 5:1.
        let at = text.find("dev/console").unwrap() - 110;
        let header = &text[at..at + 110];
        assert_eq!(&header[14..22], format!("{:08X}", S_IFCHR | 0o600));
        assert_eq!(&header[78..86], "00000005");
        assert_eq!(&header[86..94], "00000001");
    }
}
