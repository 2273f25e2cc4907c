//! The guard the io_uring-blocked tests (`blockio-cli` and `blockio-bench`,
//! each `tests/io_uring_blocked.rs`) set `kernel.io_uring_disabled` with.

const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

/// Sets `kernel.io_uring_disabled` and puts the old value back on drop.
pub struct Disabled(String);

impl Disabled {
    /// Writes `value` to the setting, keeping the old one; panics, naming
    /// the file, where it is missing (before Linux 6.6) or not writable
    /// (not root).
    pub fn new(value: &str) -> Disabled {
        let old = std::fs::read_to_string(SYSCTL)
            .unwrap_or_else(|e| panic!("{SYSCTL}: {e} (Linux 6.6 or later has it)"));
        std::fs::write(SYSCTL, value).unwrap_or_else(|e| {
            panic!("cannot write {SYSCTL}: {e}; this test blocks io_uring and must run as root")
        });
        Disabled(old.trim().to_string())
    }
}

impl Drop for Disabled {
    fn drop(&mut self) {
        std::fs::write(SYSCTL, &self.0).expect("restore kernel.io_uring_disabled");
    }
}
