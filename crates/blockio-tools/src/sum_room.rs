//! `blockio sum` and the coreutils sum tools fitted to a limit on address space
//! (`ulimit -v`): one allocator arena, worker threads and buffers sized to
//! the room left, and an engine whose thread pool fits beside them, by the
//! rules `cp` follows ([`crate::room`]).
//!
//! Without this the thread-pool backend started 64 pool threads (2 MiB of
//! stack each) and every hashing thread reserved an arena of 64 MiB, so a
//! check needed 100 to 120 MB where GNU's `sha256sum` needs 2.5, and
//! each allocation of a thread whose arena could not be reserved cost
//! three `mmap` calls.

use std::io;

use blockio::Engine;

use crate::algo::BLAKE3_PARALLEL_FROM;
use crate::room;
use crate::sum::SumOptions;
use crate::sum_limits;

/// The share of the room left that the workers' buffers may take together:
/// an eighth, as for `cp`; the rest is for thread stacks, the engine, the
/// list being checked and the allocator's own slack.
const BUFFER_SHARE: u64 = 8;

/// The smallest block a fitted stream reads (and the step blocks are cut
/// down by).
const LEAST_BLOCK: usize = 64 << 10;

/// What a batch of a checksum list takes, as a multiple of its bytes: the
/// lines' places, their parsed digests and names, the paths handed to the
/// workers and their results.
const LIST_BATCH_COST: usize = 8;

/// The least list batch a fitted check reads: a few hundred lines.
const LEAST_LIST_BATCH: usize = 16 << 10;

/// The largest block a fitted stream reads: under
/// [`BLAKE3_PARALLEL_FROM`], so that no block starts rayon's threads.
const SERIAL_BLOCK: usize = BLAKE3_PARALLEL_FROM / 2;

/// Fits `opts` to the process's limits (on address space here; on
/// descriptors and processes by [`sum_limits::fit`]) and builds the
/// engine to hash with. Call it before any other thread starts (it keeps
/// the allocator to one arena, see
/// [`room::one_arena_under_address_limit`]).
///
/// With no limit, `opts` is left as it is and the engine is the default
/// one, save that a pool thread that cannot be started leaves its batches
/// to the thread that submits them rather than failing the run.
pub fn engine_within_limits(opts: &mut SumOptions) -> io::Result<Engine> {
    let limit = room::one_arena_under_address_limit();
    if let Some(limit) = limit {
        *opts = fitted(opts, room::address_space_left(limit));
    }
    let fallback = sum_limits::fit(opts);
    let mut builder = Engine::builder()
        .backend(sum_limits::backend(fallback))
        .inline_if_no_threads(true);
    if limit.is_some() || fallback.no_ring {
        // Each pool thread's stack takes room, and a pool thread starting
        // up opens a file for a moment: one per worker beyond the first,
        // or none.
        let pool = room::pool_threads(opts.threads, true);
        builder = builder
            .no_pool_threads(pool == 0)
            .fallback_threads(pool.max(1));
    }
    builder.build()
}

/// `opts` fitted to `room` bytes of address space: threads as
/// [`room::threads_within`] allows, and each worker's buffers (a group of
/// small files read whole, the blocks of a stream in flight) within its
/// part of an eighth of the room (`BUFFER_SHARE`), as is a batch of a
/// list being checked, with what its lines take. The async engine of
/// `O_DIRECT` streams gets one pool thread per worker.
pub fn fitted(opts: &SumOptions, room: u64) -> SumOptions {
    let mut out = opts.clone();
    out.threads = room::threads_within(opts.threads.max(1), Some(room));
    let share = usize::try_from(room / BUFFER_SHARE / out.threads as u64).unwrap_or(usize::MAX);
    let share = share.max(2 * LEAST_BLOCK);
    // Small files: a group of them, each read whole with a byte more.
    out.small = out.small.min(share / 2);
    out.group = out.group.min(share / (out.small + 1)).max(1);
    // A page-cache stream keeps up to twice its depth of blocks. Blocks
    // stay below the size BLAKE3 spreads over rayon's threads, whose
    // stacks the room would have to hold too.
    let block = out.block.min(SERIAL_BLOCK);
    (out.block, out.depth) = blocks_within(block, out.depth, share / 2);
    let block = out.direct_block.min(SERIAL_BLOCK);
    (out.direct_block, out.direct_depth) = blocks_within(block, out.direct_depth, share);
    out.direct_pool_threads = out.threads;
    // A batch of a list being checked, its lines, names and results.
    out.list_batch = out
        .list_batch
        .min(share / LIST_BATCH_COST)
        .max(LEAST_LIST_BATCH);
    out
}

/// `depth` blocks of `block` bytes cut down to `most` bytes in all: fewer
/// blocks first, down to 2 (one hashed while one is read), then smaller
/// blocks, in steps of [`LEAST_BLOCK`], down to that.
fn blocks_within(block: usize, depth: usize, most: usize) -> (usize, usize) {
    let depth = depth.max(1);
    if block.saturating_mul(depth) <= most {
        return (block, depth);
    }
    let fewer = (most / block.max(1)).max(2).min(depth);
    if block * fewer <= most {
        return (block, fewer);
    }
    let block = (most / fewer / LEAST_BLOCK * LEAST_BLOCK).max(LEAST_BLOCK);
    (block, fewer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes a worker's buffers may hold at most under `opts`.
    fn per_worker(o: &SumOptions) -> usize {
        let small = o.group * (o.small + 1);
        let cached = 2 * o.depth * o.block;
        let direct = o.direct_depth * o.direct_block;
        small.max(cached).max(direct)
    }

    #[test]
    fn a_large_room_keeps_threads_and_depths_with_blocks_hashed_serially() {
        let opts = SumOptions {
            threads: 2,
            ..SumOptions::default()
        };
        let f = fitted(&opts, 4 << 30);
        assert_eq!(
            (f.threads, f.small, f.group, f.block, f.depth),
            (2, opts.small, opts.group, SERIAL_BLOCK, opts.depth)
        );
        assert_eq!(
            (f.direct_block, f.direct_depth),
            (SERIAL_BLOCK, opts.direct_depth)
        );
        assert_eq!(f.direct_pool_threads, 2);
        assert_eq!(f.list_batch, opts.list_batch);
    }

    #[test]
    fn buffers_fit_their_share_of_a_small_room() {
        let opts = SumOptions {
            threads: 8,
            ..SumOptions::default()
        };
        for room in [8 << 20, 40 << 20, 60 << 20, 200 << 20] {
            let f = fitted(&opts, room);
            assert_eq!(f.threads, room::threads_within(8, Some(room)));
            let share = (room / BUFFER_SHARE / f.threads as u64).max(2 * LEAST_BLOCK as u64);
            assert!(
                per_worker(&f) as u64 <= share,
                "room {room}: {f:?} holds {} bytes a worker, more than {share}",
                per_worker(&f)
            );
            assert!(
                f.block >= LEAST_BLOCK && f.direct_block >= LEAST_BLOCK,
                "{f:?}"
            );
            assert!(f.block < BLAKE3_PARALLEL_FROM && f.direct_block < BLAKE3_PARALLEL_FROM);
            assert!(f.depth >= 1 && f.direct_depth >= 1 && f.group >= 1, "{f:?}");
            assert!(
                (f.list_batch * LIST_BATCH_COST) as u64 <= share
                    || f.list_batch == LEAST_LIST_BATCH,
                "room {room}: a list batch of {}",
                f.list_batch
            );
        }
    }

    #[test]
    fn depth_goes_before_block_size() {
        assert_eq!(blocks_within(2 << 20, 16, 8 << 20), (2 << 20, 4));
        assert_eq!(blocks_within(2 << 20, 16, 2 << 20), (1 << 20, 2));
        assert_eq!(blocks_within(1 << 20, 4, 64 << 10), (LEAST_BLOCK, 2));
        assert_eq!(blocks_within(1 << 20, 1, 64 << 10), (LEAST_BLOCK, 1));
    }
}
