//! The one rule for `queue_depth`, shared by
//! [`EngineBuilder::queue_depth`](crate::EngineBuilder::queue_depth),
//! [`AsyncEngineBuilder::queue_depth`](crate::aio::AsyncEngineBuilder::queue_depth)
//! and the Python package's `Engine(queue_depth=...)`: one default, one
//! ceiling and one error naming the argument.

use std::fmt::Display;
use std::io;

/// The `queue_depth` of both engines and of the Python package's `Engine`
/// unless they are given one: 256.
///
/// The async engine puts every task's file operations into one ring sized
/// from its queue depth, so its depth is all the room the tasks share;
/// 256 gives a server's tasks twice the batch engine's `max_batch` (128).
/// The batch engine submits each batch through a ring of `max_batch`
/// entries and bounds the operations in flight over all its rings by the
/// depth: 256 lets two full batches be in flight at once, on two threads,
/// instead of making the second wait for the first. One default means an
/// engine changed from one API to the other keeps its bound, and the
/// Python package, which builds both, passes the one value.
pub const DEFAULT_QUEUE_DEPTH: usize = 256;

/// The largest `queue_depth` either engine takes: 32,767.
///
/// The kernel's largest ring has 32,768 submission entries
/// (`IORING_MAX_ENTRIES`; its completion queue, twice that, is within
/// `IORING_MAX_CQ_ENTRIES`). The async engine sizes its ring from the
/// queue depth and keeps one entry of it for its driver's wake-up read,
/// which leaves 32,767 for operations. The batch engine, whose rings are
/// sized by `max_batch` instead, takes the same ceiling so that one depth
/// means the same on both.
pub const MAX_QUEUE_DEPTH: usize = 32767;

/// `n` as a queue depth if it is within `1..=MAX_QUEUE_DEPTH`; otherwise an
/// [`InvalidInput`](io::ErrorKind::InvalidInput) error
/// `queue_depth must be 1..=32767, got {n}`.
///
/// Both builders' `build` apply it; it takes any integer (a negative one
/// from Python, say) so that every caller reports the value it was given.
///
/// # Examples
///
/// ```
/// assert_eq!(blockio::check_queue_depth(256).unwrap(), 256);
/// let e = blockio::check_queue_depth(-1i64).unwrap_err();
/// assert_eq!(e.to_string(), "queue_depth must be 1..=32767, got -1");
/// ```
pub fn check_queue_depth<N>(n: N) -> io::Result<usize>
where
    N: TryInto<usize> + Display + Copy,
{
    match n.try_into() {
        Ok(depth @ 1..=MAX_QUEUE_DEPTH) => Ok(depth),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("queue_depth must be 1..={MAX_QUEUE_DEPTH}, got {n}"),
        )),
    }
}
