//! The checksum tools at the edges of the system, against the real ones
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
    for t in TOOLS {
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
