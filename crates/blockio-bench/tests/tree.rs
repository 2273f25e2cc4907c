//! `blockio-bench tree`: `blockio cp` against `cp -r` and `blockio sum`
//! against `b3sum` at a tiny scale, run on the `blockio` binary built
//! beside `blockio-bench` (cargo builds both for the workspace's tests).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `blockio` binary the benchmark measures by default: beside
/// `blockio-bench`. Its absence fails the test, naming the fix.
fn blockio_beside() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_blockio-bench")).with_file_name("blockio");
    assert!(
        p.is_file(),
        "{}: missing; build it first (`cargo build -p blockio-cli`, which `cargo test` does for the workspace)",
        p.display()
    );
    p
}

/// The shipped tree benchmark at a tiny scale: every job, tree and mode
/// runs, both tools' copies are checked, the JSON has a row for each, and
/// durable copies of data trees are set beside fio doing the same I/O.
/// Runs `blockio-bench tree --json` with `args` in a new directory under
/// `dir`; its rows, after checking that it succeeded and removed its data.
fn tree_bench(dir: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    blockio_beside();
    let o = Command::new(env!("CARGO_BIN_EXE_blockio-bench"))
        .arg("tree")
        .args(args)
        .arg("--json")
        .arg("--dir")
        .arg(dir.join("tb"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!dir.join("tb").exists(), "data removed afterwards");
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    rows.as_array().unwrap().clone()
}

#[test]
fn tree_bench_smoke_run() {
    let dir = tempfile::tempdir().unwrap();
    let rows = tree_bench(
        dir.path(),
        &[
            "--scale",
            "0.001",
            "--rounds",
            "1",
            "--sum-file-mib",
            "2000",
        ],
    );
    // cp: 3 trees x 2 modes; sum: 2 inputs x 2 modes.
    assert_eq!(rows.len(), 10, "{rows:?}");
    for r in rows {
        for k in ["baseline_s", "ours_s", "speedup"] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{k} in {r}");
        }
        // fio (installed by scripts/install-deps) does the same I/O as the
        // durable copies of trees (b) and (c), and only those.
        let data_tree = r["job"] == "cp" && !r["input"].as_str().unwrap().starts_with("small");
        for k in ["fio_io_s", "fio_io_speedup"] {
            if data_tree && r["mode"] == "cold" {
                assert!(r[k].as_f64().unwrap() > 0.0, "{k} in {r}");
            } else {
                assert!(r[k].is_null(), "{k} in {r}");
            }
        }
    }
}

#[test]
fn tree_bench_after_deletion_smoke_run() {
    let dir = tempfile::tempdir().unwrap();
    let rows = tree_bench(
        dir.path(),
        &[
            "--after-deletion",
            "--scale",
            "0.01",
            "--deleted",
            "100000",
            "--ages",
            "0,1",
            "--rounds",
            "2",
        ],
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (r, age) in rows.iter().zip([0.0, 1.0]) {
        // 1% of 100,000 files deleted; each state measured at or after its age.
        assert_eq!(r["deleted"], 1000, "{r}");
        assert!(r["age_s"].as_f64().unwrap() >= age, "{r}");
        for k in ["baseline_s", "ours_s"] {
            let v = r[k].as_array().unwrap();
            assert_eq!(v.len(), 2, "{k} in {r}");
            assert!(v.iter().all(|t| t.as_f64().unwrap() > 0.0), "{k} in {r}");
        }
        assert!(r["speedup"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["target"], 0.95);
        assert_eq!(r["fresh_state"], false, "{r}");
    }
}

#[test]
fn tree_bench_fresh_state_makes_the_state_before_every_round() {
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let rows = tree_bench(
        dir.path(),
        &[
            "--after-deletion",
            "--fresh-state",
            "--scale",
            "0.01",
            "--deleted",
            "100000",
            "--ages",
            "2",
            "--rounds",
            "2",
        ],
    );
    // Each of the two rounds waited 2 s after its own deletion; one state
    // for both would have waited once.
    let took = start.elapsed().as_secs_f64();
    assert!(took >= 4.0, "took {took} s");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r["fresh_state"], true, "{r}");
    assert!(r["age_s"].as_f64().unwrap() >= 2.0, "{r}");
    for k in ["baseline_s", "ours_s"] {
        let v = r[k].as_array().unwrap();
        assert_eq!(v.len(), 2, "{k} in {r}");
        assert!(v.iter().all(|t| t.as_f64().unwrap() > 0.0), "{k} in {r}");
    }
}

/// `--sum-algos`: `blockio sum` measured with SHA-512 and MD5 against
/// `sha512sum` and `md5sum`.
#[test]
fn sum_is_measured_against_sha512sum_and_md5sum() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_blockio-bench"))
        .args(["tree", "--jobs", "sum", "--sum-algos", "sha512,md5"])
        .args([
            "--scale",
            "0.001",
            "--rounds",
            "1",
            "--sum-file-mib",
            "2000",
        ])
        .arg("--json")
        .arg("--dir")
        .arg(dir.path().join("tb"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let baselines: Vec<&str> = rows
        .iter()
        .map(|r| r["baseline"].as_str().unwrap())
        .collect();
    // Per mode (warm, cold): the big file and the tree, per algorithm.
    assert_eq!(
        baselines,
        [
            "sha512sum",
            "find | xargs sha512sum",
            "md5sum",
            "find | xargs md5sum",
        ]
        .repeat(2)
    );
    for r in rows {
        for k in ["baseline_s", "ours_s", "speedup"] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{k} in {r}");
        }
    }
}

/// A `--blockio` that is not there is refused before anything is made,
/// with the path named.
#[test]
fn a_missing_blockio_binary_is_named() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_blockio-bench"))
        .args([
            "tree",
            "--scale",
            "0.001",
            "--blockio",
            "/nonexistent/blockio",
            "--dir",
        ])
        .arg(dir.path().join("tb"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("/nonexistent/blockio: no blockio binary there"),
        "{err}"
    );
    assert!(!dir.path().join("tb").exists(), "nothing made: {err}");
}
