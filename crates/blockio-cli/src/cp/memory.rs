//! A copy's buffers fitted to a limit on address space (`ulimit -v`); the
//! probe of the limit, its one allocator arena and the threads that fit are
//! [`blockio_tools::room`]'s, shared with the sum tools.

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
