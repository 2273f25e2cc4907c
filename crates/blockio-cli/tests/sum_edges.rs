//! The sum tools at the edges of the system, against the real ones
//! (GNU coreutils' and Debian's `b3sum`) run by the same shell line:
//! files that report no size (/proc), closed and unwritable standard
//! streams, an ignored SIGPIPE, NUL bytes in lists, options after
//! `--help`. Standard output and standard error byte for byte, and the
//! exit status.

use std::path::Path;
use std::process::{Command, Output};

const TOOLS: [&str; 9] = [
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "b3sum",
];

/// A directory of links named after the tools, to the blockio binary.
fn links() -> tempfile::TempDir {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for t in TOOLS.iter().chain(&["blockio"]) {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), d.path().join(t)).unwrap();
    }
    d
}

/// Runs `script` with bash in `dir`, the tools found on `path`.
fn bash(dir: &Path, path: &str, script: &str) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env("LC_ALL", "C")
        .env_remove("POSIXLY_CORRECT")
        .output()
        .expect("bash runs")
}

/// Runs `script` (which names the tools as a shell finds them on PATH)
/// once with ours first on PATH and once with the system's, and asserts
/// that both print the same and end the same.
fn same(dir: &Path, links: &Path, script: &str) {
    let ours = bash(dir, &format!("{}:/usr/bin:/bin", links.display()), script);
    let theirs = bash(dir, "/usr/bin:/bin", script);
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout),
        "stdout of {script}"
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&theirs.stderr),
        "stderr of {script}"
    );
    assert_eq!(
        ours.status.code(),
        theirs.status.code(),
        "status of {script}"
    );
}

/// Runs `ours` (which names `blockio`) and `theirs` (a reference tool),
/// and asserts that both print the same on standard output and end the
/// same (their messages differ by the program's name).
fn same_output(dir: &Path, links: &Path, ours: &str, theirs: &str) {
    let o = bash(dir, &format!("{}:/usr/bin:/bin", links.display()), ours);
    let t = bash(dir, "/usr/bin:/bin", theirs);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&t.stdout),
        "stdout of {ours} against {theirs}"
    );
    assert_eq!(
        o.status.code(),
        t.status.code(),
        "status of {ours} against {theirs}"
    );
}

fn work() -> tempfile::TempDir {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(d.path().join("a"), b"a\n").unwrap();
    d
}

#[test]
fn files_that_report_no_size_are_read_to_their_end() {
    let (links, d) = (links(), work());
    // /proc/kallsyms reports size 0 and returns a page or so per read,
    // far short of its megabytes.
    assert!(std::fs::metadata("/proc/kallsyms").unwrap().len() == 0);
    for tool in TOOLS {
        same(d.path(), links.path(), &format!("{tool} /proc/kallsyms"));
    }
    // A list of GNU's checks out with ours.
    std::fs::write(
        d.path().join("list"),
        bash(d.path(), "/usr/bin:/bin", "sha256sum /proc/kallsyms").stdout,
    )
    .unwrap();
    same(d.path(), links.path(), "sha256sum -c list");
    same(d.path(), links.path(), "md5sum /proc/kallsyms a");
}

/// Every tool but `cksum` with its own CRC, which GNU computes over
/// whatever it could read, errors or not (see docs/tools.md, where we differ).
const GNU_READERS: [&str; 8] = [
    "md5sum",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "b2sum",
    "cksum -a sha256",
];

#[test]
fn a_closed_or_write_only_standard_input_is_an_error() {
    let (links, d) = (links(), work());
    for tool in GNU_READERS {
        for script in [
            format!("{tool} <&-"),
            format!("{tool} - <&-"),
            format!("{tool} a - a <&-"),
            format!("{tool} 0>x"),
            format!("{tool} -c <&-"),
            format!("{tool} -c - 0>x"),
        ] {
            same(d.path(), links.path(), &script);
        }
    }
    // b3sum, a Rust program, reads a closed standard input as empty.
    same(d.path(), links.path(), "b3sum <&-");
    same(d.path(), links.path(), "b3sum - a <&-");
}

#[test]
fn an_unwritable_standard_error_changes_nothing_else() {
    let (links, d) = (links(), work());
    let list = "$(sha256sum <a | cut -c1-64)";
    for script in [
        "sha256sum nosuch 2>/dev/full".to_string(),
        "sha256sum a nosuch a 2>/dev/full".to_string(),
        "sha256sum --bogus 2>/dev/full".to_string(),
        "sha256sum a nosuch 2>&-".to_string(),
        format!("sha256sum -c <(echo '{list}  nosuch'; echo '{list}  a') 2>/dev/full"),
        "md5sum -c nolist 2>/dev/full".to_string(),
        "b2sum -l 7 a 2>/dev/full".to_string(),
    ] {
        same(d.path(), links.path(), &script);
    }
}

#[test]
fn a_closed_or_unwritable_standard_output_is_a_write_error() {
    let (links, d) = (links(), work());
    for tool in ["sha256sum", "md5sum", "cksum", "b2sum"] {
        for script in [
            format!("{tool} a >&-"),
            format!("{tool} --version >&-"),
            format!("{tool} --help >&-"),
            format!("{tool} nosuch >&-"),
            format!("{tool} a 1<a"),
            format!("{tool} a >/dev/full"),
            format!("{tool} -c <({tool} a) >&-"),
            format!("{tool} -c <({tool} a) 1<a"),
            // The failed output is reported after what went wrong later.
            format!("{tool} a nosuch 2>&1 >/dev/full"),
            format!("{tool} a nosuch a 2>&1 >&-"),
            // Standard output and error in the order they were made.
            format!("{tool} a nosuch a 2>&1 | cat"),
        ] {
            same(d.path(), links.path(), &script);
        }
    }
}

#[test]
fn an_ignored_sigpipe_makes_a_closed_pipe_a_write_error() {
    let (links, d) = (links(), work());
    // Output far beyond what the pipe (64 KiB) and `head`'s one read can
    // take: the tool must write after `head` has gone, whatever the
    // scheduling (cksum's 15-byte lines for 3,000 names would fit, and
    // the tool could finish before `head` exits).
    let many = "$(printf 'a %.0s' {1..20000})";
    for tool in ["sha256sum", "md5sum", "cksum"] {
        // The parent ignores SIGPIPE: the tool inherits that and gets
        // EPIPE, which GNU's report as a write error.
        same(
            d.path(),
            links.path(),
            &format!(
                "trap '' PIPE; {tool} {many} | head -c1 >/dev/null; echo \" ${{PIPESTATUS[@]}}\""
            ),
        );
        // By default it is killed by the signal.
        same(
            d.path(),
            links.path(),
            &format!("{tool} {many} | head -c1 >/dev/null; echo \" ${{PIPESTATUS[@]}}\""),
        );
    }
}

#[test]
fn a_nul_byte_ends_a_list_lines_digest_and_name() {
    let (links, d) = (links(), work());
    // The checking tool, the tool that writes its lists, their tag.
    for (tool, plain, tag) in [
        ("sha256sum", "sha256sum", "SHA256"),
        ("md5sum", "md5sum", "MD5"),
        ("b2sum", "b2sum", "BLAKE2b"),
        ("cksum -a sha1", "cksum -a sha1", "SHA1"),
        ("cksum", "cksum -a sha1", "SHA1"),
    ] {
        let hex = format!("$({plain} <a | cut -d' ' -f1)");
        for script in [
            format!("printf '%s  a\\0\\n' {hex} | {tool} -c"),
            format!("printf '%s  a\\0junk\\n%s  a\\n' {hex} {hex} | {tool} -c"),
            format!("printf '%s  a\\0' {hex} | {tool} -c"),
            format!("printf '%s\\0 a\\n' {hex} | {tool} -c -w"),
            format!("printf '{tag} (a\\0) = %s\\n' {hex} | {tool} -c"),
            format!("printf '{tag} (a) = %s\\0junk\\n' {hex} | {tool} -c"),
            format!("printf '\\\\%s  a\\0b\\n' {hex} | {tool} -c -w"),
            format!("{plain} -z a | {tool} -c"),
            format!("{plain} -z --tag a | {tool} -c"),
            format!("{plain} -z --tag a a | {tool} -c"),
        ] {
            same(d.path(), links.path(), &script);
        }
    }
}

#[test]
fn blockio_sum_writes_names_as_the_algorithms_tool_does() {
    let (links, d) = (links(), work());
    for name in ["cr\rname", "back\\slash", "new\nline", "all\r\n\\"] {
        std::fs::write(d.path().join(name), name).unwrap();
    }
    let names = "$'cr\\rname' $'back\\\\slash' $'new\\nline' $'all\\r\\n\\\\'";
    same_output(
        d.path(),
        links.path(),
        &format!("blockio sum {names}"),
        &format!("b3sum {names}"),
    );
    same_output(
        d.path(),
        links.path(),
        &format!("blockio sum --algo sha256 {names}"),
        &format!("sha256sum {names}"),
    );
    // Their lists check, and NUL bytes end names as GNU reads them.
    for (list, check) in [
        ("sha256sum -z --tag a", "-c --algo sha256"),
        ("sha256sum -z a", "-c --algo sha256"),
        (
            "printf '%s  a\\0junk\\n' $(sha256sum <a | cut -c1-64)",
            "-c --algo sha256",
        ),
        (&format!("b3sum {names}"), "-c"),
    ] {
        same_output(
            d.path(),
            links.path(),
            &format!("{list} | blockio sum {check}"),
            &format!(
                "{list} | {}",
                if check == "-c" {
                    "b3sum -c"
                } else {
                    "sha256sum -c"
                }
            ),
        );
    }
}

#[test]
fn options_take_effect_in_order_as_getopt_hands_them_over() {
    let (links, d) = (links(), work());
    for script in [
        "md5sum --help --bogus a",
        "sha256sum --help -x",
        "b2sum --help -l 7",
        "cksum --help -a foo",
        "sha256sum --help --check=",
        "sha256sum --bogus --help",
        "sha256sum -x --help",
        "b2sum -l 7 --help",
        "cksum -a foo --help",
        "sha256sum --version --bogus",
        "sha256sum --version --help",
        "sha256sum --bogus --version",
    ] {
        // The texts of --help and --version are blockio's own: the first
        // word of each is compared, and the status.
        same(
            d.path(),
            links.path(),
            &format!("{script} >o; echo \" $?\"; head -1 o | cut -d' ' -f1"),
        );
    }
}

#[test]
fn lengths_are_read_as_coreutils_reads_numbers() {
    let (links, d) = (links(), work());
    for length in [
        "' 8'",
        "+8",
        "$'\\t16'",
        "$'\\v8'",
        "00008",
        "0",
        "99999999999999999999",
        "18446744073709551616",
        "18446744073709551615",
        "99999999999999999999x",
        "'+ 8'",
        "' -8'",
        "-8",
        "'8 '",
        "''",
        "+",
        "+-8",
        "1000",
    ] {
        same(d.path(), links.path(), &format!("b2sum -l {length} a"));
        same(
            d.path(),
            links.path(),
            &format!("cksum -a blake2b -l {length} a"),
        );
    }
}

#[test]
fn messages_begin_with_the_program_as_it_was_run() {
    let (links, d) = (links(), work());
    for argv0 in ["./sha256sum", "/some/where/sha256sum"] {
        for args in [
            "nosuch",
            "--bogus",
            "-c nosuch",
            "--help >o; head -2 o",
            "a >&-",
        ] {
            same(
                d.path(),
                links.path(),
                &format!("(exec -a {argv0} sha256sum {args})"),
            );
        }
        // --version names the tool, whatever the path.
        same(
            d.path(),
            links.path(),
            &format!("(exec -a {argv0} sha256sum --version) >o; head -c10 o"),
        );
    }
}

#[test]
fn b3sum_refuses_what_b3sum_refuses() {
    let (links, d) = (links(), work());
    std::fs::write(d.path().join("key"), [7u8; 32]).unwrap();
    std::fs::write(
        d.path().join("list"),
        bash(d.path(), "/usr/bin:/bin", "b3sum a").stdout,
    )
    .unwrap();
    for script in [
        "b3sum --keyed - <key",
        "b3sum --keyed a - <key",
        "b3sum --keyed a - a - <key",
        "b3sum --keyed a <key",
        "b3sum --version >&-",
        "b3sum -c list",
    ] {
        same(d.path(), links.path(), script);
    }
    // Where b3sum 1.8 differs from Debian's b3sum here (1.2.0), what 1.8
    // does, from its source (src/main.rs of the b3sum crate, 1.8.7), whose
    // command line is clap 4's `parse_from`: a usage error exits 2 (1.2's
    // clap 2: 1), and a version that cannot be written is let go.
    let ours = |script: &str| {
        let o = bash(
            d.path(),
            &format!("{}:/usr/bin:/bin", links.path().display()),
            script,
        );
        String::from_utf8(o.stdout).unwrap()
    };
    for script in [
        "b3sum --keyed <key",
        "b3sum --keyed --raw <key",
        "b3sum -c -l 8 list",
        "b3sum -l 32 -c list",
        "b3sum --check --length=8 list",
        "b3sum --tag -c list",
    ] {
        assert_eq!(
            ours(&format!(
                "{script} 2>e; echo \" $?\"; head -1 e | cut -d' ' -f1"
            )),
            " 2\nerror:\n",
            "{script}"
        );
    }
    assert_eq!(
        ours("b3sum --version >/dev/full 2>e; echo $?; cat e"),
        "0\n"
    );
    // The version line is b3sum 1.8.7's own, for scripts that read it.
    assert_eq!(ours("b3sum --version"), "b3sum 1.8.7\n");
}

#[test]
fn b3sum_and_blockio_sum_go_on_when_standard_error_is_full() {
    let (links, d) = (links(), work());
    let path = format!("{}:/usr/bin:/bin", links.path().display());
    for script in [
        "b3sum nosuch a 2>/dev/full",
        "blockio sum nosuch a 2>/dev/full",
        "blockio sum --algo sha256 -c <(echo \"$(sha256sum <a | cut -c1-64)  nosuch\"; sha256sum a) 2>/dev/full",
    ] {
        let o = bash(d.path(), &path, script);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.lines().any(|l| l.ends_with(" a") || l == "a: OK"), "{script}: {out}");
        assert_eq!(o.status.code(), Some(1), "{script}");
    }
}

#[test]
fn names_and_arguments_are_quoted_as_in_the_c_locale() {
    let (links, d) = (links(), work());
    // Every printable ASCII character in the middle, first and alone; then
    // bytes outside it.
    let mut names: Vec<String> = (0x21u8..0x7f)
        .filter(|&c| c != b'-' && c != b'/')
        .flat_map(|c| {
            let c = format!("\\x{c:02x}");
            [format!("q{c}y"), format!("{c}y"), c]
        })
        .collect();
    names.extend(
        [
            "caf\\xc3\\xa9",
            "\\x7f",
            "\\nx",
            "x\\n",
            "\\x01\\x02",
            "a b",
            "\\t",
            "it'\\''s",
        ]
        .map(String::from),
    );
    let names: Vec<String> = names
        .iter()
        .map(|n| format!("\"$(printf '{n}')\""))
        .collect();
    same(
        d.path(),
        links.path(),
        &format!("sha256sum -- {}", names.join(" ")),
    );
    same(
        d.path(),
        links.path(),
        &format!("md5sum -c -- {}", names.join(" ")),
    );
    for arg in [
        "$'\\t1x'",
        "$'caf\\xc3\\xa9'",
        "\"a'b\\\\c\"",
        "$'\\x01\\x7f'",
    ] {
        same(d.path(), links.path(), &format!("b2sum -l {arg} a"));
        same(d.path(), links.path(), &format!("cksum -a {arg} a"));
    }
}
