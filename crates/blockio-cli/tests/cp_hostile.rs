//! `blockio cp` on hostile and unusual inputs: links planted in the
//! destination, links among the operands, what `-a` must keep (hard
//! links, xattrs, ACLs), files whose size lies, trees deeper than
//! `PATH_MAX`, and names that could forge a line of a message. Each case
//! is checked against what GNU `cp` does, or where GNU writes through a
//! link, against the rule that nothing outside the destination is touched.

use std::ffi::{CString, OsStr};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cp(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(dir)
        .arg("cp")
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "exit {:?}: {}", o.status, stderr(o));
}

/// An extended attribute of `p` (not following a link), `None` if absent.
fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let cp = CString::new(p.as_os_str().as_bytes()).unwrap();
    let cn = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and a buffer of the length passed.
    let n =
        unsafe { libc::lgetxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (n >= 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let cp = CString::new(p.as_os_str().as_bytes()).unwrap();
    let cn = CString::new(name).unwrap();
    // SAFETY: valid C strings and a value of the length passed.
    let rc = unsafe {
        libc::lsetxattr(
            cp.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "setxattr {name} on {}", p.display());
}

fn setfacl(args: &[&str], p: &Path) {
    let o = Command::new("setfacl")
        .args(args)
        .arg(p)
        .output()
        .expect("setfacl (Debian package acl, installed by scripts/install-deps) runs");
    assert!(o.status.success(), "setfacl {args:?}: {}", stderr(&o));
}

#[test]
fn a_dangling_link_in_the_destination_is_not_written_through() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    fs::create_dir_all(d.join("s")).unwrap();
    fs::create_dir_all(d.join("t/s")).unwrap();
    fs::create_dir(d.join("elsewhere")).unwrap();
    fs::write(d.join("s/a"), b"secret").unwrap();
    fs::write(d.join("s/b"), b"fine").unwrap();
    symlink(d.join("elsewhere/escaped"), d.join("t/s/a")).unwrap();
    let o = cp(d, &["-a", "s", "t"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not writing through dangling symlink 't/s/a'"),
        "{}",
        stderr(&o)
    );
    assert!(
        !d.join("elsewhere/escaped").exists(),
        "wrote outside the copy"
    );
    // The rest of the tree is copied.
    assert_eq!(fs::read(d.join("t/s/b")).unwrap(), b"fine");

    // A link to an existing file outside is not written through either.
    fs::write(d.join("elsewhere/target"), b"untouched").unwrap();
    fs::remove_file(d.join("t/s/a")).unwrap();
    symlink(d.join("elsewhere/target"), d.join("t/s/a")).unwrap();
    let o = cp(d, &["-r", "s", "t"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(fs::read(d.join("elsewhere/target")).unwrap(), b"untouched");

    // A dangling link named on the command line: refused as GNU does.
    symlink(d.join("elsewhere/named"), d.join("named")).unwrap();
    let o = cp(d, &["s/a", "named"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not writing through dangling symlink 'named'"),
        "{}",
        stderr(&o)
    );
    assert!(!d.join("elsewhere/named").exists());
}

#[test]
fn a_directory_planted_as_a_link_in_the_destination_is_not_merged_into() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    fs::create_dir_all(d.join("s/sub")).unwrap();
    fs::write(d.join("s/sub/f"), b"x").unwrap();
    fs::create_dir_all(d.join("t/s")).unwrap();
    fs::create_dir(d.join("elsewhere")).unwrap();
    symlink(d.join("elsewhere"), d.join("t/s/sub")).unwrap();
    let o = cp(d, &["-r", "s", "t"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot overwrite non-directory 't/s/sub' with directory 's/sub'"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
    // The same one level up: `cp -r s t2` copies to `t2/s`, a name the
    // user did not write, and `t2/s` is a link to a directory elsewhere.
    fs::create_dir(d.join("t2")).unwrap();
    symlink(d.join("elsewhere"), d.join("t2/s")).unwrap();
    let o = cp(d, &["-r", "s", "t2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot overwrite non-directory 't2/s' with directory 's'"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_dir(d.join("elsewhere")).unwrap().count(), 0);
}

#[test]
fn links_to_directories_on_the_command_line_are_followed() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    fs::create_dir_all(d.join("s")).unwrap();
    fs::write(d.join("s/a"), b"a").unwrap();
    fs::create_dir(d.join("real")).unwrap();
    symlink("real", d.join("linkdir")).unwrap();
    // cp f linkdir/x: a component of the destination is a link.
    ok(&cp(d, &["s/a", "linkdir/x"]));
    assert_eq!(fs::read(d.join("real/x")).unwrap(), b"a");
    // cp -r s linkdir: the destination is a link to a directory.
    ok(&cp(d, &["-r", "s", "linkdir"]));
    assert_eq!(fs::read(d.join("real/s/a")).unwrap(), b"a");
    // cp -r s linkdir/new.
    ok(&cp(d, &["-r", "s", "linkdir/new"]));
    assert_eq!(fs::read(d.join("real/new/a")).unwrap(), b"a");
    // cp -r sl/ x: a source link to a directory, written with a slash.
    symlink("s", d.join("sl")).unwrap();
    ok(&cp(d, &["-r", "sl/", "x"]));
    assert!(fs::symlink_metadata(d.join("x")).unwrap().is_dir());
    assert_eq!(fs::read(d.join("x/a")).unwrap(), b"a");
    // Without the slash the link itself is copied (-P).
    ok(&cp(d, &["-r", "sl", "y"]));
    assert_eq!(fs::read_link(d.join("y")).unwrap(), Path::new("s"));
}

#[test]
fn dot_sources_merge_their_contents() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    fs::create_dir_all(d.join("s/in")).unwrap();
    fs::write(d.join("s/a"), b"a").unwrap();
    fs::create_dir(d.join("t")).unwrap();
    fs::write(d.join("t/kept"), b"k").unwrap();
    ok(&cp(d, &["-a", "s/.", "t"]));
    assert!(!d.join("t/s").exists(), "s/. made t/s");
    assert_eq!(fs::read(d.join("t/a")).unwrap(), b"a");
    assert!(d.join("t/in").is_dir());
    assert_eq!(fs::read(d.join("t/kept")).unwrap(), b"k");
    // Into a link to a directory, and to a new name.
    fs::create_dir(d.join("real")).unwrap();
    symlink("real", d.join("linkdir")).unwrap();
    ok(&cp(d, &["-a", "s/.", "linkdir"]));
    assert_eq!(fs::read(d.join("real/a")).unwrap(), b"a");
    ok(&cp(d, &["-a", "linkdir/.", "new"]));
    assert_eq!(fs::read(d.join("new/a")).unwrap(), b"a");
}

#[test]
fn archive_keeps_hard_links_xattrs_and_acls() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let s = d.join("s");
    fs::create_dir_all(s.join("sub")).unwrap();
    fs::write(s.join("f"), b"linked").unwrap();
    fs::hard_link(s.join("f"), s.join("g")).unwrap();
    fs::hard_link(s.join("f"), s.join("sub/h")).unwrap();
    set_xattr(&s.join("f"), "user.color", b"blue");
    set_xattr(&s.join("sub"), "user.dir", b"yes");
    // Only root may set trusted.*; cp -a copies them as root, as GNU does.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        set_xattr(&s.join("f"), "trusted.t", b"1");
    }
    // An ACL that narrows the group (mask r--) and names another user.
    fs::write(s.join("acl"), b"acl").unwrap();
    fs::set_permissions(s.join("acl"), fs::Permissions::from_mode(0o640)).unwrap();
    setfacl(&["-m", "u:nobody:rw,g::r,m::r"], &s.join("acl"));
    setfacl(&["-d", "-m", "u:nobody:rwx"], &s.join("sub"));
    // A file without an ACL in that directory: its copy must not inherit
    // one from the copied default ACL.
    fs::write(s.join("sub/plain"), b"p").unwrap();
    setfacl(&["-b"], &s.join("sub/plain"));
    fs::set_permissions(s.join("sub/plain"), fs::Permissions::from_mode(0o600)).unwrap();

    ok(&cp(d, &["-a", "s", "t"]));
    let t = d.join("t");
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&t.join("f")), ino(&t.join("g")));
    assert_eq!(ino(&t.join("f")), ino(&t.join("sub/h")));
    assert_ne!(ino(&t.join("f")), ino(&s.join("f")));
    assert_eq!(fs::metadata(t.join("f")).unwrap().nlink(), 3);
    assert_eq!(
        xattr(&t.join("f"), "user.color").as_deref(),
        Some(&b"blue"[..])
    );
    assert_eq!(
        xattr(&t.join("sub"), "user.dir").as_deref(),
        Some(&b"yes"[..])
    );
    if root {
        assert_eq!(xattr(&t.join("f"), "trusted.t").as_deref(), Some(&b"1"[..]));
    }
    for (p, name) in [
        ("acl", "system.posix_acl_access"),
        ("sub", "system.posix_acl_default"),
        ("sub/plain", "system.posix_acl_access"),
    ] {
        assert_eq!(
            xattr(&t.join(p), name),
            xattr(&s.join(p), name),
            "{name} of {p}"
        );
    }
    assert_eq!(xattr(&t.join("sub/plain"), "system.posix_acl_access"), None);
    for p in ["acl", "sub", "sub/plain"] {
        assert_eq!(
            fs::metadata(t.join(p)).unwrap().mode(),
            fs::metadata(s.join(p)).unwrap().mode(),
            "mode of {p}"
        );
    }
    // Without -a, hard links are separate files (as cp -r).
    ok(&cp(d, &["-r", "s", "plain"]));
    assert_ne!(ino(&d.join("plain/f")), ino(&d.join("plain/g")));
}

#[test]
fn files_whose_size_lies_are_copied_as_read() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    // /proc says 0 bytes; sysfs says 4096 and holds fewer.
    let sys = "/sys/kernel/mm/transparent_hugepage/enabled";
    for (src, name) in [
        ("/proc/version", "version"),
        ("/proc/self/status", "status"),
        (sys, "sys"),
    ] {
        let o = cp(d, &[src, name]);
        ok(&o);
        let got = fs::read(d.join(name)).unwrap();
        assert!(!got.is_empty(), "{src} copied empty");
        assert!(!got.contains(&0), "{src} copied with NUL padding");
        if src != "/proc/self/status" {
            assert_eq!(got, fs::read(src).unwrap(), "{src}");
        }
    }
    assert!(fs::metadata(sys).unwrap().len() > fs::metadata(d.join("sys")).unwrap().len());
}

#[test]
fn a_tree_deeper_than_path_max_is_copied_whole() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    // 25 levels of 200-byte names: 5,000 bytes of path.
    let name = "d".repeat(200);
    let mut rel = std::path::PathBuf::from("s");
    fs::create_dir(d.join("s")).unwrap();
    let mut dir = fs::File::open(d.join("s")).unwrap();
    for _ in 0..25 {
        let c = CString::new(name.as_str()).unwrap();
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: a valid directory fd and NUL-terminated name.
        unsafe {
            assert_eq!(libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755), 0);
            let fd = libc::openat(
                dir.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            );
            assert!(fd >= 0);
            dir = fs::File::from_raw_fd(fd);
        }
        rel.push(&name);
    }
    {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: a valid directory fd and NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c"leaf".as_ptr(),
                libc::O_WRONLY | libc::O_CREAT,
                0o644,
            )
        };
        assert!(fd >= 0);
        use std::io::Write;
        // SAFETY: a new descriptor owned once.
        unsafe { fs::File::from_raw_fd(fd) }
            .write_all(b"deep")
            .unwrap();
    }
    let o = cp(d, &["-a", "s", "t"]);
    ok(&o);
    // Walk down the copy by descriptor and read the leaf.
    let mut dir = fs::File::open(d.join("t")).unwrap();
    for _ in 0..25 {
        use std::os::fd::{AsRawFd, FromRawFd};
        let c = CString::new(name.as_str()).unwrap();
        // SAFETY: a valid directory fd and NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
        };
        assert!(fd >= 0, "level missing in the copy");
        // SAFETY: a new descriptor owned once.
        dir = unsafe { fs::File::from_raw_fd(fd) };
    }
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a valid directory fd and NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c"leaf".as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0, "leaf missing in the copy");
    let mut s = String::new();
    use std::io::Read;
    // SAFETY: a new descriptor owned once.
    unsafe { fs::File::from_raw_fd(fd) }
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "deep");
}

#[test]
fn names_in_messages_are_quoted_as_gnu_quotes_them() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    fs::create_dir(d.join("dst")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(d)
        .arg("cp")
        .arg(OsStr::from_bytes(b"x\ny"))
        .arg(OsStr::from_bytes(b"bad\xffz"))
        .arg("dst")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 2, "{err}");
    // GNU cp 9.1 prints these same quotings.
    assert!(err.contains("cannot stat 'x'$'\\n''y'"), "{err}");
    assert!(err.contains("cannot stat 'bad'$'\\377''z'"), "{err}");
}

/// `getfacl` of `p`: its ACL in short form, entries sorted.
fn getfacl(p: &Path) -> String {
    let o = Command::new("getfacl")
        .args(["-cp"])
        .arg(p)
        .output()
        .expect("getfacl (Debian package acl) runs");
    assert!(o.status.success(), "getfacl: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `-p`, `-a` and `--preserve=mode` onto a file that exists give it the
/// source's ACL, or none when the source has none: an ACL of the old file
/// left in place could let users read the copy who cannot read the
/// source. GNU `cp` does the same on the same input.
#[test]
fn preserving_mode_onto_an_existing_file_replaces_its_acl_as_gnu_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let options: [&[&str]; 5] = [
        &["-p"],
        &["-a"],
        &["--preserve=mode"],
        &["-a", "--no-preserve=xattr"],
        &["-a", "--attributes-only"],
    ];
    for (k, opts) in options.iter().enumerate() {
        for (source_acl, tool) in [
            (false, "gnu"),
            (false, "ours"),
            (true, "gnu"),
            (true, "ours"),
        ] {
            let w = d.join(format!("{k}-{source_acl}-{tool}"));
            fs::create_dir_all(w.join("s")).unwrap();
            fs::create_dir_all(w.join("d")).unwrap();
            for f in ["f", "s/f"] {
                fs::write(w.join(f), b"secret").unwrap();
                fs::set_permissions(w.join(f), fs::Permissions::from_mode(0o640)).unwrap();
                if source_acl {
                    setfacl(&["-m", "u:daemon:r"], &w.join(f));
                }
            }
            for x in ["x", "d/f"] {
                fs::write(w.join(x), b"old").unwrap();
                fs::set_permissions(w.join(x), fs::Permissions::from_mode(0o600)).unwrap();
                setfacl(&["-m", "u:nobody:rw"], &w.join(x));
            }
            let run = |args: &[&str]| {
                let o = if tool == "gnu" {
                    Command::new("/usr/bin/cp")
                        .current_dir(&w)
                        .args(args)
                        .output()
                        .unwrap()
                } else {
                    cp(&w, args)
                };
                ok(&o);
            };
            run(&[opts, &["f", "x"][..]].concat());
            run(&[opts, &["-r", "s/.", "d"][..]].concat());
        }
        for source_acl in [false, true] {
            for x in ["x", "d/f"] {
                let gnu = getfacl(&d.join(format!("{k}-{source_acl}-gnu")).join(x));
                let ours = getfacl(&d.join(format!("{k}-{source_acl}-ours")).join(x));
                assert_eq!(ours, gnu, "{opts:?} onto {x}, source ACL {source_acl}");
                assert!(!ours.contains("nobody"), "{opts:?} onto {x}: {ours}");
            }
        }
    }
}

/// A low limit on open descriptors (`ulimit -n`, soft and hard) leaves
/// fewer files in flight, never files uncopied: every file of a tree of
/// 450 arrives, at limits down to 16, on both backends.
#[test]
fn a_low_descriptor_limit_slows_the_copy_never_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["a", "b", "c"] {
        fs::create_dir_all(d.join("s").join(sub)).unwrap();
        for i in 0..150 {
            fs::write(d.join(format!("s/{sub}/f{i}")), vec![i as u8; 3000 + i]).unwrap();
        }
    }
    for (limit, backend) in [(128u64, "io_uring"), (16, "io_uring"), (16, "threads")] {
        let dst = format!("d-{limit}-{backend}");
        let env = if backend == "threads" {
            "threads"
        } else {
            "auto"
        };
        let o = cp_with_descriptors(d, &["-r", "s", &dst], env, limit);
        assert!(
            o.status.success(),
            "ulimit -n {limit}, {backend}: {}",
            stderr(&o)
        );
        for sub in ["a", "b", "c"] {
            for i in 0..150 {
                let got = fs::read(d.join(format!("{dst}/{sub}/f{i}"))).unwrap();
                assert_eq!(got, vec![i as u8; 3000 + i], "{dst}/{sub}/f{i}");
            }
        }
    }
}

/// Every entry below `root`, by its path relative to it, with its bytes
/// (a file), its target (a link) or nothing (a directory).
fn contents(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                dirs.push(p);
                out.push((rel, Vec::new()));
            } else if m.file_type().is_symlink() {
                out.push((
                    rel,
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                ));
            } else {
                out.push((rel, fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The descriptor floor beside GNU's: the least `ulimit -n` (soft and
/// hard) at which GNU's `cp -a`, one file at a time by its path, copies a
/// directory of 300 files and a venv-like tree (packages of modules two
/// levels deep, a link, a file of two names) is found here (5 with
/// coreutils 9.1), and blockio copies both at that limit too, on either
/// backend asked for: under a limit that leaves fewer than four
/// descriptors free it copies on the thread-pool backend (no ring), one
/// file at a time, opens directories and files by their paths and copies
/// a file only while no directory is held: the standard streams, a source
/// and its copy. (Holding a directory pair beside them, it needed 7.)
/// Each copy compared with GNU's, the two names one file in it. One below
/// that floor, where nothing can be copied, the copy fails with an error
/// naming what it could not open, never a panic.
#[test]
fn a_tree_copies_at_the_descriptor_floor_beside_gnu() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::create_dir_all(d.join("flat")).unwrap();
    for i in 0..300 {
        fs::write(d.join(format!("flat/f{i:03}")), format!("{i}\n")).unwrap();
    }
    for p in 0..10 {
        let pkg = d.join(format!("venv/lib/python3/site-packages/pkg{p}"));
        fs::create_dir_all(pkg.join("sub")).unwrap();
        for m in 0..10 {
            fs::write(pkg.join(format!("m{m}.py")), format!("{p} {m}\n")).unwrap();
            fs::write(pkg.join(format!("sub/s{m}.py")), format!("{m} {p}\n")).unwrap();
        }
    }
    fs::create_dir(d.join("venv/bin")).unwrap();
    fs::write(d.join("venv/bin/python3"), b"#!\n").unwrap();
    fs::hard_link(d.join("venv/bin/python3"), d.join("venv/bin/python3.11")).unwrap();
    symlink("python3", d.join("venv/bin/python")).unwrap();
    for tree in ["flat", "venv"] {
        let (floor, want) = gnu_descriptor_floor(d, tree);
        assert!(floor <= 5, "GNU cp -a {tree} needs ulimit -n {floor}");
        for backend in ["auto", "threads"] {
            let dst = format!("{tree}-{backend}");
            let o = cp_with_descriptors(d, &["-a", tree, &dst], backend, floor);
            assert!(
                o.status.success(),
                "cp -a {tree} at ulimit -n {floor}, {backend}: {}",
                stderr(&o)
            );
            assert_eq!(contents(&d.join(&dst)), want, "{dst}");
            if tree == "venv" {
                let ino = |n: &str| fs::metadata(d.join(&dst).join(n)).unwrap().ino();
                assert_eq!(ino("bin/python3"), ino("bin/python3.11"), "{dst}");
            }
            let below = format!("{dst}-below");
            let o = cp_with_descriptors(d, &["-a", tree, &below], backend, floor - 1);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "ulimit -n {}: {err}", floor - 1);
            assert!(
                err.lines().count() > 0
                    && err
                        .lines()
                        .all(|l| l.contains(&below) && l.ends_with("Too many open files")),
                "ulimit -n {}: {err}",
                floor - 1
            );
        }
    }
}

/// The least `ulimit -n` at which GNU's `cp -a tree` copies it whole (it
/// fails one below), with what that copy holds.
fn gnu_descriptor_floor(d: &Path, tree: &str) -> (u64, Vec<(PathBuf, Vec<u8>)>) {
    let dst = format!("{tree}-gnu");
    let copy = |limit: u64| {
        let _ = fs::remove_dir_all(d.join(&dst));
        let mut gnu = Command::new("/usr/bin/cp");
        gnu.current_dir(d).args(["-a", tree, &dst]);
        limited(&mut gnu, libc::RLIMIT_NOFILE, limit);
        gnu.output().unwrap().status.success()
    };
    let floor = (4..=12)
        .find(|&n| copy(n))
        .unwrap_or_else(|| panic!("GNU cp -a {tree} fails at every ulimit -n up to 12"));
    assert!(
        !copy(floor - 1),
        "GNU cp -a {tree} at ulimit -n {}",
        floor - 1
    );
    assert!(copy(floor), "GNU cp -a {tree} at ulimit -n {floor}");
    (floor, contents(&d.join(dst)))
}

/// `cp -a` of a tree whose files have second names in other directories
/// (200 directories, each with a file linked from a twin directory), at
/// `ulimit -n` 10 on both backends: every file copied, every pair of
/// names one file. Before, each directory holding the first copy of such
/// a file kept its two descriptors open until the copy ended (the table
/// of first copies held the directory pair): at 10 a tree of two such
/// directories lost its second, and at scale half of it failed with "Too
/// many open files".
#[test]
fn hard_links_across_many_directories_copy_under_a_low_descriptor_limit() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for i in 0..200 {
        let (a, b) = (d.join(format!("s/a{i:03}")), d.join(format!("s/b{i:03}")));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        fs::write(a.join("f"), format!("file {i}")).unwrap();
        fs::hard_link(a.join("f"), b.join("f")).unwrap();
    }
    for backend in ["auto", "threads"] {
        let dst = format!("d-{backend}");
        let o = cp_with_descriptors(d, &["-a", "s", &dst], backend, 10);
        assert!(
            o.status.success(),
            "ulimit -n 10, {backend}: {}",
            stderr(&o)
        );
        for i in 0..200 {
            let (a, b) = (
                d.join(format!("{dst}/a{i:03}/f")),
                d.join(format!("{dst}/b{i:03}/f")),
            );
            assert_eq!(fs::read_to_string(&a).unwrap(), format!("file {i}"));
            let (ma, mb) = (fs::metadata(&a).unwrap(), fs::metadata(&b).unwrap());
            assert_eq!(
                ma.ino(),
                mb.ino(),
                "{} and {} are one file",
                a.display(),
                b.display()
            );
        }
    }
}

/// With no thread to be had (`ulimit -u` reached, as an unprivileged
/// user), a copy runs on its own thread instead of failing: io_uring could
/// not start its workers either; where the user requires io_uring, the
/// error says why and what to do. Needs root, to become `nobody`.
#[test]
fn a_copy_with_no_thread_to_be_had_still_copies() {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "a_copy_with_no_thread_to_be_had_still_copies: needs root (to run as nobody); not run"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    fs::create_dir(d.join("s")).unwrap();
    for i in 0..20 {
        fs::write(d.join(format!("s/f{i}")), format!("{i}")).unwrap();
    }
    fs::write(d.join("one"), b"one").unwrap();
    for backend in ["auto", "threads", "uring"] {
        for (args, dst) in [(&["one"][..], "two"), (&["-r", "s"][..], "t")] {
            let dst = format!("{dst}-{backend}");
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_blockio"));
            cmd.current_dir(d).arg("cp").args(args).arg(&dst);
            cmd.env("BLOCKIO_BACKEND", backend);
            // SAFETY: setrlimit, setgroups, setgid and setuid are
            // async-signal-safe; the closure touches nothing else.
            unsafe {
                cmd.pre_exec(|| {
                    let one = libc::rlimit {
                        rlim_cur: 1,
                        rlim_max: 1,
                    };
                    if libc::setrlimit(libc::RLIMIT_NPROC, &one) != 0
                        || libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(65534) != 0
                        || libc::setuid(65534) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let o = cmd.output().unwrap();
            if backend == "uring" {
                // Required by the user, io_uring cannot work here: said
                // so, with what to do, and nothing copied.
                assert_eq!(o.status.code(), Some(1));
                assert!(stderr(&o).contains("ulimit -u"), "{}", stderr(&o));
                assert!(!d.join(&dst).exists());
                continue;
            }
            assert!(o.status.success(), "{args:?} ({backend}): {}", stderr(&o));
            if args[0] == "one" {
                assert_eq!(fs::read(d.join(&dst)).unwrap(), b"one");
            } else {
                for i in 0..20 {
                    assert_eq!(
                        fs::read(d.join(format!("{dst}/f{i}"))).unwrap(),
                        format!("{i}").as_bytes()
                    );
                }
            }
        }
    }
}

/// As `nobody`, beside GNU's `cp`: a directory whose source cannot be read
/// gets no ACL it inherited from its new parent (the source has none),
/// and a merge into a root-owned directory says what GNU says, with no
/// spurious message about ACLs the directory never had. Needs root.
#[test]
fn unreadable_and_unowned_directories_with_acls_as_gnu_as_nobody() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "unreadable_and_unowned_directories_with_acls_as_gnu_as_nobody: needs root; not run"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let mut seen = Vec::new();
    for tool in ["gnu", "ours"] {
        let w = dir.path().join(tool);
        for sub in ["d15", "s15", "d16", "s16"] {
            fs::create_dir_all(w.join(sub)).unwrap();
        }
        fs::set_permissions(&w, fs::Permissions::from_mode(0o777)).unwrap();
        fs::set_permissions(w.join("d15"), fs::Permissions::from_mode(0o777)).unwrap();
        setfacl(&["-d", "-m", "o::rwx"], &w.join("d15"));
        fs::set_permissions(w.join("s15"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(w.join("s16/f"), b"x").unwrap();
        let run = |args: &[&str]| {
            let mut cmd = if tool == "gnu" {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "/usr/bin/cp",
                ]);
                c
            } else {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
                c.arg(env!("CARGO_BIN_EXE_blockio")).arg("cp");
                c
            };
            let o = cmd.current_dir(&w).args(args).output().unwrap();
            let msg = stderr(&o)
                .replace("/usr/bin/cp:", "cp:")
                .replace("blockio cp:", "cp:");
            (o.status.code(), msg)
        };
        let a = run(&["-a", "s15", "d15/"]);
        let b = run(&["-a", "s16/.", "d16"]);
        seen.push((a, getfacl(&w.join("d15/s15")), b));
    }
    assert_eq!(seen[1], seen[0]);
    let ((code, msg), acl, (code2, msg2)) = &seen[0];
    assert_eq!(
        (*code, msg.as_str()),
        (Some(1), "cp: cannot access 's15': Permission denied\n")
    );
    assert!(!acl.contains("default"), "{acl}");
    assert_eq!(*code2, Some(1));
    assert!(
        msg2.ends_with("cp: preserving times for 'd16/.': Operation not permitted\n"),
        "{msg2}"
    );
}

#[test]
fn a_source_that_grows_after_it_was_looked_at_is_copied_to_its_end() {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (s, t) = (d.path().join("s"), d.path().join("t"));
    let first: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(&s, &first).unwrap();
    fs::write(&t, b"old").unwrap();
    // `-i` looks at the source, then asks: the source grows while the
    // question waits for its answer, as GNU's `cp`, which reads to the end
    // of the file, copies it whole.
    let mut child = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(d.path())
        .args(["cp", "-i", "s", "t"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut asked = Vec::new();
    let mut byte = [0u8; 1];
    while !asked.ends_with(b"? ") && err.read(&mut byte).unwrap() == 1 {
        asked.push(byte[0]);
    }
    assert_eq!(asked, b"blockio cp: overwrite 't'? ");
    let more: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 241) as u8).collect();
    fs::OpenOptions::new()
        .append(true)
        .open(&s)
        .unwrap()
        .write_all(&more)
        .unwrap();
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(fs::read(&t).unwrap(), [first, more].concat());
}

#[test]
fn archive_keeps_hard_links_between_symlinks_fifos_and_devices_as_gnu() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let s = d.path().join("s");
    fs::create_dir_all(s.join("sub")).unwrap();
    symlink("a", s.join("l")).unwrap();
    fs::hard_link(s.join("l"), s.join("sub/l2")).unwrap();
    let fifo = CString::new(s.join("p").as_os_str().as_bytes()).unwrap();
    let dev = CString::new(s.join("c").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo and mknod on NUL-terminated paths in our temporary
    // directory (a character device as /dev/null is: 1, 3; root makes it).
    unsafe {
        assert_eq!(libc::mkfifo(fifo.as_ptr(), 0o640), 0);
        if libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) != 0 {
            fs::write(s.join("c"), b"").unwrap(); // (not root: a file stands in)
        }
    }
    fs::hard_link(s.join("p"), s.join("sub/p2")).unwrap();
    fs::hard_link(s.join("c"), s.join("c2")).unwrap();
    let gnu = Command::new("cp")
        .current_dir(d.path())
        .args(["-a", "s", "g"])
        .output()
        .unwrap();
    assert!(gnu.status.success());
    ok(&cp(d.path(), &["-a", "s", "b"]));
    for (x, y) in [("l", "sub/l2"), ("p", "sub/p2"), ("c", "c2")] {
        for top in ["g", "b"] {
            let a = fs::symlink_metadata(d.path().join(top).join(x)).unwrap();
            let b = fs::symlink_metadata(d.path().join(top).join(y)).unwrap();
            assert_eq!(
                (a.ino(), a.nlink()),
                (b.ino(), 2),
                "{top}/{x} and {top}/{y}"
            );
        }
    }
}

/// A user's copy under a low limit on processes (`ulimit -u`, which
/// counts threads) is whole at every limit, on io_uring too. Past the
/// copy's own threads, io_uring could start no worker for what it cannot
/// do inline, and the kernel cancelled those operations: at `-u` 4 to 6
/// (with 2 CPUs) a copy failed files with "Operation canceled", or every
/// directory, while 3 and 7 worked. Such an operation is now done by its
/// system call on the copy's thread. Run as `nobody` (root's threads are
/// not counted), with the default backend.
#[test]
fn a_users_copy_is_whole_at_every_low_limit_on_processes() {
    assert!(
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() } == 0,
        "this test runs the copy as nobody and needs root (CI runs as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    for i in 0..8 {
        let sub = d.join(format!("s/d{i}"));
        fs::create_dir_all(&sub).unwrap();
        for j in 0..40 {
            fs::write(sub.join(format!("f{j}")), vec![j as u8; 100 * j]).unwrap();
        }
    }
    for limit in 1..=12 {
        let dst = format!("c{limit}");
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .args([env!("CARGO_BIN_EXE_blockio"), "cp", "-r", "s", &dst])
            .env_remove("BLOCKIO_BACKEND")
            .current_dir(d);
        limited(&mut cmd, libc::RLIMIT_NPROC, limit);
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "ulimit -u {limit}: {}", stderr(&o));
        for i in 0..8 {
            for j in 0..40 {
                let got = fs::read(d.join(format!("{dst}/d{i}/f{j}"))).unwrap();
                assert_eq!(got, vec![j as u8; 100 * j], "ulimit -u {limit}: d{i}/f{j}");
            }
        }
    }
}

/// `blockio cp args` in `d` on `backend` (`BLOCKIO_BACKEND`), with at
/// most `limit` open descriptors (`ulimit -n`).
fn cp_with_descriptors(d: &Path, args: &[&str], backend: &str, limit: u64) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_blockio"));
    cmd.current_dir(d)
        .arg("cp")
        .args(args)
        .env("BLOCKIO_BACKEND", backend);
    limited(&mut cmd, libc::RLIMIT_NOFILE, limit);
    cmd.output().unwrap()
}

/// `cmd` run with `resource` limited to `limit` (soft and hard), and with
/// only the standard streams open: a descriptor another test of this
/// process opened without close-on-exec, inherited at the fork, would
/// otherwise take one of the few a descriptor limit leaves.
fn limited(cmd: &mut Command, resource: libc::__rlimit_resource_t, limit: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: close_range(2) and setrlimit(2) are async-signal-safe system
    // calls on plain integer arguments; the closure touches nothing else
    // of the parent's. Closing the descriptors above 2 also closes the
    // pipe std reports an exec failure on, so such a failure reads as a
    // success in the parent and shows as the child's missing output.
    unsafe {
        cmd.pre_exec(move || {
            // close_range(3, ~0, CLOSE_RANGE_CLOEXEC): closed at the exec, so
            // the pipe `Command` reports a failed exec through still works;
            // no wrapper in the libc crate for every target, so the raw
            // system call.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(resource, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Many file operands under a low limit on descriptors, on both
/// backends: 300 files at `ulimit -n 32`, and three files from three
/// directories at 10, all copied. Before, every file operand's group held
/// its two directories open until the workers started: 40 files at 32
/// left 28 uncopied ("Too many open files"), three at 10 left one or two
/// (GNU's `cp` copies both at 6).
#[test]
fn many_file_operands_copy_under_a_low_descriptor_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut names = Vec::new();
    for i in 0..300 {
        fs::write(d.join(format!("f{i}")), format!("file {i}")).unwrap();
        names.push(format!("f{i}"));
    }
    fs::create_dir(d.join("s")).unwrap();
    fs::write(d.join("s/g"), b"in s").unwrap();
    for backend in ["auto", "threads"] {
        for (limit, operands) in [
            (32, names.clone()),
            (
                10,
                vec!["f1".to_string(), "s/g".to_string(), "f2".to_string()],
            ),
        ] {
            let dst = format!("d-{backend}-{limit}");
            fs::create_dir(d.join(&dst)).unwrap();
            let mut args = vec!["-a"];
            args.extend(operands.iter().map(String::as_str));
            args.push(&dst);
            let o = cp_with_descriptors(d, &args, backend, limit);
            assert!(
                o.status.success(),
                "ulimit -n {limit}, {backend}: {}",
                stderr(&o)
            );
            for op in &operands {
                let name = Path::new(op).file_name().unwrap();
                assert_eq!(
                    fs::read(d.join(&dst).join(name)).unwrap(),
                    fs::read(d.join(op)).unwrap(),
                    "{dst}/{op}"
                );
            }
        }
    }
}

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>` (not in the libc crate).
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
