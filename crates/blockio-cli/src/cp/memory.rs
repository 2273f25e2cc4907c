//! A copy fitted to a limit on address space (`ulimit -v`): one allocator
//! arena, and threads and buffers that fit in what is left.

/// Under a limit on address space (`ulimit -v`, `RLIMIT_AS`), keeps
/// glibc's allocator to its one main arena: each worker thread would
/// otherwise get an arena of its own, reserving 64 MiB of address space
/// apiece, and an allocation failing under the limit aborts the process.
/// With one arena the threads share it, and the copy fits where one
/// thread's does (coreutils' `tests/cp/link-heap.sh`).
///
/// Returns the limit (`None`: no limit). Call it before any thread starts.
pub(super) fn one_arena_under_address_limit() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::As).current?;
    // Raw libc: mallopt is glibc's allocator's, which rustix does not wrap.
    // SAFETY: mallopt only sets an allocator parameter; called before
    // the copy's threads start, and M_ARENA_MAX is one glibc knows.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    Some(limit)
}

/// The address space left under `limit`: what the worker threads can have.
pub(super) fn address_space_left(limit: u64) -> u64 {
    let page = rustix::param::page_size().max(4096) as u64;
    // The first field of statm: the address space in use, in pages.
    let used = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page);
    limit.saturating_sub(used)
}

/// Address space each worker thread beyond the first needs left over
/// under a limit (`ulimit -v`) to be started: its stack takes 2 MiB, and
/// a copy whose threads took the room its listings need would fail where
/// one thread fits.
const ROOM_PER_THREAD: u64 = 64 << 20;

/// The worker threads a copy may start with `room` bytes of address space
/// left under a limit: at least one, one more per [`ROOM_PER_THREAD`].
pub(super) fn threads_within(threads: usize, room: Option<u64>) -> usize {
    match room {
        Some(room) => threads.min(1 + (room / ROOM_PER_THREAD) as usize),
        None => threads,
    }
}

/// The smallest read a copy fitted to an address-space limit makes.
const LEAST_BLOCK: usize = 64 << 10;

/// The bytes per read (`block`) and in flight per worker (`wave`) of a
/// copy on `threads` workers with `room` bytes of address space left
/// under a limit: the waves together at most an eighth of the room, in
/// whole blocks of at least [`LEAST_BLOCK`]; as given when they fit, or
/// with no limit. Without this a worker's 16 MiB wave made a large file
/// fail ("memory exhausted") where a small one fit.
pub(super) fn buffers_within(
    block: usize,
    wave: usize,
    threads: usize,
    room: Option<u64>,
) -> (usize, usize) {
    let Some(room) = room else {
        return (block, wave);
    };
    let most = usize::try_from(room / 8 / threads.max(1) as u64).unwrap_or(usize::MAX);
    if wave <= most {
        return (block, wave);
    }
    let block = block.min(most / LEAST_BLOCK * LEAST_BLOCK).max(LEAST_BLOCK);
    (block, (most / block * block).max(block))
}
