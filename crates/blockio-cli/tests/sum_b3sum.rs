//! `blockio` run through a link named `b3sum`, against Debian's `b3sum`
//! (scripts/install-deps installs it) on the same inputs: standard output
//! byte for byte, standard error line for line and the exit status, for
//! each of b3sum's options. For command-line mistakes only the exit status
//! is compared: the two are parsed by different versions of clap, whose
//! wording differs.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn run(dir: &Path, prog: &Path, args: &[&[u8]], stdin: &[u8]) -> Output {
    let mut child = Command::new(prog)
        .current_dir(dir)
        .args(args.iter().map(|a| OsStr::from_bytes(a)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} runs (scripts/install-deps installs b3sum): {e}",
                prog.display()
            )
        });
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

struct Pair {
    ours: tempfile::TempDir,
    dir: tempfile::TempDir,
}

impl Pair {
    fn new() -> Pair {
        let ours = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), ours.path().join("b3sum"))
            .unwrap();
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        for (name, body) in [
            (&b"plain"[..], b"plain\n".repeat(3)),
            (b"with space", b"x".to_vec()),
            (b"back\\slash", b"y".repeat(5000)),
            (b"new\nline", b"z".to_vec()),
            (b"empty", Vec::new()),
            (b"big", (0..400_000u32).map(|i| (i % 253) as u8).collect()),
        ] {
            std::fs::write(dir.path().join(OsStr::from_bytes(name)), body).unwrap();
        }
        std::fs::create_dir(dir.path().join("d")).unwrap();
        Pair { ours, dir }
    }

    fn both(&self, args: &[&[u8]], stdin: &[u8]) -> (Output, Output) {
        let ours = run(
            self.dir.path(),
            &self.ours.path().join("b3sum"),
            args,
            stdin,
        );
        let theirs = run(self.dir.path(), Path::new("b3sum"), args, stdin);
        (ours, theirs)
    }

    /// Asserts the same output, errors and exit status.
    fn same(&self, args: &[&str], stdin: &[u8]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let (ours, theirs) = self.both(&args, stdin);
        let what = format!(
            "b3sum {:?}",
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
        assert_eq!(ours.stdout, theirs.stdout, "stdout of {what}");
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&theirs.stderr),
            "stderr of {what}"
        );
        assert_eq!(ours.status.code(), theirs.status.code(), "status of {what}");
    }

    /// Asserts the same exit status (a mistake on the command line).
    fn same_status(&self, args: &[&str]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let (ours, theirs) = self.both(&args, b"");
        assert_eq!(
            ours.status.code(),
            theirs.status.code(),
            "status of b3sum {args:?}"
        );
        assert!(!ours.stderr.is_empty());
    }
}

const FILES: [&str; 6] = [
    "plain",
    "with space",
    "back\\slash",
    "new\nline",
    "empty",
    "big",
];

#[test]
fn every_hash_option_as_b3sum() {
    let p = Pair::new();
    fn with_files<'a>(opts: &[&'a str]) -> Vec<&'a str> {
        let mut v = opts.to_vec();
        v.extend(FILES);
        v
    }
    for opts in [
        &[][..],
        &["--no-names"],
        &["-l", "64"],
        &["--length", "0"],
        &["-l", "7", "--no-names"],
        &["--derive-key", "blockio 2026-11-23 test context"],
        &["--num-threads", "1"],
        &["--num-threads", "0"],
        &["--no-mmap"],
    ] {
        p.same(&with_files(opts), b"");
        // Standard input, and a directory and a missing file among files.
        let mut v = opts.to_vec();
        v.extend(["plain", "-", "d", "missing", "empty"]);
        p.same(&v, b"from stdin");
        p.same(opts, b"only stdin");
    }
    let key = [7u8; 32];
    p.same(&with_files(&["--keyed"]), &key);
    p.same(&with_files(&["--keyed", "--no-names", "-l", "40"]), &key);
    p.same(&["--keyed", "plain"], b"too short");
    p.same(&["--keyed", "plain"], &[1u8; 40]);
    p.same(&["--raw", "big"], b"");
    p.same(&["--raw", "-l", "100", "plain"], b"");
    p.same(&["--raw"], b"raw from stdin");
    p.same(&["--raw", "plain", "big"], b"");
}

#[test]
fn check_as_b3sum() {
    let p = Pair::new();
    let list = run(
        p.dir.path(),
        Path::new("b3sum"),
        &FILES.iter().map(|f| f.as_bytes()).collect::<Vec<_>>(),
        b"",
    )
    .stdout;
    std::fs::write(p.dir.path().join("good.b3"), &list).unwrap();
    let text = String::from_utf8(list.clone()).unwrap();
    let hex = text.lines().next().unwrap()[..64].to_string();
    let zeros = "0".repeat(64);
    let bad = format!(
        "{text}{zeros}  plain\n{hex}  missing\ngarbage\n\n{} *plain\n{}  plain\n\\{hex}  a\\qb\n",
        hex,
        hex.to_uppercase()
    );
    std::fs::write(p.dir.path().join("bad.b3"), &bad).unwrap();
    for opts in [&[][..], &["--quiet"]] {
        for list in ["good.b3", "bad.b3"] {
            let mut v = vec!["-c"];
            v.extend(opts);
            v.push(list);
            p.same(&v, b"");
        }
        let mut v = vec!["--check"];
        v.extend(opts);
        p.same(&v, &list);
    }
}

#[test]
fn command_line_mistakes_fail_as_b3sum() {
    let p = Pair::new();
    for args in [
        &["--bogus"][..],
        &["--quiet", "plain"],
        &["--keyed", "--derive-key", "x", "plain"],
        &["-c", "--no-names", "plain"],
        &["-l", "x", "plain"],
    ] {
        p.same_status(args);
    }
    // A length b3sum streams and we would have to hold whole: refused,
    // with the reason, before anything is read.
    let ours = run(
        p.dir.path(),
        &p.ours.path().join("b3sum"),
        &[b"-l", b"18446744073709551615", b"plain"],
        b"",
    );
    assert_eq!(ours.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        "Error: --length 18446744073709551615 is more than blockio writes: at most 1048576 bytes\n"
    );
    p.same(&["-l", "1048576", "--no-names", "empty"], b"");
    let (ours, theirs) = p.both(&[b"--version"], b"");
    assert_eq!(ours.status.code(), theirs.status.code());
    assert!(String::from_utf8_lossy(&ours.stdout).starts_with("b3sum "));
}

/// The lines and lists where b3sum's check differs from the coreutils':
/// a comment line is refused, a carriage return stays in the name, an
/// escaped line shows its name as written, a list that cannot be read
/// stops the run; and `-` is refused in its place with `--keyed`.
#[test]
fn check_and_keyed_differences_as_b3sum() {
    let p = Pair::new();
    std::fs::write(p.dir.path().join("c\rr"), b"y").unwrap();
    let hex = String::from_utf8(
        run(
            p.dir.path(),
            Path::new("b3sum"),
            &[b"--no-names", b"plain"],
            b"",
        )
        .stdout,
    )
    .unwrap()
    .trim_end()
    .to_string();
    let list = format!(
        "\\{hex}  plain\n# comment\n{hex}  c\rr\n\\{hex}  c\\\\\rr\n{hex}  d\n{hex}  missing\n"
    );
    std::fs::write(p.dir.path().join("l.b3"), list).unwrap();
    std::fs::write(p.dir.path().join("empty.b3"), b"").unwrap();
    for args in [
        &["-c", "l.b3"][..],
        &["-c", "empty.b3"],
        &["-c", "d"],
        &["-c", "l.b3", "missing.b3", "l.b3"],
    ] {
        p.same(args, b"");
    }
    let key = [7u8; 32];
    p.same(&["--keyed", "plain", "-", "big"], &key);
    p.same(&["--keyed", "-", "plain"], &key);
}
