//! `blockio sum` against the tools it stands in for, on the same inputs:
//! standard output byte for byte, standard error line for line (the tool's
//! name aside) and the exit status, for `sha256sum` with every list format
//! and flag it has, and for `b3sum` where its formats and wording are the
//! ones `blockio sum` follows (see docs/tools.md for where they differ).

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `prog args` in `dir` with `stdin` as its standard input.
fn run(dir: &Path, prog: &str, args: &[&OsStr], stdin: &[u8]) -> Output {
    let mut child = Command::new(prog)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{prog} runs (scripts/install-deps installs it): {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// Standard error with the tool's name made ours, lines sorted: the
/// references print some warnings while checking and some at the end, in
/// an order that depends on buffering, not on what they found.
fn errors(o: &Output, tool: &str) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(|l| l.replacen(&format!("{tool}:"), "blockio sum:", 1))
        .collect();
    v.sort();
    v
}

fn same(dir: &Path, tool: &str, ours: &[&str], theirs: &[&str], stdin: &[u8]) {
    let mut args = vec![OsStr::new("sum")];
    args.extend(ours.iter().map(OsStr::new));
    let o = run(dir, env!("CARGO_BIN_EXE_blockio"), &args, stdin);
    let theirs: Vec<&OsStr> = theirs.iter().map(OsStr::new).collect();
    let t = run(dir, tool, &theirs, stdin);
    let what = format!("blockio sum {ours:?} against {tool} {theirs:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&t.stdout),
        "stdout of {what}"
    );
    let mut ours_err = errors(&o, "blockio sum");
    if tool == "b3sum" {
        // b3sum prints no summary; ours is sha256sum's.
        ours_err.retain(|l| !l.starts_with("blockio sum: WARNING:"));
    }
    assert_eq!(ours_err, errors(&t, tool), "stderr of {what}");
    assert_eq!(o.status.code(), t.status.code(), "exit status of {what}");
}

/// Files with plain and awkward names; returns the names.
fn files(dir: &Path) -> Vec<&'static str> {
    let names = vec![
        "plain",
        "with space",
        "back\\slash",
        "new\nline",
        "empty",
        "star*",
    ];
    for (i, n) in names.iter().enumerate() {
        let body = if *n == "empty" {
            Vec::new()
        } else {
            n.repeat(i * 1000 + 1).into_bytes()
        };
        std::fs::write(dir.join(OsStr::from_bytes(n.as_bytes())), body).unwrap();
    }
    names
}

/// `text`, its lines rewritten by `f`.
fn map_lines(text: &[u8], f: impl Fn(&str) -> String) -> Vec<u8> {
    String::from_utf8(text.to_vec())
        .unwrap()
        .lines()
        .map(|l| f(l) + "\n")
        .collect::<String>()
        .into_bytes()
}

#[test]
fn sha256_lists_in_every_format_check_like_sha256sum() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let names = files(dir);
    sha256_generates_like_sha256sum(dir, &names);
    let lists = sha256_lists(dir, &names);
    for (name, text) in &lists {
        std::fs::write(dir.join(format!("{name}.sha")), text).unwrap();
    }
    for (name, text) in &lists {
        let file = format!("{name}.sha");
        for flags in [&[][..], &["--quiet"], &["--status"], &["--strict"], &["-w"]] {
            let mut ours = vec!["--algo", "sha256", "-c"];
            ours.extend(flags);
            ours.push(&file);
            let mut theirs = vec!["-c"];
            theirs.extend(flags);
            theirs.push(&file);
            same(dir, "sha256sum", &ours, &theirs, b"");
        }
        // The list from standard input, as `-` and as no argument.
        same(
            dir,
            "sha256sum",
            &["--algo", "sha256", "-c", "-"],
            &["-c", "-"],
            text,
        );
        same(dir, "sha256sum", &["--algo", "sha256", "-c"], &["-c"], text);
    }
    // A list with nothing valid in it.
    same(
        dir,
        "sha256sum",
        &["--algo", "sha256", "-c"],
        &["-c"],
        b"junk\n",
    );
}

/// Generation of the files `names` in `dir`, plain and `--tag`, and from
/// standard input, as `sha256sum` does it.
fn sha256_generates_like_sha256sum(dir: &Path, names: &[&str]) {
    let mut ours = vec!["--algo", "sha256"];
    ours.extend(names);
    same(dir, "sha256sum", &ours, names, b"");
    ours.insert(2, "--tag");
    let mut theirs = vec!["--tag"];
    theirs.extend(names);
    same(dir, "sha256sum", &ours, &theirs, b"");
    same(
        dir,
        "sha256sum",
        &["--algo", "sha256"],
        &[],
        b"some input\n",
    );
    same(
        dir,
        "sha256sum",
        &["--algo", "sha256", "-"],
        &["-"],
        b"some input\n",
    );
    same(
        dir,
        "sha256sum",
        &["--algo", "sha256", "plain", "-", "missing"],
        &["plain", "-", "missing"],
        b"x",
    );
}

/// `sha256sum`'s list of the files `names` in `dir`, in every format a
/// check reads, by name: plain, OpenSSL's, leading blanks, BSD `md5 -r`'s
/// single space, binary mode's star, `--tag`, with CRLF line ends, and
/// one with wrong sums, a missing file, junk, a comment and blank lines.
fn sha256_lists(dir: &Path, names: &[&str]) -> [(&'static str, Vec<u8>); 9] {
    let list = run(
        dir,
        "sha256sum",
        &names.iter().map(OsStr::new).collect::<Vec<_>>(),
        b"",
    )
    .stdout;
    let mut tag_args = vec![OsStr::new("--tag")];
    tag_args.extend(names.iter().map(OsStr::new));
    let tagged = run(dir, "sha256sum", &tag_args, b"").stdout;
    let bad = {
        let mut v = list.clone();
        v.extend_from_slice(
            b"0000000000000000000000000000000000000000000000000000000000000000  plain\n",
        );
        v.extend_from_slice(
            b"1111111111111111111111111111111111111111111111111111111111111111  missing\n",
        );
        v.extend_from_slice(b"not a line\n\n# a comment\n   \n");
        v
    };
    [
        ("plain", list.clone()),
        (
            "openssl",
            map_lines(&tagged, |l| {
                l.replacen(" (", "(", 1).replacen(") = ", ")= ", 1)
            }),
        ),
        ("blanks", map_lines(&list, |l| format!(" \t {l}"))),
        ("single", map_lines(&list, |l| l.replacen("  ", " ", 1))),
        ("star", map_lines(&list, |l| l.replacen("  ", " *", 1))),
        ("tagged", tagged.clone()),
        ("crlf", map_lines(&list, |l| format!("{l}\r"))),
        ("tagged-crlf", map_lines(&tagged, |l| format!("{l}\r"))),
        ("bad", bad),
    ]
}

#[test]
fn blake3_sums_and_checks_like_b3sum() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let names = files(dir);
    let mut ours = vec![];
    ours.extend(&names);
    same(dir, "b3sum", &ours, &names, b"");
    same(dir, "b3sum", &[], &[], b"some input\n");
    same(dir, "b3sum", &["-"], &["-"], b"some input\n");
    let list = run(
        dir,
        "b3sum",
        &names.iter().map(OsStr::new).collect::<Vec<_>>(),
        b"",
    )
    .stdout;
    std::fs::write(dir.join("list.b3"), &list).unwrap();
    let one_wrong = map_lines(&list, |l| {
        if l.ends_with("  plain") {
            format!("{}{}", "0".repeat(64), &l[64..])
        } else {
            l.to_string()
        }
    });
    std::fs::write(dir.join("wrong.b3"), &one_wrong).unwrap();
    for file in ["list.b3", "wrong.b3"] {
        same(dir, "b3sum", &["-c", file], &["-c", file], b"");
        same(
            dir,
            "b3sum",
            &["-c", "--quiet", file],
            &["-c", "--quiet", file],
            b"",
        );
    }
    // What b3sum cannot do and we do: a tag line names its algorithm, and
    // a list of another algorithm's length gets a hint naming --algo.
    let tagged = format!("BLAKE3 (plain) = {}", &String::from_utf8_lossy(&list)[..64]);
    let o = run(
        dir,
        env!("CARGO_BIN_EXE_blockio"),
        &[
            OsStr::new("sum"),
            OsStr::new("--algo"),
            OsStr::new("sha256"),
            OsStr::new("-c"),
        ],
        tagged.as_bytes(),
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "plain: OK\n");
    let o = run(
        dir,
        env!("CARGO_BIN_EXE_blockio"),
        &[
            OsStr::new("sum"),
            OsStr::new("--algo"),
            OsStr::new("xxh3"),
            OsStr::new("-c"),
            OsStr::new("list.b3"),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("as --algo blake3 or --algo sha256 or --algo sm3 writes them"),
        "{err}"
    );
}

#[test]
fn a_closed_pipe_ends_quietly_and_specials_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::write(dir.join("f"), vec![7u8; 1 << 20]).unwrap();
    let args: Vec<String> = std::iter::once("sum".to_string())
        .chain(std::iter::repeat_n("f".to_string(), 2000))
        .collect();
    let out = Command::new("sh")
        .current_dir(dir)
        .arg("-c")
        .arg(format!(
            "{} {} | head -1; echo \"status ${{PIPESTATUS:-x}}\"",
            env!("CARGO_BIN_EXE_blockio"),
            args.join(" ")
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("Broken pipe") && !err.contains("error"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);

    std::fs::create_dir_all(dir.join("t/sub")).unwrap();
    std::fs::write(dir.join("t/file"), b"x").unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("t/dangling")).unwrap();
    std::os::unix::fs::symlink("../sub", dir.join("t/sub/to-dir")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("t/fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let o = run(
        dir,
        env!("CARGO_BIN_EXE_blockio"),
        &[OsStr::new("sum"), OsStr::new("t")],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    for want in [
        "t/dangling: a dangling symbolic link",
        "t/fifo: a FIFO",
        "t/sub/to-dir: a symbolic link to a directory",
    ] {
        assert!(err.contains(want), "{want} in {err}");
    }
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
    let o = run(
        dir,
        env!("CARGO_BIN_EXE_blockio"),
        &[
            OsStr::new("sum"),
            OsStr::new("--skip-special"),
            OsStr::new("t"),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stderr.is_empty());
}
