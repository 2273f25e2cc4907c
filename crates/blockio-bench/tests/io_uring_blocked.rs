//! With io_uring blocked by the kernel (`kernel.io_uring_disabled=2`),
//! `blockio-bench read` still runs every strategy, labels each row with
//! what served it and explains once on stderr.
//!
//! This test binary holds a single test because it changes a system-wide
//! setting: cargo runs test binaries one after another, so nothing else of
//! the suite runs meanwhile, and the setting is restored when the test
//! ends, even by a panic. It needs root, as `scripts/install-deps` does.

use std::process::{Command, Output};

#[path = "../../blockio-cli/tests/support/io_uring_sysctl.rs"]
mod io_uring_sysctl;
use io_uring_sysctl::Disabled;

fn blockio_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockio-bench"))
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

#[test]
fn read_bench_labels_every_row_when_io_uring_is_blocked() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (data, out) = (dir.path().join("data"), dir.path().join("out"));
    let _blocked = Disabled::new("2");
    let o = blockio_bench(&[
        "read",
        "--profiles",
        "warm",
        "--strategies",
        "sync,uring,auto,async",
        "--qd",
        "1,4",
        "--tasks",
        "4",
        "--size-mib",
        "8",
        "--seconds",
        "0.05",
        "--rounds",
        "1",
        "--json",
        "--dir",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("thread-pool fallback").count(), 1, "{err}");
    assert!(err.contains("EPERM"), "{err}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["config"]["blockio_backend"], "thread pool");
    let rows = doc["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        // auto serves a read alone in its batch on the calling thread (inline), and
        // bigger batches' page-cache hits there too; the async API serves
        // page-cache hits on its polling threads, unless built to submit all.
        let want: &[&str] = match (r["strategy"].as_str().unwrap(), r["qd"].as_u64()) {
            ("sync", _) => &["pread"],
            ("auto", Some(1)) => &["inline"],
            ("auto" | "async" | "async-thread", _) => {
                &["thread pool", "thread pool + inline", "inline"]
            }
            _ => &["thread pool"],
        };
        let got = r["backend"].as_str().unwrap();
        assert!(want.contains(&got), "{r}");
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(csv.starts_with("profile,strategy,qd,threads,backend,"));
    assert!(csv
        .lines()
        .skip(1)
        .all(|l| [",thread pool", ",pread,", ",inline,"]
            .iter()
            .any(|b| l.contains(b))));
}
