//! The process's limits (descriptors, address space, processes) and what
//! a copy makes of them: the backend it runs on and how many files it
//! keeps open at once.

use std::io;

use super::options::CopyOptions;

/// The backend to copy on: the default, unless descriptors are short
/// (below [`DESCRIPTORS_BESIDES_FILES`]) or no thread can be started
/// (`ulimit -u` reached). io_uring then cannot start the workers that run
/// what it does not do inline, and cancels those operations, so the
/// thread-pool backend runs every batch on the calling thread; an error
/// where the user requires io_uring ([`blockio::BACKEND_ENV`]).
pub(super) fn backend_for_this_process() -> io::Result<blockio::BackendChoice> {
    // Under a low limit on descriptors the ring's own descriptor is one
    // the files in flight need: the thread-pool backend takes none.
    if few_descriptors() && !io_uring_required() {
        return Ok(blockio::BackendChoice::ThreadPool);
    }
    if can_start_a_thread() {
        return Ok(blockio::BackendChoice::Auto);
    }
    if io_uring_required() {
        let why = if address_space_limited() {
            "the limit on address space, ulimit -v, leaves no room for a thread's stack"
        } else {
            "the limit on processes, ulimit -u, is reached"
        };
        return Err(io::Error::other(format!(
            "{}=uring: io_uring cannot start its worker threads here ({why}), and would cancel \
             what it cannot do inline; unset it to copy on the thread-pool backend",
            blockio::BACKEND_ENV
        )));
    }
    Ok(blockio::BackendChoice::ThreadPool)
}

/// Whether this process may start a thread now (not at its limit on
/// processes, `RLIMIT_NPROC`). The probe's stack is small, so that under
/// a limit on address space (`ulimit -v`) it asks no more than the copy
/// will anyway.
fn can_start_a_thread() -> bool {
    std::thread::Builder::new()
        .stack_size(32 << 10)
        .spawn(|| {})
        .is_ok_and(|t| t.join().is_ok())
}

/// Whether the environment requires io_uring ([`blockio::BACKEND_ENV`]).
fn io_uring_required() -> bool {
    matches!(
        blockio::BackendChoice::from_env(),
        Ok(Some(blockio::BackendChoice::IoUring))
    )
}

/// Whether the limit on open descriptors is below
/// [`DESCRIPTORS_BESIDES_FILES`]: the copy then takes no descriptor it can
/// do without (no ring, no pool threads).
pub(crate) fn few_descriptors() -> bool {
    descriptor_limit().is_some_and(|n| n < DESCRIPTORS_BESIDES_FILES)
}

/// Whether the descriptors free under the limit are too few for a
/// directory pair held beside a source and its copy (four): the copy then
/// names files by their paths and holds no directory while it copies one,
/// as GNU's `cp` does, which needs two beyond those open at the start.
pub(crate) fn names_by_path() -> bool {
    let open = std::fs::read_dir("/proc/self/fd")
        // (the listing's own descriptor is one of them)
        .map_or(3, |d| d.count().saturating_sub(1) as u64);
    descriptor_limit().is_some_and(|n| n.saturating_sub(open) < 4)
}

/// The soft limit on open descriptors (`RLIMIT_NOFILE`), `None` for none.
pub(super) fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Descriptors a copy keeps besides its files in flight: the standard
/// streams, the engine's, directories being listed and the directories of
/// the groups waiting (two each, source and destination), with room.
const DESCRIPTORS_BESIDES_FILES: u64 = 24;

/// `opts` with fewer threads and smaller groups of files where `limit`
/// (`RLIMIT_NOFILE`) leaves too few descriptors for the files they keep
/// open (two a file, source and copy, a group's at once on each thread):
/// under `ulimit -n 128` a copy runs one thread of 32-file groups rather
/// than failing files with `EMFILE`. The same copy, more slowly.
pub(super) fn fit_to_descriptors(opts: &CopyOptions, limit: Option<u64>) -> CopyOptions {
    let mut out = opts.clone();
    let Some(limit) = limit else { return out };
    let room = limit.saturating_sub(DESCRIPTORS_BESIDES_FILES).max(2);
    // Per thread: its group's files, twice, and its directories.
    let per_thread = |group: usize| 2 * group as u64 + 4;
    let threads = (room / per_thread(out.group)).max(1) as usize;
    out.threads = out.threads.min(threads);
    if per_thread(out.group) * out.threads as u64 > room {
        let for_files = room.saturating_sub(4 * out.threads as u64);
        out.group = (for_files / (2 * out.threads as u64)).max(1) as usize;
    }
    out
}

/// Whether the process's address space is limited (`ulimit -v`,
/// `RLIMIT_AS`).
pub(super) fn address_space_limited() -> bool {
    rustix::process::getrlimit(rustix::process::Resource::As)
        .current
        .is_some()
}

/// Lifts the soft limit on open descriptors to the hard limit: the budget
/// of files in flight is well under it either way, but a tree with long
/// chains of directories keeps a few open per level.
pub(super) fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    // `None` is unlimited; the soft limit goes up to 2^20 at most.
    let want = lim.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if lim.current.is_some_and(|cur| cur < want) {
        lim.current = Some(want);
        // Best effort: the copy runs within the old limit too.
        let _ = setrlimit(Resource::Nofile, lim);
    }
}
