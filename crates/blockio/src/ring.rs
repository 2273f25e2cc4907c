//! What every ring blockio creates shares, in both engines: the flags a
//! ring asks for, and the ladder that drops flags the kernel refuses until
//! setup succeeds, so that an older or restricted kernel still gets a ring
//! (and the caller learns which flags were dropped); an operation's
//! submission entry; and the wait that aborts rather than unwinds.

use std::io;
use std::os::fd::RawFd;

use io_uring::{squeue, IoUring};

use crate::buf::PoolBuffers;
use crate::op::Op;

/// The setup flags a ring asks for. The completion queue always has
/// `2 * entries` slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RingFlags {
    /// `SINGLE_ISSUER | DEFER_TASKRUN`: only for a ring one thread both
    /// submits to and reaps from.
    pub single_thread: bool,
    /// `COOP_TASKRUN`: no interrupt to run task work; sound where the
    /// submitting thread is the one waiting for completions.
    pub coop_taskrun: bool,
    /// `SUBMIT_ALL`: keep submitting a batch after an entry fails.
    pub submit_all: bool,
    /// `SQPOLL` with this idle time in milliseconds, attached to the poller
    /// of the ring `attach` when set.
    pub sqpoll: Option<u32>,
    /// The ring whose SQPOLL thread this one shares.
    pub attach: Option<RawFd>,
    /// `IOPOLL`: completions by polling the device (direct I/O only).
    pub iopoll: bool,
}

impl RingFlags {
    /// Drops the least important flag still set; returns its name, or
    /// `None` when nothing is left to drop.
    fn drop_least_important(&mut self) -> Option<&'static str> {
        if self.single_thread {
            self.single_thread = false;
            Some("SINGLE_ISSUER|DEFER_TASKRUN")
        } else if self.coop_taskrun {
            self.coop_taskrun = false;
            Some("COOP_TASKRUN")
        } else if self.submit_all {
            self.submit_all = false;
            Some("SUBMIT_ALL")
        } else if self.sqpoll.is_some() {
            self.sqpoll = None;
            self.attach = None;
            Some("SQPOLL")
        } else if self.iopoll {
            self.iopoll = false;
            Some("IOPOLL")
        } else {
            None
        }
    }

    fn try_build(&self, entries: u32) -> io::Result<IoUring> {
        let mut b = IoUring::builder();
        b.setup_cqsize(entries * 2);
        if self.single_thread {
            b.setup_single_issuer().setup_defer_taskrun();
        }
        if self.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if self.submit_all {
            b.setup_submit_all();
        }
        if let Some(idle_ms) = self.sqpoll {
            b.setup_sqpoll(idle_ms);
            if let Some(fd) = self.attach {
                b.setup_attach_wq(fd);
            }
        }
        if self.iopoll {
            b.setup_iopoll();
        }
        b.build(entries)
    }

    /// Builds a ring of `entries` with these flags, dropping each flag the
    /// kernel refuses (EINVAL: unknown; EPERM: not allowed here) and
    /// recording its name in `refused`. `self` ends as the flags the ring
    /// has. Fails with the kernel's error when even a plain ring is refused
    /// (io_uring missing or disabled).
    pub(crate) fn build(
        &mut self,
        entries: u32,
        refused: &mut Vec<&'static str>,
    ) -> io::Result<IoUring> {
        loop {
            let err = match self.try_build(entries) {
                Ok(ring) => return Ok(ring),
                Err(e) => e,
            };
            let refusal = matches!(err.raw_os_error(), Some(libc::EINVAL | libc::EPERM));
            match self.drop_least_important().filter(|_| refusal) {
                Some(name) => refused.push(name),
                None => return Err(err),
            }
        }
    }
}

/// Submits what is queued and waits for `want` completions. Errors that
/// only mean "not now" (EINTR; EBUSY, the completion queue backed up;
/// EAGAIN, the kernel short of memory) return so the caller can reap and
/// try again. Any other error leaves no way to learn when the kernel is done
/// with the memory of the operations in flight, so the process aborts: that
/// is the only sound choice left.
pub(crate) fn submit_and_wait_or_abort(ring: &IoUring, want: usize) {
    match ring.submit_and_wait(want) {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)
            ) => {}
        Err(_) => std::process::abort(),
    }
}

/// Whether the running kernel is at least `major.minor`: for features the
/// opcode probe cannot tell apart, because they are flags of an opcode
/// older kernels also have (multishot receive needs 6.0, multishot accept
/// 5.19).
pub(crate) fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (ma, mi) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

/// The submission entry of `op`, tagged with `ud`: on the registered-file
/// `slot` when the caller found one for it (the batch engine's file table
/// decides; the async engine has none), else on its own descriptor, with
/// its buffer's registered index when the buffer comes from `bufs`.
pub(crate) fn build_entry(
    op: &Op<'_>,
    ud: u64,
    bufs: Option<&PoolBuffers>,
    slot: Option<u32>,
) -> squeue::Entry {
    match slot {
        Some(slot) => op
            .action
            .entry(slot as RawFd, bufs)
            .flags(squeue::Flags::FIXED_FILE),
        None => op.action.entry(op.fd, bufs),
    }
    .user_data(ud)
}

#[cfg(test)]
mod tests {
    use super::RingFlags;

    #[test]
    fn flags_are_dropped_least_important_first() {
        let mut f = RingFlags {
            single_thread: true,
            coop_taskrun: true,
            submit_all: true,
            sqpoll: Some(10),
            attach: Some(3),
            iopoll: true,
        };
        let order: Vec<_> = std::iter::from_fn(|| f.drop_least_important()).collect();
        assert_eq!(
            order,
            [
                "SINGLE_ISSUER|DEFER_TASKRUN",
                "COOP_TASKRUN",
                "SUBMIT_ALL",
                "SQPOLL",
                "IOPOLL"
            ]
        );
        assert_eq!(f, RingFlags::default());
    }

    #[test]
    fn a_plain_ring_builds_here() {
        let mut f = RingFlags {
            coop_taskrun: true,
            ..RingFlags::default()
        };
        let mut refused = Vec::new();
        let ring = f
            .build(8, &mut refused)
            .expect("io_uring is enabled on the test machine");
        assert_eq!(ring.params().sq_entries(), 8);
        assert!(refused.is_empty(), "{refused:?}");
    }
}
