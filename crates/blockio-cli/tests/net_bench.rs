//! `blockio net-bench` end to end: every runtime serves wrk's requests
//! without errors, and the report has every figure.

use std::process::Command;

#[test]
fn every_runtime_serves_wrk_without_errors() {
    let o = Command::new(env!("CARGO_BIN_EXE_blockio"))
        .args([
            "net-bench",
            "--seconds",
            "1",
            "--rounds",
            "1",
            "--connections",
            "8",
            "--server-cpu",
            "0",
            "--client-cpu",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["runtime"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["tokio", "blockio", "blockio-inline", "blockio-tick"]
    );
    for r in rows {
        assert!(r["rps"].as_f64().unwrap() > 100.0, "{r}");
        assert!(r["p99_us"].as_f64().unwrap() > 0.0, "{r}");
        let errors: u64 = r["rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["errors"].as_u64().unwrap())
            .sum();
        assert_eq!(errors, 0, "{r}");
        if r["runtime"] != "tokio" {
            assert!(r["rps_vs_tokio"][0].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}
