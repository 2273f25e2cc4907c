//! `blockio tree-bench --sum-algos`: `blockio sum` measured with SHA-512
//! and MD5 against `sha512sum` and `md5sum`, at a tiny scale.

use std::process::Command;

#[test]
fn sum_is_measured_against_sha512sum_and_md5sum() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .args(["tree-bench", "--jobs", "sum", "--sum-algos", "sha512,md5"])
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
