//! `blockio-bench read`: a tiny run of every strategy on every profile, its
//! outputs, and its errors.

use std::path::Path;
use std::process::{Command, Output};

fn blockio(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockio-bench"))
        .arg("read")
        .args(args)
        .output()
        .unwrap()
}

fn tiny(dir: &Path, extra: &[&str]) -> Output {
    tiny_window(dir, "0.05", extra)
}

/// A tiny run whose measuring windows last `seconds`.
fn tiny_window(dir: &Path, seconds: &str, extra: &[&str]) -> Output {
    let data = dir.join("data");
    let out = dir.join("out");
    let mut args = vec![
        "--size-mib",
        "8",
        "--seconds",
        seconds,
        "--rounds",
        "1",
        "--qd",
        "1,4",
        "--tasks",
        "4",
        "--verify",
        "--dir",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    blockio(&args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A window shorter than one read (here 1 µs, as a busy machine can make
/// any short window) still measures every strategy: each worker completes
/// at least one read before it looks at the deadline.
#[test]
fn a_window_shorter_than_one_read_still_measures_every_strategy() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = tiny_window(dir.path(), "0.000001", &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["iops"].as_f64().unwrap() > 0.0, "no read measured: {r}");
    }
}

#[test]
fn tiny_run_covers_every_strategy_and_profile_and_writes_its_files() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = tiny(dir.path(), &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    for profile in ["direct", "cold", "warm", "seq"] {
        let mine: Vec<_> = rows.iter().filter(|r| r["profile"] == profile).collect();
        profile_runs_every_strategy(profile, &mine);
        for r in &mine {
            row_has_every_figure(r);
        }
        let cold_ok = mine.iter().all(|r| {
            let res = r["resident_before"].as_f64().unwrap();
            match profile {
                "cold" => res < 0.05,
                "warm" | "seq" => res > 0.95,
                _ => true,
            }
        });
        assert!(cold_ok, "{profile}: page cache not in the profile's state");
    }
    let summary = doc["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 4);
    for s in summary {
        let r = s["auto_vs_best"].as_f64().unwrap();
        assert!(r > 0.0 && r <= 1.0, "{s}");
        assert!(s["auto_qd1_vs_sync"].as_f64().unwrap() > 0.0, "{s}");
        let a = &s["async_api"][0];
        assert_eq!(a["tasks"], 4, "{s}");
        for field in ["vs_tokio_fs", "vs_spawn_blocking", "vs_sync_batch"] {
            assert!(a[field].as_f64().unwrap() > 0.0, "{field} in {s}");
        }
    }
    files_match_the_run(dir.path(), &doc);
    // No progress output when stderr is not a terminal; data file removed.
    assert!(!stderr(&o).contains("round 1/"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_dir(dir.path().join("data")).unwrap().count(),
        0
    );
}

/// The rows of one profile: every strategy (tokio::fs has no `O_DIRECT`),
/// at the queue depths and task counts the tiny run asks for.
fn profile_runs_every_strategy(profile: &str, mine: &[&serde_json::Value]) {
    let mut strategies: Vec<&str> = mine
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    strategies.dedup();
    let mut want = vec![
        "sync",
        "threads",
        "pool-tokio-fs",
        "pool-blocking",
        "uring",
        "uring-mt",
        "auto",
        "async",
    ];
    if profile == "direct" {
        want.retain(|s| *s != "pool-tokio-fs");
    }
    assert_eq!(strategies, want, "{profile}");
    let qds = |st: &str| -> Vec<u64> {
        mine.iter()
            .filter(|r| r["strategy"] == st)
            .map(|r| r["qd"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        qds("uring"),
        [1, 4],
        "{profile}: the uring sweep follows --qd"
    );
    assert_eq!(qds("async"), [4], "{profile}: async follows --tasks");
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let mut auto = vec![1, cpus, 4, 128];
    auto.dedup();
    assert_eq!(
        qds("auto"),
        auto,
        "{profile}: auto alone, one at a time from every thread, at the deepest --qd and from many threads"
    );
}

/// One run's row has every figure, finite and not negative, and read
/// something; a latency percentile is left out exactly when fewer than
/// ten recorded latencies lie beyond it.
fn row_has_every_figure(r: &serde_json::Value) {
    for field in ["iops", "mib_s", "cpu_us_per_op"] {
        let x = r[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} in {r}"));
        assert!(x.is_finite() && x >= 0.0, "{field} in {r}");
    }
    let samples = r["samples"]
        .as_u64()
        .unwrap_or_else(|| panic!("samples in {r}"));
    assert!(samples >= 1, "{r}");
    for (field, beyond) in [("p50_us", 2), ("p99_us", 100), ("p999_us", 1000)] {
        if samples >= 10 * beyond {
            let x = r[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} in {r}"));
            assert!(x.is_finite() && x >= 0.0, "{field} in {r}");
        } else {
            assert!(r[field].is_null(), "{field} in {r}");
        }
    }
    assert!(r["iops"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["qd"].as_u64().unwrap() >= 1 && r["threads"].as_u64().unwrap() >= 1);
    assert!(r["ctx_switches"].is_u64(), "{r}");
}

/// The files under `dir/out`: JSON equal to stdout's `doc`, CSV with a
/// row per run, an SVG chart naming every profile.
fn files_match_the_run(dir: &std::path::Path, doc: &serde_json::Value) {
    let out = dir.join("out");
    let file_doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(file_doc["rows"], doc["rows"]);
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(csv.starts_with("profile,strategy,qd,threads,backend,iops,"));
    assert_eq!(
        csv.lines().count(),
        doc["rows"].as_array().unwrap().len() + 1
    );
    let svg = std::fs::read_to_string(out.join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for name in ["direct:", "cold:", "warm:", "seq:", "auto", "uring-mt"] {
        assert!(svg.contains(name), "chart lacks {name}");
    }
}

#[test]
fn table_mode_prints_every_profile_and_the_auto_ratio() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = tiny(
        dir.path(),
        &[
            "--profiles",
            "warm,seq",
            "--strategies",
            "sync,auto",
            "--keep",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("warm: buffered random 4 KiB"), "{text}");
    assert!(text.contains("seq: buffered sequential 128 KiB"), "{text}");
    assert!(!text.contains("direct:"), "{text}");
    assert!(text.contains("against the best strategy"), "{text}");
    assert!(text.contains("auto qd 1 / sync"), "{text}");
    // --keep leaves the data file.
    assert_eq!(
        std::fs::read_dir(dir.path().join("data")).unwrap().count(),
        1
    );
}

#[test]
fn bad_flags_are_refused_with_the_flag_named() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for (args, needle) in [
        (vec!["--seconds", "0"], "--seconds"),
        (vec!["--rounds", "0"], "--rounds"),
        (vec!["--qd", "1,0"], "--qd"),
        (vec!["--profiles", "hot"], "unknown profile \"hot\""),
        (vec!["--strategies", "mmap"], "unknown strategy \"mmap\""),
        (vec!["--tasks", "0"], "--tasks"),
        (vec!["--size-mib", "lots"], "--size-mib"),
    ] {
        let o = tiny(dir.path(), &args);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn unwritable_directories_and_too_little_space_fail_before_running() {
    let o = blockio(&["--dir", "/proc/blockio-bench", "--size-mib", "8"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("cannot create the data directory /proc/blockio-bench"),
        "{}",
        stderr(&o)
    );

    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = dir.path().join("data");
    let o = blockio(&[
        "--dir",
        data.to_str().unwrap(),
        "--out",
        "/proc/blockio-out",
        "--size-mib",
        "8",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("results directory /proc/blockio-out"),
        "{}",
        stderr(&o)
    );

    let out = dir.path().join("out");
    let o = blockio(&[
        "--dir",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--size-mib",
        "1000000000",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("MiB free"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_dir(&data).unwrap().count(),
        0,
        "a partial file was left"
    );
}

#[test]
fn tmpfs_skips_direct_and_cold_with_a_warning_and_refuses_them_when_asked() {
    let shm = Path::new("/dev/shm");
    assert!(
        blockio_bench::data::is_memory_filesystem(shm).unwrap(),
        "/dev/shm is not tmpfs here; this test needs a tmpfs"
    );
    let dir = tempfile::tempdir_in(shm).unwrap();
    let out = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = [
        "--size-mib",
        "4",
        "--seconds",
        "0.02",
        "--rounds",
        "1",
        "--qd",
        "4",
        "--strategies",
        "sync,auto",
        "--json",
    ];
    let mut args: Vec<&str> = base.to_vec();
    args.extend([
        "--dir",
        dir.path().to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let o = blockio(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("direct: skipped"), "{}", stderr(&o));
    assert!(stderr(&o).contains("cold: skipped"), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let profiles: Vec<&str> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["profile"].as_str().unwrap())
        .collect();
    assert!(
        profiles.iter().all(|p| *p == "warm" || *p == "seq"),
        "{profiles:?}"
    );
    assert_eq!(doc["skipped"].as_array().unwrap().len(), 2);

    args.extend(["--profiles", "direct"]);
    let o = blockio(&args);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("tmpfs"), "{}", stderr(&o));
}

#[test]
fn fio_rows_and_ratios_when_fio_is_installed() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = tiny(
        dir.path(),
        &[
            "--profiles",
            "warm",
            "--strategies",
            "sync,auto",
            "--fio",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    if Command::new("fio").arg("--version").output().is_ok() {
        let fio = rows
            .iter()
            .find(|r| r["strategy"] == "fio")
            .expect("a fio row");
        assert!(fio["iops"].as_f64().unwrap() > 0.0);
        for r in rows {
            assert!(r["vs_fio"].as_f64().unwrap() > 0.0, "{r}");
        }
        assert!(doc["summary"][0]["fio_iops"].as_f64().unwrap() > 0.0);
    } else {
        assert!(
            stderr(&o).contains("fio is not installed"),
            "{}",
            stderr(&o)
        );
        assert!(rows
            .iter()
            .all(|r| r["strategy"] != "fio" && r["vs_fio"].is_null()));
    }
}

#[test]
fn sum_workload_hashes_the_same_both_ways() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let data = dir.path().join("data");
    let o = blockio(&[
        "--sum",
        "--sum-mib",
        "8",
        "--sum-blocks",
        "32768,1048576",
        "--rounds",
        "1",
        "--json",
        "--dir",
        data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["sum"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let want = blake3_of_pattern(8 << 20);
    for r in rows {
        assert_eq!(r["blake3"].as_str().unwrap(), want, "{r}");
        assert!(r["mib_s"].as_f64().unwrap() > 0.0);
        assert!(r["voluntary_csw"].is_u64() && r["involuntary_csw"].is_u64());
    }
    let strategies: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, ["tokio-fs", "async", "tokio-fs", "async"]);
    assert_eq!(
        std::fs::read_dir(&data).unwrap().count(),
        0,
        "data file left behind"
    );
}

/// BLAKE3 of the benchmark's data pattern, computed independently.
fn blake3_of_pattern(len: usize) -> String {
    let mut buf = vec![0u8; len];
    blockio_bench::data::fill(&mut buf, 0);
    blake3::hash(&buf).to_hex().to_string()
}
