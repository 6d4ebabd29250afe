//! The file routes of the execution service as attackers meet them: a client asking it to
//! delete the root directory under another name, or to spend its memory and CPU (endless part
//! headers, huge lines, backtracking glob patterns, searches nobody waits for), and a workload
//! in the sandbox planting symlinks and swapping files under a service that runs as root. Every
//! request that deletes, moves or changes anything acts inside a scratch directory; the
//! root-directory ones go only to a service chrooted into a scratch root, checked to be so
//! before they are sent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

mod common;
use common::scratch::Scratch;
use common::{euid, is_root, skip, Service, BIN};

/// Starts execd without a token on an ephemeral port, with a scratch directory.
fn execd(name: &str) -> Service {
    let dir = Scratch::new(&format!("files-{name}"));
    let mut cmd = Command::new(BIN);
    cmd.args(["execd", "--port", "0", "--announce", "--dev-no-token", "--state-dir"]).arg(dir.join("state"));
    Service::start(cmd, dir)
}

/// `path` for a query string.
fn q(path: &Path) -> String {
    path.to_str().unwrap().bytes().map(|b| if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// Status and body (de-chunked) of the response `s` carries, which must come within `within`.
fn response(s: &mut TcpStream, within: Duration) -> (u16, String) {
    s.set_read_timeout(Some(within)).unwrap();
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    if read.as_ref().is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)) {
        return (0, format!("no complete answer within {within:?}; got: {text}"));
    }
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, mut body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return (status, body.to_string());
    }
    let mut plain = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size, 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        plain.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    (status, plain)
}

/// One request with a body; (status, body), status 0 when no answer came within 30 s.
fn request(svc: &Service, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    response(&mut s, Duration::from_secs(30))
}

fn get(svc: &Service, path: &str) -> (u16, String) {
    request(svc, "GET", path, "")
}

/// A `/proc/PID/status` field in KiB: `VmRSS` now, `VmHWM` at its peak.
fn memory_kib(svc: &Service, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", svc.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A file a workload's symlink points at: `text`, mode 0600, this process's own.
fn write_victim(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Mode bits and owner of `path` (following symlinks): what a victim must keep.
fn mode_and_owner(path: &Path) -> (u32, u32) {
    let meta = std::fs::metadata(path).unwrap();
    (meta.mode() & 0o7777, meta.uid())
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

const BOUNDARY: &str = "sg-files-boundary";

/// The opening of a multipart part named `name`.
fn part_head(name: &str) -> String {
    format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n\r\n")
}

/// A `metadata` part and the opening of its `file` part.
fn upload_head(metadata: &serde_json::Value) -> String {
    format!("{}{metadata}\r\n{}", part_head("metadata"), part_head("file"))
}

/// Starts `POST /files/upload` with a chunked body whose first chunk is `first`.
fn start_upload(svc: &Service, first: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    write!(s, "POST /files/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    send_chunk(&mut s, first);
    s
}

fn send_chunk(s: &mut TcpStream, data: &[u8]) {
    write!(s, "{:x}\r\n", data.len()).unwrap();
    s.write_all(data).unwrap();
    s.write_all(b"\r\n").unwrap();
}

/// Ends an upload started with [`start_upload`] after `last` and returns the answer.
fn finish_upload(mut s: TcpStream, last: &[u8]) -> (u16, String) {
    send_chunk(&mut s, last);
    s.write_all(b"0\r\n\r\n").unwrap();
    response(&mut s, Duration::from_secs(30))
}

/// Sends `head` and then `filler` bytes of `fill` as one upload body from another thread,
/// while this one waits for the answer; returns it and how much the service's peak memory grew.
fn flood_upload(svc: &Service, head: &str, fill: u8, filler: usize) -> ((u16, String), u64) {
    let before = memory_kib(svc, "VmHWM");
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    let mut writer = s.try_clone().unwrap();
    let head = format!(
        "POST /files/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {}\r\n\r\n{head}",
        head.len() + filler
    );
    let sender = std::thread::spawn(move || {
        let block = vec![fill; 1 << 20];
        // The service may answer and close before taking it all.
        let _ = writer.write_all(head.as_bytes()).and_then(|_| (0..filler >> 20).try_for_each(|_| writer.write_all(&block)));
    });
    let answer = response(&mut s, Duration::from_secs(30));
    drop(s);
    sender.join().unwrap();
    (answer, memory_kib(svc, "VmHWM").saturating_sub(before))
}

/// Waits for `dir` to hold a file whose name starts with `prefix`.
fn wait_for_entry(dir: &Path, prefix: &str) -> std::path::PathBuf {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = std::fs::read_dir(dir).unwrap().flatten().find(|e| e.file_name().to_string_lossy().starts_with(prefix));
        if let Some(entry) = found {
            return entry.path();
        }
        assert!(Instant::now() < deadline, "no {prefix}* in {}", dir.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A scratch root directory holding `sandbox-guest` and the libraries it loads, for a service
/// chrooted into it.
fn scratch_root(name: &str) -> Scratch {
    let root = Scratch::new(name);
    for dir in ["bin", "tmp", "proc", "keep/sub"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::copy(BIN, root.join("bin/sandbox-guest")).unwrap();
    // The libraries a dynamically linked build loads (ldd names none for a static one).
    let ldd = Command::new("ldd").arg(BIN).output().map(|o| o.stdout).unwrap_or_default();
    for lib in String::from_utf8_lossy(&ldd).split_whitespace().filter(|w| w.starts_with('/')) {
        let inside = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::copy(lib, inside).unwrap();
    }
    std::fs::write(root.join("keep/sub/file"), "keep").unwrap();
    root
}

#[test]
fn deleting_or_moving_the_root_directory_is_refused_however_the_path_spells_it() {
    const TEST: &str = "deleting_or_moving_the_root_directory_is_refused_however_the_path_spells_it";
    let probe = Command::new("unshare").args(["-Urmpf", "--mount-proc", "true"]).stderr(Stdio::null()).status();
    if !probe.is_ok_and(|s| s.success()) {
        return skip(TEST, "unshare cannot make user, mount and PID namespaces here");
    }
    let root = scratch_root("files-chroot");
    let marker = format!("chroot-marker-{}", std::process::id());
    std::fs::write(root.join(&marker), "").unwrap();
    // The service's "/" is the scratch root: a chroot in namespaces of its own, with its own
    // /proc, ended with unshare. Nothing outside the scratch root is reachable from there.
    let mut cmd = Command::new("unshare");
    cmd.args(["-Urmpf", "--kill-child"])
        .arg(format!("--mount-proc={}", root.join("proc").display()))
        .arg("chroot")
        .arg(&*root)
        .args(["/bin/sandbox-guest", "execd", "--port", "0", "--announce", "--dev-no-token", "--state-dir", "/state"]);
    let svc = Service::start(cmd, root);
    // Before anything destructive: the service must see the scratch root as "/".
    assert_eq!(get(&svc, &format!("/files/info?path=/{marker}")).0, 200, "the service's root is not the scratch root");
    assert_eq!(get(&svc, "/files/info?path=/etc").0, 404, "the service's root is not the scratch root");

    for spelling in ["//", "/tmp/..", "/./", "/keep/sub/../..", "/proc/self/root", "/proc/self/root/", "/proc/1/root/..", "/"] {
        let (status, body) = request(&svc, "DELETE", &format!("/directories?path={spelling}"), "");
        assert_eq!(status, 400, "DELETE /directories?path={spelling}: {body}");
        assert!(body.contains("INVALID_FILE") && body.contains("root directory"), "{spelling}: {body}");
        let moved = json!([{ "src": spelling, "dest": "/tmp/moved" }]).to_string();
        let (status, body) = request(&svc, "POST", "/files/mv", &moved);
        assert_eq!(status, 400, "mv {spelling}: {body}");
        assert!(body.contains("root directory"), "mv {spelling}: {body}");
    }
    // Several paths with the root among them: none is deleted.
    let (status, body) = request(&svc, "DELETE", "/directories?path=/keep/sub&path=//", "");
    assert_eq!(status, 400, "{body}");
    assert!(svc.dir.join("keep/sub/file").exists() && svc.dir.join(&marker).exists(), "the scratch root lost files");
    // Other directories still go.
    assert_eq!(request(&svc, "DELETE", "/directories?path=/keep", "").0, 200);
    assert!(!svc.dir.join("keep").exists());
}

#[test]
fn a_search_with_a_pattern_of_many_stars_answers_at_once() {
    let svc = execd("glob");
    std::fs::write(svc.dir.join("a".repeat(100)), "").unwrap();
    std::fs::write(svc.dir.join("aaab"), "").unwrap();
    let started = Instant::now();
    let pattern = "*a*a*a*a*a*a*a*a*a*a*b".replace('*', "%2A");
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    write!(s, "GET /files/search?path={}&pattern={pattern} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", q(&svc.dir)).unwrap();
    let (status, body) = response(&mut s, Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    let found: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(found.len(), 0, "{body}");
    let (status, body) = get(&svc, &format!("/files/search?path={}&pattern=%2Aa%2Ab", q(&svc.dir)));
    assert_eq!(status, 200);
    assert!(body.contains("aaab") && !body.contains(&"a".repeat(100)), "{body}");
}

/// CPU time the service has used so far.
fn cpu_time(svc: &Service) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", svc.child.id())).unwrap();
    let fields: Vec<u64> = stat.rsplit_once(')').unwrap().1.split_whitespace().skip(11).take(2).map(|f| f.parse().unwrap()).collect();
    // SAFETY: sysconf cannot fail for _SC_CLK_TCK.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis((fields[0] + fields[1]) * 1000 / ticks)
}

#[test]
fn a_search_stops_when_its_client_goes_away() {
    let svc = execd("search-gone");
    for d in 0..40 {
        let dir = svc.dir.join(format!("tree/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        (0..1000).for_each(|f| std::fs::write(dir.join(format!("f{f}")), "").unwrap());
    }
    // A search through 40,000 files takes a while; its client leaves early.
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    let idle = cpu_time(&svc);
    write!(s, "GET /files/search?path={}&pattern=%2A%2A HTTP/1.1\r\nHost: x\r\n\r\n", q(&svc.dir.join("tree"))).unwrap();
    // Until the search is at work (a busy machine may give it no CPU for a while); else it could be
    // over before its client left, or not begun, and what follows would prove nothing.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut working = Duration::ZERO;
    while working < Duration::from_millis(20) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        working = cpu_time(&svc) - idle;
    }
    assert!(working >= Duration::from_millis(20), "the search was not at work when its client left ({working:?} of CPU in 10 s)");
    drop(s);
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_time(&svc);
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_time(&svc) - before;
    assert!(spent < Duration::from_millis(100), "the search went on without its client: {spent:?} of CPU in 1 s");
}

#[test]
fn a_search_with_many_matches_streams_its_answer_with_bounded_memory() {
    let svc = execd("search-many");
    let long = "n".repeat(200);
    for d in 0..40 {
        let dir = svc.dir.join(format!("tree/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        (0..1000).for_each(|f| std::fs::write(dir.join(format!("{long}{f}")), "").unwrap());
    }
    let before = memory_kib(&svc, "VmHWM");
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    write!(s, "GET /files/search?path={}&pattern=n%2A HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", q(&svc.dir.join("tree"))).unwrap();
    let (status, body) = response(&mut s, Duration::from_secs(60));
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    let found: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(found.len(), 40_000);
    assert!(found.iter().all(|f| f["path"].as_str().is_some_and(|p| p.contains(&long))));
    // About 15 MB of JSON went out; held whole (a tree of values, then its text) it took over 100 MB.
    let grew = memory_kib(&svc, "VmHWM").saturating_sub(before);
    assert!(grew < 8 << 10, "peak memory grew by {grew} KiB for a {} KiB answer", body.len() >> 10);
}

#[test]
fn a_part_header_or_preamble_that_never_ends_is_refused_with_bounded_memory() {
    let svc = execd("mp-bomb");
    const FILLER: usize = 48 << 20;
    // A part header without its blank line, then a body without any boundary.
    for (head, what) in [(format!("--{BOUNDARY}\r\nX-Big: "), "header"), (String::new(), "preamble")] {
        let ((status, body), grew) = flood_upload(&svc, &head, b'a', FILLER);
        assert_eq!(status, 413, "{what}: {body}");
        assert!(body.contains("INVALID_FILE"), "{what}: {body}");
        assert!(grew < 16 << 10, "{what}: peak memory grew by {grew} KiB for a {} MiB body", FILLER >> 20);
    }
}

#[test]
fn metadata_parts_are_bounded_in_size_and_number_and_checked_before_the_file_streams() {
    let svc = execd("mp-meta");
    let target = svc.dir.join("out.bin");
    // Thousands of metadata parts waiting for file parts that never come.
    let one = format!("{}{}\r\n", part_head("metadata"), json!({ "path": target }));
    let ((status, body), _) = flood_upload(&svc, &format!("{}--{BOUNDARY}--\r\n", one.repeat(5000)), b'-', 0);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("INVALID_FILE_METADATA") && body.contains("1024"), "{body}");

    // A metadata part above 1 MiB.
    let big = format!("{}{}\r\n--{BOUNDARY}--\r\n", part_head("metadata"), json!({ "path": target, "owner": "x".repeat(2 << 20) }));
    let ((status, body), _) = flood_upload(&svc, &big, b'-', 0);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("INVALID_FILE_METADATA"), "{body}");

    // An unknown owner or group, a mode that is not octal, a path naming a directory: refused
    // while the file part is still coming (the answer waits only for the client to go quiet),
    // with nothing written.
    let uploads: Vec<_> = [
        json!({ "path": target, "owner": "no-such-user-sandbox-guest" }),
        json!({ "path": target, "group": "no-such-group-sandbox-guest" }),
        json!({ "path": target, "mode": 999 }),
        json!({ "path": format!("{}/", svc.dir.display()) }),
        json!({ "path": format!("{}/sub/..", svc.dir.display()) }),
    ]
    .into_iter()
    .map(|metadata| (start_upload(&svc, format!("{}{}", upload_head(&metadata), "x".repeat(1000)).as_bytes()), metadata))
    .collect();
    for (mut s, metadata) in uploads {
        let (status, body) = response(&mut s, Duration::from_secs(15));
        assert_eq!(status, 400, "{metadata}: {body}");
        assert!(body.contains("INVALID_FILE_METADATA"), "{metadata}: {body}");
    }
    assert!(!target.exists());
    assert_eq!(std::fs::read_dir(&*svc.dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().contains(".upload-")).count(), 0);
}

#[test]
fn an_upload_is_written_to_a_private_temporary_file() {
    let svc = execd("up-private");
    let target = svc.dir.join("secret.txt");
    let up = start_upload(&svc, format!("{}TOP-SECRET", upload_head(&json!({ "path": target, "mode": 600 }))).as_bytes());
    let tmp = wait_for_entry(&svc.dir, ".secret.txt.upload-");
    assert_eq!(mode(&tmp), 0o600, "the temporary file of an upload is readable by others");
    let (status, body) = finish_upload(up, format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    assert_eq!(status, 200, "{body}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "TOP-SECRET");
    assert_eq!(mode(&target), 0o600);
    assert!(!tmp.exists());
}

#[test]
fn a_temporary_file_swapped_for_a_symlink_gets_no_owner_or_mode_through_it() {
    let svc = execd("up-swap");
    let victim = svc.dir.join("victim");
    write_victim(&victim, "root only");
    let home = svc.dir.join("home");
    std::fs::create_dir(&home).unwrap();
    let mut metadata = json!({ "path": home.join("up.bin"), "mode": 666 });
    if is_root() {
        metadata["owner"] = json!("65534");
    }
    let up = start_upload(&svc, format!("{}first", upload_head(&metadata)).as_bytes());
    // The workload swaps the temporary file for a symlink to the victim while the body streams.
    let tmp = wait_for_entry(&home, ".up.bin.upload-");
    std::fs::remove_file(&tmp).unwrap();
    std::os::unix::fs::symlink(&victim, &tmp).unwrap();
    let (status, body) = finish_upload(up, format!(" last\r\n--{BOUNDARY}--\r\n").as_bytes());
    assert_eq!(status, 200, "{body}");
    assert_eq!(mode_and_owner(&victim), (0o600, euid()), "the victim got the upload's mode or owner");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root only");
}

#[test]
fn permissions_and_new_directories_do_not_follow_a_symlink() {
    let svc = execd("perm-links");
    let victim_file = svc.dir.join("victim-file");
    write_victim(&victim_file, "secret");
    let victim_dir = svc.dir.join("victim-dir");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::set_permissions(&victim_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Symlinks a workload planted where the client expects its own file and directory.
    let link = svc.dir.join("out.txt");
    std::os::unix::fs::symlink(&victim_file, &link).unwrap();
    let newdir = svc.dir.join("newdir");
    std::os::unix::fs::symlink(&victim_dir, &newdir).unwrap();

    let (status, body) = request(&svc, "POST", "/files/permissions", &json!({ link.to_str().unwrap(): { "mode": 666 } }).to_string());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("symbolic link") && body.contains(link.to_str().unwrap()), "{body}");
    for dir in [newdir.display().to_string(), format!("{}/", newdir.display())] {
        let (status, body) = request(&svc, "POST", "/directories", &json!({ &dir: { "mode": 777 } }).to_string());
        assert_eq!(status, 400, "{dir}: {body}");
        assert!(body.contains("symbolic link"), "{dir}: {body}");
    }
    if is_root() {
        // An owner is given to the symlink itself.
        let (status, body) = request(&svc, "POST", "/files/permissions", &json!({ link.to_str().unwrap(): { "owner": "65534" } }).to_string());
        assert_eq!(status, 200, "{body}");
        assert_eq!(std::fs::symlink_metadata(&link).unwrap().uid(), 65534);
        let (status, body) = request(&svc, "POST", "/directories", &json!({ newdir.to_str().unwrap(): { "owner": "65534" } }).to_string());
        assert_eq!(status, 400, "{body}");
    }
    assert_eq!(mode_and_owner(&victim_file), (0o600, euid()), "the symlinked file changed");
    assert_eq!(mode_and_owner(&victim_dir), (0o700, euid()), "the symlinked directory changed");

    // Plain files and directories still get theirs.
    let plain = svc.dir.join("plain");
    std::fs::write(&plain, "").unwrap();
    assert_eq!(request(&svc, "POST", "/files/permissions", &json!({ plain.to_str().unwrap(): { "mode": 640 } }).to_string()).0, 200);
    assert_eq!(mode(&plain), 0o640);
    let made = svc.dir.join("made/deeper");
    assert_eq!(request(&svc, "POST", "/directories", &json!({ made.to_str().unwrap(): { "mode": 750 } }).to_string()).0, 200);
    assert_eq!(mode(&made), 0o750);
}

#[test]
fn line_downloads_stream_and_take_any_offset_and_limit() {
    let svc = execd("lines");
    let three = svc.dir.join("three.txt");
    std::fs::write(&three, "l1\nl2\nl3\n").unwrap();
    let (status, body) = get(&svc, &format!("/files/download?path={}&offset=1&limit=18446744073709551615", q(&three)));
    assert_eq!((status, body.as_str()), (200, "l2\nl3\n"));
    let (status, body) = get(&svc, &format!("/files/download?path={}&offset=1&limit=18446744073709551616", q(&three)));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("INVALID_REQUEST_BODY") && body.contains("'limit'"), "{body}");

    // One line of 256 MiB (a sparse file, no newline) streams without being held.
    let big = svc.dir.join("big.sparse");
    std::fs::File::create(&big).unwrap().set_len(256 << 20).unwrap();
    let before = memory_kib(&svc, "VmHWM");
    let mut s = TcpStream::connect(&svc.addr).unwrap();
    write!(s, "GET /files/download?path={}&offset=0&limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", q(&big)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let total = std::io::copy(&mut s, &mut std::io::sink()).unwrap();
    assert!(total > 256 << 20, "{total} bytes");
    let grew = memory_kib(&svc, "VmHWM").saturating_sub(before);
    assert!(grew < 16 << 10, "peak memory grew by {grew} KiB for one 256 MiB line");
}

#[test]
fn replace_swaps_in_a_rewritten_copy_with_the_owner_and_mode_and_bounded_memory() {
    let svc = execd("replace");
    let path = svc.dir.join("conf.txt");
    std::fs::write(&path, "user=old\nport=1\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    let owner = std::fs::metadata(&path).unwrap().uid();
    // A reader that opened the file before keeps reading the old text, whole.
    let mut reader = std::fs::File::open(&path).unwrap();
    let (status, body) = request(&svc, "POST", "/files/replace?verbose=true", &json!({ path.to_str().unwrap(): { "old": "old", "new": "new" } }).to_string());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""replacedCount":1"#), "{body}");
    let mut before = String::new();
    reader.read_to_string(&mut before).unwrap();
    assert_eq!(before, "user=old\nport=1\n", "the file was rewritten in place");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "user=new\nport=1\n");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.uid()), (0o640, owner));
    assert!(std::fs::read_dir(&*svc.dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().contains(".replace-")));

    // A file without a match, or not text, is left as it was: not even copied.
    let plain = svc.dir.join("plain.txt");
    std::fs::write(&plain, "nothing here").unwrap();
    let binary = svc.dir.join("binary.bin");
    std::fs::write(&binary, b"old\xff").unwrap();
    let inode = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let (plain_inode, binary_inode) = (inode(&plain), inode(&binary));
    let (status, body) = request(&svc, "POST", "/files/replace?verbose=true", &json!({ plain.to_str().unwrap(): { "old": "old", "new": "new" } }).to_string());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""replacedCount":0"#), "{body}");
    let (status, body) = request(&svc, "POST", "/files/replace", &json!({ binary.to_str().unwrap(): { "old": "old", "new": "new" } }).to_string());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("INVALID_FILE_CONTENT"), "{body}");
    assert_eq!((inode(&plain), inode(&binary)), (plain_inode, binary_inode));
    assert_eq!(std::fs::read(&binary).unwrap(), b"old\xff");

    // A symlink a workload put in place of the file is not written through.
    let victim = svc.dir.join("victim");
    std::fs::write(&victim, "secret").unwrap();
    let link = svc.dir.join("link.txt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let (status, body) = request(&svc, "POST", "/files/replace", &json!({ link.to_str().unwrap(): { "old": "secret", "new": "PWNED" } }).to_string());
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("symbolic link"), "{body}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");

    // 64 MiB of text streams through.
    let big = svc.dir.join("big.txt");
    std::fs::write(&big, "abc\n".repeat(16 << 20)).unwrap();
    let before = memory_kib(&svc, "VmHWM");
    let (status, body) = request(&svc, "POST", "/files/replace?verbose=true", &json!({ big.to_str().unwrap(): { "old": "b", "new": "XY" } }).to_string());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!(r#""replacedCount":{}"#, 16 << 20)), "{body}");
    let grew = memory_kib(&svc, "VmHWM").saturating_sub(before);
    assert!(grew < 16 << 10, "peak memory grew by {grew} KiB replacing in a 64 MiB file");
    let text = std::fs::read_to_string(&big).unwrap();
    assert_eq!((text.len(), &text[..10]), (80 << 20, "aXYc\naXYc\n"));
}

/// Sets the extended attribute `name` of `path`; false where the file system takes none.
fn set_xattr(path: &Path, name: &str, value: &[u8]) -> bool {
    let (path, name) = (std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap(), std::ffi::CString::new(name).unwrap());
    // SAFETY: setxattr with NUL-terminated strings and a buffer of the given length.
    unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) == 0 }
}

fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let (path, name) = (std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap(), std::ffi::CString::new(name).unwrap());
    let mut buf = vec![0u8; 256];
    // SAFETY: getxattr into a buffer of the given length.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

#[test]
fn replace_writes_in_place_a_file_with_other_links_or_extended_attributes() {
    let svc = execd("replace-identity");
    let inode = |p: &Path| std::fs::metadata(p).unwrap().ino();
    // Two names of one file: both see the new text, and they stay one file.
    let path = svc.dir.join("a.txt");
    let other = svc.dir.join("b.txt");
    std::fs::write(&path, "name=old\n".repeat(1000)).unwrap();
    std::fs::hard_link(&path, &other).unwrap();
    let (status, body) = request(&svc, "POST", "/files/replace?verbose=true", &json!({ path.to_str().unwrap(): { "old": "old", "new": "brand-new" } }).to_string());
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""replacedCount":1000"#), "{body}");
    assert_eq!(inode(&path), inode(&other));
    assert_eq!(std::fs::metadata(&path).unwrap().nlink(), 2);
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "name=brand-new\n".repeat(1000));
    // Shorter text is cut to its length.
    let (status, body) = request(&svc, "POST", "/files/replace", &json!({ other.to_str().unwrap(): { "old": "brand-new", "new": "x" } }).to_string());
    assert_eq!(status, 200, "{body}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "name=x\n".repeat(1000));
    assert!(std::fs::read_dir(&*svc.dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().contains(".replace-")));

    // A file with an extended attribute keeps it (and its inode).
    let tagged = svc.dir.join("tagged.txt");
    std::fs::write(&tagged, "v=old").unwrap();
    if !set_xattr(&tagged, "user.origin", b"upload") {
        return skip("replace_writes_in_place_a_file_with_other_links_or_extended_attributes", "the extended-attribute half: this file system takes no user attributes");
    }
    let before = inode(&tagged);
    let (status, body) = request(&svc, "POST", "/files/replace", &json!({ tagged.to_str().unwrap(): { "old": "old", "new": "new" } }).to_string());
    assert_eq!(status, 200, "{body}");
    assert_eq!(std::fs::read_to_string(&tagged).unwrap(), "v=new");
    assert_eq!((inode(&tagged), get_xattr(&tagged, "user.origin")), (before, Some(b"upload".to_vec())));
}

#[test]
fn client_mistakes_on_files_are_4xx_not_server_faults() {
    let svc = execd("mistakes");
    let file = svc.dir.join("f");
    std::fs::write(&file, "x").unwrap();
    let dir = svc.dir.join("d");
    std::fs::create_dir(&dir).unwrap();
    let looped = svc.dir.join("loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let long = svc.dir.join("n".repeat(300));
    let f = file.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let cases = [
        ("GET", format!("/files/download?path={}", q(&file.join("sub"))), String::new(), 400),
        ("GET", format!("/files/download?path={}", q(&looped)), String::new(), 400),
        ("GET", format!("/files/download?path={}", q(&long)), String::new(), 400),
        ("GET", format!("/files/info?path={}", q(&file.join("sub"))), String::new(), 400),
        ("POST", "/files/mv".into(), json!([{ "src": f, "dest": d }]).to_string(), 400),
        ("POST", "/files/mv".into(), json!([{ "src": d, "dest": format!("{d}/inside") }]).to_string(), 400),
        ("POST", "/directories".into(), json!({ format!("{f}/x"): {} }).to_string(), 400),
        ("POST", "/directories".into(), json!({ f: {} }).to_string(), 400),
        ("POST", "/files/permissions".into(), json!({ f: { "owner": "4294967295" } }).to_string(), 400),
        ("DELETE", format!("/files?path={}", q(&file.join("sub"))), String::new(), 400),
        ("DELETE", format!("/directories?path={}", q(&svc.dir.join("none"))), String::new(), 404),
    ];
    for (method, path, body, want) in cases {
        let (status, answer) = request(&svc, method, &path, &body);
        assert_eq!(status, want, "{method} {path} {body}: {answer}");
        assert!(answer.contains(r#""code":"#) && answer.contains(r#""message":"#), "{answer}");
    }
    let (status, answer) = finish_upload(start_upload(&svc, upload_head(&json!({ "path": format!("{d}/") })).as_bytes()), format!("x\r\n--{BOUNDARY}--\r\n").as_bytes());
    assert_eq!(status, 400, "{answer}");
    assert!(svc.dir.join("f").exists() && dir.is_dir());
}

#[test]
fn a_failed_move_names_its_destination_when_that_is_what_is_wrong() {
    let svc = execd("move-names");
    let file = svc.dir.join("f");
    std::fs::write(&file, "x").unwrap();
    let full = svc.dir.join("full");
    std::fs::create_dir_all(full.join("inside")).unwrap();
    let (f, d) = (file.to_str().unwrap(), full.to_str().unwrap());
    let (status, answer) = request(&svc, "POST", "/files/mv", &json!([{ "src": f, "dest": d }]).to_string());
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains(&format!("{f} -> {d}")), "{answer}");
    assert!(file.exists());
}
