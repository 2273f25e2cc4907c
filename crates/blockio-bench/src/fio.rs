//! Running fio as a reference, on the same file in the same run.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::profile::Profile;

/// Whether an `fio` binary can be run.
pub fn available() -> bool {
    Command::new("fio").arg("--version").output().is_ok()
}

/// The fio options matching a profile: fio's io_uring engine, random 4 KiB
/// reads at depth 64 (sequential 128 KiB at depth 8 for `seq`), buffered
/// unless `direct`; `cold` lets fio evict the file first (`invalidate=1`),
/// the warm profiles keep the cache (`invalidate=0`).
pub fn profile_options(profile: Profile) -> (Vec<String>, usize) {
    let (rw, bs, qd) = match profile {
        Profile::Seq => ("read", "128k", 8),
        _ => ("randread", "4k", 64),
    };
    let opts = vec![
        "--ioengine=io_uring".to_string(),
        format!("--direct={}", u8::from(profile.direct())),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--iodepth={qd}"),
        format!("--invalidate={}", u8::from(!profile.warm())),
    ];
    (opts, qd)
}

/// Runs fio on `path` for `seconds` with `options` and returns its read
/// IOPS, or `None` if fio is not installed.
pub fn read_iops(path: &Path, options: &[String], seconds: f64) -> Result<Option<f64>> {
    let out = Command::new("fio")
        .arg("--name=blockio")
        .arg(format!("--filename={}", path.display()))
        .args(options)
        .arg(format!(
            "--runtime={}ms",
            (seconds * 1000.0).max(1.0) as u64
        ))
        .args(["--time_based", "--output-format=json"])
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("run fio"),
    };
    if !out.status.success() {
        bail!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON document.
    let start = text.find('{').context("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::from_str(&text[start..]).context("parse fio's JSON")?;
    let iops = v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("fio's JSON has no jobs[0].read.iops")?;
    Ok(Some(iops))
}
