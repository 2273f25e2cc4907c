//! The sum tools at the floors GNU's work at, beside them on the same
//! files, on both backends: the least limit on open descriptors
//! (`ulimit -n`) at which GNU's `sha256sum`, `md5sum`, `b2sum` and
//! Debian's `b3sum` hash a tree and check its list, and a limit on
//! processes (`ulimit -u`) that leaves no thread to start.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

/// The tools compared, and the programs they are compared with.
const TOOLS: [(&str, &str); 4] = [
    ("sha256sum", "/usr/bin/sha256sum"),
    ("md5sum", "/usr/bin/md5sum"),
    ("b2sum", "/usr/bin/b2sum"),
    ("b3sum", "/usr/bin/b3sum"),
];

/// The backends, as `BLOCKIO_BACKEND` names them.
const BACKENDS: [&str; 2] = ["auto", "threads"];

/// The files hashed: 300 small ones and one of 3 MiB (streamed, not read
/// whole, and hashed by BLAKE3 on several cores where threads can be
/// had), named in `dir`; links named after the tools, to blockio.
fn tree(dir: &Path) -> Vec<String> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let mut names = Vec::new();
    for i in 0..300 {
        let name = format!("f{i:03}");
        fs::write(dir.join(&name), format!("{i}\n")).unwrap();
        names.push(name);
    }
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(dir.join("big"), big).unwrap();
    names.push("big".to_string());
    for (tool, _) in TOOLS {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), dir.join(tool)).unwrap();
    }
    names
}

/// `prog args` in `dir` on `backend` for ours, with only the standard
/// streams open and `limit` set (soft and hard: a resource and its
/// limit), if given; as user `uid` if given.
fn run(
    dir: &Path,
    prog: &str,
    args: &[String],
    backend: &str,
    limit: Option<(libc::__rlimit_resource_t, u64)>,
    uid: Option<u32>,
) -> Output {
    let mut cmd = Command::new(prog);
    cmd.current_dir(dir)
        .args(args)
        .env("LC_ALL", "C")
        .env("BLOCKIO_BACKEND", backend);
    // SAFETY: close_range(2), setrlimit(2), setgroups(2), setgid(2) and
    // setuid(2) are async-signal-safe system calls on plain arguments;
    // the closure touches nothing else of the parent's.
    unsafe {
        cmd.pre_exec(move || {
            // close_range(3, ~0, CLOSE_RANGE_CLOEXEC): closed at the exec, so
            // the pipe `Command` reports a failed exec through still works;
            // no wrapper in the libc crate for every target, so the raw
            // system call.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            if let Some((resource, limit)) = limit {
                let lim = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(resource, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(uid) = uid {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The least `ulimit -n` (from 3) at which `reference args` succeeds (it
/// fails one below), with its output there.
fn reference_floor(dir: &Path, reference: &str, args: &[String]) -> (u64, Output) {
    let at = |n| {
        run(
            dir,
            reference,
            args,
            "auto",
            Some((libc::RLIMIT_NOFILE, n)),
            None,
        )
    };
    let floor = (3..=16)
        .find(|&n| at(n).status.success())
        .unwrap_or_else(|| panic!("{reference} {args:?} fails at every ulimit -n up to 16"));
    assert!(
        !at(floor - 1).status.success(),
        "{reference} at {}",
        floor - 1
    );
    (floor, at(floor))
}

/// Each tool hashes 301 files, and checks their list, at the least
/// `ulimit -n` GNU's (or Debian's `b3sum`) needs (4 and 5 with coreutils
/// 9.1), on both backends, printing what the reference prints: the files
/// open at once fit the descriptors left (with the defaults the workers'
/// groups would hold some 70), below a few dozen with no ring, down to
/// one at a time, standard output is no duplicate, and a file that still
/// cannot be opened is tried again alone, never reported "Too many open
/// files".
#[test]
fn a_tree_hashes_and_checks_at_the_descriptor_floor_beside_the_reference() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let names = tree(dir);
    for (tool, reference) in TOOLS {
        let (floor, want) = reference_floor(dir, reference, &names);
        assert!(floor <= 5, "{reference} needs ulimit -n {floor} to hash");
        let list = format!("{tool}.list");
        fs::write(dir.join(&list), &want.stdout).unwrap();
        let check = vec!["-c".to_string(), list];
        let (check_floor, want_check) = reference_floor(dir, reference, &check);
        let link = format!("./{tool}");
        for backend in BACKENDS {
            for (args, floor, want) in [(&names, floor, &want), (&check, check_floor, &want_check)]
            {
                let o = run(
                    dir,
                    &link,
                    args,
                    backend,
                    Some((libc::RLIMIT_NOFILE, floor)),
                    None,
                );
                assert_eq!(
                    (o.status.code(), stderr(&o).as_str()),
                    (Some(0), ""),
                    "{tool} {} on {backend} at ulimit -n {floor}",
                    args[0]
                );
                assert_eq!(
                    o.stdout, want.stdout,
                    "{tool} {} on {backend} at ulimit -n {floor}: ours differs from {reference}",
                    args[0]
                );
            }
        }
    }
}

/// A user no process runs as: its count of processes, which `ulimit -u`
/// limits, is this test's alone.
const LONE_UID: u32 = 61_061;

/// With no thread to be had (`ulimit -u` 1 to 3 for a user of its own),
/// each tool hashes and checks on the calling thread what the reference
/// hashes unlimited, on each backend, io_uring required too: a
/// thread-pool engine that cannot start a thread, rayon's pool for BLAKE3
/// that cannot start, and io_uring cancelling the reads it has no worker
/// for each leave the work to the calling thread (no "Resource
/// temporarily unavailable", no panic, no "FAILED"). Needs root, to
/// become that user.
#[test]
fn the_tools_work_with_no_thread_to_be_had() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test runs the tools as another user and needs root"
    );
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let names = vec!["f000".to_string(), "big".to_string()];
    tree(dir);
    for (tool, reference) in TOOLS {
        let want = run(dir, reference, &names, "auto", None, None);
        assert!(want.status.success(), "{reference}: {}", stderr(&want));
        let list = format!("{tool}.list");
        fs::write(dir.join(&list), &want.stdout).unwrap();
        let check = vec!["-c".to_string(), list];
        let want_check = run(dir, reference, &check, "auto", None, None);
        assert!(want_check.status.success(), "{reference} -c");
        let link = format!("./{tool}");
        for backend in ["auto", "threads", "uring"] {
            for n in 1..=3 {
                for (args, want) in [(&names, &want), (&check, &want_check)] {
                    let limit = Some((libc::RLIMIT_NPROC, n));
                    let o = run(dir, &link, args, backend, limit, Some(LONE_UID));
                    let what = format!("{tool} {} on {backend} at ulimit -u {n}", args[0]);
                    assert_eq!(
                        (o.status.code(), stderr(&o).as_str()),
                        (Some(0), ""),
                        "{what}"
                    );
                    assert_eq!(
                        o.stdout, want.stdout,
                        "{what}: ours differs from {reference}"
                    );
                }
            }
        }
    }
}

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>` (not in the libc crate).
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
