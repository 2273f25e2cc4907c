//! `blockio cp` interrupted by a signal while it copies: every file left
//! at the destination is a complete copy (or, with `-b`, the file that was
//! there before), and the process ends by the signal, as GNU's does. The
//! assertions hold wherever the signal lands; the signal is sent once the
//! first destination file exists, while most of the tree is still to come.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
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

/// A temporary directory on `/dev/shm` (a tmpfs) for the trees copied
/// and signalled here. On an ext4 disk shared with other work, the
/// overwrites of 2,000 files waited on the disk most of their time (GNU's
/// `cp`, which empties each file first, makes ext4 flush it on close):
/// the copies, the signals and what is left behind are the same there.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a tmpfs, for the interrupted copies")
}

/// A temporary directory with the empty directories `s` and `t` in it.
fn source_and_target() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let d = scratch();
    let (s, t) = (d.path().join("s"), d.path().join("t"));
    fs::create_dir(&s).unwrap();
    fs::create_dir(&t).unwrap();
    (d, s, t)
}

/// `blockio cp ARGS` in `dir`, with SIGINT, SIGTERM and SIGHUP at their
/// default action (the suite may run with them ignored, as a background
/// job's SIGINT is, and an ignored signal stays ignored by the copy, as
/// by GNU's).
fn cp(dir: &Path, args: &[&str]) -> std::process::Child {
    cp_command(dir, args).spawn().unwrap()
}

/// The command [`cp`] runs, to be given more settings before it is.
fn cp_command<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_blockio"));
    cmd.current_dir(dir).arg("cp").args(args);
    with_default_signals(cmd)
}

/// GNU's `cp ARGS` in `dir`, its signals as [`cp_command`] sets them.
fn gnu_cp_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("/usr/bin/cp");
    cmd.current_dir(dir).args(args);
    with_default_signals(cmd)
}

/// `cmd`, run with SIGINT, SIGTERM and SIGHUP unblocked and at their
/// default action.
fn with_default_signals(mut cmd: Command) -> Command {
    // SAFETY: between fork and exec the closure only calls signal(2) and
    // sigprocmask(2), which are async-signal-safe, on valid arguments.
    unsafe {
        cmd.pre_exec(|| {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd
}

/// Runs `cp ARGS s t` in `dir` and sends `sig` once `t` holds a file.
fn interrupted(dir: &Path, args: &[&str], sig: i32) -> std::process::ExitStatus {
    interrupted_once(dir, args, sig, |_| true)
}

/// [`interrupted`], the signal sent once an entry of `dir/t` whose name
/// `ready` accepts exists (or the copy has ended, or 30 s have passed).
fn interrupted_once(
    dir: &Path,
    args: &[&str],
    sig: i32,
    ready: impl Fn(&str) -> bool,
) -> std::process::ExitStatus {
    let mut child = cp(dir, &[args, &["s", "t"]].concat());
    let t = dir.join("t");
    let bound = Instant::now() + Duration::from_secs(30);
    while Instant::now() < bound && child.try_wait().unwrap().is_none() {
        let found = fs::read_dir(&t)
            .is_ok_and(|d| d.flatten().any(|e| ready(&e.file_name().to_string_lossy())));
        if found {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: kill(2) on the child's pid, which is not yet reaped (so it
    // names no other process).
    unsafe { libc::kill(child.id() as i32, sig) };
    child.wait().unwrap()
}

/// `cp -rT --backup=numbered s t` in `dir`, ended by SIGTERM once the
/// first backup exists (among the renames), or complete before it.
fn backup_copy_interrupted(dir: &Path) {
    let status = interrupted_once(dir, &["-rT", "--backup=numbered"], libc::SIGTERM, |n| {
        n.ends_with('~')
    });
    ended_by(status, libc::SIGTERM);
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

/// Sends SIGTERM to `child` once one of its threads waits in a write to a
/// full pipe (one the caller holds and nobody reads; seen in the
/// thread's `wchan`) or the child has ended, and checks that it ended by
/// the signal (or complete before it).
fn terminated_once_blocked(child: &mut std::process::Child) {
    let tasks = format!("/proc/{}/task", child.id());
    let in_pipe_write = || {
        fs::read_dir(&tasks).into_iter().flatten().any(|t| {
            fs::read_to_string(t.unwrap().path().join("wchan"))
                .is_ok_and(|w| w.ends_with("pipe_write"))
        })
    };
    let bound = Instant::now() + Duration::from_secs(60);
    while Instant::now() < bound && child.try_wait().unwrap().is_none() && !in_pipe_write() {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        Instant::now() < bound,
        "the copy neither ended nor filled the pipe in 60 s"
    );
    // SAFETY: kill(2) on the child's pid, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    ended_by(child.wait().unwrap(), libc::SIGTERM);
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
        let d = scratch();
        tree(d.path(), false);
        let status = interrupted(d.path(), &["-r"], sig);
        ended_by(status, sig);
        all_complete(d.path(), None);
    }
}

#[test]
fn an_interrupted_archive_copy_leaves_no_name_of_an_unfinished_hard_linked_file() {
    let d = scratch();
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
    let d = scratch();
    tree(d.path(), false);
    fs::create_dir(d.path().join("t")).unwrap();
    for i in 0..FILES {
        fs::write(d.path().join(format!("t/f{i:03}")), b"old").unwrap();
    }
    backup_copy_interrupted(d.path());
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

#[test]
fn an_interrupted_backup_copy_of_symbolic_links_puts_back_what_it_replaced() {
    // Links are made over the names in their way after those are moved
    // aside: a signal in between puts the old file back. (The signal
    // comes once the first backup exists, among the renames.)
    let (d, s, t) = source_and_target();
    for i in 0..FILES * 10 {
        std::os::unix::fs::symlink(format!("target{i}"), s.join(format!("l{i:04}"))).unwrap();
        fs::write(t.join(format!("l{i:04}")), b"old").unwrap();
    }
    backup_copy_interrupted(d.path());
    for i in 0..FILES * 10 {
        let name = t.join(format!("l{i:04}"));
        let st = fs::symlink_metadata(&name).unwrap_or_else(|e| panic!("{name:?}: {e}"));
        if st.file_type().is_symlink() {
            assert_eq!(
                fs::read_link(&name).unwrap(),
                Path::new(&format!("target{i}"))
            );
        } else {
            assert_eq!(fs::read(&name).unwrap(), b"old", "{name:?}");
        }
    }
}

#[test]
fn an_interrupted_backup_copy_of_two_names_of_one_file_puts_both_back() {
    // `-a`'s second name is a hard link to the first name's copy; the
    // signal comes while that copy is still filled (here from a FIFO whose
    // writer never writes), and both names must hold the files they had,
    // never the second name the incomplete copy.
    let (d, s, t) = source_and_target();
    let fifo = std::ffi::CString::new(s.join("p").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path in our temporary directory.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    fs::hard_link(s.join("p"), s.join("q")).unwrap();
    fs::write(t.join("p"), b"old p").unwrap();
    fs::write(t.join("q"), b"old q").unwrap();
    // The writer: opened read-write, so this open waits for no reader,
    // and held open so the copy's reads wait for data that never comes.
    let writer = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(s.join("p"))
        .unwrap();
    let args = [
        "-rT",
        "--preserve=links",
        "--copy-contents",
        "--backup=numbered",
        "s",
        "t",
    ];
    let mut child = cp(d.path(), &args);
    // The signal comes once the second name is linked over its old file
    // (kept as `q.~1~`), or once the copy waits in the FIFO's read with
    // the first name's old file kept aside: with `-b` a group's files
    // whose names are taken are copied one after the other, so the
    // second name is linked only once the first copy is whole, and until
    // the FIFO is written the copy does nothing more.
    let tasks = format!("/proc/{}/task", child.id());
    let in_fifo_read = || {
        fs::read_dir(&tasks).into_iter().flatten().any(|t| {
            fs::read_to_string(t.unwrap().path().join("wchan"))
                .is_ok_and(|w| w.ends_with("pipe_read"))
        })
    };
    let linked = || t.join("q.~1~").exists() && t.join("q").exists();
    let aside_in_read = || t.join("p.~1~").exists() && in_fifo_read();
    let bound = Instant::now() + Duration::from_secs(30);
    while !(linked() || aside_in_read()) {
        assert!(
            Instant::now() < bound && child.try_wait().unwrap().is_none(),
            "in 30 s the copy neither linked the second name nor waited in the FIFO's read"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: kill(2) on the child's pid, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    ended_by(child.wait().unwrap(), libc::SIGTERM);
    drop(writer);
    assert_eq!(fs::read(t.join("p")).unwrap(), b"old p");
    assert_eq!(fs::read(t.join("q")).unwrap(), b"old q");
}

#[test]
fn a_signal_after_a_failed_backup_copy_is_undone_keeps_the_file_put_back() {
    // Every copy fails (the file size limit), so each is removed and the
    // file `-b` moved aside is put back, then reported; the reports fill a
    // pipe nobody reads, so the copy stops inside one, and the signal
    // comes then. No name may lose the file put back under it.
    const N: usize = 1500;
    let (d, s, t) = source_and_target();
    for i in 0..N {
        fs::write(s.join(format!("f{i:04}")), vec![b'n'; 8192]).unwrap();
        fs::write(t.join(format!("f{i:04}")), b"old").unwrap();
    }
    let mut cmd = cp_command(d.path(), &["-rT", "--backup=numbered", "s", "t"]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: between fork and exec the closure only calls setrlimit(2)
    // and signal(2), async-signal-safe, on valid arguments.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 4096,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let _stderr = child.stderr.take().unwrap(); // (held: the reports fill it)
    terminated_once_blocked(&mut child);
    for i in 0..N {
        let name = t.join(format!("f{i:04}"));
        let got = fs::read(&name).unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert!(
            got == b"old" || got.len() == 8192,
            "{name:?}: {} bytes",
            got.len()
        );
    }
}

#[test]
fn a_signal_while_a_refused_relative_link_is_reported_keeps_the_file_put_back() {
    // `cp -s -b -v` of relative sources into another directory: each link
    // is refused (GNU makes relative links only in the current directory)
    // after the file in its way was moved aside, reported, and put back.
    // The reports fill a pipe nobody reads, so the copy stops inside one;
    // a long source name makes that mostly the report made while the file
    // is aside. The signal comes then: every name keeps its file.
    const N: usize = 100;
    let (d, s, t) = source_and_target();
    let long = format!("{}/", vec!["d".repeat(250); 8].join("/"));
    fs::create_dir_all(s.join(&long)).unwrap();
    let mut args = vec!["-sv".to_string(), "--backup=numbered".into()];
    for i in 0..N {
        fs::write(s.join(format!("{long}f{i:03}")), b"new").unwrap();
        fs::write(t.join(format!("f{i:03}")), b"old").unwrap();
        args.push(format!("{long}f{i:03}"));
    }
    args.push("../t/".into());
    let mut cmd = cp_command(&s, &args);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    terminated_once_blocked(&mut child);
    drop(stdout);
    let mut names: Vec<String> = fs::read_dir(&t)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let want: Vec<String> = (0..N).map(|i| format!("f{i:03}")).collect();
    assert_eq!(names, want, "a name lost its file, or a backup was left");
    for name in &names {
        assert_eq!(fs::read(t.join(name)).unwrap(), b"old", "{name}");
    }
    drop(d);
}

#[test]
fn a_copy_waiting_for_a_fifos_reader_ends_by_the_signal() {
    // An existing FIFO at the destination is opened and written into, as
    // GNU does; with no reader the open waits, and only a signal ends the
    // copy, which must not wait for that open.
    let d = scratch();
    fs::write(d.path().join("s"), b"data").unwrap();
    let fifo =
        std::ffi::CString::new(d.path().join("t").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path in our temporary directory.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut child = cp(d.path(), &["s", "t"]);
    // Once a thread of the copy waits in the FIFO's open.
    let tasks = format!("/proc/{}/task", child.id());
    let in_fifo_open = || {
        fs::read_dir(&tasks).into_iter().flatten().any(|t| {
            fs::read_to_string(t.unwrap().path().join("wchan"))
                .is_ok_and(|w| w == "wait_for_partner")
        })
    };
    let bound = Instant::now() + Duration::from_secs(30);
    while !in_fifo_open() {
        assert!(
            Instant::now() < bound && child.try_wait().unwrap().is_none(),
            "the copy never waited for the FIFO's reader"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: kill(2) on the child's pid, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // A bound only against a hang: the copy must end by the signal.
    let bound = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > bound {
            child.kill().unwrap();
            panic!("the copy did not end on SIGINT while it waited for the FIFO's reader");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
}

/// The existing files of [`an_interrupted_overwrite_empties_no_more_files_than_it_writes`].
const OVERWRITTEN: usize = 2000;
/// The worker threads of the copy in that test.
const THREADS: usize = 3;

/// `dir/s` with `OVERWRITTEN` files of 16 KiB of `n`, or `dir/x` with
/// the same names holding 12 KiB of `o` each.
fn old_or_new(dir: &Path, sub: &str) {
    let (byte, len) = if sub == "s" {
        (b'n', 16 << 10)
    } else {
        (b'o', 12 << 10)
    };
    fs::create_dir_all(dir.join(sub)).unwrap();
    for i in 0..OVERWRITTEN {
        fs::write(dir.join(format!("{sub}/f{i:04}")), vec![byte; len]).unwrap();
    }
}

/// The names of `dir/x` (not its backups) that hold neither their old
/// bytes nor the new: emptied, part written, or missing.
fn neither_old_nor_new(dir: &Path) -> Vec<String> {
    let (old, new) = (vec![b'o'; 12 << 10], vec![b'n'; 16 << 10]);
    (0..OVERWRITTEN)
        .map(|i| format!("f{i:04}"))
        .filter(|name| {
            let got = fs::read(dir.join("x").join(name)).ok();
            got.as_ref() != Some(&old) && got.as_ref() != Some(&new)
        })
        .collect()
}

/// The backups `f0000~`... of `dir/x` that exist; panics if one of them
/// does not hold its name's old bytes.
fn backups_hold_the_old_bytes(dir: &Path) -> usize {
    let old = vec![b'o'; 12 << 10];
    let mut found = 0;
    for i in 0..OVERWRITTEN {
        let backup = dir.join(format!("x/f{i:04}~"));
        match fs::read(&backup) {
            Ok(got) => {
                assert!(
                    got == old,
                    "{backup:?} holds {} bytes, not the old ones",
                    got.len()
                );
                found += 1;
            }
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{backup:?}"),
        }
    }
    found
}

/// Random points (a number of lines of `-v` output, 1 to `OVERWRITTEN`)
/// at which to signal a copy, from a seed of the clock (printed with each
/// result, to run a failure again).
fn random_points() -> (u64, impl Iterator<Item = usize>) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut x = seed;
    let points = std::iter::from_fn(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Some(1 + (x % OVERWRITTEN as u64) as usize)
    });
    (seed, points)
}

/// Runs `cmd` (a verbose copy of `s/.` onto `x`, in its directory) and
/// sends it `sig` once it has printed `lines` lines: once it has reached
/// that file, wherever that falls in its work. Whether it ended by the
/// signal (rather than complete before it).
fn interrupted_after_lines(mut cmd: Command, lines: usize, sig: i32) -> bool {
    use std::io::BufRead;
    cmd.stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = Vec::new();
    for _ in 0..lines {
        line.clear();
        if out.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
    }
    // SAFETY: kill(2) on the child's pid, not yet reaped.
    unsafe { libc::kill(child.id() as i32, sig) };
    // Read on, so that no write of the copy's waits for this reader.
    std::io::copy(&mut out, &mut std::io::sink()).unwrap();
    let status = child.wait().unwrap();
    ended_by(status, sig);
    !status.success()
}

#[test]
fn an_interrupted_overwrite_empties_no_more_files_than_it_writes() {
    // `cp -a s/. x` onto 2,000 existing files, interrupted at random
    // points: each existing file keeps its old bytes until its new ones
    // are about to be written, so at most one file per worker thread is
    // left neither old nor new (GNU's `cp`, one thread, leaves at most
    // one: run here at the first point; it is slower, and on ext4, where
    // emptying a file makes it flush the file on close, much slower).
    let (seed, mut points) = random_points();
    let d = scratch();
    old_or_new(d.path(), "s");
    let threads = format!("--threads={THREADS}");
    for (k, sig) in [libc::SIGINT, libc::SIGTERM, libc::SIGINT, libc::SIGTERM]
        .into_iter()
        .enumerate()
    {
        let lines = points.next().unwrap();
        for gnu in [false, true].into_iter().take(if k == 0 { 2 } else { 1 }) {
            old_or_new(d.path(), "x");
            let cmd = if gnu {
                gnu_cp_command(d.path(), &["-av", "s/.", "x"])
            } else {
                cp_command(d.path(), &["-av", &threads, "s/.", "x"])
            };
            let cut = interrupted_after_lines(cmd, lines, sig);
            let bad = neither_old_nor_new(d.path());
            let (who, most) = if gnu {
                ("GNU cp", 1)
            } else {
                ("blockio cp", THREADS)
            };
            println!(
                "{who}, signal {sig} after {lines} lines (seed {seed}, cut short: {cut}): {} files neither old nor new",
                bad.len()
            );
            assert!(
                bad.len() <= most,
                "{who}, signal {sig} after {lines} lines (seed {seed}): {} files neither old nor new \
                 (at most {most}): {:?}",
                bad.len(),
                &bad[..bad.len().min(10)]
            );
        }
    }
}

#[test]
fn a_killed_backup_overwrite_leaves_no_more_names_neither_old_nor_new_than_it_writes() {
    // `cp -b -a s/. x` onto 2,000 existing files, killed (SIGKILL: nothing
    // is put back) at random points: each existing file is kept aside as
    // its backup and made anew just before its new bytes are written, so
    // at most one name per worker thread holds neither its old bytes nor
    // the new, and every backup made holds the old bytes (GNU's `cp`, one
    // thread, leaves at most one: run here at the first point).
    let (seed, mut points) = random_points();
    let d = scratch();
    old_or_new(d.path(), "s");
    let threads = format!("--threads={THREADS}");
    for k in 0..3 {
        let lines = points.next().unwrap();
        for gnu in [false, true].into_iter().take(if k == 0 { 2 } else { 1 }) {
            fs::remove_dir_all(d.path().join("x")).ok();
            old_or_new(d.path(), "x");
            let cmd = if gnu {
                gnu_cp_command(d.path(), &["-bav", "s/.", "x"])
            } else {
                cp_command(d.path(), &["-bav", &threads, "s/.", "x"])
            };
            let cut = interrupted_after_lines(cmd, lines, libc::SIGKILL);
            let bad = neither_old_nor_new(d.path());
            let backups = backups_hold_the_old_bytes(d.path());
            let (who, most) = if gnu {
                ("GNU cp", 1)
            } else {
                ("blockio cp", THREADS)
            };
            println!(
                "{who} -b, killed after {lines} lines (seed {seed}, cut short: {cut}): {} names \
                 neither old nor new, {backups} backups",
                bad.len()
            );
            assert!(
                bad.len() <= most,
                "{who} -b, killed after {lines} lines (seed {seed}): {} names neither old nor new \
                 (at most {most}): {:?}",
                bad.len(),
                &bad[..bad.len().min(10)]
            );
            assert!(
                cut || backups == OVERWRITTEN,
                "{who}: {backups} backups of a complete copy"
            );
        }
    }
}
