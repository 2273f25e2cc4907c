//! What the server costs: CPU time and context switches of this process
//! (`getrusage`), and the system calls its threads make (counted by
//! `perf stat` attached to this process, in a run of their own: see the
//! [`net_bench`](super) module doc). The load generator is a child
//! process, counted in neither; its CPU time is counted on its own
//! (`RUSAGE_CHILDREN`), to show when the client's CPU is the limit.
//!
//! Peak memory ([`PeakRss`]) is this process's resident high-water mark
//! over one run: the servers are threads of this process and the load
//! generator is not, so the mark is the server's (plus this process's
//! small resident base, the same for every runtime). Before each run the
//! allocator hands freed memory back to the kernel (`malloc_trim`) and the
//! mark is reset (`/proc/self/clear_refs`), so that no run inherits the
//! one before it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// This process's resource use so far (its threads, not its children).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// User and system CPU time, microseconds.
    pub cpu_us: f64,
    /// Context switches, voluntary and not.
    pub switches: f64,
}

impl Usage {
    /// The use so far.
    pub fn now() -> Usage {
        Usage::of(libc::RUSAGE_SELF)
    }

    /// The use so far of this process's children that have ended and been
    /// waited for (the load generators).
    pub fn children() -> Usage {
        Usage::of(libc::RUSAGE_CHILDREN)
    }

    fn of(who: libc::c_int) -> Usage {
        // SAFETY: all-zero is a valid rusage, which getrusage fills.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: writes into the live `u`.
        unsafe { libc::getrusage(who, &mut u) };
        let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        Usage {
            cpu_us: us(u.ru_utime) + us(u.ru_stime),
            switches: (u.ru_nvcsw + u.ru_nivcsw) as f64,
        }
    }

    /// The use between `before` and this.
    pub fn since(&self, before: &Usage) -> Usage {
        Usage {
            cpu_us: self.cpu_us - before.cpu_us,
            switches: self.switches - before.switches,
        }
    }
}

/// This process's resident high-water mark over one run.
pub struct PeakRss;

impl PeakRss {
    /// Starts a run: freed memory goes back to the kernel and the mark
    /// restarts from the resident size now. `None` where the kernel does
    /// not let the mark be reset (before Linux 4.0).
    pub fn start() -> Option<PeakRss> {
        #[cfg(target_env = "gnu")]
        // SAFETY: glibc's malloc_trim only returns free memory; any
        // thread may call it at any time.
        unsafe {
            libc::malloc_trim(0);
        }
        // "5" resets the peak resident size to the current one.
        std::fs::write("/proc/self/clear_refs", "5").ok()?;
        Some(PeakRss)
    }

    /// The mark since [`start`](Self::start), in MiB (`VmHWM`).
    pub fn finish(self) -> Option<f64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }
}

/// `perf stat` counting the system calls of this process's threads.
pub struct Syscalls {
    perf: Option<Child>,
}

/// The tracepoint every system call passes.
const EVENT: &str = "raw_syscalls:sys_enter";

impl Syscalls {
    /// Whether `perf` can count system calls here (installed, and allowed
    /// to read tracepoints: root, or `perf_event_paranoid` low enough).
    pub fn available() -> bool {
        Command::new("perf")
            .args(["stat", "-x,", "-e", EVENT, "--", "true"])
            .stdout(Stdio::null())
            .output()
            .map(|o| o.status.success() && parse(&String::from_utf8_lossy(&o.stderr)).is_some())
            .unwrap_or(false)
    }

    /// Starts counting the threads this process has now (`--no-inherit`:
    /// not the load generator, a child started later); waits until `perf`
    /// has had time to attach.
    pub fn start() -> Option<Syscalls> {
        let perf = Command::new("perf")
            .args(["stat", "--no-inherit", "-x,", "-e", EVENT, "-p"])
            .arg(std::process::id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        std::thread::sleep(Duration::from_millis(300));
        Some(Syscalls { perf: Some(perf) })
    }

    /// Stops counting: the system calls counted.
    pub fn finish(mut self) -> Option<f64> {
        let perf = self.perf.take()?;
        // SAFETY: signals our own child, which has not been waited for
        // (so its pid is not reused).
        unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
        let out = perf.wait_with_output().ok()?;
        parse(&String::from_utf8_lossy(&out.stderr))
    }
}

impl Drop for Syscalls {
    fn drop(&mut self) {
        if let Some(mut perf) = self.perf.take() {
            let _ = perf.kill();
            let _ = perf.wait();
        }
    }
}

/// The count in `perf stat -x,`'s line for the event.
fn parse(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.contains(EVENT))?;
    line.split(',').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_perfs_csv_line() {
        let t = "144,,raw_syscalls:sys_enter,2045658,100.00,,\n";
        assert_eq!(super::parse(t), Some(144.0));
        assert_eq!(
            super::parse("<not counted>,,raw_syscalls:sys_enter,0,100.00,,"),
            None
        );
    }
}
