//! `blockio cp` against GNU `cp` (`/usr/bin/cp`) on the same input: each
//! case is set up twice by the same shell script, each tool runs with the
//! same arguments in its own copy, and the exit status, the messages (the
//! program name aside) and everything left on disk must be the same.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

/// GNU `cp`, found in `/usr/bin` (the only directory on the `PATH` the
/// runs get), so that it names itself `cp` in its messages.
const GNU_CP: &str = "cp";

/// What one run did: exit status, messages, and the directory afterwards.
/// The lines of standard output (`-v`) and of the messages are sorted: a
/// parallel copy says what it did in the order it did it.
#[derive(Debug, PartialEq)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    tree: BTreeMap<OsString, String>,
}

/// Every entry below `root`: kind, permission bits, owner, and the
/// contents of files, targets of links, numbers of devices, and which
/// names are one file.
fn snapshot(root: &Path) -> BTreeMap<OsString, String> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, OsString> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut names: Vec<_> = fs::read_dir(&d).unwrap().map(|e| e.unwrap()).collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().as_os_str().to_owned();
            let m = fs::symlink_metadata(&p).unwrap();
            let t = m.file_type();
            let what = if t.is_symlink() {
                // An absolute target inside the run's directory is the
                // same in both runs.
                let t = fs::read_link(&p).unwrap().display().to_string();
                format!("link -> {}", t.replace(&*root.to_string_lossy(), "<w>"))
            } else if t.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if t.is_file() {
                let first = inodes.entry(m.ino()).or_insert_with(|| rel.clone());
                let same = if *first != rel {
                    format!(" (= {})", first.to_string_lossy())
                } else {
                    String::new()
                };
                format!(
                    "file {:?}{same}",
                    String::from_utf8_lossy(&fs::read(&p).unwrap())
                )
            } else if t.is_fifo() {
                "fifo".to_string()
            } else if t.is_char_device() || t.is_block_device() {
                format!("device {:x}", m.rdev())
            } else {
                "other".to_string()
            };
            let perms = if t.is_symlink() { 0 } else { m.mode() & 0o7777 };
            // Times set by a setup (before 2020) are compared; the times
            // of files made by the runs are not.
            let mtime = if m.mtime() < 1_577_836_800 {
                format!(" mtime {}", m.mtime())
            } else {
                String::new()
            };
            out.insert(
                rel,
                format!(
                    "{what} mode {perms:o} owner {}:{}{mtime}{}",
                    m.uid(),
                    m.gid(),
                    user_xattrs(&p)
                ),
            );
        }
    }
    out
}

/// The lines of `text`, sorted.
fn sorted(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The `user.*` extended attributes of `p` (not following a link), as
/// ` name=value` each, and its ACLs (`system.posix_acl_*`) in hex.
fn user_xattrs(p: &Path) -> String {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: a valid NUL-terminated path and a buffer of the given size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return String::new();
    }
    let mut out = String::new();
    for name in names[..n as usize].split(|&b| b == 0) {
        let acl = name.starts_with(b"system.posix_acl_");
        if !name.starts_with(b"user.") && !acl {
            continue;
        }
        let cname = std::ffi::CString::new(name).unwrap();
        let mut v = vec![0u8; 4096];
        // SAFETY: as above, with a NUL-terminated attribute name.
        let len =
            unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        let v = &v[..len.max(0) as usize];
        let v = if acl {
            v.iter().map(|b| format!("{b:02x}")).collect()
        } else {
            String::from_utf8_lossy(v).into_owned()
        };
        out.push_str(&format!(" {}={v}", String::from_utf8_lossy(name)));
    }
    out
}

/// GNU's messages start `cp: `; ours `blockio cp: ` (or `cp: ` when run
/// through a link named `cp`): compared without the program name.
/// blockio's note that io_uring was unavailable (the machine's setting,
/// not the copy's doing) is left out too.
fn messages(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.contains("note: I/O ran on the thread-pool backend"))
        .map(|l| l.strip_prefix("blockio ").unwrap_or(l))
        // A message after a question (`-i`) shares the question's line.
        .map(|l| l.replace("? blockio cp: ", "? cp: "))
        .map(|l| l.replace("'blockio cp --help'", "'cp --help'"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Runs `setup` with `sh` in a new directory `w` under `dir`, then `cmd`
/// there (`prefix` first, such as `setpriv ...`) with `args`.
fn run_in(
    dir: &Path,
    setup: &str,
    prefix: &[&str],
    cmd: &[&str],
    args: &[&str],
    input: &str,
) -> Outcome {
    let w = dir.join("w");
    fs::create_dir(&w).unwrap();
    let s = Command::new("sh")
        .args(["-ec", setup])
        .current_dir(&w)
        .output()
        .unwrap();
    assert!(
        s.status.success(),
        "setup `{setup}`: {}",
        messages(&s.stderr)
    );
    let argv: Vec<&str> = prefix.iter().chain(cmd).chain(args).copied().collect();
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("LC_ALL", "C")
        .current_dir(&w)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(input.as_bytes());
    }
    let o = child.wait_with_output().unwrap();
    Outcome {
        code: o.status.code(),
        stdout: sorted(&String::from_utf8_lossy(&o.stdout)),
        stderr: sorted(&messages(&o.stderr)),
        tree: snapshot(&w),
    }
}

/// GNU `cp` and `blockio cp` on the same input: (GNU, ours).
fn both(setup: &str, prefix: &[&str], args: &[&str], input: &str) -> (Outcome, Outcome) {
    let (g, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for d in [&g, &b] {
        // Reachable by an unprivileged user running the copy.
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let gnu = run_in(g.path(), setup, prefix, &[GNU_CP], args, input);
    let ours = run_in(
        b.path(),
        setup,
        prefix,
        &[env!("CARGO_BIN_EXE_blockio"), "cp"],
        args,
        input,
    );
    (gnu, ours)
}

use std::os::unix::fs::PermissionsExt;

/// Asserts that `blockio cp args` does what GNU `cp args` does after
/// `setup`; returns GNU's outcome for further checks.
#[track_caller]
fn like_gnu(setup: &str, args: &[&str]) -> Outcome {
    like_gnu_as(&[], setup, args)
}

#[track_caller]
fn like_gnu_as(prefix: &[&str], setup: &str, args: &[&str]) -> Outcome {
    like_gnu_with(prefix, setup, args, "")
}

/// As [`like_gnu`], run by `prefix` and with `input` on standard input.
#[track_caller]
fn like_gnu_with(prefix: &[&str], setup: &str, args: &[&str], input: &str) -> Outcome {
    let (gnu, ours) = both(setup, prefix, args, input);
    assert_eq!(
        ours,
        gnu,
        "`cp {}` after `{setup}`: ours (left) differs from GNU's (right)",
        args.join(" ")
    );
    gnu
}

/// A prefix that runs the copy as `nobody` (uid and gid 65534, no
/// supplementary groups).
const NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

fn root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Every way of naming the source as the destination is refused before
/// anything is opened for writing: through a link at either end (relative
/// or absolute), two links to one file, a hard link, a `./` path; with
/// and without `-a`/`-p`: `cp f sl` leaves `f`'s data, and `cp -a sl f`
/// leaves `f` a file.
#[test]
fn the_same_file_under_another_name_is_refused_as_gnu_refuses_it() {
    let cases: &[(&str, &[&str])] = &[
        ("echo data > f; ln -s f sl", &["f", "sl"]),
        ("echo data > f; ln -s f sl", &["-a", "f", "sl"]),
        ("echo data > f; ln -s f sl", &["-p", "f", "sl"]),
        ("echo data > f; ln -s \"$PWD/f\" sl", &["-p", "f", "sl"]),
        ("echo data > f; ln -s f sl", &["sl", "f"]),
        ("echo data > f; ln -s f sl", &["-a", "sl", "f"]),
        (
            "echo data > f; ln -s f sl; ln -s f sl2",
            &["-a", "sl", "sl2"],
        ),
        ("echo data > f; ln f h", &["f", "h"]),
        ("echo data > f; ln f h", &["-a", "f", "h"]),
        ("echo data > f", &["f", "./f"]),
        ("echo data > f; mkdir d; ln -s ../f d/f", &["f", "d"]),
    ];
    for (setup, args) in cases {
        let gnu = like_gnu(setup, args);
        assert_eq!(
            gnu.tree[&OsString::from("f")],
            "file \"data\\n\" mode 644 owner 0:0".replace("0:0", &owner()),
            "{args:?}: the source is intact"
        );
    }
}

fn owner() -> String {
    // SAFETY: no preconditions, cannot fail.
    unsafe { format!("{}:{}", libc::geteuid(), libc::getegid()) }
}

/// A source named twice is copied once, with GNU's warning, exit 0 (it
/// was "No such file or directory" for a directory given twice).
#[test]
fn a_source_named_twice_is_copied_once_with_a_warning() {
    let setup = "echo data > f; mkdir a d; echo x > a/x";
    like_gnu(setup, &["-a", "a", "a", "d/"]);
    like_gnu(setup, &["-a", "f", "f", "d/"]);
    like_gnu(setup, &["f", "./f", "d/"]);
    like_gnu(setup, &["-r", "a", "./a/", "d/"]);
    like_gnu(&format!("{setup}; ln f h"), &["f", "h", "d/"]);
    let o = like_gnu(setup, &["-r", "a", "f", "a", "f", "d"]);
    assert_eq!(o.code, Some(0));
    assert!(
        o.stderr.contains("specified more than once"),
        "{}",
        o.stderr
    );
}

/// An existing FIFO at the destination is opened and written into, as GNU
/// does: the reader waiting on it gets the data and the FIFO stays. It
/// was deleted (its positioned writes failed, and the failed copy was
/// removed).
#[test]
fn an_existing_fifo_is_written_into_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("small"), b"small data\n").unwrap();
    let fifo = std::ffi::CString::new(d.join("pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path, alive for the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let pipe = d.join("pipe");
    let reader = std::thread::spawn(move || fs::read(pipe).unwrap());
    let o = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(d)
        .args(["cp", "small", "pipe"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", messages(&o.stderr));
    assert_eq!(reader.join().unwrap(), b"small data\n");
    assert!(fs::symlink_metadata(d.join("pipe"))
        .unwrap()
        .file_type()
        .is_fifo());
}

/// An existing device node at the destination is written into and kept
/// (`cp sparse /dev/null` as root removed `/dev/null`: extending the copy
/// to the source's size failed, and the failed copy was removed); here a
/// null device made for the test, as a file and inside a tree, with and
/// without `-a`.
#[test]
fn an_existing_device_is_written_into_not_replaced() {
    assert!(
        root(),
        "this test makes device nodes and needs root (CI runs as root)"
    );
    let setup = "echo data > f; truncate -s 1M sparse; mknod n c 1 3; chmod 666 n; \
                 mkdir -p s t/s; echo x > s/n; mknod t/s/n c 1 3";
    for args in [
        &["f", "n"][..],
        &["sparse", "n"],
        &["-p", "f", "n"],
        &["-a", "f", "n"],
        &["-r", "s", "t"],
    ] {
        let o = like_gnu(setup, args);
        assert!(
            o.tree[&OsString::from("n")].starts_with("device 103"),
            "{o:?}"
        );
        assert!(
            o.tree[&OsString::from("t/s/n")].starts_with("device 103"),
            "{o:?}"
        );
    }
}

/// `-p`/`-a` by a user who cannot keep the owner (here `nobody`, with
/// group `users` as a supplementary group): the copy is owned by the
/// copier, so its set-user-ID, set-group-ID and sticky bits are cleared,
/// as GNU clears them; its group is kept when the copier belongs to it.
#[test]
fn preserving_without_the_owner_clears_the_special_bits_and_keeps_the_group() {
    assert!(
        root(),
        "this test makes root's files and copies them as nobody"
    );
    let setup = "for m in 4755 2755 6755 1755 755; do echo $m > f$m; chmod $m f$m; done; \
                 mkdir -m 1777 sticky; chgrp users f755 f4755; \
                 mkdir -m 777 out";
    for (groups, flag) in [("", "-p"), ("", "-a"), ("100", "-p"), ("100", "-a")] {
        let mut prefix = vec!["setpriv", "--reuid=65534", "--regid=65534"];
        let g = format!("--groups={groups}");
        prefix.push(if groups.is_empty() {
            "--clear-groups"
        } else {
            &g
        });
        let args = [
            flag, "-r", "f4755", "f2755", "f6755", "f1755", "f755", "sticky", "out",
        ];
        let o = like_gnu_as(&prefix, setup, &args);
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        for name in ["out/f4755", "out/f2755", "out/f6755", "out/f1755"] {
            assert!(o.tree[&OsString::from(name)].contains("mode 755"), "{o:?}");
        }
        // A directory keeps its sticky bit, as with GNU.
        assert!(
            o.tree[&OsString::from("out/sticky")].contains("mode 1777"),
            "{o:?}"
        );
    }
}

/// A copy that fails part-way onto an existing file (a full disk) leaves
/// that name in place: it may be another link to a file someone needs,
/// and only files the copy created are ever removed.
#[test]
fn a_failed_overwrite_never_removes_a_name_the_copy_did_not_create() {
    assert!(
        root(),
        "this test mounts a 1 MiB tmpfs and needs root (CI runs as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("big"), vec![7u8; 3 << 20]).unwrap();
    fs::create_dir(d.join("small")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs small && cd small && echo old > file && ln file other && \
         '{0}' cp ../big file; rc=$?; ls -i file other >&2 || true; '{0}' cp ../big new; \
         test ! -e new && exit $rc",
        env!("CARGO_BIN_EXE_blockio"),
    );
    let o = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .current_dir(d)
        .output()
        .expect("unshare (util-linux)");
    let err = messages(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains("existed before the copy and was not removed"),
        "{err}"
    );
    let inodes: Vec<&str> = err
        .lines()
        .filter(|l| l.ends_with(" file") || l.ends_with(" other"))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(inodes.len(), 2, "both names are still there: {err}");
    assert_eq!(inodes[0], inodes[1], "and still one file: {err}");
}

/// Without `-r`, as GNU: links on the command line are followed (with
/// `-r` copied as links, unless `-H` or `-L`); a FIFO is read; a device
/// is read (`cp /dev/null log` empties `log`); a directory is left out
/// ("omitting directory", exit 1); `cp f nodir/` is "Not a directory";
/// dangling and looping links are "cannot stat".
#[test]
fn without_r_links_are_followed_and_specials_read_as_gnu_does() {
    let setup = "echo data > f; mkdir d; echo in > d/x; ln -s f sl; ln -s f sl2; ln -s d dl; \
                 ln -s nowhere dangling; ln -s loop loop; echo log > log; mkfifo p; \
                 (echo from-fifo > p) >/dev/null 2>&1 &";
    let cases: &[&[&str]] = &[
        &["sl", "x"],
        &["-r", "sl", "x"],
        &["-rH", "sl", "x"],
        &["-rL", "sl", "x"],
        &["-P", "sl", "x"],
        &["-d", "sl", "x"],
        &["-r", "dl", "x"],
        &["-rH", "dl", "x"],
        &["dl", "x"],
        &["p", "x"],
        &["/dev/null", "log"],
        &["d", "x"],
        &["d", "f", "sl", "x"],
        &["f", "nodir/"],
        &["dangling", "x"],
        &["loop", "x"],
        &["sl", "sl2"],
        &["-r", "d", "f", "nodir"],
        &["-r", "d/", "x"],
        &["-r", "--strip-trailing-slashes", "dl/", "x"],
        &["-r", "--strip-trailing-slashes", "dl/", "d"],
    ];
    for args in cases {
        // The FIFO's writer waits for a reader: only the cases that read
        // it are run with it.
        let setup = if args.contains(&"p") {
            setup.to_string()
        } else {
            setup.replace("(echo from-fifo > p) >/dev/null 2>&1 &", "true")
        };
        like_gnu(&setup, args);
    }
}

/// With `-r --copy-contents`, a FIFO is read like a file, as GNU does;
/// with `-r` alone it is made anew.
#[test]
fn copy_contents_reads_fifos_when_recursive() {
    let setup = "mkfifo p; (echo from-fifo > p) >/dev/null 2>&1 &";
    like_gnu(setup, &["-r", "--copy-contents", "p", "x"]);
    like_gnu("mkfifo p", &["-r", "p", "x"]);
}

/// A FIFO read like a file waits for its writer, as GNU's open(2) does:
/// the copy holds what the writer wrote, with `-R --copy-contents` and
/// without `-r`. Opened through the ring, it did not wait, and the copy
/// read the end of file at once, empty, when no writer was there yet.
#[test]
fn a_fifo_read_as_a_file_waits_for_its_writer() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for args in [&["-R", "--copy-contents", "p", "x"][..], &["p", "x"]] {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        let fifo = std::ffi::CString::new(w.join("p").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path, alive for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let mut child = Command::new(env!("CARGO_BIN_EXE_blockio"))
            .current_dir(w)
            .arg("cp")
            .args(args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // No writer until the copy has the FIFO open to read (a writer's
        // non-blocking open fails until then): the copy must wait for it.
        let mut writer = loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("cp {args:?} ended ({status}) without waiting for a writer");
            }
            match fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(w.join("p"))
            {
                Ok(f) => break f,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(e) => panic!("opening the FIFO to write: {e}"),
            }
        };
        writer.write_all(b"from the writer\n").unwrap();
        drop(writer);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", messages(&o.stderr));
        assert_eq!(
            fs::read_to_string(w.join("x")).unwrap(),
            "from the writer\n",
            "cp {args:?}"
        );
    }
}

/// A parent directory made by `--parents` with `--preserve=mode` or
/// `--preserve=ownership` is, while the copy runs, no more open than GNU
/// makes it (coreutils' `tests/cp/parent-perm-race.sh`): with the owner
/// kept, no access for the group and others; with the mode kept, no
/// write access for them. The copy of a FIFO's contents holds the copy
/// open until the FIFO gets a writer, so the directory is looked at
/// while the copy is under way, before its final mode is set.
#[test]
fn parents_made_with_preserve_are_closed_to_others_while_copying() {
    use std::io::Write;
    for (attr, closed) in [("mode", 0o022), ("ownership", 0o077)] {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        fs::create_dir(w.join(attr)).unwrap();
        fs::set_permissions(w.join(attr), fs::Permissions::from_mode(0o777)).unwrap();
        fs::create_dir(w.join("d")).unwrap();
        let fifo =
            std::ffi::CString::new(w.join(attr).join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path, alive for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        // A writer's open of the FIFO returns once the copy opens it to
        // read, after making d/ATTR; the copy then reads until the writer
        // closes it, and sets the final modes only after that.
        let made = w.join("d").join(attr);
        let writer = {
            let (fifo, made) = (w.join(attr).join("fifo"), made.clone());
            std::thread::spawn(move || {
                let mut f = fs::OpenOptions::new().write(true).open(fifo).unwrap();
                let mode = fs::metadata(&made).unwrap().mode() & 0o7777;
                f.write_all(b"data\n").unwrap();
                mode
            })
        };
        let preserve = format!("--preserve={attr}");
        let child = Command::new(env!("CARGO_BIN_EXE_blockio"))
            .current_dir(w)
            .args([
                "cp",
                &preserve,
                "-R",
                "--copy-contents",
                "--parents",
                attr,
                "d",
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mode = writer.join().unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{attr}: {}", messages(&o.stderr));
        assert_eq!(
            mode & closed,
            0,
            "--preserve={attr}: d/{attr} was {mode:o} while the copy ran"
        );
        assert_eq!(fs::read(made.join("fifo")).unwrap(), b"data\n");
    }
}

/// `-t DIR` and `-T`, as GNU.
#[test]
fn target_directory_options_work_as_gnu_does() {
    let setup = "echo data > f; mkdir d e; echo in > d/x; echo old > e/x";
    for args in [
        &["-t", "e", "f"][..],
        &["-rt", "e", "d", "f"],
        &["--target-directory=e", "f"],
        &["--target=e", "f"],
        &["-rT", "d", "new"],
        &["-rT", "d", "e"],
        &["-T", "f", "d"],
        &["-T", "f", "g"],
        &["-t", "f", "d"],
        &["-t", "nowhere", "f"],
    ] {
        like_gnu(setup, args);
    }
}

/// Usage errors print GNU's message (and its pointer to `--help`) and
/// exit with 1; long options may be abbreviated; options and operands
/// mix; `--` ends the options.
#[test]
fn usage_errors_and_option_syntax_as_gnu() {
    let setup = "echo data > f; mkdir d; echo in > d/x";
    for args in [
        &[][..],
        &["f"],
        &["--bogus", "f", "g"],
        &["--bogus=1", "f", "g"],
        &["--re", "f", "g"],
        &["-q", "f", "g"],
        &["-t"],
        &["--target-directory"],
        &["--recursive=yes", "d", "g"],
        &["-T", "f", "g", "h"],
        &["-t", ".", "-T", "f"],
        &["-t", "d", "-t", "d", "f"],
        &["--rec", "d", "g"],
        &["d", "g", "--recursive"],
        &["--", "-x", "f"],
        &["-rP"],
        &["--no-target", "f", "g"],
        &["--arch", "d", "g"],
        // Ambiguous abbreviations are named whole, value and all, and
        // list each option once (`--path` is `--parents`), as glibc's
        // getopt_long does; the empty name abbreviates every option.
        &["--parents", "f", "d/x", "nodest"],
        &["--parents", "f", "d/x", "nodir/"],
        &["--parents", "f", "d/x", "f"],
        &["--parents", "f", "nodest"],
        &["--p", "f", "g"],
        &["--s=x", "f", "g"],
        &["--=", "f", "g"],
        &["--no", "f", "g"],
    ] {
        let o = like_gnu(setup, args);
        assert_ne!(o.code, Some(2), "{args:?}");
    }
}

/// What happens to existing destinations: `-v`, `-u`, `-n`, `-i`,
/// `--remove-destination`, as GNU, on files, trees, links and FIFOs.
#[test]
fn overwrite_options_work_as_gnu_does() {
    let setup = "echo new > f; touch -d 2010-01-01 f; mkdir d; echo old > d/f; \
                 touch -d 2000-01-01 d/f; echo newer > d/g; touch -d 2030-01-01 d/g; \
                 ln -s f l; ln f hard; mkdir -p s/sub t/s; echo a > s/x; echo c > s/sub/y; \
                 ln -s x s/lx; echo b > t/s/x; ln -s nowhere t/s/lx; mkfifo s/p; \
                 touch -d 2000-01-01 s/x t/s/x";
    for args in [
        &["-v", "f", "d/f"][..],
        &["-v", "f", "d"],
        &["-u", "f", "d/f"],
        &["-u", "f", "d/g"],
        &["-uv", "f", "d/g"],
        &["--update", "f", "d/g"],
        &["-nv", "f", "d/f"],
        &["-rv", "s", "t"],
        &["-av", "s", "t"],
        &["-av", "s", "new"],
        &["-ru", "s", "t"],
        &["-rn", "s", "t"],
        &["-v", "--remove-destination", "f", "d/f"],
        &["-v", "--remove-destination", "l", "d/f"],
        &["-av", "--remove-destination", "l", "d"],
        &["--remove-destination", "f", "hard"],
        &["--remove-destination", "-P", "l", "f"],
        &["-av", "l", "d"],
        &["-f", "f", "d/f"],
        &["-if", "f", "new-file"],
        &["-in", "f", "d/f"],
        &["-ni", "f", "new-file"],
    ] {
        like_gnu(setup, args);
    }
    // `-u` onto a link to something newer keeps it.
    let setup = "mkdir s t; echo x > s/x; touch -d 2001-01-01 s/x; mkdir t2; ln -s ../t2 t/x";
    for args in [&["-ru", "s/.", "t"][..], &["-u", "s/x", "t/x"]] {
        like_gnu(setup, args);
    }
    // `-u` onto a link to the source itself, older or newer than it: "the
    // same file" first, as GNU's order is (random seed 3051).
    for touch in ["2030-01-01", "2000-01-01"] {
        let setup = format!(
            "mkdir s t; echo x > s/x; touch -d 2011-01-01 s/x; ln -s \"$PWD/s/x\" t/x; \
             touch -h -d {touch} t/x"
        );
        for args in [&["-ru", "s/.", "t"][..], &["-rpu", "s/.", "t"]] {
            let gnu = like_gnu(&setup, args);
            assert_eq!(gnu.code, Some(1), "{gnu:?}");
        }
    }
    // `-n` onto a link that leads nowhere is refused, not skipped.
    let setup = "mkdir s t; echo x > s/x; echo y > s/y; ln -s nowhere t/x; ln -s ../s/y t/y";
    for args in [
        &["-rn", "s/.", "t"][..],
        &["-n", "s/x", "t/x"],
        &["-n", "s/y", "t/y"],
    ] {
        like_gnu(setup, args);
    }
}

/// `-i` asks before overwriting (GNU's question, on standard error) and
/// goes on only on a yes.
#[test]
fn interactive_asks_as_gnu_does() {
    let setup = "echo new > f; echo old > g; mkdir d; ln -s x d/g";
    for (args, input) in [
        (&["-i", "f", "g"][..], "n\n"),
        (&["-i", "f", "g"], "y\n"),
        (&["-i", "f", "g"], "yes\n"),
        (&["-i", "f", "g"], ""),
        (&["-iv", "f", "g"], "Y\n"),
        (&["-ia", "f", "d"], "n\n"),
        (&["-ia", "f", "d"], "y\n"),
    ] {
        like_gnu_with(&[], setup, args, input);
    }
    // A directory in the way of a file: asked first (coreutils'
    // tests/cp/cp-i.sh), then "cannot overwrite directory" on a yes.
    let setup = "mkdir -p a b/a/c; touch a/c";
    for input in ["n\n", "y\n"] {
        like_gnu_with(&[], setup, &["-iR", "a", "b"], input);
    }
}

/// `-f`: an existing file the copier cannot open for writing is removed
/// and made anew (as `nobody`, since root may write any file).
#[test]
fn force_replaces_a_file_that_cannot_be_opened() {
    assert!(root(), "this test makes files for nobody and needs root");
    let setup = "echo new > f; echo old > ro; chmod 444 ro; ln -s nowhere dangling; \
                 chown -R 65534:65534 .";
    for args in [
        &["f", "ro"][..],
        &["-f", "f", "ro"],
        &["-fv", "f", "ro"],
        &["f", "dangling"],
        &["-f", "f", "dangling"],
    ] {
        like_gnu_as(&NOBODY, setup, args);
    }
}

/// `-au`: a destination `-u` keeps (not older than the source) stands for
/// the copy of its file, and the file's other names are linked to it, as
/// GNU's (coreutils' tests/cp/preserve-link.sh). Which name comes first
/// decides which file they all become, and GNU goes by its directory
/// listing's order, so what is compared is coreutils' own check: every
/// name is one file.
#[test]
fn update_keeps_a_destination_that_the_other_names_link_to() {
    for first in ["f", "linkm"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let setup = format!(
            "mkdir -p s t/s; touch -d 2001-01-01 s/f; for n in linkm linke fileo fileu; do \
             ln s/f s/$n; done; touch t/s/{first}; ln t/s/{first} t/s/linke; \
             touch -d 2000-01-01 t/s/fileo; touch t/s/fileu"
        );
        assert!(Command::new("sh")
            .args(["-c", &setup])
            .current_dir(d)
            .status()
            .unwrap()
            .success());
        let o = Command::new(env!("CARGO_BIN_EXE_blockio"))
            .args(["cp", "-au", "s", "t"])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", messages(&o.stderr));
        let ino = |n: &str| fs::metadata(d.join("t/s").join(n)).unwrap().ino();
        for n in ["linkm", "linke", "fileo", "fileu"] {
            assert_eq!(
                ino(n),
                ino("f"),
                "t/s/{n} is t/s/f (t/s/{first} there first)"
            );
        }
    }
}

/// A file copied onto a link the same copy just made (two sources of one
/// name) is refused in GNU's words, whether the link leads to a file or
/// nowhere, and nothing is written through it (coreutils'
/// tests/cp/abuse.sh).
#[test]
fn a_link_the_copy_just_made_is_not_written_through() {
    for setup in [
        "mkdir a b c; ln -s ../t a/1; echo payload > b/1",
        "mkdir a b c; ln -s ../t a/1; echo payload > b/1; echo i > t",
    ] {
        let o = like_gnu(setup, &["-dR", "a/1", "b/1", "c"]);
        assert!(o.stderr.contains("just-created symlink"), "{}", o.stderr);
    }
}

/// A destination behind a directory the copier may not search is "cannot
/// stat", and nothing is copied (coreutils' tests/cp/fail-perm.sh, as
/// `nobody`, since root may search any directory).
#[test]
fn a_destination_that_cannot_be_looked_at_is_cannot_stat() {
    assert!(root(), "this test makes files for nobody and needs root");
    let setup = "mkdir -p D/D; touch F; ln -s D/D symlink; chown -R 65534:65534 .; chmod 0 D";
    for args in [
        &["F", "symlink"][..],
        &["--no-target-directory", "F", "symlink"],
        &["--target-directory=symlink", "F"],
    ] {
        let o = like_gnu_as(&NOBODY, setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.stderr);
    }
}

/// A directory the copier may read but not search is listed, and each
/// of its entries is "cannot stat", as GNU says; its copy is made. Before,
/// the listing reopened the directory through itself, which needs search
/// permission: "cannot read directory" for the directory as a whole.
#[test]
fn a_directory_that_cannot_be_searched_is_listed_and_its_entries_cannot_be_stat_as_gnu() {
    assert!(root(), "this test makes files for nobody and needs root");
    let setup = "mkdir -p s/nx s/ok; echo 1 > s/nx/b; echo 2 > s/nx/c; mkdir s/nx/sub; \
                 echo 3 > s/ok/f; chown -R 65534:65534 .; chmod 644 s/nx";
    for args in [
        &["-r", "s", "d"][..],
        &["-a", "s", "d"],
        &["-r", "s/nx", "d"],
    ] {
        let o = like_gnu_as(&NOBODY, setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains("cannot stat"), "{args:?}: {}", o.stderr);
    }
}

/// A file operand in a directory the copier may search but not read is
/// copied, as GNU copies it. Before, its directory was opened for
/// reading: "cannot access 's/x': Permission denied", nothing copied.
#[test]
fn a_file_in_a_directory_that_can_be_searched_but_not_read_is_copied_as_gnu() {
    assert!(root(), "this test makes files for nobody and needs root");
    let setup = "mkdir -p s/x d; echo b > s/x/b; echo c > c; chown -R 65534:65534 .; chmod 111 s/x";
    for args in [
        &["s/x/b", "d/"][..],
        &["-a", "s/x/b", "d/"],
        &["--parents", "s/x/b", "d"],
        &["c", "s/x/b", "d"],
    ] {
        let o = like_gnu_as(&NOBODY, setup, args);
        assert_eq!(o.code, Some(0), "{args:?}: {}", o.stderr);
    }
}

/// Numbered backups of many files in one destination directory, copied by
/// several workers at once: each file's next number is found from a
/// listing of its own, so every old backup stays and each file gets the
/// number after its highest, as with GNU. (The destination directory's
/// descriptor is shared by the workers; a listing read through it would
/// see another's offset.)
#[test]
fn numbered_backups_of_many_files_in_one_directory_as_gnu() {
    let setup = "mkdir s d; for i in $(seq 60); do echo new$i > s/f$i; echo old$i > d/f$i; \
                 echo b1 > d/f$i.~1~; echo b2 > d/f$i.~2~; done";
    let o = like_gnu(setup, &["-r", "--backup=numbered", "s/.", "d"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.tree[OsStr::new("d/f60.~3~")].contains("old60"),
        "{:?}",
        o.tree.get(OsStr::new("d/f60.~3~"))
    );
}

/// `-p`, `-a`, `--preserve=LIST` and `--no-preserve=LIST` keep what GNU
/// keeps: `-p` mode, owner and times but not extended attributes or hard
/// links; `--no-preserve=mode` gives new files the default mode; plain
/// `-r` keeps a directory's sticky bit and a FIFO's special bits, not a
/// directory's set-user-ID and set-group-ID bits (before, the sticky bit
/// was dropped too).
#[test]
fn preserve_lists_keep_what_gnu_keeps() {
    let setup = "mkdir s; echo a > s/f; ln s/f s/h; chmod 640 s/f; chmod 2750 s; \
                 python3 -c \"import os; os.setxattr('s/f', 'user.x', b'1')\"; \
                 chown 65534:100 s/f; mkdir s/sticky s/setid; chmod 1777 s/sticky; \
                 chmod 6755 s/setid; mkfifo s/p; chmod 4755 s/p; touch -d 2001-02-03 s/f s";
    for args in [
        &["-rp", "s", "t"][..],
        &["-a", "s", "t"],
        &["-r", "s", "t"],
        &["-r", "--preserve", "s", "t"],
        &["-r", "--preserve=mode", "s", "t"],
        &["-r", "--preserve=timestamps", "s", "t"],
        &["-r", "--preserve=ownership", "s", "t"],
        &["-r", "--preserve=links", "s", "t"],
        &["-r", "--preserve=xattr", "s", "t"],
        &["-r", "--preserve=all", "s", "t"],
        &["-r", "--preserve=t,ow", "s", "t"],
        &["-a", "--no-preserve=mode", "s", "t"],
        &["-a", "--no-preserve=all", "s", "t"],
        &["-a", "--no-preserve=links,xattr", "s", "t"],
        &["-rd", "s", "t"],
        &["-r", "--preserve=context", "s", "t"],
        &["-r", "--preserve=bogus", "s", "t"],
        &["-r", "--no-preserve", "s", "t"],
        &["-rZ", "s", "t"],
        &["-r", "--context=x", "s", "t"],
    ] {
        like_gnu(setup, args);
    }
}

/// `-rs` onto what is already there, the source named by its absolute
/// path (through `/proc/self/cwd`, the same on both sides): what is in
/// the way of a link to a symbolic link or a FIFO is removed first
/// (unless it is a hard link of that very link: then it is left), and a
/// hard link of a regular source file is "the same file", as GNU 9.1
/// does; a link to a source directory in its copy's place cannot be
/// overwritten. Before, blockio said "File exists" of each, and of the
/// last that it was the same file.
#[test]
fn symbolic_links_of_a_tree_replace_what_is_in_the_way_as_gnu_does() {
    let setup = "mkdir -p s t/s; echo a > s/a; ln -s a s/l1; ln -s a s/l2; ln -s nowhere s/l3; \
                 mkfifo s/f1 s/f2; ln s/a t/s/a; ln -s \"$PWD/s/l1\" t/s/l1; echo old > t/s/l2; \
                 ln -P s/l3 t/s/l3; ln -s \"$PWD/s/f1\" t/s/f1; echo x > t/s/f2";
    for args in [
        &["-rs", "/proc/self/cwd/s", "t"][..],
        &["-rsv", "/proc/self/cwd/s", "t"],
        &["-rsn", "/proc/self/cwd/s", "t"],
        &["-rsb", "/proc/self/cwd/s", "t"],
        // The hard link of the source is the same file before `-u`
        // compares times and before `-i` asks (random seed 3532).
        &["-rsu", "/proc/self/cwd/s", "t"],
    ] {
        like_gnu(setup, args);
    }
    like_gnu_with(
        &[],
        "mkdir -p s t/s; echo a > s/a; ln s/a t/s/a",
        &["-rsi", "/proc/self/cwd/s", "t"],
        "n\n",
    );
    // A link to a source directory where its copy goes: "cannot
    // overwrite non-directory" with -s, where without it GNU calls them
    // the same file.
    let setup = "mkdir -p s/d t/s; ln -s \"$PWD/s/d\" t/s/d";
    for args in [
        &["-rs", "/proc/self/cwd/s", "t"][..],
        &["-rsu", "/proc/self/cwd/s", "t"],
        &["-r", "/proc/self/cwd/s", "t"],
    ] {
        like_gnu(setup, args);
    }
}

/// `-s` with a relative source, the link made outside the working
/// directory: refused ("can make relative symbolic links only in current
/// directory", the name quoted only where a shell needs it: `été` is
/// not), but only once what is in the way has been judged: `-u` keeps a
/// newer file and `-n` any file without a word, `--remove-destination`
/// removes it first, `-f` and `-b` leave it. Before, blockio refused
/// before looking, and quoted every name beyond ASCII.
#[test]
fn relative_symbolic_links_elsewhere_are_refused_after_what_is_in_the_way_is_judged() {
    let setup = "mkdir -p s/sub t/s/sub; echo a > s/a; echo b > 's/\u{e9}t\u{e9}'; \
                 echo c > s/sub/c; echo old > t/s/a; echo new > t/s/sub/c; \
                 touch -d 2000-01-01 s/a s/sub/c; touch -d 2001-01-01 t/s/a; \
                 touch -d 2030-01-01 t/s/sub/c";
    for args in [
        &["-rs", "s", "t"][..],
        &["-rsu", "s", "t"],
        &["-rsn", "s", "t"],
        &["-rsf", "s", "t"],
        &["-rs", "--remove-destination", "s", "t"],
        &["-rsb", "s", "t"],
        &["-s", "s/\u{e9}t\u{e9}", "t/"],
    ] {
        // Names are quoted as GNU quotes them in a UTF-8 locale.
        like_gnu_as(&["env", "LC_ALL=C.UTF-8"], setup, args);
    }
}

/// `-l` and `-s` make hard and symbolic links instead of copies, as GNU:
/// directories made, `-rl` following links in the tree (GNU's default for
/// `-l`), relative symbolic links only in the current directory, an
/// existing destination an error unless `-f`.
#[test]
fn link_options_work_as_gnu_does() {
    let setup = "echo a > f; echo o > g; mkdir -p d s/sub; echo x > s/x; ln -s x s/lx; \
                 echo y > s/sub/y; ln -s /nonexistent s/dang; ln f hard; ln -s f lf";
    for args in [
        &["-l", "f", "h"][..],
        &["-l", "f", "g"],
        &["-lf", "f", "g"],
        &["-lv", "f", "d"],
        &["-l", "f", "hard"],
        &["-l", "f", "f"],
        &["-rl", "s", "t"],
        &["-rlP", "s", "t"],
        &["-al", "s", "t"],
        &["-s", "f", "k"],
        &["-s", "f", "d"],
        &["-s", "f", "g"],
        &["-sf", "f", "g"],
        &["-sv", "f", "k"],
        &["-rs", "s", "t"],
        &["-ls", "f", "k"],
        &["-ln", "f", "g"],
        // A hard link of the source in the way: the same file with -f.
        &["-sf", "f", "hard"],
        &["-s", "f", "hard"],
        // A link to the source in the way: made anew with -f (coreutils'
        // tests/cp/cross-dev-symlink.sh), "File exists" without.
        &["-dsf", "f", "lf"],
        &["-sf", "f", "lf"],
        &["-s", "f", "lf"],
    ] {
        like_gnu(setup, args);
    }
    // A directory where a link goes, and -u with links. Every time that
    // -u compares is set: a file and a directory made within one clock
    // tick of each other have the same time, and -u then keeps either.
    let setup = "mkdir -p s t/s/x; echo x > s/x; echo y > s/y; echo old > t/s/y; \
                 touch -d 2000-01-01 s/y s/x";
    for args in [
        &["-rl", "s", "t"][..],
        &["-rlf", "s", "t"],
        &["-rlu", "s", "t"],
        &["-rlfu", "s", "t"],
    ] {
        like_gnu(setup, args);
    }
    // Absolute sources make links anywhere: run in a directory whose path
    // is the same for both tools.
    let d = tempfile::tempdir().unwrap();
    let abs = d.path().join("f");
    fs::write(&abs, b"a").unwrap();
    let setup = "mkdir -p d s/sub; echo x > s/x";
    let abs = abs.to_str().unwrap();
    like_gnu(setup, &["-s", abs, "d"]);
    like_gnu(setup, &["-sv", abs, "d/k"]);
}

/// Files, links and trees for the backup tests to replace.
const BACKUP_SETUP: &str = "echo a > f; echo o > g; echo old1 > n.~1~; echo n > n; ln -s f l; \
     mkdir -p s t/s; echo x > s/x; ln -s x s/lx; echo old > t/s/x; ln -s old t/s/lx";

/// `-b`, `--backup=CONTROL`, `-S`: the replaced destination is kept aside
/// under GNU's names (`g~`, `g.~1~`), for files, links and whole trees.
#[test]
fn backup_options_work_as_gnu_does() {
    let setup = BACKUP_SETUP;
    for args in [
        &["-b", "f", "g"][..],
        &["-bv", "f", "g"],
        &["--backup", "f", "n"],
        &["--backup=numbered", "f", "g"],
        &["--backup=t", "f", "n"],
        &["--backup=existing", "f", "n"],
        &["--backup=nil", "f", "g"],
        &["--backup=simple", "f", "n"],
        &["--backup=never", "f", "n"],
        &["--backup=none", "f", "g"],
        &["--backup=off", "f", "g"],
        &["--backup=nu", "f", "g"],
        &["--backup=bogus", "f", "g"],
        &["-S", ".bak", "f", "g"],
        &["--suffix=.x", "-v", "f", "g"],
        &["-b", "f", "new"],
        &["-bn", "f", "g"],
        &["-ab", "s", "t"],
        &["-rb", "s", "t"],
        &["-abv", "l", "g"],
        &["-b", "f", "f"],
        &["-b", "f", "l"],
        &["-b", "l", "f"],
        &["-lb", "f", "g"],
        &["-sb", "f", "g"],
    ] {
        like_gnu(setup, args);
    }
}

/// A `--backup`, `--sparse` or `--preserve` value GNU's argmatch refuses
/// is quoted by the locale: curly quotes where the character set is UTF-8.
#[test]
fn a_refused_option_value_is_quoted_as_gnu_quotes_it() {
    let setup = BACKUP_SETUP;
    for args in [
        &["--backup=bogus", "f", "g"][..],
        &["--sparse=a", "f", "g"],
        &["--preserve=q", "f", "g"],
    ] {
        let gnu = like_gnu_as(&["env", "LC_ALL=C.UTF-8"], setup, args);
        assert!(gnu.stderr.contains('\u{2018}'), "{args:?}: {gnu:?}");
    }
}

/// `cp --force --backup F F` copies F to its backup name (coreutils'
/// tests/cp/backup-1.sh); `cp -b a~ a` would back `a` up onto its own
/// source, and is refused (tests/cp/backup-is-src.sh).
#[test]
fn a_backup_of_the_source_itself_as_gnu_makes_it() {
    let setup = "echo F > F; echo a > a; echo a-tilde > a~; mkdir d; echo d > d/F";
    for args in [
        &["--force", "--backup=simple", "--suffix=.b", "F", "F"][..],
        &["-T", "--force", "--backup=simple", "--suffix=.b", "F", "F"],
        &["-f", "--backup=numbered", "F", "F"],
        &["-fbv", "d/F", "d/F"],
        &["-b", "F", "F"],
        &["-fb", "./F", "F"],
        &["--b=simple", "a~", "a"],
        &["-fb", "a~", "a"],
        &["-b", "--suffix=.x", "a~", "a"],
        &["--backup=numbered", "a~", "a"],
    ] {
        like_gnu(setup, args);
    }
}

/// One source named twice with backups: no "specified more than once";
/// the second copy is refused, or with numbered backups made again with a
/// second backup.
#[test]
fn one_source_named_twice_with_backups_as_gnu_copies_it() {
    let setup = "echo f > f; mkdir d s; echo old > d/f; echo x > s/x; mkdir d/s; echo o > d/s/x";
    for args in [
        &["-b", "f", "f", "d"][..],
        &["--backup=numbered", "f", "f", "d"],
        &["--backup=existing", "f", "f", "d"],
        &["-rb", "s", "s", "d"],
        &["-r", "--backup=numbered", "s", "s", "d"],
    ] {
        like_gnu(setup, args);
    }
}

/// Backup numbers as GNU reads them: decimal of any length (never
/// wrapping round at 2^64 onto `x.~0~`), none with a leading zero.
#[test]
fn backup_numbers_are_read_as_gnu_reads_them() {
    for setup in [
        "echo A > x; echo B > y; echo P > x.~0~; echo C > x.~18446744073709551615~",
        "echo A > x; echo B > y; echo C > x.~9~; echo D > x.~010~",
        "echo A > x; echo B > y; echo C > x.~99999999999999999999~; echo D > x.~+5~",
        "echo A > x; echo B > y; echo C > x.~1x~; echo D > x.~~",
    ] {
        for args in [
            &["--backup=numbered", "y", "x"][..],
            &["--backup=existing", "y", "x"],
        ] {
            like_gnu(setup, args);
        }
    }
}

/// `-x`: a directory on another file system is made, not walked; here a
/// tmpfs mounted in a private mount namespace for the copy only.
#[test]
fn one_file_system_stops_at_mount_points() {
    assert!(
        root(),
        "this test mounts a tmpfs and needs root (CI runs as root)"
    );
    let setup = "mkdir -p s/m s/d; echo x > s/x; echo y > s/d/y";
    let prefix = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t tmpfs cp-x s/m && echo hidden > s/m/f && exec \"$0\" \"$@\"",
    ];
    for args in [
        &["-rx", "s", "t"][..],
        &["-ax", "s", "t"],
        &["-r", "s", "t"],
    ] {
        let o = like_gnu_as(&prefix, setup, args);
        assert_eq!(
            o.tree.contains_key(&OsString::from("t/m/f")),
            !args.contains(&"-rx") && !args.contains(&"-ax"),
            "{args:?}: {o:?}"
        );
    }
}

/// `-L` in a tree: links are copied as what they lead to, a link to a
/// directory walked, a link back up is GNU's "cyclic" error; `-H` follows
/// only the command line's.
#[test]
fn dereference_follows_links_inside_trees_as_gnu_does() {
    let setup = "mkdir -p s/sub o; echo x > s/x; ln -s x s/lx; ln -s .. s/sub/up; \
                 ln -s /nonexistent s/dang; ln -s sub s/lsub; echo other > o/f; \
                 ln -s ../o s/lo; ln -s s ls";
    for args in [
        &["-rL", "s", "t"][..],
        &["-aL", "s", "t"],
        &["-rH", "ls", "t"],
        &["-rL", "ls", "t"],
        &["-r", "ls", "t"],
    ] {
        like_gnu(setup, args);
    }
}

/// `--parents` copies each source by its whole path under the directory,
/// making the directories on the way with their sources' modes (and with
/// `-p` times), as GNU, which says them with `-v` without quotes.
#[test]
fn parents_copies_whole_paths_as_gnu_does() {
    let setup = "mkdir -p a/b d; echo x > a/b/f; echo y > a/g; chmod 750 a; \
                 touch -d 2001-01-01 a a/b";
    for args in [
        &["--parents", "a/b/f", "d"][..],
        &["--parents", "-v", "a/b/f", "a/g", "d"],
        &["--parents", "-p", "a/b/f", "d"],
        &["--parents", "-r", "a/b", "d"],
        &["--parents", "./a/b/f", "d"],
        &["--parents", "a/b/f", "nodir"],
        &["--parents", "a/b/f", "a/g"],
        &["--par", "-a", "a/b", "d"],
    ] {
        like_gnu(setup, args);
    }
    // Parents already at the destination: with -p they take their
    // sources' attributes, as the ones made do; without, they keep their
    // own (coreutils' tests/cp/parent-perm.sh).
    let setup = "mkdir -p a/b/c a/b/d e/a/b/c; touch a/b/c/foo a/b/d/foo; chmod 750 a; \
                 chmod 705 e/a e/a/b; touch -d 2001-01-01 a a/b";
    for args in [
        &["-p", "--parents", "a/b/d/foo", "e"][..],
        &["--parents", "a/b/d/foo", "e"],
        &["-a", "--parents", "a/b/d/foo", "e"],
        &["--preserve=mode", "--parents", "a/b/d/foo", "e"],
    ] {
        like_gnu(setup, args);
    }
}

/// `--attributes-only`: a new file is empty, an existing one keeps its
/// data and takes the attributes asked for.
#[test]
fn attributes_only_copies_no_data_as_gnu_does() {
    let setup = "echo data > f; chmod 640 f; touch -d 2001-01-01 f; echo old > g; \
                 mkdir -p s; echo x > s/x";
    for args in [
        &["--attributes-only", "f", "new"][..],
        &["--attributes-only", "f", "g"],
        &["--attributes-only", "-p", "f", "g"],
        &["--attributes-only", "-a", "s", "t"],
    ] {
        like_gnu(setup, args);
    }
    // Onto a file with two names, with -a: written into, not replaced, and
    // a link is not put in its place unless asked (coreutils'
    // tests/cp/attr-existing.sh).
    let setup = "printf 1 > f; printf 2 > g; ln g g2; ln -s f l";
    for args in [
        &["-a", "--attributes-only", "f", "g"][..],
        &["-a", "--attributes-only", "l", "g"],
        &["-a", "--remove-destination", "--attributes-only", "l", "g"],
        &["-af", "--attributes-only", "l", "g"],
    ] {
        like_gnu(setup, args);
    }
}

/// The blocks a file takes on disk.
fn blocks(p: &Path) -> u64 {
    fs::metadata(p).unwrap().blocks()
}

/// `--sparse=never` fills holes; `--sparse=always` makes holes of blocks
/// of zeros, as GNU's copies (same contents and allocation, compared in
/// one directory); bad WHENs are GNU's usage errors.
#[test]
fn sparse_modes_allocate_as_gnu_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A hole, then data, then 1 MiB of written zeros, then data.
    let mut data = vec![0u8; 3 << 20];
    data[(1 << 20)..(1 << 20) + 5].copy_from_slice(b"hello");
    data[(3 << 20) - 5..].copy_from_slice(b"world");
    fs::write(d.join("zeros"), &data).unwrap();
    let s = Command::new("sh")
        .current_dir(d)
        .args(["-ec", "truncate -s 2M holes; printf data >> holes"])
        .status()
        .unwrap();
    assert!(s.success());
    for (when, src) in [
        ("never", "holes"),
        ("always", "zeros"),
        ("auto", "holes"),
        ("always", "holes"),
    ] {
        let flag = format!("--sparse={when}");
        let gnu = Command::new("/usr/bin/cp")
            .current_dir(d)
            .args([&flag, src, "gnu"])
            .status()
            .unwrap();
        let ours = Command::new(env!("CARGO_BIN_EXE_blockio"))
            .current_dir(d)
            .args(["cp", &flag, src, "ours"])
            .output()
            .unwrap();
        assert!(
            gnu.success() && ours.status.success(),
            "{}",
            messages(&ours.stderr)
        );
        assert_eq!(
            fs::read(d.join("ours")).unwrap(),
            fs::read(d.join(src)).unwrap()
        );
        assert_eq!(
            blocks(&d.join("ours")),
            blocks(&d.join("gnu")),
            "{flag} {src}: allocation"
        );
        fs::remove_file(d.join("ours")).unwrap();
        fs::remove_file(d.join("gnu")).unwrap();
    }
    for args in [
        &["--sparse=bogus", "f", "g"][..],
        &["--sparse=a", "f", "g"],
        &["--sparse", "f", "g"],
    ] {
        like_gnu("echo data > f", args);
    }
}

/// `--reflink=always` clones or fails with GNU's message (on a file system
/// without clones, such as ext4 or tmpfs); `auto` and `never` copy.
#[test]
fn reflink_modes_as_gnu() {
    let setup = "echo data > f";
    for args in [
        &["--reflink=auto", "f", "g"][..],
        &["--reflink=never", "f", "g"],
        &["--reflink=bogus", "f", "g"],
        &["--reflink=a", "f", "g"],
    ] {
        like_gnu(setup, args);
    }
    let (gnu, ours) = both(setup, &[], &["--reflink", "f", "g"], "");
    assert_eq!(ours.code, gnu.code);
    if gnu.code == Some(1) {
        // No clones here: the same message; the empty copy GNU leaves
        // behind is removed (nothing incomplete is left).
        assert!(
            gnu.stderr.starts_with("cp: failed to clone 'g' from 'f'"),
            "{gnu:?}"
        );
        let said = ours
            .stderr
            .replace(" (the incomplete copy 'g' was removed)", "");
        assert_eq!(said, gnu.stderr);
        assert!(!ours.tree.contains_key(&OsString::from("g")), "{ours:?}");
    } else {
        assert_eq!(ours, gnu);
    }
}

/// What is already in a destination tree, as GNU treats it (cases the
/// random comparison in `cp_random.rs` found): links to the source's own
/// entries, hard links, directories where files go, FIFOs, with the
/// options that change what happens to them.
#[test]
fn existing_entries_in_trees_as_gnu_treats_them() {
    let setup = "mkdir -p s/d t/s; echo a > s/f; ln s/f s/f2; mkfifo s/p; ln -s f s/l; \
                 chmod 700 s/d; touch -d 2005-01-01 s/f; \
                 mkdir -m 755 t/s/d; ln -s \"$PWD/s/p\" t/s/p; echo x > t/s/f; ln t/s/f t/s/f2; \
                 echo y > t/s/l; touch -d 2001-01-01 t/s/l";
    for args in [
        // Two names of one file: -a replaces them (two new names of one
        // copy); without -a they are written into.
        &["-a", "s", "t"][..],
        &["-r", "s", "t"],
        // A link to the source FIFO: the same file, under -P only.
        &["-rp", "s", "t"],
        &["-rL", "s", "t"],
        &["-rH", "s", "t"],
        &["-rn", "s", "t"],
        &["-r", "--remove-destination", "s", "t"],
        // A merged directory keeps its mode unless the mode is kept.
        &["-r", "--preserve=timestamps", "s", "t"],
        &["-ru", "s", "t"],
        &["-rb", "s", "t"],
    ] {
        like_gnu(setup, args);
    }
    // A link to a source directory, and a newer directory where a file
    // goes (-u looks at the times first).
    let setup = "mkdir -p s/d t/s/f; echo a > s/f; touch -d 2000-01-01 s/f; \
                 ln -s \"$PWD/s/d\" t/s/d";
    for args in [
        &["-r", "s", "t"][..],
        &["-rn", "s", "t"],
        &["-rL", "s", "t"],
        &["-r", "--remove-destination", "s", "t"],
        &["-ru", "s", "t"],
    ] {
        like_gnu(setup, args);
    }
}

/// A directory reached again by (device, inode) is never entered: the
/// source bind-mounted below the destination (the copy would otherwise
/// nest `s/s/s/...` until the disk is full), also with `--parents`, and a
/// source that holds itself through a bind mount. Each mount is made in a
/// private mount namespace for the copy only; `timeout` bounds a runaway.
#[test]
fn a_directory_is_never_copied_into_itself_through_a_bind_mount() {
    assert!(
        root(),
        "this test bind-mounts directories and needs root (CI runs as root)"
    );
    let cases: &[(&str, &str, &[&str])] = &[
        // Nothing beside the copy in the directory that holds it: GNU
        // abandons the operand at the error, so what else it copied
        // depends on the order it reads the directory in.
        ("mkdir s m", "mount --bind s m", &["-r", "s", "m/"]),
        (
            "mkdir -p s/sub/deep m",
            "mount --bind s m",
            &["-r", "s", "m/sub/deep/"],
        ),
        (
            "mkdir a m",
            "mount --bind a m",
            &["-r", "--parents", "a", "m"],
        ),
        (
            "mkdir -p s/sub o; echo y > s/f",
            "mount --bind s s/sub",
            &["-r", "s", "o/"],
        ),
        (
            "mkdir -p s/sub o; echo y > s/f",
            "mount --bind s s/sub",
            &["-a", "s", "o/a"],
        ),
        (
            "mkdir -p s/sub o; echo y > s/f",
            "mount --bind s s/sub",
            &["-rx", "s", "o/"],
        ),
    ];
    for (setup, mount, args) in cases {
        let script = format!("{mount} && exec timeout 60 \"$0\" \"$@\"");
        let prefix = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ];
        let o = like_gnu_as(&prefix, setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {o:?}");
    }
}

/// A directory copied onto itself (the destination a bind mount of the
/// source, a link to it, or the source named twice with `-T`) is one
/// "same file" refusal of the operand, as GNU's, never a walk with one
/// message per file; with `-n` nothing is checked nor copied, and a link
/// in the way of `--remove-destination` is "cannot overwrite
/// non-directory".
#[test]
fn a_directory_onto_itself_is_one_refusal_as_gnu_makes_it() {
    assert!(
        root(),
        "this test bind-mounts directories and needs root (CI runs as root)"
    );
    let bound: &[&[&str]] = &[
        &["-a", "s/.", "t"],
        &["-rT", "s", "t"],
        &["-rT", "s/", "t/"],
        &["-ab", "s/.", "t"],
        &["-ru", "s/.", "t"],
        &["-rsT", "s", "t"],
        &["-al", "s/.", "t"],
        &["-rn", "s/.", "t"],
        &["-a", "--remove-destination", "s/.", "t"],
    ];
    let setup = "mkdir -p s/sub t; echo 1 > s/a; echo 2 > s/b; echo 3 > s/sub/c";
    let prefix = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind s t && exec timeout 60 \"$0\" \"$@\"",
    ];
    for args in bound {
        let o = like_gnu_as(&prefix, setup, args);
        assert!(o.stderr.lines().count() <= 1, "{args:?}: {o:?}");
    }
    into_itself_through_a_bind_mount_as_gnu(setup, &prefix);
}

/// `cp -r s/ t/.` with `t` a bind mount of `s` (through `prefix`): `t/.`
/// names the source itself, so the copy `s/s` is inside it. After "into
/// itself", GNU abandons the rest of the operand, so which of `a`, `b`
/// and `sub` it copied first depends on the order it read `s` in; blockio
/// skips only that directory (see the module docs of
/// `blockio_tools::copy`). Status and messages are GNU's, and the tree is
/// GNU's plus the rest of the copy.
fn into_itself_through_a_bind_mount_as_gnu(setup: &str, prefix: &[&str]) {
    let (gnu, ours) = both(setup, prefix, &["-r", "s/", "t/."], "");
    assert_eq!(
        (&ours.code, &ours.stdout, &ours.stderr),
        (&gnu.code, &gnu.stdout, &gnu.stderr),
        "`cp -r s/ t/.`: ours (left), GNU's (right)"
    );
    assert_eq!(gnu.stderr.lines().count(), 1, "{gnu:?}");
    for (name, what) in &gnu.tree {
        assert_eq!(ours.tree.get(name), Some(what), "{name:?}: {ours:?}");
    }
    let copied = ["s/s/a", "s/s/b", "s/s/sub", "s/s/sub/c"];
    let extra: Vec<_> = ours
        .tree
        .keys()
        .filter(|k| !gnu.tree.contains_key(*k))
        .collect();
    assert!(
        extra
            .iter()
            .all(|k| copied.iter().any(|c| k.as_os_str() == *c)),
        "{extra:?}"
    );
    for c in copied {
        assert!(ours.tree.contains_key(&OsString::from(c)), "{c}: {ours:?}");
    }
}

/// A directory copied onto itself through a symbolic link to it (or
/// named twice with `-T`) is refused as GNU refuses it, and its file is
/// left as it was.
#[test]
fn a_directory_onto_itself_through_a_link_is_refused_as_gnu_refuses_it() {
    let linked: &[&[&str]] = &[
        &["-r", "s2/.", "t2"],
        &["-rL", "s2/.", "t2"],
        &["-rH", "s2/.", "t2"],
        &["-r", "s2/.", "t2/."],
        &["-rT", "s2", "t2"],
        &["-rT", "s2/", "t2"],
        &["-rHT", "s2", "t2"],
        &["-rT", "s2", "s2"],
        &["-a", "--remove-destination", "-T", "s2", "t2"],
        &["-n", "s2/f", "t2/f"],
    ];
    for args in linked {
        let o = like_gnu("mkdir s2; echo x > s2/f; ln -s s2 t2", args);
        assert_eq!(
            o.tree[&OsString::from("s2/f")].split(" mode").next(),
            Some("file \"x\\n\"")
        );
    }
}

/// Inside a tree, a destination directory that is the source's own (a
/// bind mount of it) is one "same file" refusal of that directory, as
/// GNU's; with `-b` or `--remove-destination` a file whose destination is
/// its own directory entry is refused rather than moved aside or removed
/// (GNU's rule: the backup would rename the source).
#[test]
fn a_source_directory_met_again_inside_a_tree_is_refused_as_gnu_refuses_it() {
    assert!(
        root(),
        "this test bind-mounts directories and needs root (CI runs as root)"
    );
    let setup = "mkdir -p s/sub t/sub; echo 1 > s/a; echo 3 > s/sub/c; echo 4 > s/sub/d";
    let prefix = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind s/sub t/sub && exec timeout 60 \"$0\" \"$@\"",
    ];
    let cases: &[&[&str]] = &[
        &["-rT", "s", "t"],
        &["-a", "s/.", "t"],
        &["-rLT", "s", "t"],
        &["-rbT", "s", "t"],
        &["-rubT", "s", "t"],
        &["-rT", "--remove-destination", "s", "t"],
        &["-rnT", "s", "t"],
        &["-rlT", "s", "t"],
    ];
    for args in cases {
        let o = like_gnu_as(&prefix, setup, args);
        assert_eq!(
            o.tree[&OsString::from("s/sub/c")].split(" mode").next(),
            Some("file \"3\\n\"")
        );
    }
    // The whole source bind-mounted, with backups: the names differ at
    // the top, so each entry inside is judged.
    let whole = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount --bind s t && exec timeout 60 \"$0\" \"$@\"",
    ];
    for args in [
        &["-rbT", "s", "t"][..],
        &["-r", "--backup=numbered", "-T", "s", "t"],
    ] {
        like_gnu_as(
            &whole,
            "mkdir -p s/sub t; echo 1 > s/a; echo 3 > s/sub/c",
            args,
        );
    }
}

/// `-v` and messages quote a name that starts with bytes to escape after
/// an empty quoted run (`''$'\001'`), as GNU's quoting does; `-sv` says
/// what it is about to do (and what it removed or backed up and put
/// back) before refusing a relative link outside the current directory;
/// `-lf`/`-sf` replace what is in the way without a "removed" line.
#[test]
fn verbose_lines_and_quoting_as_gnu_writes_them() {
    // A name of one control character: quoted as bytes that are not
    // UTF-8 are, in any locale.
    let setup = "echo x > f; printf x > \"$(printf '\\001')\"; mkdir d";
    let cases: &[(&str, &[&str])] = &[
        ("", &["-v", "\u{1}", "d"]),
        ("", &["-v", "--parents", "\u{1}", "d"]),
        ("", &["-v", "f", "\u{1}"]),
        ("", &["\u{1}", "\u{1}"]),
        ("", &["\u{1}\u{1}", "d"]),
        ("", &["-sv", "f", "d"]),
        ("", &["-sv", "f", "d/g"]),
        ("echo y > d/f", &["-sv", "f", "d"]),
        ("echo y > d/f", &["-sbv", "f", "d"]),
        ("echo y > d/f", &["-sv", "--remove-destination", "f", "d"]),
        ("ln -s f sl; ln -s x d/sl", &["-sPv", "sl", "d"]),
        // A link made over what is in the way by `-f` alone: no
        // "removed" line; by `--remove-destination`: one.
        ("echo y > g", &["-lfv", "f", "g"]),
        ("echo y > g", &["-sfv", "f", "g"]),
        ("echo y > g", &["-lv", "--remove-destination", "f", "g"]),
        (
            "echo z > d/f; mkdir -p e/d; echo y > e/d/f",
            &["-rlfv", "d", "e"],
        ),
    ];
    for (more, args) in cases {
        like_gnu(&format!("{setup}; {more}"), args);
    }
}

/// `-rL` with a link to a directory above the destination: the walk
/// reaches the growing copy through it. GNU copies until the path is
/// longer than `PATH_MAX`; blockio, which copies trees of any depth,
/// refuses to enter its own copy instead (a bounded copy, and an error).
#[test]
fn dereferencing_a_link_to_an_ancestor_of_the_destination_ends() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path();
    fs::create_dir_all(w.join("x/s/a")).unwrap();
    std::os::unix::fs::symlink("../..", w.join("x/s/a/up")).unwrap();
    fs::write(w.join("x/s/f"), "hi\n").unwrap();
    fs::write(w.join("x/other"), "o\n").unwrap();
    let o = Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_blockio"), "cp", "-rL", "s", "d"])
        .current_dir(w.join("x"))
        .output()
        .unwrap();
    let err = messages(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot copy a directory, 's', into itself, 'd'"),
        "{err}"
    );
    assert!(
        err.contains("cannot copy cyclic symbolic link 's/a/up/s'"),
        "{err}"
    );
    let d = w.join("x/d");
    assert_eq!(fs::read_to_string(d.join("a/up/other")).unwrap(), "o\n");
    assert!(!d.join("a/up/d").exists(), "the copy was entered: {err}");
    assert!(!d.join("a/up/s").exists(), "the cycle was entered: {err}");
}

/// `--preserve=links`: a destination refused as the source itself, or
/// kept by `-i`, is not a copy, so the next name of the same file is
/// copied anew rather than linked to it (before, `d/s/g` became a link of
/// the source: writing to the copy wrote into the source).
#[test]
fn hard_links_are_never_made_to_a_destination_that_is_not_a_copy() {
    let same = "mkdir -p s d/s; echo hi > s/f; ln s/f s/g; ln s/f d/s/f";
    for (setup, args, input) in [
        (same, &["-a", "s", "d"][..], ""),
        (same, &["-r", "--preserve=links", "s", "d"], ""),
        (
            "mkdir -p s d/s; echo hi > s/f; ln s/f s/g; ln s/f d/s/f; echo other > d/s/g",
            &["-a", "s", "d"],
            "",
        ),
        (
            "mkdir -p s d; echo hi > s/f; ln s/f s/g; ln s/f d/f",
            &["-a", "s/.", "d/"],
            "",
        ),
        (
            "mkdir -p s d/s; echo F > s/f; ln s/f s/g; echo old > d/s/f",
            &["-a", "-i", "s", "d"],
            "n\n",
        ),
        // `-u` keeping a newer destination: it stands for the copy, and
        // the other names are linked to it (coreutils' preserve-link).
        (
            "mkdir -p s d/s; touch s/f; for n in linkm linke fileo fileu; do ln s/f s/$n; \
             done; touch d/s/f; ln d/s/f d/s/linke; touch -d '-1 hour' d/s/fileo; \
             touch -d '+1 hour' d/s/fileu",
            &["-au", "s", "d"],
            "",
        ),
    ] {
        like_gnu_with(&[], setup, args, input);
    }
}

/// `-u` and `-i` judge an existing FIFO before opening it: the open waits
/// for a reader, and before, with none, the copy never ended (`timeout`
/// bounds that here).
#[test]
fn update_and_interactive_decide_before_opening_a_fifo() {
    let setup = "echo new > f; mkfifo p; touch -d 2000-01-01 f; \
                 mkdir s d; echo x > s/f; touch -d 2000-01-01 s/f; mkfifo d/f";
    for (args, input) in [
        (&["-u", "f", "p"][..], ""),
        (&["-i", "f", "p"], "n\n"),
        (&["-ru", "s/f", "d/"], ""),
        (&["-ri", "s/.", "d/"], "n\n"),
    ] {
        let o = like_gnu_with(&["timeout", "20"], setup, args, input);
        assert_eq!(o.code, Some(0), "{args:?}: {o:?}");
    }
}

/// `-b` never keeps the destination aside under the source's own name:
/// with `-l` or `-s` the link was then made to the old destination and
/// the source's data was gone. GNU's "might destroy source" refusal.
#[test]
fn a_backup_never_takes_the_name_of_the_source_of_a_link() {
    let setup = "echo new > f; echo precious > 'f~'; ln 'f~' keep";
    for args in [
        &["-bl", "f~", "f"][..],
        &["-bs", "f~", "f"],
        &["--backup=existing", "-l", "f~", "f"],
        &["-b", "--attributes-only", "f~", "f"],
        &["-b", "f~", "f"],
        &["--suffix=~", "-bsf", "f~", "f"],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {o:?}");
    }
}

/// `-i` on a destination the copier may not write asks GNU's question,
/// naming its mode, before anything is opened or removed: before, `-if`
/// removed the file without asking, and `-i` alone failed without asking.
#[test]
fn interactive_asks_before_replacing_an_unwritable_file() {
    assert!(
        root(),
        "this test makes root's files and copies them as nobody"
    );
    let setup = "echo a > f; echo o > g; chmod 444 g; mkdir -p s d/s; echo a > s/f; \
                 echo o > d/s/f; chmod 444 d/s/f; chmod 777 . d/s";
    for (args, input) in [
        (&["-if", "f", "g"][..], "n\n"),
        (&["-if", "f", "g"], "y\n"),
        (&["-i", "f", "g"], "n\n"),
        (&["-i", "f", "g"], "y\n"),
        (&["-rif", "s", "d"], "n\n"),
        (&["-rif", "s", "d"], "y\n"),
    ] {
        like_gnu_with(&NOBODY, setup, args, input);
    }
}

/// `-b` and a copy that fails (here a read error): the incomplete copy is
/// removed and the file kept aside goes back to its name, as GNU puts it
/// back.
#[test]
fn a_failed_copy_puts_the_backup_back() {
    let setup = "echo precious > d; mkdir -p s t; ln -s /proc/self/mem s/m; echo old > t/m";
    for args in [
        &["-b", "/proc/self/mem", "d"][..],
        &["--backup=numbered", "/proc/self/mem", "d"],
        &["-rbL", "s/.", "t/"],
    ] {
        let (gnu, ours) = both(setup, &[], args, "");
        assert_eq!(
            (ours.code, &ours.tree),
            (gnu.code, &gnu.tree),
            "{args:?}: ours {ours:?}, GNU {gnu:?}"
        );
        assert_eq!(gnu.code, Some(1), "{args:?}: {gnu:?}");
        assert!(
            ours.stderr.contains("the file it replaced put back"),
            "{args:?}: {ours:?}"
        );
    }
}

/// `-T` takes the destination as the name itself: a link there to a
/// directory is not a directory, and nothing is written where it leads
/// (before, the copy was merged into the link's target).
#[test]
fn no_target_directory_never_merges_through_a_link() {
    let setup = "mkdir s t; echo a > s/f; ln -s t ld; touch file; ln -s file lf; \
                 ln -s nowhere dang";
    for args in [
        &["-rT", "s", "ld"][..],
        &["-aT", "s", "ld"],
        &["-rT", "--remove-destination", "s", "ld"],
        &["-rT", "s/.", "ld"],
        &["-rT", "s", "ld/"],
        &["-r", "s", "ld"],
        &["-r", "s/.", "ld"],
        &["-rT", "s", "t"],
        &["-r", "s", "lf"],
        &["-r", "s", "dang"],
    ] {
        like_gnu(setup, args);
    }
}

/// Standard output that cannot be written (`> /dev/full`): GNU's "write
/// error" and status 1 for `--help`, `--version` and `-v`, whose copy is
/// still made.
#[test]
fn output_write_errors_fail_as_gnu_does() {
    for args in [&["--help"][..], &["--version"], &["-v", "f", "g"]] {
        let run = |cmd: &[&str]| {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join("f"), "a\n").unwrap();
            let o = Command::new(cmd[0])
                .args(&cmd[1..])
                .args(args)
                .env("PATH", "/usr/bin:/bin")
                .env("LC_ALL", "C")
                .current_dir(dir.path())
                .stdout(fs::File::create("/dev/full").unwrap())
                .output()
                .unwrap();
            (
                o.status.code(),
                messages(&o.stderr),
                fs::read(dir.path().join("g")).ok(),
            )
        };
        let gnu = run(&[GNU_CP]);
        let ours = run(&[env!("CARGO_BIN_EXE_blockio"), "cp"]);
        assert_eq!(ours, gnu, "{args:?}");
        assert_eq!(gnu.0, Some(1), "{args:?}");
    }
}

/// Two sources copied to one name (`cp a/f b/f d/`): the first is
/// copied, the second refused as GNU refuses it ("will not overwrite
/// just-created"), whatever the overwrite options and whichever thread
/// comes first: neither is lost silently.
#[test]
fn a_copy_just_made_is_never_overwritten_by_a_later_operand() {
    let setup = "mkdir a b c d; echo A > a/f; echo B > b/f; ln -s ../a/f c/f";
    for args in [
        &["a/f", "b/f", "d/"][..],
        &["-f", "a/f", "b/f", "d/"],
        &["--remove-destination", "a/f", "b/f", "d/"],
        &["-b", "a/f", "b/f", "d/"],
        &["-l", "a/f", "b/f", "d/"],
        &["-d", "a/f", "c/f", "d/"],
        &["-r", "a/f", "b/f", "d"],
        &["-a", "a/f", "b/f", "a/f", "d"],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {o:?}");
    }
}

/// Operands whose copies land on the same names end as GNU's do: the
/// later operand's copy last, in command-line order, whichever thread
/// comes first.
#[test]
fn operands_merging_into_one_destination_end_in_command_line_order() {
    let setup = "mkdir a b c d e e/f; echo A > a/f; echo B > b/f; echo C > c/f; \
                 mkdir a/s b/s; echo A > a/s/x; echo B > b/s/x";
    for _ in 0..3 {
        for args in [
            &["-r", "a/.", "b/f", "d/"][..],
            &["-r", "a/.", "b/.", "d/"],
            &["-r", "a/.", "b/.", "c/.", "d/"],
            &["-r", "a/f", "e/f", "d/"],
            &["-r", "a/s", "b/s", "d/"],
        ] {
            like_gnu(setup, args);
        }
    }
}

/// A directory made in a set-group-ID directory keeps the set-group-ID
/// bit it inherits, as GNU keeps it, also when the source directory has
/// that bit (before, dropped then) and with `-a`.
#[test]
fn directories_keep_an_inherited_set_group_id_bit() {
    let setup = "mkdir s s2 s3 o p; echo x > s/f; chmod 2777 s; chmod 2775 o; chmod 777 s2; \
                 chmod 2755 s3";
    let umask = ["sh", "-c", "umask 022; exec \"$0\" \"$@\""];
    for args in [
        &["-r", "s", "o/"][..],
        &["-a", "s2", "o/a"],
        &["-a", "s3", "o/c"],
        &["-r", "--no-preserve=mode", "s", "o/d"],
        &["-r", "s", "p/"],
        &["-a", "s", "p/b"],
    ] {
        like_gnu_as(&umask, setup, args);
    }
}

/// `--reflink=always` clones or fails, as GNU's: also when either side is
/// a FIFO or a device (here `/dev/null`), which cannot be cloned (before, such a copy was
/// silently made byte by byte); and it goes only with `--sparse=auto`.
#[test]
fn reflink_always_never_falls_back_to_a_copy() {
    let setup = "echo data > f";
    for args in [
        &["--reflink=always", "/dev/null", "g"][..],
        &["--reflink=always", "--sparse=always", "f", "g"],
        &["--reflink", "--sparse=never", "f", "g"],
        &["--reflink=always", "--sparse=auto", "/dev/null", "g"],
    ] {
        let o = like_gnu(setup, args);
        assert_ne!(o.code, Some(0), "{args:?}: {o:?}");
    }
}

/// `--backup=` with nothing after it is `--backup`, as GNU takes it
/// (before, "invalid argument ''" and nothing copied).
#[test]
fn an_empty_backup_control_is_the_default() {
    let setup = "echo new > f; echo old > g";
    for args in [
        &["--backup=", "f", "g"][..],
        &["--backup=", "-S", ".o", "f", "g"],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(0), "{args:?}: {o:?}");
    }
}

/// `--sparse=always` from a pipe into a regular file: blocks of zeros
/// become holes, as GNU makes them (before, every zero was written).
#[test]
fn sparse_always_makes_holes_from_a_pipe() {
    let run = |cmd: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        let setup = "truncate -s 8M big; echo x >> big; printf 'a%.0s' 1 2 3 >> big";
        assert!(Command::new("sh")
            .args(["-ec", setup])
            .current_dir(w)
            .status()
            .unwrap()
            .success());
        let script = "cat big | exec \"$0\" \"$@\"";
        let o = Command::new("sh")
            .args(["-c", script])
            .args(cmd)
            .args(["--sparse=always", "/dev/stdin", "c"])
            .current_dir(w)
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd:?}: {}", messages(&o.stderr));
        assert_eq!(
            fs::read(w.join("c")).unwrap(),
            fs::read(w.join("big")).unwrap()
        );
        blocks(&w.join("c"))
    };
    let gnu = run(&[GNU_CP]);
    let ours = run(&[env!("CARGO_BIN_EXE_blockio"), "cp"]);
    assert!(gnu <= 16, "GNU allocated {gnu} blocks");
    assert!(ours <= gnu, "ours allocated {ours} blocks, GNU {gnu}");
}

/// A destination in the way that cannot be removed or kept aside is
/// reported as that step, as GNU reports it ("cannot remove", "cannot
/// backup"), not as a creation that never came.
#[test]
fn a_destination_that_cannot_be_removed_is_named_so() {
    assert!(
        root(),
        "this test makes root's files and copies them as nobody"
    );
    let setup = "echo src > f; echo old > g; chmod 444 g; chmod 1777 .; mkdir r; \
                 echo old > r/g; chmod 644 f";
    for args in [
        &["-f", "f", "g"][..],
        &["--remove-destination", "f", "g"],
        &["-b", "f", "r/g"],
        &["-bf", "f", "r/g"],
    ] {
        let o = like_gnu_as(&NOBODY, setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {o:?}");
    }
}

/// A dangling link in the way inside a tree is "not writing through
/// dangling symlink", GNU's words (before, "dangling" was left out).
#[test]
fn a_dangling_link_in_a_tree_is_named_dangling() {
    let setup = "mkdir -p s d/s a/b; echo x > s/f; ln -s nowhere d/s/f; echo y > a/b/f; \
                 mkdir -p e/a/b; ln -s nowhere e/a/b/f";
    for args in [
        &["-a", "s", "d"][..],
        &["-r", "s", "d"],
        &["--parents", "a/b/f", "e"],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {o:?}");
    }
}

/// Several sources and a destination that is no directory: GNU's words.
#[test]
fn several_sources_need_a_directory_in_gnu_words() {
    let setup = "echo a > f; echo b > g; touch file";
    for args in [&["f", "g", "file"][..], &["f", "g", "nodir"]] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {o:?}");
    }
}

/// `-il` answered "yes" replaces the file with the hard link, as GNU's
/// (before, "File exists"); `-ilf` asks once, not twice.
#[test]
fn interactive_hard_links_replace_after_yes() {
    let setup = "echo a > f; echo o > g";
    for (args, input) in [
        (&["-il", "f", "g"][..], "y\n"),
        (&["-il", "f", "g"], "n\n"),
        (&["-ilf", "f", "g"], "y\ny\n"),
        (&["-is", "f", "g"], "y\n"),
    ] {
        like_gnu_with(&[], setup, args, input);
    }
}

/// An empty destination name is refused with GNU's message for what
/// would have been made there ("regular file", "symbolic link '' to",
/// "hard link '' to", "directory") and `No such file or directory`.
#[test]
fn an_empty_destination_name_is_refused_as_gnu_refuses_it() {
    let setup = "echo x > f; mkdir d; ln -s f l";
    for args in [
        &["f", ""][..],
        &["-r", "f", ""],
        &["-s", "f", ""],
        &["-l", "f", ""],
        &["-r", "d", ""],
        &["-P", "l", ""],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.stderr);
    }
}

/// A destination written with a trailing `/` that is an existing
/// non-directory is "cannot stat ... Not a directory"; an absent one
/// made as a link is "cannot create ... link", as GNU says.
#[test]
fn a_trailing_slash_on_a_non_directory_destination_is_refused_as_gnu_refuses_it() {
    let setup = "echo x > f; echo y > g; ln -s f l";
    for args in [
        &["f", "g/"][..],
        &["f", "l/"],
        &["-s", "f", "g/"],
        &["-s", "f", "l/"],
        &["-s", "f", "nodir/"],
        &["-l", "f", "nodir/"],
        &["-l", "f", "g/"],
        &["f", "nodir/"],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.stderr);
    }
}

/// A destination that cannot be looked at for a reason other than its
/// absence is "cannot stat" it, and nothing is made, as GNU says: a loop
/// of links on the way, or as the last name when a file is copied
/// through it (also with `-n`, which skipped it, exit 0), a name too
/// long. Before, these were "not writing through
/// dangling symlink" and "cannot create regular file" or "cannot create
/// directory". A directory copied onto the link looks at the link itself,
/// which is in the way.
#[test]
fn a_destination_that_cannot_be_looked_at_is_cannot_stat_as_gnu_says() {
    let long = "n".repeat(300);
    let setup = "echo x > f; mkdir d; echo y > d/g; ln -s loop loop";
    for (args, said) in [
        (&["f", "loop"][..], "cannot stat"),
        (&["f", "loop/x"], "cannot stat"),
        (&["-r", "d", "loop/x"], "cannot stat"),
        (&["-n", "f", "loop"], "cannot stat"),
        (&["-f", "f", "loop/x"], "cannot remove"),
        (&["-fb", "f", "loop/x"], "cannot remove"),
        (&["--remove-destination", "f", "loop/x"], "cannot stat"),
        (&["-a", "d", "loop"], "cannot overwrite non-directory"),
        (&["f", &long], "cannot stat"),
        (&["-r", "d", &long], "cannot stat"),
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(said), "{args:?}: {}", o.stderr);
    }
}

/// `--parents -r a/b/..` (or `a/b/.`) into a fresh destination makes
/// `d/a/b` and fails on `d/a/b/..`, which exists, as GNU's does.
#[test]
fn parents_with_a_last_dot_or_dot_dot_fails_as_gnu_does() {
    let setup = "mkdir -p a/b d; echo x > a/b/f";
    for args in [
        &["--parents", "-r", "a/b/..", "d"][..],
        &["--parents", "-r", "a/b/.", "d"],
    ] {
        let o = like_gnu(setup, args);
        assert_eq!(o.code, Some(1), "{args:?}: {}", o.stderr);
    }
}

/// With `-a`, a second name of a file already copied is linked over what
/// is in its way as GNU links it, `-i` asking first ("n" keeps the file).
/// (Without `-v` or `-u`: the two operands' copies run at once, and which
/// name is copied and which linked, which those show, is not fixed.)
#[test]
fn a_second_name_linked_over_a_file_is_asked_as_gnu() {
    let setup = "mkdir s t; echo one > s/a; ln s/a s/b; touch -d 2001-01-01 s/a; echo old > t/b";
    for (args, input) in [
        (&["-a", "s/a", "s/b", "t"][..], ""),
        (&["-a", "-f", "s/a", "s/b", "t"], ""),
        (&["-a", "-b", "s/a", "s/b", "t"], ""),
        (&["-ai", "s/a", "s/b", "t"], "n\n"),
        (&["-ai", "s/a", "s/b", "t"], "y\n"),
        (&["-aib", "s/a", "s/b", "t"], "n\n"),
        (&["-aib", "s/a", "s/b", "t"], "y\n"),
    ] {
        like_gnu_with(&[], setup, args, input);
    }
}

/// The second name of a file, met after the first in one directory, is
/// linked over a file in its way by GNU's rule: `-v` says "removed"; `-u`
/// links over even a newer file, with no line for the copy; with `-b` as
/// well that file is kept as the backup (GNU drops it). (Against fixed
/// results: GNU meets the names in the directory's own order.)
#[test]
fn a_second_name_linked_over_a_file_is_said_and_kept_by_the_rules() {
    for (flags, lines, backup) in [
        (
            "-av",
            "'s/a' -> 't/s/a'\n's/b' -> 't/s/b'\nremoved 't/s/b'\n",
            None,
        ),
        ("-auv", "'s/a' -> 't/s/a'\nremoved 't/s/b'\n", None),
        (
            "-abuv",
            "'s/a' -> 't/s/a'\n's/b' -> 't/s/b' (backup: 't/s/b~')\n",
            Some("b~"),
        ),
    ] {
        let d = tempfile::tempdir().unwrap();
        let sh = "mkdir -p s t/s; echo one > s/a; ln s/a s/b; touch -d 2001-01-01 s/a; \
                  echo old > t/s/b";
        let ok = Command::new("sh")
            .args(["-ec", sh])
            .current_dir(d.path())
            .status()
            .unwrap();
        assert!(ok.success());
        let out = Command::new(env!("CARGO_BIN_EXE_blockio"))
            .args(["cp", flags, "s", "t"])
            .current_dir(d.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{flags}: {}", messages(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), lines, "{flags}");
        let t = d.path().join("t/s");
        let (a, b) = (
            fs::metadata(t.join("a")).unwrap(),
            fs::metadata(t.join("b")).unwrap(),
        );
        assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "{flags}: one file");
        assert_eq!(fs::read(t.join("b")).unwrap(), b"one\n", "{flags}");
        match backup {
            Some(name) => assert_eq!(fs::read(t.join(name)).unwrap(), b"old\n", "{flags}"),
            None => assert_eq!(fs::read_dir(&t).unwrap().count(), 2, "{flags}"),
        }
    }
}

/// A second link to one destination name is refused, as GNU refuses it
/// ("will not overwrite just-created"): it would replace the link just
/// made and, with `-b`, the backup of the file that was there.
#[test]
fn a_second_link_made_to_a_just_created_name_is_refused() {
    let setup = "mkdir s1 s2 l; echo one > s1/x; echo two > s2/x; echo PRECIOUS > x; \
                 ln -s ../s1/x l/x; ln -s ../s2/x l/y; ln -s s1 d1";
    for args in [
        &["-bsv", "s1/x", "s2/x", "."][..],
        &["-sv", "--backup=existing", "s1/x", "s2/x", "."],
        &["-sfv", "s1/x", "s2/x", "."],
        &["-sv", "--remove-destination", "s1/x", "s2/x", "."],
        &["-bsv", "s1/x", "d1/x", "."],
        &["-Pbv", "l/x", "l/x", "."],
        &["-sbv", "--backup=numbered", "s1/x", "s2/x", "."],
    ] {
        like_gnu(setup, args);
    }
}

/// `-v` lines and messages name paths as GNU's `cp` joins them: a
/// directory's trailing slashes dropped before a name is added.
#[test]
fn paths_with_extra_slashes_are_named_as_gnu_names_them() {
    let setup = "mkdir -p s d a/b s/sub/deep; echo x > s/f; echo y > a/b/g; mkdir -m 0 s/closed; \
                 echo z > s/sub/y; ln -s nowhere s/sub/deep/dl";
    for args in [
        &["-rv", "s//", "d//"][..],
        &["-rLv", "s//", "d//"],
        &["-rLv", "s//sub//", "d/"],
        &["-rv", "--strip-trailing-slashes", "s//", "d//"],
        &["--parents", "-rv", "a/b/", "d"],
        &["--parents", "-v", "a/./b/g", "d"],
        &["--parents", "-v", "./a//b/./g", "d"],
        &["-rv", "s/", "new//"],
        // A file operand is named as written, and so is a destination
        // that is not a directory.
        &["-v", "./././s/f", "d//g"],
        &["-v", "s//f", ".//d/./"],
        &["-v", "s/./f", "s/../d/.//h"],
        &["-sv", "--backup=numbered", "./s//f", "d//g"],
        &["-v", "--backup=numbered", "./s//f", "d//g"],
    ] {
        like_gnu(setup, args);
    }
}

/// Messages for operands that name nothing, or a place that cannot be
/// reached, as GNU's `cp` words them.
#[test]
fn unreachable_destinations_and_empty_names_are_worded_as_gnu() {
    let setup = "echo f > f; mkfifo ff; ln -s nowhere dl; echo x > plain; mkdir -p a/b/c d e/a; \
                 echo g > a/b/c/f; echo in-the-way > e/a/b";
    for args in [
        &["f", "nodir/x"][..],
        &["-s", "f", "nodir/x"],
        &["-l", "f", "nodir/x"],
        &["-P", "dl", "nodir/x"],
        &["-r", "ff", "nodir/x"],
        &["f", "plain/x"],
        &["-v", "", "x"],
        &["-v", "f", "nodir/x"],
        &["-v", "f", "plain/"],
        &["-v", "f", "e/nodir/"],
        &["-sv", "f", "nodir/x"],
        &["-lv", "f", "nodir/x"],
        &["-Pv", "dl", "nodir/x"],
        &["-rv", "ff", "nodir/x"],
        &["-v", "f", "plain/x"],
        &["-r", "", "d"],
        &["--preserve=", "f", "g"],
        &["--preserve=mode,", "f", "g"],
        &["--sparse=", "f", "g"],
        &["--parents", "-T", "a/b/c/f", "d"],
        &["--parents", "a/b/c/f", "e"],
    ] {
        like_gnu(setup, args);
    }
}

/// A private mount namespace with a ramfs (which holds no extended
/// attributes, so no ACLs) on `r`, where the copy runs; what it leaves in
/// `r` is then copied out to `r.after` (by GNU `cp -a`, the same for both
/// runs) to be compared, and the copy's status is the run's.
const ON_RAMFS: [&str; 7] = [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    "mount -t ramfs ramfs r && \"$0\" \"$@\"; rc=$?; /usr/bin/cp -a r r.after; exit $rc",
];

/// ACLs on a file system that cannot hold them (ramfs): the copy keeps
/// the mode and times, and GNU says "preserving permissions for 'r/f':
/// Operation not supported" and fails, since the copy is open to users
/// the ACL kept out (blockio was silent, and exited 0); a directory's
/// default ACL alone is left out silently, as GNU leaves it. Other
/// extended attributes it cannot hold: silent with `-a`, a failure with
/// `--preserve=xattr` named, reported with `--attributes-only`.
#[test]
fn acls_the_destination_cannot_hold_fail_the_copy_as_gnu() {
    assert!(
        root(),
        "this test mounts a ramfs and needs root (CI runs as root)"
    );
    let setup = "mkdir r; echo secret > f; chgrp users f; chmod 660 f; \
                 setfacl -m u:nobody:rw,g::---,m::rw f; setfattr -n user.q -v 1 f; \
                 echo plain > x; setfattr -n user.q -v 1 x; \
                 mkdir dd d1; setfacl -m u:nobody:rwx dd; setfacl -d -m u:nobody:rwx dd d1; \
                 touch -d 2001-02-03 f x dd d1";
    for args in [
        &["-a", "f", "r/f"][..],
        &["-p", "f", "r/f"],
        &["--preserve=mode", "f", "r/f"],
        &["--preserve=all", "f", "r/f"],
        &["-r", "--preserve=xattr", "x", "r/x"],
        &["-a", "--preserve=xattr", "f", "r/f"],
        &["-a", "--attributes-only", "x", "r/x"],
        &["-a", "x", "r/x"],
        &["-a", "dd", "r/dd"],
        &["-a", "d1", "r/d1"],
    ] {
        like_gnu_as(&ON_RAMFS, setup, args);
    }
}

/// An extended attribute a FIFO or device cannot hold (`user.*`: EPERM)
/// is left out silently by `-a`, whose copy succeeds and gets the mode
/// and times (blockio said "preserving attributes of 'n': setting
/// extended attribute user.q: Operation not permitted", exited 1 and set
/// neither); reported by `--preserve=all` (exit 0) and by
/// `--preserve=xattr` (exit 1), in GNU's words.
#[test]
fn extended_attributes_a_special_file_cannot_hold_as_gnu() {
    assert!(
        root(),
        "this test makes device nodes and needs root (CI runs as root)"
    );
    let setup = "echo data > f; chmod 640 f; setfattr -n user.q -v 1 f; touch -d 2001-02-03 f; \
                 mknod n c 1 3; chmod 666 n; mkfifo p; (timeout 20 cat p > /dev/null 2>&1 &)";
    for args in [
        &["-a", "f", "n"][..],
        &["-a", "f", "p"],
        &["--preserve=all", "f", "n"],
        &["--preserve=xattr", "f", "n"],
        &["-p", "--preserve=xattr", "f", "n"],
        &["--preserve=xattr", "-a", "f", "n"],
    ] {
        like_gnu(setup, args);
    }
}

/// The extended attributes `/etc/xattr.conf` lists (Debian's, from
/// libattr1, skips `user.Beagle.*`, a desktop indexer's data) are left out
/// of a copy, as GNU's `cp` leaves them out through libattr; the others
/// are copied. blockio copied them all.
#[test]
fn attributes_listed_in_etc_xattr_conf_are_left_out_as_gnu() {
    let conf = fs::read_to_string("/etc/xattr.conf").unwrap_or_default();
    assert!(
        conf.lines().any(|l| l.starts_with("user.Beagle.*")),
        "this test needs Debian's /etc/xattr.conf (package libattr1), which skips user.Beagle.*"
    );
    let setup = "echo data > f; setfattr -n user.Beagle.x -v 1 f; setfattr -n user.keep -v 2 f; \
                 mkdir d; setfattr -n user.Beagle.y -v 3 d; \
                 echo in > d/g; setfattr -n user.Beagle.z -v 4 d/g; setfattr -n user.keep -v 5 d/g";
    for (args, file) in [
        (&["-a", "f", "c"][..], "c"),
        (&["--preserve=xattr", "f", "c"], "c"),
        (&["--preserve=all", "f", "c"], "c"),
        (&["-a", "--attributes-only", "f", "c"], "c"),
        (&["-a", "d", "c"], "c/g"),
    ] {
        let o = like_gnu(setup, args);
        assert!(
            o.tree[OsStr::new(file)].contains("user.keep="),
            "{args:?}: {:?}",
            o.tree
        );
        for copy in ["c", file] {
            assert!(
                !o.tree[OsStr::new(copy)].contains("Beagle"),
                "{args:?}: {:?}",
                o.tree
            );
        }
    }
}

/// `--no-preserve=mode` into a directory with a default ACL: GNU gives
/// each new file and directory a minimal ACL and the default mode minus
/// the umask (a directory keeps the default ACL it inherited); blockio
/// kept the inherited `user:nobody:rwx` entry and its wider mode.
#[test]
fn no_preserve_mode_drops_inherited_acls_as_gnu() {
    let setup = "mkdir dd; setfacl -d -m u:nobody:rwx dd; echo x > f; \
                 mkdir -p sd/s; echo y > sd/g; echo z > sd/s/h; mkfifo sd/p";
    for args in [
        &["--no-preserve=mode", "f", "dd/b"][..],
        &["-p", "--no-preserve=mode", "f", "dd/b"],
        &["-r", "--no-preserve=mode", "sd", "dd/sd"],
        &["-r", "--no-preserve=mode", "sd", "dd"],
        &["-a", "--no-preserve=all", "sd", "dd/sd"],
        &["-r", "sd", "dd/sd"],
        &["-a", "sd", "dd/sd"],
    ] {
        like_gnu(setup, args);
    }
}

/// `-a` after `--no-preserve=mode` keeps the mode (the later option wins,
/// as with GNU): a 700 subdirectory stays 700 (it became 755).
#[test]
fn archive_after_no_preserve_mode_keeps_the_mode_as_gnu() {
    let setup = "mkdir -p s/sub; chmod 700 s/sub; echo x > s/sub/f; chmod 600 s/sub/f";
    for args in [
        &["--no-preserve=mode", "-a", "s", "t"][..],
        &["-a", "--no-preserve=mode", "s", "t"],
    ] {
        like_gnu(setup, args);
    }
}

/// `-u` with two names of one source file (a hard link), one of whose
/// destinations is a newer file and the other a newer directory
/// (`BLOCKIO_CP_SEED=3010` of `cp_random.rs`, `cp -rp -u --sparse=always
/// -b --backup=numbered`): both are kept, as `-u` keeps what is not older
/// than its source, and nothing is reported. GNU 9.1 keeps both too, but
/// exits 1 with "cannot create hard link ... Is a directory" (or
/// "Operation not permitted", by the order the directory lists the two
/// names in): after keeping the first it links the second name's
/// destination to the first's, `--preserve=links` or not, "even if it
/// was a newer separate file" (its copy.c says so), and a directory
/// cannot be linked over nor linked to. That is the hard link `-u` did
/// not ask for failing, not a destination in the way; the trees both
/// leave are the same.
#[test]
fn update_keeps_a_newer_directory_at_a_second_names_destination_without_a_message() {
    let setup = "mkdir s; echo data > s/a; ln s/a s/b; touch -d 2000-01-01 s/a; \
                 mkdir -p d/b; echo inner > d/b/inner; echo newer > d/a";
    for args in [
        &["-r", "-u", "s/.", "d"][..],
        &["-a", "-u", "s/.", "d"],
        &[
            "-rp",
            "-u",
            "--sparse=always",
            "-b",
            "--backup=numbered",
            "s/.",
            "d",
        ],
    ] {
        let (gnu, ours) = both(setup, &[], args, "");
        let what = format!("cp {}", args.join(" "));
        assert_eq!(ours.tree, gnu.tree, "{what}: the trees left (ours, GNU's)");
        assert_eq!((ours.code, ours.stderr.as_str()), (Some(0), ""), "{what}");
        assert_eq!(gnu.code, Some(1), "{what}: GNU's");
        assert!(
            gnu.stderr.starts_with("cp: cannot create hard link 'd/./")
                && gnu.stderr.lines().count() == 1,
            "{what}: GNU's message: {}",
            gnu.stderr
        );
        let held = |name: &str| ours.tree.get(OsStr::new(name)).cloned().unwrap_or_default();
        assert!(
            held("d/a").contains("newer") && held("d/b/inner").contains("inner"),
            "{what}: the newer file and directory kept: {:?}",
            ours.tree
        );
    }
}

/// Names holding a single quote and an escape are quoted in messages
/// byte for byte as GNU quotes them, down to the `''` it writes first
/// when such a name ends in an escape (`'''it'\''s'$'\n'`) and the `'$'`
/// it leaves out when such a name starts with one.
#[test]
fn names_with_a_quote_and_an_escape_are_quoted_as_gnu_quotes_them() {
    for name in [
        "it's\n",
        "\nit's\n",
        "\u{1}'\u{2}",
        "'a\n",
        "\n'x",
        "a'b\nc",
        "x'y\tz'w",
    ] {
        let o = like_gnu("mkdir d", &["--", name, "d/"]);
        assert_eq!(o.code, Some(1), "{name:?}: {}", o.stderr);
        assert!(o.stderr.contains("cannot stat '"), "{name:?}: {}", o.stderr);
    }
}
