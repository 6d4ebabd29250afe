//! `sandbox-vmm`          run one VM: start frame on stdin, answers on stdout, then control.sock
//! `sandbox-vmm preflight [--cgroup-root DIR] [--kvm PATH]`   JSON report of what the host lacks

use std::path::PathBuf;
use std::process::ExitCode;

use sandbox_vmm::host::preflight;
use sandbox_vmm::runner::{self, EXIT_INVALID, EXIT_OK, EXIT_UNAVAILABLE};

const USAGE: &str = "usage: sandbox-vmm [run]                      read the start frame on stdin and run the VM
       sandbox-vmm preflight [--cgroup-root DIR] [--kvm PATH]   print what this host lacks, as JSON";

fn preflight_cmd(args: &[String]) -> i32 {
    let mut options = preflight::Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let slot = match arg.as_str() {
            "--cgroup-root" => &mut options.cgroup_root,
            "--kvm" => {
                match it.next() {
                    Some(v) => options.kvm_path = PathBuf::from(v),
                    None => return usage_error("--kvm needs a path"),
                }
                continue;
            }
            other => return usage_error(&format!("preflight: unknown argument {other:?}")),
        };
        match it.next() {
            Some(v) => *slot = Some(PathBuf::from(v)),
            None => return usage_error(&format!("{arg} needs a directory")),
        }
    }
    let report = preflight::run(&options);
    println!("{}", serde_json::to_string_pretty(&report).expect("a JSON value serialises"));
    if report["ok"] == serde_json::json!(true) {
        EXIT_OK
    } else {
        EXIT_UNAVAILABLE
    }
}

fn usage_error(message: &str) -> i32 {
    eprintln!("sandbox-vmm: {message}\n{USAGE}");
    EXIT_INVALID
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        None | Some("run") if args.len() <= 1 => runner::run(std::io::stdin().lock(), &mut std::io::stdout().lock()),
        Some("preflight") => preflight_cmd(&args[1..]),
        Some("--help") | Some("-h") => {
            println!("{USAGE}");
            EXIT_OK
        }
        Some("--version") => {
            println!("sandbox-vmm {}", env!("CARGO_PKG_VERSION"));
            EXIT_OK
        }
        _ => usage_error(&format!("unknown arguments {args:?}")),
    };
    ExitCode::from(code as u8)
}
