//! Work fitted to a limit on address space (`ulimit -v`, `RLIMIT_AS`):
//! the probe of the limit, the room left under it, and the worker threads
//! that room holds. `cp` and the sum tools (`blockio sum`,
//! `sha256sum`, `b3sum`…) size themselves with the same rules.
//!
//! Under such a limit every thread's stack and every allocator arena takes
//! address space whether it is used or not: glibc gives each thread that
//! allocates an arena of its own, reserving 64 MiB, and when that
//! reservation fails it does not settle on an existing arena but maps
//! each allocation of that thread on its own (three `mmap` calls, two of
//! them failing, and a `munmap` per allocation freed). A check of a
//! 300,000-line list spent minutes in the kernel that way. One arena,
//! shared, avoids both.

/// Under a limit on address space (`ulimit -v`, `RLIMIT_AS`), keeps
/// glibc's allocator to its one main arena: each worker thread would
/// otherwise get an arena of its own, reserving 64 MiB of address space
/// apiece, and, the reservation failing, map every allocation on its own
/// (see the module docs); an allocation failing under the limit aborts
/// the process. With one arena the threads share it, and the work fits
/// where one thread's does (coreutils' `tests/cp/link-heap.sh`).
///
/// Returns the limit in bytes (`None`: no limit). Call it before any
/// thread starts.
pub fn one_arena_under_address_limit() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::As).current?;
    // (through blockio, so that the engine's threads leave the bound at
    // one instead of setting the library's own)
    blockio::arenas::bound(std::num::NonZeroU32::MIN);
    Some(limit)
}

/// The address space left under `limit` (bytes): what the worker threads
/// can have.
pub fn address_space_left(limit: u64) -> u64 {
    let page = rustix::param::page_size() as u64;
    // The first field of statm: the address space in use, in pages.
    let used = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page);
    limit.saturating_sub(used)
}

/// Address space each worker thread beyond the first needs left over
/// under a limit (`ulimit -v`) to be started: its stack takes 2 MiB, and
/// work whose threads took the room its data needs (a copy's listings, a
/// checksum's buffers) would fail where one thread fits.
pub const ROOM_PER_THREAD: u64 = 64 << 20;

/// The worker threads that may start with `room` bytes of address space
/// left under a limit (`None`: no limit): at least one, one more per
/// [`ROOM_PER_THREAD`].
pub fn threads_within(threads: usize, room: Option<u64>) -> usize {
    match room {
        Some(room) => threads.min(1 + (room / ROOM_PER_THREAD) as usize),
        None => threads,
    }
}

/// The thread-pool backend's workers for work on `threads` threads: 16
/// each, at most 64, or, under a limit on address space (`limited`), one
/// per thread beyond the first, which runs its batches itself (every
/// worker's stack takes 2 MiB of the room the work needs). Zero means
/// none ([`blockio::EngineBuilder::no_pool_threads`]).
pub fn pool_threads(threads: usize, limited: bool) -> usize {
    if limited {
        threads.saturating_sub(1)
    } else {
        (threads.max(1) * 16).min(64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_fit_the_room() {
        assert_eq!(threads_within(8, None), 8);
        assert_eq!(threads_within(8, Some(0)), 1);
        assert_eq!(threads_within(8, Some(ROOM_PER_THREAD - 1)), 1);
        assert_eq!(threads_within(8, Some(2 * ROOM_PER_THREAD)), 3);
        assert_eq!(threads_within(2, Some(100 * ROOM_PER_THREAD)), 2);
    }

    #[test]
    fn pool_threads_shrink_under_a_limit() {
        assert_eq!(pool_threads(1, false), 16);
        assert_eq!(pool_threads(8, false), 64);
        assert_eq!(pool_threads(1, true), 0);
        assert_eq!(pool_threads(3, true), 2);
    }
}
