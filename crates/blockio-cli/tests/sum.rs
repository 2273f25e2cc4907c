//! `blockio sum`: the same hashes as b3sum and sha256sum, their line format
//! (escaped names included), check mode, and failures reported with exit 1.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn blockio(dir: &Path, args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(dir)
        .arg("sum")
        .args(args)
        .output()
        .unwrap()
}

fn tool(dir: &Path, name: &str, files: &[&OsStr]) -> Vec<u8> {
    let o = Command::new(name)
        .current_dir(dir)
        .args(files)
        .output()
        .unwrap_or_else(|e| {
            panic!("{name} is needed for this test (scripts/install-deps installs it): {e}")
        });
    assert!(
        o.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// A tree with awkward names, an empty file, and files spanning many blocks.
fn tree(root: &Path) -> Vec<&'static [u8]> {
    let names: Vec<&'static [u8]> = vec![
        b"t/a/empty",
        b"t/a/small",
        b"t/a/with space",
        b"t/a/new\nline",
        b"t/a/back\\slash",
        b"t/a/\xff\xfe latin1",
        b"t/b/c/big",
        b"t/b/c/exact",
        b"t/b/mid",
    ];
    for (k, n) in names.iter().enumerate() {
        let p = root.join(OsStr::from_bytes(n));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let len = match k {
            0 => 0,
            6 => 5_000_017,
            7 => 3 << 20,
            8 => 300_000,
            _ => 10 + k * 100,
        };
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + k * 7) as u8).collect();
        std::fs::write(&p, data).unwrap();
    }
    std::fs::create_dir_all(root.join("t/empty-dir")).unwrap();
    let mut sorted = names.clone();
    sorted.sort();
    sorted
}

#[test]
fn hashes_and_lines_equal_b3sum_and_sha256sum() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let names = tree(dir.path());
    let files: Vec<&OsStr> = names.iter().map(|n| OsStr::from_bytes(n)).collect();
    for (algo, reference) in [("blake3", "b3sum"), ("sha256", "sha256sum")] {
        // A directory argument walks the tree in sorted order.
        let o = blockio(
            dir.path(),
            &[
                OsStr::new("--algo"),
                OsStr::new(algo),
                OsStr::new("--block-size"),
                OsStr::new("65536"),
                OsStr::new("t"),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want = tool(dir.path(), reference, &files);
        if reference == "sha256sum" {
            // Byte for byte, non-UTF-8 name included.
            assert_eq!(o.stdout, want, "{algo}");
        } else {
            // b3sum writes a non-UTF-8 name lossily (U+FFFD), which its own
            // -c then cannot open; blockio writes the raw bytes, as
            // sha256sum does. Everything else is byte for byte.
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&want),
                "{algo}"
            );
        }
    }
}

#[test]
fn check_mode_passes_and_fails_like_b3sum() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let names = tree(dir.path());
    // b3sum cannot check the non-UTF-8 name (see above): leave it out here,
    // and check it through blockio's own output below.
    let files: Vec<&OsStr> = names
        .iter()
        .filter(|n| std::str::from_utf8(n).is_ok())
        .map(|n| OsStr::from_bytes(n))
        .collect();
    std::fs::write(dir.path().join("sums"), tool(dir.path(), "b3sum", &files)).unwrap();
    let own = blockio(dir.path(), &[OsStr::new("t")]);
    std::fs::write(dir.path().join("own-sums"), &own.stdout).unwrap();
    let o = blockio(dir.path(), &[OsStr::new("-c"), OsStr::new("own-sums")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        o.stdout
            .split(|&b| b == b'\n')
            .filter(|l| l.ends_with(b": OK"))
            .count(),
        names.len()
    );
    let o = blockio(dir.path(), &[OsStr::new("-c"), OsStr::new("sums")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reference = Command::new("b3sum")
        .current_dir(dir.path())
        .args(["-c", "sums"])
        .output()
        .unwrap();
    assert_eq!(
        o.stdout, reference.stdout,
        "check output differs from b3sum -c"
    );
    // Change one file, delete another: both fail, the rest pass, exit 1.
    std::fs::write(dir.path().join("t/a/small"), b"changed").unwrap();
    std::fs::remove_file(dir.path().join("t/b/mid")).unwrap();
    let o = blockio(dir.path(), &[OsStr::new("-c"), OsStr::new("sums")]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("t/a/small: FAILED\n"), "{out}");
    assert!(out.contains("t/b/mid: FAILED open or read\n"), "{out}");
    assert!(out.contains("t/b/c/big: OK\n"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("t/b/mid") && err.contains("No such file"),
        "{err}"
    );
    // A file with no checksum lines fails.
    std::fs::write(dir.path().join("junk"), b"hello\n").unwrap();
    let o = blockio(dir.path(), &[OsStr::new("-c"), OsStr::new("junk")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("blockio sum: junk: no properly formatted checksum lines found"));
}

#[test]
fn unreadable_and_missing_files_are_reported_and_the_rest_hashed() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("ok"), b"fine").unwrap();
    // /proc/self/mem opens but fails to read at offset 0 (EIO), even as root.
    let o = blockio(
        dir.path(),
        &[
            OsStr::new("missing"),
            OsStr::new("/proc/self/mem"),
            OsStr::new("ok"),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("blockio sum: missing: No such file"), "{err}");
    assert!(err.contains("blockio sum: /proc/self/mem:"), "{err}");
    let want = tool(dir.path(), "b3sum", &[OsStr::new("ok")]);
    assert_eq!(o.stdout, want, "the readable file is still hashed");
}

#[test]
fn other_algorithms_and_bad_flags() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("abc"), b"abc").unwrap();
    for (algo, hex) in [
        ("xxh3", "78af5f94892f3950"),
        ("crc32c", "364b3fb7"),
        ("md5", "900150983cd24fb0d6963f7d28e17f72"),
        ("sha1", "a9993e364706816aba3e25717850c26c9cd0d89d"),
    ] {
        let o = blockio(
            dir.path(),
            &[OsStr::new("--algo"), OsStr::new(algo), OsStr::new("abc")],
        );
        assert!(o.status.success());
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("{hex}  abc\n"));
    }
    let o = blockio(
        dir.path(),
        &[OsStr::new("--algo"), OsStr::new("md4"), OsStr::new("abc")],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown algorithm \"md4\""));
    for (flag, value, says) in [
        ("--depth", "0", "--depth must be between 1 and 1024, got 0"),
        ("--block-size", "100", "--block-size must be between 4096"),
        ("--block-size", "1.5M", "not a size: \"1.5M\""),
    ] {
        let o = blockio(
            dir.path(),
            &[OsStr::new(flag), OsStr::new(value), OsStr::new("abc")],
        );
        assert!(!o.status.success(), "{flag} {value}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(says), "{flag}");
    }
    // Flags that only mean something when checking, or only when not.
    for args in [
        &["--quiet", "abc"][..],
        &["--status", "abc"],
        &["-c", "--tag", "abc"],
    ] {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let o = blockio(dir.path(), &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}

/// A list that holds no line for `--algo` says which `--algo` its
/// digests would fit; `-w` names improper lines; names are quoted as
/// blockio quotes them; a list that cannot be read is reported and the
/// next checked.
#[test]
fn check_mode_explains_lists_it_cannot_use() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("abc"), b"abc").unwrap();
    let md5 = "900150983cd24fb0d6963f7d28e17f72";
    std::fs::write(dir.path().join("md5 list"), format!("{md5}  abc\n")).unwrap();
    std::fs::write(dir.path().join("short"), "abcd  abc\n\r\n").unwrap();
    let o = blockio(
        dir.path(),
        &[
            OsStr::new("-c"),
            OsStr::new("-w"),
            OsStr::new("md5 list"),
            OsStr::new("missing"),
            OsStr::new("short"),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(o.stdout, b"");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "blockio sum: 'md5 list': 1: improperly formatted BLAKE3 checksum line\n\
         blockio sum: 'md5 list': no properly formatted checksum lines found (its digests \
         are 32 hex digits long, as --algo md5 writes them; this check used --algo blake3)\n\
         blockio sum: missing: No such file or directory\n\
         blockio sum: short: 1: improperly formatted BLAKE3 checksum line\n\
         blockio sum: short: 2: improperly formatted BLAKE3 checksum line\n\
         blockio sum: short: no properly formatted checksum lines found (its digests \
         are 4 hex digits long; --algo blake3 writes 64)\n"
    );
    let o = blockio(
        dir.path(),
        &[
            OsStr::new("-c"),
            OsStr::new("--algo"),
            OsStr::new("md5"),
            OsStr::new("md5 list"),
        ],
    );
    assert_eq!(
        (o.status.code(), o.stdout.as_slice()),
        (Some(0), &b"abc: OK\n"[..])
    );
}

/// Writes `path` back and drops it from the page cache, and checks that
/// none of it is left there: `POSIX_FADV_DONTNEED` skips a page that
/// something else holds at that instant (the kernel's reclaim or
/// compaction, a read still in flight), so it is asked again, up to 100
/// times, before the test gives up with the count.
fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    let len = f.metadata().unwrap().len();
    let mut left = u64::MAX;
    for _ in 0..100 {
        // SAFETY: fadvise on an open descriptor has no memory effects.
        let rc = unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        assert_eq!(rc, 0);
        left = cached_pages(&f, 0, len);
        if left == 0 {
            return;
        }
        std::thread::yield_now();
    }
    panic!(
        "{}: {left} pages stay in the page cache after POSIX_FADV_DONTNEED",
        path.display()
    );
}

/// How many pages of `f` between `off` and `off + len` are in the page
/// cache, counted with `cachestat(2)` (Linux 6.5+), which does no I/O. (A
/// `RWF_NOWAIT` read is no probe: on a miss it starts readahead, and a
/// fast disk can finish it before the call returns.)
fn cached_pages(f: &std::fs::File, off: u64, len: u64) -> u64 {
    /// The same number on every architecture (the generic syscall table).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range: [u64; 2] = [off, len];
    // nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted.
    let mut stat = [0u64; 5];
    // SAFETY: cachestat reads the two-u64 range and writes one five-u64
    // `struct cachestat`; both arrays are live for the synchronous call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            std::os::fd::AsRawFd::as_raw_fd(f),
            range.as_ptr(),
            stat.as_mut_ptr(),
            0u32,
        )
    };
    assert_eq!(rc, 0, "cachestat: {}", std::io::Error::last_os_error());
    stat[0]
}

#[test]
fn uncached_large_files_are_read_with_o_direct_and_hash_the_same() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let probe = dir.path().join("probe");
    std::fs::write(&probe, [0u8; 4096]).unwrap();
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
    {
        panic!("this test needs O_DIRECT where CARGO_TARGET_TMPDIR is (not tmpfs): {e}");
    }
    // Sizes around the block size (64 KiB here): not a multiple, an exact
    // multiple, less than one block, and many blocks.
    let sizes = [5_000_017usize, 7 << 16, 300_000, 65_535, 3 << 20];
    let names: Vec<String> = (0..sizes.len()).map(|k| format!("f{k}")).collect();
    for (name, &len) in names.iter().zip(&sizes) {
        let data: Vec<u8> = (0..len).map(|i| (i * 131 + len) as u8).collect();
        std::fs::write(dir.path().join(name), data).unwrap();
    }
    let files: Vec<&OsStr> = names.iter().map(OsStr::new).collect();
    let want = tool(dir.path(), "b3sum", &files);
    for no_direct in [false, true] {
        for n in &names {
            evict(&dir.path().join(n));
        }
        let mut args = vec![
            OsStr::new("--block-size"),
            OsStr::new("64K"),
            OsStr::new("--depth"),
            OsStr::new("3"),
        ];
        if no_direct {
            args.push(OsStr::new("--no-direct"));
        }
        args.extend(&files);
        let o = blockio(dir.path(), &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.stdout, want, "--no-direct: {no_direct}");
        // Direct reads leave the cache as it was (empty); buffered ones
        // fill it. Checked on the biggest file, well past its first block.
        let big = std::fs::File::open(dir.path().join(&names[0])).unwrap();
        assert_eq!(
            cached_pages(&big, 3 << 20, 4096) == 1,
            no_direct,
            "--no-direct: {no_direct}"
        );
    }
}

/// A pipe named as a file is read from start to end: a read at offset 0
/// of a pipe would take its next bytes, and lose the first.
#[test]
fn a_pipe_named_as_a_file_is_hashed_whole() {
    use std::io::Write;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data: Vec<u8> = (0..600_000u32).map(|i| (i % 241) as u8).collect();
    std::fs::write(dir.path().join("same"), &data).unwrap();
    for algo in ["blake3", "sha512"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_blockio"))
            .current_dir(dir.path())
            .args(["sum", "--algo", algo, "/dev/stdin", "same"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(&data).unwrap();
        drop(input);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success());
        let out = String::from_utf8(o.stdout).unwrap();
        let hexes: Vec<&str> = out.lines().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(hexes.len(), 2, "{out}");
        assert_eq!(
            hexes[0], hexes[1],
            "the pipe's digest is the file's ({algo})"
        );
    }
}
