//! With io_uring blocked by the kernel (`kernel.io_uring_disabled=2`),
//! every tool still works and says what served its I/O: `cp --json`
//! reports the backend, `sum` prints the same sums as b3sum and a one-line
//! note; run as `cp` (a link of that name) it prints nothing of it. (`blockio-bench read` is checked the same way in its own crate.)
//!
//! This test binary holds a single test because it changes a system-wide
//! setting: cargo runs test binaries one after another, so nothing else of
//! the suite runs meanwhile, and the setting is restored when the test
//! ends, even by a panic. It needs root, as `scripts/install-deps` does.

use std::path::Path;
use std::process::{Command, Output};

#[path = "support/io_uring_sysctl.rs"]
mod io_uring_sysctl;
use io_uring_sysctl::Disabled;

fn blockio(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockio"))
        .args(args)
        // The suite also runs with BLOCKIO_BACKEND=threads, which would make
        // the fallback a request rather than the kernel's refusal.
        .env_remove("BLOCKIO_BACKEND")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn cp_reports_its_backend(dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/a"), vec![5u8; 300_000]).unwrap();
    let dst = dir.join("dst");
    let o = blockio(&[
        "cp",
        "-a",
        "--json",
        src.to_str().unwrap(),
        dst.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("thread-pool backend").count(), 1, "{err}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["backend"], "thread pool");
    assert!(report["fallback_reason"]
        .as_str()
        .unwrap()
        .contains("EPERM"));
    assert_eq!(
        std::fs::read(dst.join("sub/a")).unwrap(),
        std::fs::read(src.join("sub/a")).unwrap()
    );
}

/// Run through a link named `cp`, the binary is `cp`: its messages are
/// GNU's alone, with no note about the backend.
fn cp_by_name_says_nothing_of_it(dir: &Path) {
    let link = dir.join("cp");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), &link).unwrap();
    let o = Command::new(&link)
        .args(["-r", "src", "by-name"])
        .current_dir(dir)
        .env_remove("BLOCKIO_BACKEND")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "");
    assert_eq!(
        std::fs::read(dir.join("by-name/sub/a")).unwrap(),
        std::fs::read(dir.join("src/sub/a")).unwrap()
    );
}

fn sum_matches_b3sum(dir: &Path) {
    let f = dir.join("src/sub/a");
    let o = blockio(&["sum", f.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("thread-pool backend").count(), 1, "{err}");
    let reference = Command::new("b3sum").arg(&f).output().unwrap();
    assert_eq!(text(&o.stdout), text(&reference.stdout));
}

#[test]
fn every_tool_says_what_served_it_when_io_uring_is_blocked() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let _blocked = Disabled::new("2");
    cp_reports_its_backend(dir.path());
    cp_by_name_says_nothing_of_it(dir.path());
    sum_matches_b3sum(dir.path());
}
