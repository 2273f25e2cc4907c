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
    let mut cmd = Command::new("fio");
    cmd.arg("--name=blockio")
        .arg(format!("--filename={}", path.display()))
        .args(options)
        .arg(format!(
            "--runtime={}ms",
            (seconds * 1000.0).max(1.0) as u64
        ))
        .args(["--time_based", "--output-format=json"]);
    let Some(v) = run_json(&mut cmd)? else {
        return Ok(None);
    };
    let iops = v["jobs"][0]["read"]["iops"]
        .as_f64()
        .context("fio's JSON has no jobs[0].read.iops")?;
    Ok(Some(iops))
}

/// A copy's I/O done by fio, as a reference for what this device gives:
/// the seconds fio takes to read the files under `src` (`--opendir`, 1 MiB
/// blocks, in turn) while a second job writes as many bytes to the new file
/// `scratch` and fsyncs it, both `O_DIRECT` with 32 in flight. Not a strict
/// floor: a copy through the page cache has come in below it on this disk
/// (its write-back merges writes, fio's preallocated file converts
/// extents), and the disk's speed moves by ±20 % between runs. The time is
/// fio's own (`job_runtime` of the slower job, which includes the final
/// fsync), without its start-up (opening files, preallocating). `None` if
/// fio is not installed. `scratch` is removed afterwards.
pub fn copy_io(src: &Path, bytes: u64, scratch: &Path) -> Result<Option<f64>> {
    let mut cmd = Command::new("fio");
    cmd.args([
        "--output-format=json",
        "--ioengine=io_uring",
        "--direct=1",
        "--bs=1m",
        "--iodepth=32",
        "--name=read",
        "--rw=read",
        "--file_service_type=roundrobin",
    ])
    .arg(format!("--opendir={}", src.display()))
    .args(["--name=write", "--rw=write", "--end_fsync=1"])
    .arg(format!("--filename={}", scratch.display()))
    .arg(format!("--size={}", bytes.div_ceil(1 << 20).max(1) << 20));
    let v = run_json(&mut cmd);
    let _ = std::fs::remove_file(scratch);
    let Some(v) = v? else {
        return Ok(None);
    };
    let jobs = v["jobs"].as_array().context("fio's JSON has no jobs")?;
    let mut ms = 0.0f64;
    for j in jobs {
        let t = j["job_runtime"]
            .as_f64()
            .context("fio's JSON has a job without job_runtime")?;
        ms = ms.max(t);
    }
    if jobs.len() != 2 || ms <= 0.0 {
        bail!(
            "fio reported {} jobs and {ms} ms, expected 2 jobs",
            jobs.len()
        );
    }
    Ok(Some(ms / 1000.0))
}

/// Runs fio (`cmd`, with `--output-format=json`) and returns its JSON
/// document, or `None` if fio is not installed. A failing fio is an error
/// carrying its stderr.
fn run_json(cmd: &mut Command) -> Result<Option<serde_json::Value>> {
    let out = match cmd.output() {
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
    // fio may print notes before the document.
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text.find('{').context("fio printed no JSON")?;
    serde_json::from_str(&text[start..])
        .map(Some)
        .context("parse fio's JSON")
}
