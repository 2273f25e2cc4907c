//! `blockio cp`: byte and metadata equality with the source, GNU `cp -r`
//! semantics, and failures reported with their paths and exit status 1.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cp(dir: &Path, args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(dir)
        .arg("cp")
        .args(args)
        .output()
        .unwrap()
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[path = "support/bytes.rs"]
mod data;
use data::bytes;

/// A tree with awkward names, an empty file and directory, a file spanning
/// many blocks, symbolic links (one dangling), a FIFO and odd modes.
fn tree(root: &Path) {
    let t = root.join("src");
    fs::create_dir_all(t.join("a/b/c")).unwrap();
    fs::create_dir_all(t.join("empty dir")).unwrap();
    fs::write(t.join("a/empty"), b"").unwrap();
    fs::write(t.join("a/small"), b"hello\n").unwrap();
    fs::write(t.join("a/with space"), bytes(5000, 1)).unwrap();
    fs::write(t.join(OsStr::from_bytes(b"a/new\nline")), bytes(10, 2)).unwrap();
    fs::write(t.join(OsStr::from_bytes(b"a/bad\xffutf8")), bytes(77, 3)).unwrap();
    // 5 MiB + a bit: many 1 MiB blocks and a short last one.
    fs::write(t.join("a/b/c/big"), bytes((5 << 20) + 123, 4)).unwrap();
    for i in 0..100 {
        fs::write(t.join(format!("a/b/f{i}")), bytes(i * 37, i as u64)).unwrap();
    }
    std::os::unix::fs::symlink("../small", t.join("a/b/link")).unwrap();
    std::os::unix::fs::symlink("nowhere/at all", t.join("dangling")).unwrap();
    fs::set_permissions(t.join("a/small"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::set_permissions(t.join("a/b/f1"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(t.join("a/b/c"), fs::Permissions::from_mode(0o750)).unwrap();
    // Read-only: made writable while it is filled, its mode set at the end.
    fs::create_dir(t.join("a/ro")).unwrap();
    fs::write(t.join("a/ro/inside"), bytes(300, 5)).unwrap();
    fs::set_permissions(t.join("a/ro"), fs::Permissions::from_mode(0o555)).unwrap();
    let fifo = std::ffi::CString::new(t.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path, alive for the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    // Old times, to see that -p keeps them and a plain copy does not.
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    for p in ["a/small", "a/b/c/big"] {
        let f = fs::File::options().write(true).open(t.join(p)).unwrap();
        f.set_times(fs::FileTimes::new().set_modified(old).set_accessed(old))
            .unwrap();
    }
}

/// Every path under `root`, relative, sorted.
fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Same names, kinds, bytes, link targets and permission bits; with
/// `times`, the same modification times for files.
fn assert_same(src: &Path, dst: &Path, times: bool) {
    let (a, b) = (listing(src), listing(dst));
    assert_eq!(a, b, "the same paths");
    for rel in &a {
        let (s, d) = (src.join(rel), dst.join(rel));
        let (ms, md) = (
            fs::symlink_metadata(&s).unwrap(),
            fs::symlink_metadata(&d).unwrap(),
        );
        assert_eq!(
            ms.file_type(),
            md.file_type(),
            "{}: same kind",
            rel.display()
        );
        if ms.file_type().is_symlink() {
            assert_eq!(fs::read_link(&s).unwrap(), fs::read_link(&d).unwrap());
            continue;
        }
        assert_eq!(
            ms.mode() & 0o7777,
            md.mode() & 0o7777,
            "{}: mode",
            rel.display()
        );
        if ms.is_file() {
            assert_eq!(
                fs::read(&s).unwrap(),
                fs::read(&d).unwrap(),
                "{}",
                rel.display()
            );
            if times {
                assert_eq!(ms.mtime(), md.mtime(), "{}: mtime", rel.display());
                assert_eq!(
                    ms.mtime_nsec(),
                    md.mtime_nsec(),
                    "{}: mtime ns",
                    rel.display()
                );
            }
        }
        if times && ms.is_dir() {
            assert_eq!(ms.mtime(), md.mtime(), "{}: dir mtime", rel.display());
        }
    }
}

#[test]
fn copies_a_tree_byte_for_byte_with_modes_links_and_odd_names() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let o = cp(dir.path(), &[os("-r"), os("src"), os("dst")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same(&dir.path().join("src"), &dir.path().join("dst"), false);
    // Without -p, times are new.
    let m = fs::metadata(dir.path().join("dst/a/small")).unwrap();
    assert_ne!(m.mtime(), 1_000_000_000);
}

#[test]
fn preserve_and_archive_keep_times() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    for (flag, out) in [("-p", "dst-p"), ("-a", "dst-a")] {
        let o = cp(dir.path(), &[os(flag), os("-r"), os("src"), os(out)]);
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
        assert_same(&dir.path().join("src"), &dir.path().join(out), true);
    }
}

#[test]
fn into_an_existing_directory_and_several_sources() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let d = dir.path();
    fs::create_dir(d.join("out")).unwrap();
    // cp -r src out (out exists): out/src.
    let o = cp(d, &[os("-r"), os("src"), os("out")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same(&d.join("src"), &d.join("out/src"), false);
    // Several sources into a directory; a file source keeps its name.
    let o = cp(d, &[os("-r"), os("src/a/small"), os("src/a/b"), os("out")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(d.join("out/small")).unwrap(), b"hello\n");
    assert_same(&d.join("src/a/b"), &d.join("out/b"), false);
    // Several sources and a destination that is not a directory.
    let o = cp(d, &[os("src/a/small"), os("src/a/empty"), os("nodir")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("target 'nodir': No such file or directory"),
        "{}",
        stderr(&o)
    );
    assert!(!d.join("nodir").exists());
}

#[test]
fn overwrite_and_no_clobber_follow_cp() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("new"), b"new contents").unwrap();
    fs::write(d.join("old"), b"old contents that are longer").unwrap();
    fs::set_permissions(d.join("old"), fs::Permissions::from_mode(0o600)).unwrap();
    // -n: the existing file is left alone, success.
    let o = cp(d, &[os("-n"), os("new"), os("old")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fs::read(d.join("old")).unwrap(),
        b"old contents that are longer"
    );
    // Default: overwritten in place (truncated), its mode kept.
    let o = cp(d, &[os("new"), os("old")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(d.join("old")).unwrap(), b"new contents");
    assert_eq!(fs::metadata(d.join("old")).unwrap().mode() & 0o777, 0o600);
    // A directory is never replaced by a file, nor a file by a directory.
    fs::create_dir_all(d.join("t/x")).unwrap();
    fs::create_dir(d.join("x")).unwrap();
    fs::write(d.join("t/f"), b"file").unwrap();
    fs::write(d.join("f"), b"f").unwrap();
    let o = cp(d, &[os("f"), os("t/x")]);
    // cp f t/x (t/x is a directory): makes t/x/f.
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cp(d, &[os("-r"), os("x"), os("t/f")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot overwrite non-directory 't/f' with directory 'x'"),
        "{}",
        stderr(&o)
    );
    // Same file.
    let o = cp(d, &[os("new"), os("new")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("are the same file"), "{}", stderr(&o));
}

#[test]
fn copying_a_directory_into_itself_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let o = cp(dir.path(), &[os("-r"), os("src"), os("src/a/inside")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot copy a directory, 'src', into itself, 'src/a/inside'"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("src/a/inside").exists());
    // Through a link to the source, the same refusal, and nothing made.
    std::os::unix::fs::symlink("src", dir.path().join("t")).unwrap();
    let o = cp(dir.path(), &[os("-r"), os("src"), os("t")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot copy a directory, 'src', into itself, 't/src'"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("src/src").exists());
}

#[test]
fn a_missing_source_is_reported_and_the_rest_copied() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    fs::create_dir(dir.path().join("out")).unwrap();
    let o = cp(dir.path(), &[os("-r"), os("nope"), os("src"), os("out")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot stat 'nope': No such file or directory"),
        "{}",
        stderr(&o)
    );
    assert_same(&dir.path().join("src"), &dir.path().join("out/src"), false);
}

#[test]
fn sparse_files_keep_their_holes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f = fs::File::create(d.join("sparse")).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"start", 0).unwrap();
    f.write_all_at(b"middle", 40 << 20).unwrap();
    f.set_len(100 << 20).unwrap();
    drop(f);
    let src_blocks = fs::metadata(d.join("sparse")).unwrap().blocks();
    assert!(
        src_blocks * 512 < 1 << 20,
        "the test file system keeps holes"
    );
    let o = cp(d, &[os("sparse"), os("copy")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fs::read(d.join("sparse")).unwrap(),
        fs::read(d.join("copy")).unwrap()
    );
    let m = fs::metadata(d.join("copy")).unwrap();
    assert_eq!(m.len(), 100 << 20);
    assert!(m.blocks() * 512 < 1 << 20, "copy has {} blocks", m.blocks());
}

#[test]
fn json_summary_counts_what_was_copied() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let o = cp(
        dir.path(),
        &[os("--json"), os("--fsync"), os("-r"), os("src"), os("dst")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"], 107);
    assert_eq!(v["symlinks"], 2);
    assert_eq!(v["specials"], 1);
    assert_eq!(v["dirs"], 6, "src, a, a/b, a/b/c, a/ro, empty dir");
    assert_eq!(v["errors"], 0);
    assert!(v["bytes"].as_u64().unwrap() > 5 << 20);
    assert_same(&dir.path().join("src"), &dir.path().join("dst"), false);
}

#[test]
fn bad_flags_fail_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let o = cp(
        dir.path(),
        &[os("--block-size"), os("12"), os("a"), os("b")],
    );
    // Usage errors exit with 1, as GNU cp's do.
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--block-size"), "{}", stderr(&o));
    let o = cp(dir.path(), &[os("only-one")]);
    assert_eq!(o.status.code(), Some(1));
}

/// Runs the copy as an unprivileged user (root reads every file), so that
/// a mode-000 file really is unreadable.
#[test]
fn an_unreadable_file_is_reported_and_the_rest_copied() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    fs::create_dir_all(d.join("src/sub")).unwrap();
    fs::write(d.join("src/sub/ok"), b"fine").unwrap();
    fs::write(d.join("src/sub/secret"), b"no").unwrap();
    fs::write(d.join("src/z"), b"last").unwrap();
    fs::set_permissions(d.join("src/sub/secret"), fs::Permissions::from_mode(0o000)).unwrap();
    for p in ["src", "src/sub"] {
        fs::set_permissions(d.join(p), fs::Permissions::from_mode(0o777)).unwrap();
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let mut c = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_blockio"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_blockio"))
    };
    let o = c
        .current_dir(d)
        .args(["cp", "-r", "src", "dst"])
        .output()
        .expect("setpriv (util-linux) runs the copy as nobody");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot open 'src/sub/secret' for reading: Permission denied"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read(d.join("dst/sub/ok")).unwrap(), b"fine");
    assert_eq!(fs::read(d.join("dst/z")).unwrap(), b"last");
    assert!(
        !d.join("dst/sub/secret").exists(),
        "no empty file passed off as a copy"
    );
}

/// A destination file system that fills up: a clear error naming the file,
/// exit 1, and no partial file left behind looking complete. Needs a small
/// file system: a size-limited tmpfs, mounted in a private mount namespace
/// (root), so nothing outlives the test.
#[test]
fn a_full_destination_fails_clearly_and_leaves_no_partial_file() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test mounts a 1 MiB tmpfs and needs root (CI runs as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir(d.join("src")).unwrap();
    fs::write(d.join("src/fits"), bytes(100 << 10, 1)).unwrap();
    fs::write(d.join("src/too-big"), bytes(3 << 20, 2)).unwrap();
    fs::create_dir(d.join("small")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs '{0}/small' && '{1}' cp -r '{0}/src' '{0}/small/dst'; rc=$?; ls -la '{0}/small/dst' >&2; exit $rc",
        d.display(),
        env!("CARGO_BIN_EXE_blockio"),
    );
    let o = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux)");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("too-big"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("incomplete copy"), "{err}");
    assert!(
        !err.contains(" too-big\n"),
        "the partial file is gone: {err}"
    );
    assert!(
        err.contains(" fits\n"),
        "the file that fits was copied: {err}"
    );
}

/// Runs `blockio cp ARGS` in `dir` with its address space limited to
/// `kib` KiB (`ulimit -v`); whether it succeeded, and its messages.
fn cp_within(dir: &Path, kib: u64, args: &str) -> (Option<i32>, String) {
    let o = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -v {kib} && exec \"$0\" cp {args}"),
            env!("CARGO_BIN_EXE_blockio"),
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    (o.status.code(), stderr(&o))
}

/// Under `ulimit -v`, the worker threads cost little address space
/// beyond what one thread's copy takes: they share one allocation arena
/// instead of reserving 64 MiB each, a thread is started only with room
/// to spare, and a thread that cannot be had leaves the work to fewer.
/// Before, three threads aborted on a failed allocation within 4 MB of
/// what one thread's copy needed (part of coreutils'
/// `tests/cp/link-heap.sh`).
#[test]
fn more_threads_fit_within_an_address_space_limit_one_thread_fits() {
    let dir = tree_dir();
    let d = dir.path();
    let a = d.join("e").join("a");
    fs::create_dir_all(&a).unwrap();
    for i in 0..1000 {
        fs::write(a.join(format!("{i:031}")), b"").unwrap();
    }
    for i in 0..500 {
        fs::create_dir(a.join(format!("d{i:030}"))).unwrap();
    }
    // The least address space (in steps of 1 MiB) in which one thread's
    // `cp -al` of the tree succeeds, as coreutils' get_min_ulimit_v_ finds it.
    let mut one = 4096;
    loop {
        let _ = fs::remove_dir_all(d.join("g"));
        if cp_within(d, one, "--threads=1 -al e g").0 == Some(0) {
            break;
        }
        one += 1024;
        assert!(one < 1 << 20, "cp -al e g fails even under 1 GiB");
    }
    let (code, err) = cp_within(d, one + 4000, "--threads=3 -al e g3");
    assert_eq!(code, Some(0), "under ulimit -v {}: {err}", one + 4000);
    assert_eq!(fs::read_dir(d.join("g3").join("a")).unwrap().count(), 1500);
}

/// The least address space, in steps of 1000 KiB, in which `cp ARGS`
/// succeeds in `dir`, as coreutils' `get_min_ulimit_v_` finds it; `clean`
/// is removed before each try.
fn least_address_space(dir: &Path, args: &str, clean: &Path) -> u64 {
    let mut kib = 4000;
    loop {
        let _ = fs::remove_dir_all(clean);
        let _ = fs::remove_file(clean);
        if cp_within(dir, kib, args).0 == Some(0) {
            return kib;
        }
        kib += 1000;
        assert!(kib < 1 << 20, "cp {args} fails even under 1 GiB");
    }
}

/// A copy that fits under a limit on address space (`ulimit -v`) fits
/// under every higher one, on either backend. Before, on the thread-pool
/// backend, a limit too low for the probe thread's small stack made the
/// copy run its batches itself and succeed, while a slightly higher one
/// let the probe start but not the pool's worker (2 MiB of stack):
/// "memory exhausted", exit 1, over a band of some 2 MB. Where that band
/// fell depended on the size of the build.
#[test]
fn a_copy_that_fits_under_an_address_space_limit_fits_under_every_higher_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("f"), b"x").unwrap();
    for backend in ["threads", "auto"] {
        let mut least = None;
        for kib in (4000..64_000).step_by(125) {
            let _ = fs::remove_file(d.join("f2"));
            let o = Command::new("sh")
                .args([
                    "-c",
                    &format!("ulimit -v {kib} && exec \"$0\" cp -a f f2"),
                    env!("CARGO_BIN_EXE_blockio"),
                ])
                .env("BLOCKIO_BACKEND", backend)
                .current_dir(d)
                .output()
                .unwrap();
            match (least, o.status.code()) {
                (None, Some(0)) => least = Some(kib),
                (Some(l), code) => {
                    assert_eq!(
                        code,
                        Some(0),
                        "{backend}: fits under ulimit -v {l} but not {kib}: {}",
                        stderr(&o)
                    );
                    assert_eq!(fs::read(d.join("f2")).unwrap(), b"x");
                    if kib >= l + 4000 {
                        break;
                    }
                }
                (None, _) => {}
            }
        }
        assert!(least.is_some(), "{backend}: cp -a f f2 fails under 64 MB");
    }
}

/// Under a limit on address space that leaves no room for a second
/// thread, the thread-pool backend starts no worker: the copy runs its
/// batches itself, and a worker's 2 MiB stack stays room for the copy's
/// own work. Seen while the copy waits on a FIFO's writer.
#[test]
fn a_copy_fitted_to_one_thread_starts_no_pool_worker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = std::ffi::CString::new(d.join("p").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path, alive for the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut child = Command::new("sh")
        .args([
            "-c",
            "ulimit -v 40000 && exec \"$0\" cp --copy-contents p out",
            env!("CARGO_BIN_EXE_blockio"),
        ])
        .env("BLOCKIO_BACKEND", "threads")
        .current_dir(d)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Opens once the copy has opened the FIFO, its engine built; a copy
    // that ends first fails the test rather than leaving it waiting.
    let mut w = loop {
        use std::os::unix::fs::OpenOptionsExt;
        match fs::File::options()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(d.join("p"))
        {
            Ok(w) => break w,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if child.try_wait().unwrap().is_some() {
                    let o = child.wait_with_output().unwrap();
                    panic!("cp ended before reading: {}", stderr(&o));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let threads: Vec<String> = fs::read_dir(format!("/proc/{}/task", child.id()))
        .unwrap()
        .map(|t| fs::read_to_string(t.unwrap().path().join("comm")).unwrap())
        .collect();
    std::io::Write::write_all(&mut w, b"through").unwrap();
    drop(w);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(d.join("out")).unwrap(), b"through");
    assert_eq!(threads.len(), 1, "threads: {threads:?}");
}

/// Under a limit on address space (`ulimit -v`) a large file is copied
/// through buffers fitted to the room left: from another file system
/// (where the data passes through the copy's memory), 64 MiB fit within
/// 1 MB of what a one-byte file's copy takes. Before, each worker's 16 MiB
/// wave made it "memory exhausted" under 16 MB more, and left an empty
/// copy behind (GNU's `cp` reads through a 128 KiB buffer).
#[test]
fn a_large_file_from_another_file_system_fits_within_1_mb_of_a_small_ones_copy() {
    let shm = tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a tmpfs");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_ne!(
        fs::metadata(shm.path()).unwrap().dev(),
        fs::metadata(d).unwrap().dev(),
        "the test needs /dev/shm on another file system than the temporary directory"
    );
    let (one, big) = (shm.path().join("one"), shm.path().join("big"));
    fs::write(&one, b"x").unwrap();
    let data = bytes(64 << 20, 11);
    fs::write(&big, &data).unwrap();
    let least = least_address_space(d, &format!("{} o", one.display()), &d.join("o"));
    let kib = least + 1000;
    let (code, err) = cp_within(d, kib, &format!("{} big", big.display()));
    assert_eq!(code, Some(0), "under ulimit -v {kib}: {err}");
    assert!(fs::read(d.join("big")).unwrap() == data, "the copy differs");
}

/// Out of memory at any point, even at the first allocation of the
/// process, before `cp` has read its arguments, the message names
/// `blockio cp`, as documented. Before, the first allocations failed as
/// "blockio: memory exhausted".
#[test]
fn out_of_memory_names_blockio_cp_from_the_first_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("f"), b"").unwrap();
    let mut exhausted = 0;
    for kib in (4000..64_000).step_by(25) {
        let _ = fs::remove_file(d.join("f2"));
        let (code, err) = cp_within(d, kib, "-al f f2");
        match code {
            Some(0) => break,
            Some(1) => {
                assert_eq!(
                    err, "blockio cp: memory exhausted\n",
                    "under ulimit -v {kib}"
                );
                exhausted += 1;
            }
            // Below the least the loader needs to map the binary: the
            // kernel's or the loader's failure, before any of the program.
            _ => {}
        }
    }
    assert!(exhausted > 0, "no limit made the copy run out of memory");
}

/// `cp -a` and `cp -r` of one directory of 40,000 empty files, within
/// 4 MB more address space than the copy of one empty file takes (GNU's
/// `cp -a` copies it under `ulimit -v 8000`). The worker listing a
/// directory copies waiting groups of files itself while more than two
/// per worker wait. Before, every file of the directory was queued (its
/// names and a `statx` each) before any was copied: the copy needed some
/// 14 MB more than `-al`'s and aborted with "memory allocation of N bytes
/// failed" under `ulimit -v 20000`, leaving part of the tree.
#[test]
fn cp_a_and_r_of_a_directory_of_40000_files_fit_within_4_mb_of_one_files_copy() {
    let dir = tree_dir();
    let d = dir.path();
    let src = forty_thousand_empty_files(d);
    fs::write(d.join("f"), b"").unwrap();
    let mut want: Vec<_> = fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    want.sort();
    for opt in ["-a", "-r"] {
        let one = least_address_space(d, &format!("{opt} f f2"), &d.join("f2"));
        let (code, err) = cp_within(d, one + 4000, &format!("{opt} e copy{opt}"));
        assert_eq!(
            code,
            Some(0),
            "cp {opt} under ulimit -v {}: {err}",
            one + 4000
        );
        assert_eq!(err, "");
        let mut names: Vec<_> = fs::read_dir(d.join(format!("copy{opt}")))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, want, "cp {opt}");
    }
}

/// A temporary directory on `/dev/shm` (a tmpfs) for the trees that the
/// tests here copy again and again under `ulimit -v` (1,500 to 40,000
/// entries). On an ext4 disk shared with other work, making, copying and
/// removing such a tree took up to a minute a copy (GNU's `cp -a` of
/// 40,000 empty files: 50 s, 2 s on tmpfs), and a floor is found by
/// copying it a dozen times. The address space the copies need hardly
/// differs there: GNU's `cp -a` floor for 40,000 files is 6,311 KiB on
/// both, blockio's (debug build) 10,504 KiB on tmpfs and between 10,505
/// and 10,600 on ext4.
fn tree_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a tmpfs, for the cp tests' large trees")
}

/// `d/e`, a directory of 40,000 empty files named `f00001` on.
fn forty_thousand_empty_files(d: &Path) -> PathBuf {
    let src = d.join("e");
    fs::create_dir(&src).unwrap();
    for i in 1..=40_000 {
        fs::write(src.join(format!("f{i:05}")), b"").unwrap();
    }
    src
}

/// `d/e`, a directory of `n` empty files with 240-byte names: names that
/// alone take more address space than the tests below leave.
fn long_named_files(d: &Path, n: usize) -> PathBuf {
    let src = d.join("e");
    fs::create_dir(&src).unwrap();
    let long = "n".repeat(235);
    for i in 0..n {
        fs::write(src.join(format!("{long}{i:05}")), b"").unwrap();
    }
    src
}

/// A copy that runs out of memory ends as GNU's `cp` does (its
/// `xalloc_die`): "cp: memory exhausted" and exit status 1. Here the
/// names of one directory (30,000 of 240 bytes) alone take more than the
/// address space left. Before, Rust's allocation-failure handler printed
/// "memory allocation of N bytes failed" and aborted the process
/// (SIGABRT, exit status 134).
#[test]
fn cp_out_of_memory_says_memory_exhausted_and_exits_1() {
    let dir = tree_dir();
    let d = dir.path();
    long_named_files(d, 30_000);
    fs::write(d.join("f"), b"").unwrap();
    let one = least_address_space(d, "-r f f2", &d.join("f2"));
    let (code, err) = cp_within(d, one + 2000, "-r e copy");
    assert_eq!(code, Some(1), "under ulimit -v {}: {err}", one + 2000);
    assert_eq!(err, "blockio cp: memory exhausted\n");
}

/// coreutils' `tests/cp/link-heap.sh`: `cp -al` of a tree of 40,000
/// entries, two directories of 20,000 (10,000 files and 10,000
/// subdirectories, the second's files hard links of the first's), within
/// 4 MB more address space than the copy of one empty file takes. A
/// directory's listing keeps its names only (a `statx` and an entry for
/// a few hundred at a time), a subdirectory waiting to be walked is its
/// parent and name, and an empty one is finished when listed. Before,
/// each listed entry kept its whole `statx` and both names, every
/// directory its final attributes until the end, and the copy needed
/// some 30 MB more than one file's.
#[test]
fn cp_al_of_a_directory_of_20000_entries_fits_within_4_mb_of_one_files_copy() {
    let dir = tree_dir();
    let d = dir.path();
    let (a, b) = (d.join("e").join("a"), d.join("e").join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    for i in 1..=10_000 {
        let name = format!("{i:031}");
        fs::write(a.join(&name), b"").unwrap();
        fs::hard_link(a.join(&name), b.join(&name)).unwrap();
        let sub = format!("d{i:030}");
        fs::create_dir(a.join(&sub)).unwrap();
        fs::create_dir(b.join(&sub)).unwrap();
    }
    fs::write(d.join("f"), b"").unwrap();
    let one = least_address_space(d, "-al f f2", &d.join("f2"));
    let (code, err) = cp_within(d, one + 4000, "-al e copy");
    assert_eq!(code, Some(0), "under ulimit -v {}: {err}", one + 4000);
    assert_eq!(err, "");
    for (from, to) in [(&a, d.join("copy/a")), (&b, d.join("copy/b"))] {
        let mut names: Vec<_> = fs::read_dir(&to)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names.len(), 20_000, "{}", to.display());
        for n in names {
            let (s, c) = (
                fs::symlink_metadata(from.join(&n)).unwrap(),
                fs::symlink_metadata(to.join(&n)).unwrap(),
            );
            if s.is_dir() {
                assert!(c.is_dir(), "{}", to.join(&n).display());
                assert_eq!(fs::read_dir(to.join(&n)).unwrap().count(), 0);
            } else {
                assert_eq!(c.ino(), s.ino(), "{} is a hard link", to.join(&n).display());
            }
        }
    }
}

/// Runs `program ARGS` (a shell word list) in `dir` with its address
/// space limited to `kib` KiB; whether it succeeded.
fn succeeds_within(program: &str, dir: &Path, kib: u64, args: &str) -> bool {
    Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -v {kib} && exec \"$0\" {args} >/dev/null 2>&1"),
            program,
        ])
        .current_dir(dir)
        .status()
        .unwrap()
        .success()
}

/// The least address space, to 4 KiB, in which `program ARGS` succeeds
/// in `dir`, found by bisection between 1,024 KiB (too little to start a
/// program) and `high` (in which it must succeed); `clean` is removed
/// before each try.
fn floor_by_bisection(program: &str, dir: &Path, args: &str, clean: &Path, mut high: u64) -> u64 {
    let mut low = 1024;
    assert!(
        succeeds_within(program, dir, high, args),
        "{program} {args} fails under ulimit -v {high}"
    );
    while high - low > 4 {
        let mid = (low + high) / 2;
        let _ = fs::remove_dir_all(clean);
        if succeeds_within(program, dir, mid, args) {
            high = mid;
        } else {
            low = mid;
        }
    }
    let _ = fs::remove_dir_all(clean);
    high
}

/// GNU `cp ARGS`'s floor in `dir` (see [`floor_by_bisection`]). The
/// floor an earlier run found (kept in the build's temporary directory)
/// is taken only if it still is one, GNU failing 4 KiB below it and
/// succeeding at it: two runs of GNU's copy instead of a dozen, and no
/// stale figure.
fn gnu_floor(dir: &Path, args: &str, clean: &Path) -> u64 {
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gnu-cp-floor {args}"));
    let is_floor = |kib: u64| {
        let _ = fs::remove_dir_all(clean);
        let below = succeeds_within("/usr/bin/cp", dir, kib - 4, args);
        let _ = fs::remove_dir_all(clean);
        let at = succeeds_within("/usr/bin/cp", dir, kib, args);
        let _ = fs::remove_dir_all(clean);
        !below && at
    };
    let earlier = fs::read_to_string(&kept)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if let Some(kib) = earlier.filter(|&k| k > 4 && is_floor(k)) {
        return kib;
    }
    let kib = floor_by_bisection("/usr/bin/cp", dir, args, clean, 16_384);
    fs::write(&kept, kib.to_string()).unwrap();
    kib
}

/// The image of the release build of `blockio` when this was measured:
/// what the copy below may map of its own executable within GNU's floor.
/// A debug build maps more (its code unoptimised); that excess alone is
/// added to GNU's floor. (A release build that grows past this must fit
/// in GNU's floor with the rest taking less.)
const RELEASE_IMAGE_KIB: u64 = 2_384;

/// What a debug build may take beyond GNU's floor besides its larger
/// image: its unoptimised code also uses more heap and stack than the
/// release build, whose own floor `docs/tools.md` gives beside GNU's
/// (measured there with the release binary, not by this test).
const DEBUG_BUILD_ALLOWANCE_KIB: u64 = 2_048;

/// `cp -a` of one directory of 40,000 empty files succeeds under the
/// least `ulimit -v` in which GNU's `cp -a` copies it, measured here by
/// bisection: the copy starts small (no maths library mapped for a
/// progress line; threads, ring and buffers fitted to the room left)
/// and grows with the tree less than GNU's does. A debug build's larger
/// executable image, and [`DEBUG_BUILD_ALLOWANCE_KIB`] for its
/// unoptimised code, are allowed beyond GNU's floor, and stated in the
/// failure.
#[test]
fn cp_a_of_40000_empty_files_fits_where_gnu_cp_a_does() {
    let dir = tree_dir();
    let d = dir.path();
    forty_thousand_empty_files(d);
    let gnu = gnu_floor(d, "-a e c", &d.join("c"));
    let ours = env!("CARGO_BIN_EXE_blockio");
    let excess = common::executable_image_kib(ours).saturating_sub(RELEASE_IMAGE_KIB);
    let limit = gnu + excess + DEBUG_BUILD_ALLOWANCE_KIB;
    let (code, err) = cp_within(d, limit, "-a e c");
    assert_eq!(
        (code, err.as_str()),
        (Some(0), ""),
        "blockio cp -a of 40,000 files under ulimit -v {limit} (GNU's floor {gnu} KiB, plus \
         {excess} KiB of executable image beyond the release build's, plus the debug build's \
         {DEBUG_BUILD_ALLOWANCE_KIB} KiB)"
    );
    assert_eq!(fs::read_dir(d.join("c")).unwrap().count(), 40_000);
}

/// `cp -a`, `cp -r` and `cp -al` of one directory of 36,000 entries with
/// long names under `ulimit -v 20000`: the names alone take more than
/// that, and both GNU's `cp` and blockio's stop the same way, "memory
/// exhausted" and exit status 1, never an abort, with nothing of the
/// directory copied.
#[test]
fn a_directory_too_large_for_the_address_space_ends_as_gnu_cp_ends() {
    let dir = tree_dir();
    let d = dir.path();
    long_named_files(d, 36_000);
    for opt in ["-a", "-r", "-al"] {
        let gnu = Command::new("sh")
            .args([
                "-c",
                &format!("ulimit -v 20000 && exec cp {opt} e gnu{opt}"),
            ])
            .current_dir(d)
            .output()
            .unwrap();
        assert_eq!(
            (gnu.status.code(), stderr(&gnu).as_str()),
            (Some(1), "cp: memory exhausted\n"),
            "GNU cp {opt}"
        );
        let (code, err) = cp_within(d, 20_000, &format!("{opt} e ours{opt}"));
        assert_eq!(
            (code, err.as_str()),
            (Some(1), "blockio cp: memory exhausted\n"),
            "blockio cp {opt}"
        );
        for side in ["gnu", "ours"] {
            let copied = fs::read_dir(d.join(format!("{side}{opt}"))).map_or(0, |r| r.count());
            assert_eq!(copied, 0, "{side} cp {opt}");
        }
    }
}
