//! Load from `wrk`, pinned to its own CPU, and what it measured.

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::load::{Latency, Outcome, CDF_POINTS};

/// wrk's Lua hook that prints the figures on one line, and a line per
/// point of the latency CDF.
const REPORT: &str = r#"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BLOCKIO-NET %d %d %f %f %f %d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.connect + e.read + e.write + e.timeout + e.status))
  for _, p in ipairs({ POINTS_LIST }) do
    io.write(string.format("BLOCKIO-CDF %f %f\n", p, latency:percentile(p)))
  end
end
"#;

/// Whether wrk is installed.
pub fn available() -> bool {
    Command::new("wrk").arg("--version").output().is_ok()
}

/// Runs wrk against `addr` with `connections` connections for `duration`:
/// one wrk thread on CPU `cpu` (with `taskset`), or with `None` two
/// threads on any CPU.
pub fn run(
    addr: SocketAddr,
    connections: usize,
    duration: Duration,
    cpu: Option<usize>,
) -> Result<Outcome> {
    let mut script = tempfile_in_tmp()?;
    let points: Vec<String> = CDF_POINTS.iter().map(|p| p.to_string()).collect();
    script
        .1
        .write_all(REPORT.replace("POINTS_LIST", &points.join(", ")).as_bytes())?;
    let secs = duration.as_secs().max(1);
    let mut cmd = match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string(), "wrk", "-t1"]);
            c
        }
        None => {
            let mut c = Command::new("wrk");
            c.arg("-t2");
            c
        }
    };
    let out = cmd
        .arg(format!("-c{connections}"))
        .arg(format!("-d{secs}s"))
        .args(["--timeout", "10s", "-s"])
        .arg(&script.0)
        .arg(format!("http://{addr}/"))
        .output()
        .context("cannot run wrk (apt-get install wrk; scripts/install-deps does)")?;
    let _ = std::fs::remove_file(&script.0);
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse(&text).with_context(|| format!("wrk printed no figures:\n{text}"))
}

fn tempfile_in_tmp() -> Result<(std::path::PathBuf, std::fs::File)> {
    let path = std::env::temp_dir().join(format!("blockio-wrk-{}.lua", std::process::id()));
    let f =
        std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok((path, f))
}

/// The figures from the report lines.
fn parse(text: &str) -> Option<Outcome> {
    let numbers = |line: &str| -> Option<Vec<f64>> {
        line.split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect()
    };
    let line = text.lines().find(|l| l.starts_with("BLOCKIO-NET "))?;
    let [requests, duration_us, p50, p99, p999, errors] = numbers(line)?[..] else {
        return None;
    };
    let cdf = text
        .lines()
        .filter(|l| l.starts_with("BLOCKIO-CDF "))
        .filter_map(|l| match numbers(l)?[..] {
            [p, us] => Some((p, us)),
            _ => None,
        })
        .collect();
    Some(Outcome {
        units: requests,
        seconds: duration_us / 1e6,
        errors: errors as u64,
        latency: Some(Latency {
            p50_us: p50,
            p99_us: p99,
            p999_us: p999,
            cdf,
        }),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_report_line() {
        let l = super::parse(
            "Running 1s test\nBLOCKIO-NET 1000 500000 10.5 20.0 30.0 2\nBLOCKIO-CDF 50 10.5\n",
        )
        .unwrap();
        assert_eq!(l.units / l.seconds, 2000.0);
        let lat = l.latency.unwrap();
        assert_eq!(
            (lat.p50_us, lat.p99_us, lat.p999_us, l.errors),
            (10.5, 20.0, 30.0, 2)
        );
        assert_eq!(lat.cdf, [(50.0, 10.5)]);
        assert!(super::parse("nothing").is_none());
    }
}
