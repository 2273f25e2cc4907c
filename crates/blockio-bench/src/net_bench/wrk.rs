//! Load from `wrk`, pinned to its own CPU, and what it measured.

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// What one `wrk` run measured.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Load {
    /// Requests per second.
    pub rps: f64,
    /// Latency percentiles, microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Socket errors and non-2xx responses.
    pub errors: u64,
    /// Requests completed.
    pub requests: u64,
    /// The server's CPU time (user + system, every thread of this process;
    /// wrk is a child and not counted) per request, microseconds.
    pub server_cpu_us_per_req: f64,
    /// The server's context switches (voluntary and not) per request.
    pub server_switches_per_req: f64,
}

/// wrk's Lua hook that prints the figures on one line.
const REPORT: &str = r#"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BLOCKIO-NET %d %d %f %f %f %d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.connect + e.read + e.write + e.timeout + e.status))
end
"#;

/// Whether wrk is installed.
pub fn available() -> bool {
    Command::new("wrk").arg("--version").output().is_ok()
}

/// Runs wrk against `addr` with `connections` connections for `duration`,
/// on CPU `cpu` (with `taskset`), one wrk thread.
pub fn run(addr: SocketAddr, connections: usize, duration: Duration, cpu: usize) -> Result<Load> {
    let mut script = tempfile_in_tmp()?;
    script.1.write_all(REPORT.as_bytes())?;
    let secs = duration.as_secs().max(1);
    let before = Usage::now();
    let out = Command::new("taskset")
        .args(["-c", &cpu.to_string(), "wrk", "-t1"])
        .arg(format!("-c{connections}"))
        .arg(format!("-d{secs}s"))
        .args(["--timeout", "10s", "-s"])
        .arg(&script.0)
        .arg(format!("http://{addr}/"))
        .output()
        .context("cannot run wrk (apt-get install wrk; scripts/install-deps does)")?;
    let used = Usage::now().since(&before);
    let _ = std::fs::remove_file(&script.0);
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut load = parse(&text).with_context(|| format!("wrk printed no figures:\n{text}"))?;
    let per = |x: f64| x / load.requests.max(1) as f64;
    load.server_cpu_us_per_req = per(used.cpu_us);
    load.server_switches_per_req = per(used.switches);
    Ok(load)
}

/// This process's resource use so far (its threads, not its children).
struct Usage {
    cpu_us: f64,
    switches: f64,
}

impl Usage {
    fn now() -> Usage {
        // SAFETY: all-zero is a valid rusage, which getrusage fills.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: writes into the live `u`.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        Usage {
            cpu_us: us(u.ru_utime) + us(u.ru_stime),
            switches: (u.ru_nvcsw + u.ru_nivcsw) as f64,
        }
    }

    fn since(&self, before: &Usage) -> Usage {
        Usage {
            cpu_us: self.cpu_us - before.cpu_us,
            switches: self.switches - before.switches,
        }
    }
}

fn tempfile_in_tmp() -> Result<(std::path::PathBuf, std::fs::File)> {
    let path = std::env::temp_dir().join(format!("blockio-wrk-{}.lua", std::process::id()));
    let f =
        std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok((path, f))
}

/// The figures from the report line.
fn parse(text: &str) -> Option<Load> {
    let line = text.lines().find(|l| l.starts_with("BLOCKIO-NET "))?;
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [requests, duration_us, p50, p99, p999, errors] = f[..] else {
        return None;
    };
    Some(Load {
        rps: requests / (duration_us / 1e6),
        p50_us: p50,
        p99_us: p99,
        p999_us: p999,
        errors: errors as u64,
        requests: requests as u64,
        server_cpu_us_per_req: 0.0,
        server_switches_per_req: 0.0,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_report_line() {
        let l =
            super::parse("Running 1s test\nBLOCKIO-NET 1000 500000 10.5 20.0 30.0 2\n").unwrap();
        assert_eq!(l.rps, 2000.0);
        assert_eq!(
            (l.p50_us, l.p99_us, l.p999_us, l.errors),
            (10.5, 20.0, 30.0, 2)
        );
        assert!(super::parse("nothing").is_none());
    }
}
