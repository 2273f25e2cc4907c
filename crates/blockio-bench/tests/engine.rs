//! Smoke test of `blockio-bench engine`: a tiny run must print every field
//! its `--help` and docs/benchmarks.md document, with plausible values; bad flags must fail clearly.

use std::process::Command;

fn blockio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_blockio-bench"))
}

#[test]
fn tiny_run_prints_the_documented_json_fields() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = blockio()
        .args([
            "engine",
            "--size-mib",
            "64",
            "--seconds",
            "0.3",
            "--rounds",
            "1",
            "--no-fio",
            "--json",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for field in [
        "iops",
        "raw_iops",
        "iops_2_threads",
        "iops_64_threads",
        "iops_registered",
    ] {
        let x = v[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} missing in {v}"));
        assert!(x.is_finite() && x >= 0.0, "{field} = {x}");
    }
    // Counted only where the counting allocator is built in.
    if cfg!(feature = "count-allocations") {
        let a = v["allocs_per_op"].as_f64().expect("allocs_per_op counted");
        assert!(a.is_finite() && a >= 0.0, "allocs_per_op = {a}");
    } else {
        assert!(v["allocs_per_op"].is_null(), "{v}");
    }
    assert!(v["iops"].as_f64().unwrap() > 0.0);
    assert!(v["iops_registered"].as_f64().unwrap() > 0.0);
    assert!(
        v.get("fio_iops").is_some(),
        "fio_iops is present (null when skipped)"
    );
    assert!(v["fio_iops"].is_null());
    // The data file is removed unless --keep.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_flags_fail_with_a_clear_message() {
    let out = blockio().args(["engine", "--qd", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--qd must be between 1 and 4096"));
    let out = blockio()
        .args(["engine", "--seconds", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seconds"));
}

#[test]
fn tmpfs_directory_is_refused() {
    if !blockio_bench::data::is_memory_filesystem("/dev/shm").unwrap_or(false) {
        panic!("/dev/shm is expected to be tmpfs on this project's machines");
    }
    let out = blockio()
        .args([
            "engine",
            "--size-mib",
            "64",
            "--no-fio",
            "--dir",
            "/dev/shm/blockio-bench-test",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tmpfs"));
    let _ = std::fs::remove_dir("/dev/shm/blockio-bench-test");
}
