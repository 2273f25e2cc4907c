//! `blockio sum` and the coreutils sum tools fitted to the limits on open descriptors
//! (`ulimit -n`, `RLIMIT_NOFILE`) and on processes (`ulimit -u`,
//! `RLIMIT_NPROC`), falling back step by step as `cp` does: fewer files
//! open at once, then no ring and no pool thread, then one file at a time
//! on the calling thread. GNU's `sha256sum` hashes any number of files
//! with four descriptors (the standard streams and one file) and checks a
//! list with five; so do these on either backend unless
//! `BLOCKIO_BACKEND=uring` requires the ring, which takes one more (and
//! a list longer than one batch stays open while its files are checked).
//!
//! Each worker holds its group's small files open until their batch is
//! read, and a large file it streams (twice over for `O_DIRECT`, which
//! opens the file again): with the defaults two threads hold some 70
//! descriptors, so the groups are fitted to what is left. A file whose open still fails so (another program's
//! descriptors, a limit lowered meanwhile) is tried again once its
//! worker's group is read, and then alone once every worker is done
//! ([`crate::sum::hash_files`]).

use blockio::BackendChoice;

use crate::sum::SumOptions;

/// Descriptors kept besides the files being hashed when descriptors are
/// plenty: the engine's rings, the async engine that streams `O_DIRECT`
/// reads and its wake-up descriptor, and pool threads starting up (the
/// C library's allocator opens a file on a thread's first allocation).
/// Below this, the tools take no descriptor they can do without.
const DESCRIPTORS_BESIDES_FILES: u64 = 24;

/// What a worker holds open besides its group's small files: a large file
/// being streamed, and the same file opened again for `O_DIRECT`.
const BESIDES_GROUP: u64 = 2;

/// The limits' effect on how the tools hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback {
    /// Descriptors are too few for a ring beside the files: hash on the
    /// thread-pool backend, with no pool thread, each batch on the thread
    /// that submits it.
    pub no_ring: bool,
    /// No thread can be started (`ulimit -u` reached): io_uring would
    /// cancel what it cannot do inline, having no worker to hand it to.
    pub no_threads: bool,
}

/// Fits `opts` to the descriptors left under the process's limit and to
/// whether a thread can be started, and says what the engine must do
/// without.
pub fn fit(opts: &mut SumOptions) -> Fallback {
    raise_descriptor_limit();
    let no_threads = !can_start_a_thread();
    let (fitted, no_ring) = fitted(opts, descriptors_left());
    *opts = fitted;
    if no_threads {
        // The async engine needs a driver thread.
        opts.direct = false;
    }
    Fallback {
        no_ring,
        no_threads,
    }
}

/// The backend `fallback` asks for: the thread-pool backend when there is
/// no room for a ring or no thread to be had, unless the environment
/// requires a backend ([`blockio::BACKEND_ENV`], which the engine obeys
/// either way).
pub fn backend(fallback: Fallback) -> BackendChoice {
    if fallback.no_ring || fallback.no_threads {
        BackendChoice::ThreadPool
    } else {
        BackendChoice::Auto
    }
}

/// `opts` fitted to `left` descriptors free (`None`: no limit), and
/// whether the ring must go.
///
/// With room for every worker's files beside `DESCRIPTORS_BESIDES_FILES` (24),
/// nothing changes. With room for a worker of one file beside them,
/// fewer threads, then smaller groups. Below that: no ring, no
/// `O_DIRECT` stream (its second descriptor and its engine), one thread,
/// and groups of as many files as the descriptors left hold, keeping one
/// for a large file and one spare; down to one file at a time.
pub fn fitted(opts: &SumOptions, left: Option<u64>) -> (SumOptions, bool) {
    let mut out = opts.clone();
    let Some(left) = left else {
        return (out, false);
    };
    let per_thread = |group: usize| group as u64 + BESIDES_GROUP;
    let threads = out.threads.max(1) as u64;
    if left >= DESCRIPTORS_BESIDES_FILES + per_thread(out.group) * threads {
        return (out, false);
    }
    if left >= DESCRIPTORS_BESIDES_FILES + per_thread(1) {
        let room = left - DESCRIPTORS_BESIDES_FILES;
        let threads = (room / per_thread(out.group)).clamp(1, threads);
        out.threads = threads as usize;
        let group = (room / threads).saturating_sub(BESIDES_GROUP).max(1);
        out.group = out.group.min(group as usize);
        return (out, false);
    }
    out.threads = 1;
    out.direct = false;
    out.group = out.group.min(left.saturating_sub(2).max(1) as usize);
    (out, true)
}

/// Lifts the soft limit on open descriptors to the hard limit (at most
/// 2^20), as `cp` does: the default soft limit of 1,024 would otherwise
/// cut the threads of a machine with many CPUs. Only a limit the user
/// set as hard then fits the work.
fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let want = lim.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if lim.current.is_some_and(|cur| cur < want) {
        lim.current = Some(want);
        // Best effort: the work fits the old limit otherwise.
        let _ = setrlimit(Resource::Nofile, lim);
    }
}

/// Descriptors that may still be opened under the limit on open files
/// (`None`: no limit): the limit less those open now.
pub fn descriptors_left() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
    // The listing's own descriptor is one of those listed. If it cannot
    // be opened, none is left.
    let open = std::fs::read_dir("/proc/self/fd").map_or(limit, |d| d.count() as u64 - 1);
    Some(limit.saturating_sub(open))
}

/// Whether this process may start a thread now (not at its limit on
/// processes, `RLIMIT_NPROC`). The probe's stack is small, so that under
/// a limit on address space (`ulimit -v`) it asks for little.
pub fn can_start_a_thread() -> bool {
    std::thread::Builder::new()
        .stack_size(32 << 10)
        .spawn(|| {})
        .is_ok_and(|t| t.join().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(threads: usize) -> SumOptions {
        SumOptions {
            threads,
            ..SumOptions::default()
        }
    }

    /// Descriptors a fitted run may hold at once: each thread's group and
    /// what it streams.
    fn held(o: &SumOptions) -> u64 {
        o.threads as u64 * (o.group as u64 + if o.direct { 2 } else { 1 })
    }

    #[test]
    fn no_limit_or_a_high_one_changes_nothing() {
        let o = opts(8);
        for left in [None, Some(1 << 20)] {
            let (f, no_ring) = fitted(&o, left);
            assert_eq!(
                (f.threads, f.group, f.direct, no_ring),
                (8, o.group, true, false)
            );
        }
    }

    #[test]
    fn a_moderate_limit_keeps_the_ring_with_fewer_files_in_flight() {
        let o = opts(8);
        for left in [30, 40, 64, 100, 200] {
            let (f, no_ring) = fitted(&o, Some(left));
            assert!(!no_ring, "{left}: {f:?}");
            assert!(f.threads >= 1 && f.group >= 1, "{left}: {f:?}");
            assert!(
                held(&f) + DESCRIPTORS_BESIDES_FILES <= left,
                "{left}: {f:?} holds {}",
                held(&f)
            );
        }
    }

    #[test]
    fn a_low_limit_drops_the_ring_then_goes_one_file_at_a_time() {
        let o = opts(2);
        for left in 1..DESCRIPTORS_BESIDES_FILES + 3 {
            let (f, no_ring) = fitted(&o, Some(left));
            assert!(no_ring, "{left}: {f:?}");
            assert_eq!((f.threads, f.direct), (1, false), "{left}");
            assert!(held(&f) <= left.max(2), "{left}: {f:?}");
        }
        assert_eq!(fitted(&o, Some(1)).0.group, 1);
        assert_eq!(fitted(&o, Some(0)).0.group, 1);
    }
}
