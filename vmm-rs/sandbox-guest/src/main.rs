//! `sandbox-guest`: the guest side of sandboxd in one binary.
//!
//! - `execd`: the execution service (port 44772)
//! - `egress`: the egress service (port 18080)
//! - `bootstrap`: the image entrypoint; supervises the workload and both services
//! - `init`: PID 1 of the initramfs (modules, read-only root with a private overlay, switch_root)
//! - `initramfs`, `prepare-image`: build the firmware's initramfs and prepared image manifests

mod bootstrap;
mod config;
mod egress;
mod execd;
mod http;
mod init;
mod initramfs;
mod prepare;
#[cfg(test)]
mod scratch;

use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage: sandbox-guest <execd|egress|bootstrap|init|initramfs|prepare-image> [flags]
  execd     [--bind IP] [--port N (44772)] (--token-file PATH | --token-env NAME | --dev-no-token) [--config FILE.json]
            [--state-dir DIR] [--ping-interval-ms N] [--header-timeout-ms N (10000)] [--idle-timeout-ms N (300000)]
            [--max-connections N (4096)] [--announce]
  egress    [--bind IP] [--port N (18080)] (--token-file PATH | --token-env NAME | --dev-no-token) [--config FILE.json]
            [--header-timeout-ms N] [--idle-timeout-ms N] [--max-connections N] [--announce]
  bootstrap [flags] -- WORKLOAD ARGV...   (see `sandbox-guest bootstrap --help`)
  init      (PID 1 of the initramfs; reads sandbox.* keys of /proc/cmdline) | init --print-plan 'CMDLINE'
  initramfs --modules-dir DIR --out FILE [--init-binary STATIC_BINARY] [--manifest FILE.json]
  prepare-image --rootfs DIR --images-dir DIR --key KEY [--cmd JSON] [--env JSON] [--library-dir DIR] [--binary STATIC]";

fn main() -> ExitCode {
    // The kernel starts the initramfs's `/init` by that name, with no subcommand.
    if std::env::args().next().is_some_and(|a| Path::new(&a).file_name().is_some_and(|n| n == "init")) {
        return match init::main(&[]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("sandbox-guest init: {message}");
                ExitCode::from(2)
            }
        };
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((sub, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match sub.as_str() {
        "execd" => config::service_config(rest, 44772).and_then(|c| service_runtime().block_on(execd::run(c))),
        "egress" => config::service_config(rest, 18080).and_then(|c| service_runtime().block_on(egress::run(c))),
        "bootstrap" => bootstrap::main(rest),
        "init" => init::main(rest),
        "initramfs" => initramfs::main(rest),
        "prepare-image" => prepare::main(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => Err(format!("unknown subcommand '{other}'\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sandbox-guest {sub}: {message}");
            ExitCode::from(2)
        }
    }
}

/// The services' runtime, made after the configuration was read (a token variable is scrubbed
/// while the process has one thread), with every descriptor the hard limit allows.
fn service_runtime() -> tokio::runtime::Runtime {
    http::raise_fd_limit(0);
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("cannot start the async runtime")
}
