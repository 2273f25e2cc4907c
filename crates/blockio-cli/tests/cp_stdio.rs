//! `cp`'s standard streams when they fail, beside GNU `cp` on the same
//! input: a closed pipe on standard output (`cp -v … | head`) with SIGPIPE
//! at its default action or ignored, a closed standard output, a closed
//! standard input under `-i`. Whatever happens to the streams, the files
//! copied are whole.

use std::fs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A directory with `bin/cp`, a link to blockio, so that it runs as `cp`.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("bin")).unwrap();
    let link = dir.path().join("bin/cp");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), &link).unwrap();
    (dir, link)
}

/// A pipe whose reading end is already closed: every write to the other
/// end fails with `EPIPE` (or raises SIGPIPE).
fn broken_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just made and are owned by nobody else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    w
}

/// Runs `prog` (blockio's `cp` link, or GNU's `cp`) in `dir`, with
/// standard output a closed pipe, SIGPIPE `ignored` or not.
fn run_into_broken_pipe(prog: &Path, dir: &Path, args: &[&str], ignored: bool) -> Output {
    let mut cmd = Command::new(prog);
    cmd.current_dir(dir).args(args).stdout(broken_pipe());
    if ignored {
        // SAFETY: signal() is async-signal-safe; the closure touches
        // nothing else of the parent's.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                Ok(())
            });
        }
    }
    cmd.stderr(Stdio::piped()).output().unwrap()
}

/// GNU's `cp`, named `cp` in its messages.
fn gnu() -> PathBuf {
    PathBuf::from("/usr/bin/cp")
}

/// The messages with the program's name as it was called replaced by `cp`.
fn messages(o: &Output, prog: &Path) -> String {
    String::from_utf8_lossy(&o.stderr).replace(&*prog.to_string_lossy(), "cp")
}

#[path = "support/bytes.rs"]
mod data;
use data::bytes as random_bytes;

#[test]
fn a_closed_pipe_on_stdout_never_cuts_a_copy_as_gnu_never_does() {
    let (dir, ours) = setup();
    let d = dir.path();
    let data = random_bytes(5 << 20, 1);
    fs::write(d.join("src"), &data).unwrap();
    for (prog, dst) in [(gnu(), "gnu"), (ours.clone(), "ours")] {
        fs::write(d.join(dst), b"old content").unwrap();
        let o = run_into_broken_pipe(&prog, d, &["-v", "src", dst], false);
        // Ended by SIGPIPE, as GNU's, and only once the file is whole.
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGPIPE),
            "{dst}: {:?}",
            o.status
        );
        assert!(fs::read(d.join(dst)).unwrap() == data, "{dst} is not whole");
    }
    // A tree: every file that exists in the destination is whole.
    fs::create_dir(d.join("s")).unwrap();
    for i in 0..300 {
        fs::write(d.join(format!("s/f{i}")), random_bytes(20 << 10, i + 2)).unwrap();
    }
    let o = run_into_broken_pipe(&ours, d, &["-rv", "s", "t"], false);
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{:?}", o.status);
    for i in 0..300 {
        let name = format!("f{i}");
        if let Ok(got) = fs::read(d.join("t").join(&name)) {
            assert!(
                got == random_bytes(20 << 10, i + 2),
                "t/{name} is not whole"
            );
        }
    }
}

#[test]
fn with_sigpipe_ignored_a_closed_pipe_is_gnus_write_error() {
    let (dir, ours) = setup();
    let d = dir.path();
    let data = random_bytes(1 << 20, 3);
    fs::write(d.join("src"), &data).unwrap();
    let mut seen = Vec::new();
    for (prog, dst) in [(gnu(), "gnu"), (ours.clone(), "ours")] {
        fs::write(d.join(dst), b"old content").unwrap();
        let o = run_into_broken_pipe(&prog, d, &["-v", "src", dst], true);
        assert!(fs::read(d.join(dst)).unwrap() == data, "{dst} is not whole");
        seen.push((o.status.code(), messages(&o, &prog)));
    }
    assert_eq!(
        seen[0],
        (Some(1), "cp: write error: Broken pipe\n".to_string())
    );
    assert_eq!(seen[1], seen[0]);
}

/// Runs `prog` in `dir` with descriptor `fd` (0 or 1) closed.
fn run_with_closed(prog: &Path, dir: &Path, args: &[&str], fd: i32) -> Output {
    let mut cmd = Command::new(prog);
    cmd.current_dir(dir).args(args);
    // SAFETY: close() is async-signal-safe; the closure touches nothing
    // else of the parent's.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(fd);
            Ok(())
        });
    }
    cmd.stdout(if fd == 1 {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd.stderr(Stdio::piped()).output().unwrap()
}

#[test]
fn a_closed_stdout_under_v_and_a_closed_stdin_under_i_fail_as_in_gnu() {
    let (dir, ours) = setup();
    let d = dir.path();
    fs::write(d.join("src"), b"new").unwrap();
    let mut seen = Vec::new();
    for prog in [gnu(), ours] {
        let _ = fs::remove_file(d.join("v"));
        fs::write(d.join("i"), b"old").unwrap();
        let v = run_with_closed(&prog, d, &["-v", "src", "v"], 1);
        let i = run_with_closed(&prog, d, &["-i", "src", "i"], 0);
        seen.push((
            v.status.code(),
            messages(&v, &prog),
            fs::read(d.join("v")).unwrap(),
            i.status.code(),
            messages(&i, &prog),
            fs::read(d.join("i")).unwrap(),
        ));
    }
    assert_eq!(
        seen[0],
        (
            Some(1),
            "cp: write error: Bad file descriptor\n".to_string(),
            b"new".to_vec(),
            Some(1),
            "cp: overwrite 'i'? cp: error closing file: Bad file descriptor\n".to_string(),
            b"old".to_vec(),
        )
    );
    assert_eq!(seen[1], seen[0]);
}

#[test]
fn a_full_stderr_changes_nothing_but_the_messages_as_in_gnu() {
    let (dir, ours) = setup();
    let d = dir.path();
    fs::create_dir(d.join("s")).unwrap();
    for i in 0..50 {
        fs::write(d.join(format!("s/f{i}")), format!("{i}")).unwrap();
    }
    for (prog, dst) in [(gnu(), "gnu"), (ours, "ours")] {
        fs::create_dir(d.join(dst)).unwrap();
        let full = fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Command::new(&prog)
            .current_dir(d)
            .args(["-r", "missing", "s", "also-missing", dst])
            .stderr(full)
            .output()
            .unwrap();
        // Two sources are missing; the one that exists is copied whole.
        assert_eq!(o.status.code(), Some(1), "{dst}: {:?}", o.status);
        for i in 0..50 {
            let got = fs::read(d.join(format!("{dst}/s/f{i}"))).unwrap();
            assert_eq!(got, format!("{i}").as_bytes(), "{dst}/s/f{i}");
        }
    }
}

#[test]
fn help_and_version_are_answered_in_order_and_say_blockio() {
    let (dir, ours) = setup();
    let run = |args: &[&str]| {
        let o = Command::new(&ours)
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    for args in [&["--version"][..], &["--vers"], &["--version", "--bogus"]] {
        let (code, out) = run(args);
        assert_eq!(code, Some(0), "{args:?}");
        assert!(out.starts_with("cp (blockio) "), "{args:?}: {out}");
    }
    // As getopt_long hands them over: --help before a mistake is answered.
    let (code, out) = run(&["--help", "--bogus"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("Usage: "), "{out}");
    assert_eq!(run(&["--bogus", "--help"]), (Some(1), String::new()));
}
