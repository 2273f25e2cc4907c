//! `blockio` run through a link named `b3sum`, which follows b3sum 1.8,
//! against Debian's `b3sum` (scripts/install-deps installs it; 1.2.0 here)
//! on the same inputs where the two versions agree: standard output byte
//! for byte, standard error line for line and the exit status, for each
//! of b3sum's options. Where 1.8 differs from 1.2 (`--tag`, `--seek`, the
//! check lists it reads and its closing warning, carriage returns escaped
//! in names, usage errors exiting 2), the expected bytes are 1.8's, read
//! from its source (src/main.rs of the b3sum crate, 1.8.7);
//! scripts/b3sum-tests runs b3sum 1.8.7 itself beside blockio on such
//! command lines.

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

    /// Runs ours alone.
    fn ours(&self, args: &[&str], stdin: &[u8]) -> Output {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        run(
            self.dir.path(),
            &self.ours.path().join("b3sum"),
            &args,
            stdin,
        )
    }

    /// Asserts what ours writes and how it ends: b3sum 1.8's output.
    fn expect(&self, args: &[&str], stdin: &[u8], stdout: &str, stderr: &str, status: i32) {
        let o = self.ours(args, stdin);
        let what = format!("b3sum {args:?}");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            stdout,
            "stdout of {what}"
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stderr),
            stderr,
            "stderr of {what}"
        );
        assert_eq!(o.status.code(), Some(status), "status of {what}");
    }

    /// The plain BLAKE3 digest of a file, as Debian's b3sum writes it.
    fn hex(&self, file: &str) -> String {
        let o = run(
            self.dir.path(),
            Path::new("b3sum"),
            &[b"--no-names", file.as_bytes()],
            b"",
        );
        String::from_utf8(o.stdout).unwrap().trim_end().to_string()
    }
}

/// The reasons std gives for a missing file and a directory read.
const ENOENT: &str = "No such file or directory (os error 2)";
const EISDIR: &str = "Is a directory (os error 21)";

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
    for opts in [&[][..], &["--quiet"]] {
        let mut v = vec!["-c"];
        v.extend(opts);
        v.push("good.b3");
        p.same(&v, b"");
        let mut v = vec!["--check"];
        v.extend(opts);
        p.same(&v, &list);
    }
    // Lines b3sum refuses, a digest that does not match, a missing file
    // and a directory: each named (the refused lines on standard error),
    // and counted in one closing warning (b3sum 1.8: `parse_check_line`,
    // `check_one_line`, `main`).
    let hex = p.hex("plain");
    let zeros = "0".repeat(64);
    let upper = hex.to_uppercase();
    let bad = format!(
        "{hex}  plain\n{zeros}  plain\n{hex}  missing\ngarbage\n\n{hex} *plain\n\
         {upper}  plain\n\\{hex}  a\\qb\n{hex}  d\n"
    );
    std::fs::write(p.dir.path().join("bad.b3"), &bad).unwrap();
    let refused = "b3sum: Invalid check line format\nb3sum: Empty line\n\
                   b3sum: Invalid check line format\nb3sum: Invalid hex\n\
                   b3sum: Invalid backslash escape\n\
                   b3sum: WARNING: 8 computed checksums did NOT match\n";
    let failed = format!("plain: FAILED\nmissing: FAILED ({ENOENT})\nd: FAILED ({EISDIR})\n");
    p.expect(
        &["-c", "bad.b3"],
        b"",
        &format!("plain: OK\n{failed}"),
        refused,
        1,
    );
    p.expect(&["-c", "--quiet", "bad.b3"], b"", &failed, refused, 1);
    // One warning for all the lists, after the last.
    let twice = "b3sum: WARNING: 2 computed checksums did NOT match\n";
    let one = format!("{zeros}  plain\n");
    std::fs::write(p.dir.path().join("one.b3"), &one).unwrap();
    p.expect(
        &["-c", "one.b3", "good.b3", "one.b3"],
        b"",
        &format!("plain: FAILED\n{}plain: FAILED\n", ok_lines()),
        twice,
        1,
    );
    p.expect(
        &["-c", "one.b3"],
        b"",
        "plain: FAILED\n",
        "b3sum: WARNING: 1 computed checksum did NOT match\n",
        1,
    );
}

/// `b3sum -c good.b3`'s output: every file of FILES passes.
fn ok_lines() -> String {
    FILES
        .iter()
        .map(|f| match *f {
            "back\\slash" => "\\back\\\\slash: OK\n".to_string(),
            "new\nline" => "\\new\\nline: OK\n".to_string(),
            f => format!("{f}: OK\n"),
        })
        .collect()
}

/// `--tag` lines, and lists of them (b3sum 1.8's `hash_one_input`,
/// `split_tagged_check_line`); carriage returns escaped in names, and a
/// list with Windows line ends (`parse_check_line` drops them).
#[test]
fn tags_carriage_returns_and_crlf_lists_as_b3sum() {
    let p = Pair::new();
    std::fs::write(p.dir.path().join("c\rr"), b"y").unwrap();
    let (plain, cr, nl) = (p.hex("plain"), p.hex("c\rr"), p.hex("new\nline"));
    let tagged = format!(
        "BLAKE3 (plain) = {plain}\n\\BLAKE3 (c\\rr) = {cr}\n\\BLAKE3 (new\\nline) = {nl}\n"
    );
    p.expect(
        &["--tag", "plain", "c\rr", "new\nline"],
        b"",
        &tagged,
        "",
        0,
    );
    let lines = format!("{plain}  plain\n\\{cr}  c\\rr\n");
    p.expect(&["plain", "c\rr"], b"", &lines, "", 0);
    // --no-names and --raw win over --tag, as in b3sum.
    p.expect(
        &["--tag", "--no-names", "plain"],
        b"",
        &format!("{plain}\n"),
        "",
        0,
    );
    let checked = "plain: OK\n\\c\\rr: OK\n\\new\\nline: OK\n";
    p.expect(&["-c"], tagged.as_bytes(), checked, "", 0);
    let crlf = tagged.replace('\n', "\r\n");
    p.expect(&["-c"], crlf.as_bytes(), checked, "", 0);
    p.expect(
        &["-c"],
        lines.replace('\n', "\r\n").as_bytes(),
        "plain: OK\n\\c\\rr: OK\n",
        "",
        0,
    );
    // A name is split from its digest at the last `) = `.
    std::fs::write(p.dir.path().join("x) = y"), b"plain\n".repeat(3)).unwrap();
    let odd = format!("BLAKE3 (x) = y) = {plain}\n");
    p.expect(&["-c"], odd.as_bytes(), "x) = y: OK\n", "", 0);
}

/// `--seek`: the output from an offset of BLAKE3's extendable output, for
/// hashes and for checks (b3sum 1.8's `hash_path`).
#[test]
fn seek_as_b3sum() {
    let p = Pair::new();
    let long = String::from_utf8(p.ours(&["-l", "100", "--no-names", "big"], b"").stdout).unwrap();
    let long = long.trim_end();
    assert_eq!(long.len(), 200);
    assert_eq!(&long[..64], p.hex("big"));
    let part = p.ours(&["--seek", "60", "-l", "40", "big"], b"");
    assert_eq!(
        String::from_utf8(part.stdout).unwrap(),
        format!("{}  big\n", &long[120..])
    );
    let raw = p
        .ours(&["--seek", "99", "-l", "1", "--raw", "big"], b"")
        .stdout;
    assert_eq!(raw, [u8::from_str_radix(&long[198..], 16).unwrap()]);
    let list = format!("{}  big\n", &long[2..66]);
    p.expect(&["-c", "--seek", "1"], list.as_bytes(), "big: OK\n", "", 0);
}

/// `-l` past 1 MiB: BLAKE3's extendable output streamed, as b3sum
/// streams it, byte for byte as b3sum's (3 MiB + 5 bytes of output, the
/// hex of it, each format b3sum 1.2 has, a name escaped, a file missing,
/// standard input); and from a `--seek` offset, the same bytes as the
/// output made whole from the start.
#[test]
fn a_length_past_a_mebibyte_is_streamed_as_b3sum_streams_it() {
    let p = Pair::new();
    let len = "3145733";
    for args in [
        &["-l", len, "plain", "big"][..],
        &["-l", len, "back\\slash", "missing", "empty"],
        &["-l", len, "--no-names", "big"],
        &["-l", len, "--raw", "big"],
        &["-l", len, "--derive-key", "context", "plain"],
        &["-l", len, "-"],
    ] {
        p.same(args, b"from standard input");
    }
    let whole = p.ours(&["-l", len, "--no-names", "big"], b"").stdout;
    assert_eq!(whole.len(), 2 * 3_145_733 + 1);
    let part = p.ours(
        &["--seek", "1048579", "-l", "1048583", "--no-names", "big"],
        b"",
    );
    let hex = part.stdout.strip_suffix(b"\n").expect("one line");
    assert!(
        hex == &whole[2 * 1_048_579..2 * (1_048_579 + 1_048_583)],
        "--seek into a streamed output"
    );
}

#[test]
fn command_line_mistakes_fail_as_b3sum() {
    let p = Pair::new();
    // clap 4's usage errors, as b3sum 1.8's `Inner::parse_from` exits on
    // them: status 2 (Debian's 1.2.0, on clap 2, exits 1).
    for args in [
        &["--bogus"][..],
        &["--quiet", "plain"],
        &["--keyed", "--derive-key", "x", "plain"],
        &["-c", "--no-names", "plain"],
        &["-c", "--tag", "plain"],
        &["-l", "x", "plain"],
        &["--seek", "-1", "plain"],
        &["--keyed"],
    ] {
        let o = p.ours(args, b"");
        assert_eq!(o.status.code(), Some(2), "status of b3sum {args:?}");
        assert!(o.stderr.starts_with(b"error: "), "b3sum {args:?}");
        assert!(o.stdout.is_empty());
    }
    p.same(&["-l", "1048576", "--no-names", "empty"], b"");
    p.expect(
        &["--raw", "plain", "big"],
        b"",
        "",
        "Error: Only one filename can be provided when using --raw\n",
        1,
    );
    let v = p.ours(&["--version"], b"");
    assert_eq!(v.status.code(), Some(0));
    let v = String::from_utf8(v.stdout).unwrap();
    assert_eq!(v, "b3sum 1.8.7\n", "b3sum 1.8.7's own line");
}

/// The lines and lists where b3sum's check differs from the coreutils':
/// a comment line is refused, a carriage return inside a name stays, an
/// escaped line shows its name as written, a list that cannot be read
/// stops the run (without the closing warning); and `-` is refused in its
/// place with `--keyed`.
#[test]
fn check_and_keyed_differences_as_b3sum() {
    let p = Pair::new();
    std::fs::write(p.dir.path().join("c\rr"), b"y").unwrap();
    let hex = p.hex("plain");
    let list = format!(
        "\\{hex}  plain\n# comment\n{hex}  c\rr\n\\{hex}  c\\\\\rr\n{hex}  d\n{hex}  missing\n"
    );
    std::fs::write(p.dir.path().join("l.b3"), list).unwrap();
    let out = format!(
        "\\plain: OK\nc\rr: FAILED\n\\c\\\\\rr: FAILED ({ENOENT})\nd: FAILED ({EISDIR})\n\
         missing: FAILED ({ENOENT})\n"
    );
    let warned = "b3sum: Invalid check line format\n\
                  b3sum: WARNING: 5 computed checksums did NOT match\n";
    p.expect(&["-c", "l.b3"], b"", &out, warned, 1);
    p.expect(
        &["-c", "l.b3", "missing.b3", "l.b3"],
        b"",
        &out,
        &format!("b3sum: Invalid check line format\nError: {ENOENT}\n"),
        1,
    );
    // A list that is not UTF-8: the lines before it are checked.
    let mut bytes = format!("{hex}  plain\n").into_bytes();
    bytes.extend_from_slice(b"\xff\n");
    bytes.extend_from_slice(format!("{hex}  plain\n").as_bytes());
    std::fs::write(p.dir.path().join("n.b3"), bytes).unwrap();
    p.expect(
        &["-c", "n.b3"],
        b"",
        "plain: OK\n",
        "Error: stream did not contain valid UTF-8\n",
        1,
    );
    std::fs::write(p.dir.path().join("empty.b3"), b"").unwrap();
    for args in [&["-c", "empty.b3"][..], &["-c", "d"]] {
        p.same(args, b"");
    }
    let key = [7u8; 32];
    p.same(&["--keyed", "plain", "-", "big"], &key);
    p.same(&["--keyed", "-", "plain"], &key);
}

/// A name that is not UTF-8 is written with U+FFFD, as b3sum writes it
/// (`filepath_to_string`: `to_string_lossy`); Debian's b3sum 1.2.0 does
/// the same for plain lines, so they are compared with it. `--tag` lines
/// are 1.8's only: their bytes are asserted. `blockio sum` writes the
/// name's bytes.
#[test]
fn names_that_are_not_utf8_as_b3sum() {
    let p = Pair::new();
    let name = OsStr::from_bytes(b"bad\xffname\xc3");
    std::fs::write(p.dir.path().join(name), b"x").unwrap();
    let args: [&[u8]; 3] = [b"plain", name.as_bytes(), b"back\\slash"];
    let (ours, theirs) = p.both(&args, b"");
    assert_eq!(ours.stdout, theirs.stdout);
    assert_eq!(ours.status.code(), Some(0));
    let hex = p.hex("with space");
    let tagged = run(
        p.dir.path(),
        &p.ours.path().join("b3sum"),
        &[b"--tag", name.as_bytes()],
        b"",
    );
    assert_eq!(
        String::from_utf8(tagged.stdout).unwrap(),
        format!("BLAKE3 (bad\u{fffd}name\u{fffd}) = {hex}\n")
    );
    let sum = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .current_dir(p.dir.path())
        .arg("sum")
        .arg(name)
        .output()
        .unwrap();
    let mut want = format!("{hex}  ").into_bytes();
    want.extend_from_slice(name.as_bytes());
    want.push(b'\n');
    assert_eq!(sum.stdout, want);
}
