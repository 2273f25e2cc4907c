//! `blockio` run through links named after the coreutils sum tools,
//! against GNU's own tools on the same inputs: standard output and
//! standard error byte for byte (both under the same name, in the C
//! locale) and the exit status, for every option and list format the tools
//! have, and their mistakes.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const TOOLS: [&str; 8] = [
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
];

/// A directory of links named after the tools, to the blockio binary.
fn links() -> tempfile::TempDir {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for t in TOOLS.iter().chain(&["b3sum", "cp"]) {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), d.path().join(t)).unwrap();
    }
    d
}

/// Runs `prog` with `argv[0]` its file name, as a shell finds it on PATH,
/// in the C locale.
fn run(dir: &Path, prog: &Path, args: &[&[u8]], stdin: &[u8]) -> Output {
    run_in(dir, prog, args, stdin, "C")
}

/// [`run`] in the locale `locale` (`LC_ALL`).
fn run_in(dir: &Path, prog: &Path, args: &[&[u8]], stdin: &[u8], locale: &str) -> Output {
    let mut child = Command::new(prog)
        .arg0(prog.file_name().unwrap())
        .current_dir(dir)
        .args(args.iter().map(|a| OsStr::from_bytes(a)))
        .env("LC_ALL", locale)
        .env_remove("POSIXLY_CORRECT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} runs: {e}", prog.display()));
    let mut input = child.stdin.take().unwrap();
    // A tool may exit without reading its input.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

/// The GNU tool `name`, from the system (not a link of ours).
fn gnu(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("GNU {name} is installed (coreutils)")
}

/// Runs `tool args` as blockio (through the link) and as GNU's, and
/// asserts that they agree.
fn same(dir: &Path, links: &Path, tool: &str, args: &[&[u8]], stdin: &[u8]) {
    same_in(dir, links, tool, args, stdin, "C")
}

/// [`same`] in the locale `locale`.
fn same_in(dir: &Path, links: &Path, tool: &str, args: &[&[u8]], stdin: &[u8], locale: &str) {
    let ours = run_in(dir, &links.join(tool), args, stdin, locale);
    let theirs = run_in(dir, &gnu(tool), args, stdin, locale);
    let shown: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
    let what = format!("{tool} {shown:?}");
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout),
        "stdout of {what}"
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&theirs.stderr),
        "stderr of {what}"
    );
    assert_eq!(ours.status.code(), theirs.status.code(), "status of {what}");
}

/// Files with plain and awkward names, a directory, and their names.
fn tree(dir: &Path) -> Vec<&'static [u8]> {
    let names: Vec<&'static [u8]> = vec![
        b"plain",
        b"with space",
        b"back\\slash",
        b"new\nline",
        b"cr\rname",
        b"empty",
        b" lead",
        b"*star",
        b"big",
    ];
    for (i, n) in names.iter().enumerate() {
        let body = match *n {
            b"empty" => Vec::new(),
            // Larger than a small file: streamed.
            b"big" => (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect(),
            _ => n.repeat(i * 100 + 1),
        };
        std::fs::write(dir.join(OsStr::from_bytes(n)), body).unwrap();
    }
    std::fs::create_dir(dir.join("d")).unwrap();
    names
}

#[test]
fn sums_match_gnu_for_every_tool_and_format() {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    let names = tree(dir);
    for tool in TOOLS {
        let mut formats: Vec<Vec<&[u8]>> =
            vec![vec![], vec![b"--tag"], vec![b"-z"], vec![b"--tag", b"-z"]];
        if tool == "cksum" {
            for a in [
                "bsd", "sysv", "crc", "md5", "sha1", "sha224", "sha256", "sha384", "sha512",
                "blake2b", "sm3",
            ] {
                let a: &'static str = Box::leak(format!("--algorithm={a}").into_boxed_str());
                formats.push(vec![a.as_bytes()]);
                formats.push(vec![a.as_bytes(), b"--untagged"]);
            }
            formats.push(vec![b"-a", b"blake2b", b"-l", b"128"]);
            formats.push(vec![b"-a", b"blake2b", b"-l", b"8", b"--untagged"]);
        } else {
            formats.push(vec![b"-b"]);
            formats.push(vec![b"-t"]);
            formats.push(vec![b"--binary", b"--tag"]);
        }
        if tool == "b2sum" {
            formats.push(vec![b"-l", b"128"]);
            formats.push(vec![b"--length=256", b"--tag"]);
            formats.push(vec![b"-l", b"0"]);
        }
        for f in &formats {
            let mut args = f.clone();
            args.extend(&names);
            same(dir, links.path(), tool, &args, b"");
            // Standard input, alone and among files; a directory and a
            // missing file among files.
            same(dir, links.path(), tool, f, b"from stdin\n");
            let mut args = f.clone();
            args.extend([&b"plain"[..], b"-", b"d", b"missing", b"empty"]);
            let crc = !f
                .iter()
                .any(|a| a.starts_with(b"--algorithm=") || *a == b"-a")
                || f.contains(&&b"--algorithm=crc"[..]);
            if tool == "cksum" && crc {
                // GNU cksum 9.1 gives a directory the CRC of nothing and
                // exits 0 (its CRC loop ignores the read error); we report
                // it as every other algorithm does.
                let o = run(dir, &links.path().join(tool), &args, b"stdin again");
                assert_eq!(
                    String::from_utf8_lossy(&o.stderr),
                    "cksum: d: Is a directory\ncksum: missing: No such file or directory\n"
                );
                assert_eq!(o.status.code(), Some(1));
                continue;
            }
            same(dir, links.path(), tool, &args, b"stdin again");
            // A pipe named as a file.
            let mut args = f.clone();
            args.extend([&b"/dev/stdin"[..], b"plain"]);
            same(dir, links.path(), tool, &args, b"through a pipe\n");
        }
    }
}

#[test]
fn checks_match_gnu_for_every_list_format() {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    let names = tree(dir);
    for tool in TOOLS {
        let (lists, text, tag_text) = write_lists(dir, tool, &names);
        let algo: Vec<&[u8]> = if tool == "cksum" {
            vec![b"-a", b"sha256"]
        } else {
            vec![]
        };
        for name in &lists {
            for flags in [
                &[][..],
                &[&b"--status"[..]],
                &[b"--ignore-missing", b"--quiet"],
                &[b"-w", b"--strict", b"--quiet"],
            ] {
                let mut args: Vec<&[u8]> = vec![b"-c"];
                args.extend(flags);
                args.push(name.as_bytes());
                same(dir, links.path(), tool, &args, b"");
                if tool == "cksum" && flags.is_empty() {
                    let mut with_algo = algo.clone();
                    with_algo.extend(&args);
                    same(dir, links.path(), tool, &with_algo, b"");
                }
            }
        }
        // A list on standard input, a directory, a missing list, several.
        same(dir, links.path(), tool, &[b"-c"], tag_text.as_bytes());
        same(dir, links.path(), tool, &[b"-c", b"-"], text.as_bytes());
        same(dir, links.path(), tool, &[b"-c", b"d"], b"");
        same(dir, links.path(), tool, &[b"-c", b"nope"], b"");
        same(
            dir,
            links.path(),
            tool,
            &[b"--check", b"plain.list", b"d", b"tagged.list"],
            b"",
        );
    }
}

/// Writes into `dir` GNU `tool`'s lists of the files `names`, plain and
/// tagged, and lists made from those: bad and mismatched lines, a missing
/// file, OpenSSL's format, leading blanks, CRLF, single spaces, comments.
/// The lists' names, and the plain and tagged lists' text.
fn write_lists(dir: &Path, tool: &str, names: &[&[u8]]) -> (Vec<&'static str>, String, String) {
    let gnu_tool = gnu(tool);
    let write = |file: &str, args: &[&[u8]]| {
        let mut a = args.to_vec();
        a.extend(names);
        let o = run(dir, &gnu_tool, &a, b"");
        std::fs::write(dir.join(file), &o.stdout).unwrap();
        o.stdout
    };
    let (plain, tagged) = if tool == "cksum" {
        (
            write("plain.list", &[b"-a", b"sha256", b"--untagged"]),
            write("tagged.list", &[b"-a", b"sha512"]),
        )
    } else {
        (write("plain.list", &[]), write("tagged.list", &[b"--tag"]))
    };
    let text = String::from_utf8_lossy(&plain).into_owned();
    let tag_text = String::from_utf8_lossy(&tagged).into_owned();
    let first = text.lines().next().unwrap().to_string();
    let hex: String = first
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    let zeros = "0".repeat(hex.len());
    let mut lists: Vec<(&str, String)> = vec![
        ("plain.list", text.clone()),
        ("tagged.list", tag_text.clone()),
        (
            "mixed.list",
            format!("# comment\n\n{text}not a line\n{zeros}  plain\n{hex}  missing\n"),
        ),
        (
            "openssl.list",
            tag_text.replace(" (", "(").replace(") = ", ")= "),
        ),
        (
            "blanks.list",
            text.lines().map(|l| format!(" \t{l}\r\n")).collect(),
        ),
        ("single.list", format!("{hex} plain\n{hex} *star\n")),
        ("unfinished.list", first.clone()),
        ("only-bad.list", "nothing here\n".to_string()),
        ("missing-only.list", format!("{hex}  missing\n")),
    ];
    if tool == "cksum" {
        lists.push(("crc.list", "4294967295 0 empty\n".into()));
    }
    for (name, body) in &lists {
        std::fs::write(dir.join(name), body).unwrap();
    }
    (lists.into_iter().map(|(n, _)| n).collect(), text, tag_text)
}

#[test]
fn usage_errors_match_gnu() {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    std::fs::write(dir.join("f"), b"f\n").unwrap();
    let common: Vec<Vec<&[u8]>> = vec![
        vec![b"--bogus"],
        vec![b"--bogus=1", b"f"],
        vec![b"-x", b"f"],
        vec![b"-c", b"--tag", b"f"],
        vec![b"--zero", b"-c", b"f"],
        vec![b"--quiet", b"f"],
        vec![b"--status", b"f"],
        vec![b"--strict", b"f"],
        vec![b"-w", b"f"],
        vec![b"--ignore-missing", b"f"],
        vec![b"--st", b"-c", b"f"],
        vec![b"--stat", b"-c", b"f"],
        vec![b"--check=yes", b"f"],
        // Every option abbreviated by the empty name, in GNU's order.
        vec![b"--=", b"f"],
        vec![b"--t=1", b"f"],
        vec![b"--", b"-c"],
        // Missing files whose names need quoting in messages.
        vec![b"", b"it's", b"bad\xff", b"a b", b"new\nline", b"f"],
        vec![b"f", b"--tag"],
    ];
    for tool in TOOLS {
        for args in &common {
            same(dir, links.path(), tool, args, b"");
        }
        let extra: &[&[&str]] = match tool {
            "cksum" => &[
                &["-a"],
                &["-a", "sha22", "f"],
                &["-a", "crc", "-c", "f"],
                &["-l", "128", "f"],
                &["-a", "blake2b", "-l", "12", "f"],
                &["-a", "blake2b", "-l", "1024", "f"],
                &["-a", "blake2b", "-l", "x", "f"],
                &["-b", "f"],
                &["--untagged", "--tag", "f"],
            ],
            "b2sum" => &[
                &["--tag", "--text", "f"],
                &["-l"],
                &["-l", "12", "f"],
                &["--length=520", "f"],
                &["-b", "-c", "f"],
            ],
            _ => &[
                &["--tag", "--text", "f"],
                &["--text", "--tag", "f"],
                &["-b", "-c", "f"],
                &["-t", "-c", "f"],
            ],
        };
        for args in extra {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            same(dir, links.path(), tool, &args, b"");
        }
    }
}

#[test]
fn help_and_version_name_the_tool() {
    let links = links();
    for tool in TOOLS {
        let o = run(Path::new("."), &links.path().join(tool), &[b"--help"], b"");
        assert_eq!(o.status.code(), Some(0));
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(
            help.starts_with(&format!("Usage: {tool} [OPTION]... [FILE]...\n")),
            "{help}"
        );
        // Abbreviated, as getopt_long allows.
        let o = run(Path::new("."), &links.path().join(tool), &[b"--vers"], b"");
        assert_eq!(o.status.code(), Some(0));
        let version = String::from_utf8_lossy(&o.stdout);
        assert!(
            version.starts_with(&format!("{tool} (blockio) ")),
            "{version}"
        );
    }
    // blockio under its own name still has its subcommands.
    let o = run(
        Path::new("."),
        Path::new(env!("CARGO_BIN_EXE_blockio")),
        &[b"sum", b"--algo", b"sha512", b"-"],
        b"abc",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
         2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f  -\n"
    );
}

#[test]
fn cp_through_a_link_is_blockio_cp() {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(d.path().join("a"), b"data").unwrap();
    let cp = links.path().join("cp");
    let o = run(d.path(), &cp, &[b"a", b"b"], b"");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(d.path().join("b")).unwrap(), b"data");
    // A usage error: status 1, as GNU cp, and the message names `cp`.
    let o = run(d.path(), &cp, &[b"--bogus", b"a", b"c"], b"");
    assert_eq!(o.status.code(), Some(1));
    let o = run(d.path(), &cp, &[b"--version"], b"");
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("cp "));
}

#[test]
fn a_full_standard_output_is_a_write_error_as_gnu_says() {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(d.path().join("f"), b"f\n").unwrap();
    for args in [&["f"][..], &["--help"]] {
        let full = |prog: &Path| {
            Command::new(prog)
                .arg0("sha256sum")
                .args(args)
                .current_dir(d.path())
                .env("LC_ALL", "C")
                .stdout(std::fs::File::create("/dev/full").unwrap())
                .output()
                .unwrap()
        };
        let ours = full(&links.path().join("sha256sum"));
        let theirs = full(&gnu("sha256sum"));
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&theirs.stderr),
            "{args:?}"
        );
        assert_eq!(ours.status.code(), theirs.status.code());
    }
}

/// In a UTF-8 locale the arguments a tool refuses, and the names in those
/// messages, are between curly quotes (`invalid argument ‘x’ for
/// ‘--algorithm’`), as GNU's tools quote them; before, always `'x'`.
#[test]
fn refused_arguments_are_quoted_by_the_locale_as_gnu_quotes_them() {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cases: &[(&str, &[&[u8]])] = &[
        ("cksum", &[b"-a", b"x"]),
        ("cksum", &[b"-l", b"7", b"/dev/null"]),
        ("b2sum", &[b"-l", b"7", b"/dev/null"]),
        ("b2sum", &[b"-l", b"520", b"/dev/null"]),
    ];
    for (tool, args) in cases {
        same_in(d.path(), links.path(), tool, args, b"", "C.UTF-8");
    }
}

/// The address space (`ulimit -v`, KiB) a check of a 300,000-line list
/// runs in: GNU's `sha256sum` and `b3sum` check it in less, and a list
/// held whole (some 150 MB here) would not fit.
const LIST_LIMIT_KIB: u32 = 60_000;

/// Runs `prog -c list` in `dir` under `ulimit -v LIST_LIMIT_KIB` (its
/// file name is the tool's), on the backend the suite runs on: the
/// sum tools fit their threads, buffers and thread pool to the room
/// left, as the copy does.
fn check_limited(dir: &Path, prog: &Path, list: &str) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {LIST_LIMIT_KIB} && exec \"$0\" -c {list}"
        ))
        .arg(prog)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .unwrap()
}

/// `tool -c` of a 300,000-line list under [`check_limited`], ours beside
/// the reference: the same output, and ours succeeds.
fn a_long_list_is_checked_in_bounded_memory(tool: &str) {
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    std::fs::write(dir.join("a"), b"hi\n").unwrap();
    let sum = run(dir, &gnu(tool), &[b"a"], b"");
    let list = sum.stdout.repeat(300_000);
    std::fs::write(dir.join("list"), &list).unwrap();
    let theirs = check_limited(dir, &gnu(tool), "list");
    assert!(theirs.status.success(), "GNU {tool} under the limit");
    let ours = check_limited(dir, &links.path().join(tool), "list");
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&theirs.stderr),
        "{tool} -c under ulimit -v {LIST_LIMIT_KIB}"
    );
    assert_eq!(ours.status.code(), Some(0), "{tool}");
    assert_eq!(ours.stdout.len(), b"a: OK\n".len() * 300_000, "{tool}");
    assert!(ours.stdout == theirs.stdout, "{tool}: stdout as GNU's");
}

// One test per tool, so that the two checks (each some seconds of CPU
// time, Debian's `b3sum` the longest: several system calls a line)
// run at once on the test harness's threads.
#[test]
fn a_long_sha256sum_list_is_checked_in_bounded_memory() {
    a_long_list_is_checked_in_bounded_memory("sha256sum");
}

#[test]
fn a_long_b3sum_list_is_checked_in_bounded_memory() {
    a_long_list_is_checked_in_bounded_memory("b3sum");
}

#[test]
fn each_result_is_written_as_its_line_arrives() {
    use std::io::{BufRead, BufReader};
    let links = links();
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        std::fs::write(dir.join(name), name.repeat(i + 1)).unwrap();
    }
    for tool in ["sha256sum", "b3sum"] {
        let lines: Vec<Vec<u8>> = ["a", "b", "c"]
            .iter()
            .map(|n| run(dir, &gnu(tool), &[n.as_bytes()], b"").stdout)
            .collect();
        let prog = links.path().join(tool);
        let mut child = Command::new(&prog)
            .arg0(tool)
            .arg("-c")
            .current_dir(dir)
            .env("LC_ALL", "C")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        let mut results = BufReader::new(child.stdout.take().unwrap());
        // Results are read on a thread, so that a check that waits for the
        // end of its list fails the test instead of hanging it.
        let (to_test, from_reader) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut line = String::new();
            while results.read_line(&mut line).unwrap() > 0 {
                if to_test.send(std::mem::take(&mut line)).is_err() {
                    break;
                }
            }
        });
        for (line, name) in lines.iter().zip(["a", "b", "c"]) {
            input.write_all(line).unwrap();
            input.flush().unwrap();
            let got = from_reader
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|e| {
                    panic!("{tool}: no result for {name} while the list is open: {e}")
                });
            assert_eq!(got, format!("{name}: OK\n"), "{tool}");
        }
        drop(input);
        assert!(child.wait().unwrap().success(), "{tool}");
        reader.join().unwrap();
    }
}
