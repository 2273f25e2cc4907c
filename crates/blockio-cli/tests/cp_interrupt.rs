//! `blockio cp` interrupted by a signal while it copies: every file left
//! at the destination is a complete copy (or, with `-b`, the file that was
//! there before), and the process ends by the signal, as GNU's does. The
//! assertions hold wherever the signal lands; the signal is sent once the
//! first destination file exists, while most of the tree is still to come.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const FILES: usize = 120;
const SIZE: usize = 512 << 10;

/// `FILES` files of distinct bytes in `dir/s` (with `-a`'s hard links:
/// every file also under a second name).
fn tree(dir: &Path, hard_links: bool) {
    let s = dir.join("s");
    fs::create_dir(&s).unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..FILES {
        let data: Vec<u8> = (0..SIZE / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        fs::write(s.join(format!("f{i:03}")), data).unwrap();
        if hard_links {
            fs::hard_link(s.join(format!("f{i:03}")), s.join(format!("g{i:03}"))).unwrap();
        }
    }
}

/// Runs `cp ARGS s t` in `dir` and sends `sig` once `t` holds a file.
fn interrupted(dir: &Path, args: &[&str], sig: i32) -> std::process::ExitStatus {
    let mut child = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(dir)
        .arg("cp")
        .args(args)
        .args(["s", "t"])
        .spawn()
        .unwrap();
    let t = dir.join("t");
    let bound = Instant::now() + Duration::from_secs(30);
    while Instant::now() < bound && child.try_wait().unwrap().is_none() {
        if fs::read_dir(&t).is_ok_and(|mut d| d.next().is_some()) {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: kill(2) on the child's pid, which is not yet reaped (so it
    // names no other process).
    unsafe { libc::kill(child.id() as i32, sig) };
    child.wait().unwrap()
}

/// Every file in `dir/t` equals the file of its name in `dir/s`, or, with
/// `before`, the bytes that name held before the copy.
fn all_complete(dir: &Path, before: Option<&[u8]>) -> usize {
    let mut n = 0;
    for entry in fs::read_dir(dir.join("t")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let got = fs::read(entry.path()).unwrap();
        let want = fs::read(dir.join("s").join(&name)).unwrap();
        assert!(
            got == want || Some(&got[..]) == before,
            "{name:?}: {} bytes, not the source's {} (nor what was there before)",
            got.len(),
            want.len()
        );
        n += 1;
    }
    n
}

fn ended_by(status: std::process::ExitStatus, sig: i32) {
    assert!(
        status.signal() == Some(sig) || status.success(),
        "ended by {status:?}, not by signal {sig} (or a copy complete before it)"
    );
}

#[test]
fn an_interrupted_recursive_copy_leaves_only_complete_files() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        tree(d.path(), false);
        let status = interrupted(d.path(), &["-r"], sig);
        ended_by(status, sig);
        all_complete(d.path(), None);
    }
}

#[test]
fn an_interrupted_archive_copy_leaves_no_name_of_an_unfinished_hard_linked_file() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    tree(d.path(), true);
    let status = interrupted(d.path(), &["-a"], libc::SIGINT);
    ended_by(status, libc::SIGINT);
    all_complete(d.path(), None);
    // The names left of one file are still one file.
    for i in 0..FILES {
        let (f, g) = (
            d.path().join(format!("t/f{i:03}")),
            d.path().join(format!("t/g{i:03}")),
        );
        if let (Ok(a), Ok(b)) = (fs::metadata(&f), fs::metadata(&g)) {
            assert_eq!(a.ino(), b.ino(), "{f:?} and {g:?}");
        }
    }
}

#[test]
fn an_interrupted_backup_copy_puts_back_what_it_replaced() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    tree(d.path(), false);
    fs::create_dir(d.path().join("t")).unwrap();
    for i in 0..FILES {
        fs::write(d.path().join(format!("t/f{i:03}")), b"old").unwrap();
    }
    let status = interrupted(d.path(), &["-rT", "--backup=numbered"], libc::SIGTERM);
    ended_by(status, libc::SIGTERM);
    // Every name holds the copy or the old bytes, never part of a copy;
    // backups are of the old bytes.
    let mut names = 0;
    for i in 0..FILES {
        let got = fs::read(d.path().join(format!("t/f{i:03}"))).unwrap();
        let want = fs::read(d.path().join(format!("s/f{i:03}"))).unwrap();
        assert!(got == want || got == b"old", "f{i:03}: {} bytes", got.len());
        names += 1;
        if let Ok(b) = fs::read(d.path().join(format!("t/f{i:03}.~1~"))) {
            assert_eq!(b, b"old");
        }
    }
    assert_eq!(names, FILES);
}
