//! `blockio._blockio`: the Rust core of the Python package.
//!
//! The Python layer (`blockio/__init__.py`) wraps `Core`: it turns file
//! objects into descriptors, raises errors, and ties the asynchronous calls
//! to the running asyncio loop. This module does the I/O:
//!
//! * synchronous batches go to a [`blockio::Engine`] with the GIL released;
//! * asynchronous batches go to a [`blockio::aio::AsyncEngine`], whose driver
//!   thread submits everything queued in one `io_uring_enter`. Each batch is
//!   a Rust future whose waker records its token and writes to an eventfd;
//!   the event loop watches that eventfd (`loop.add_reader`) and calls
//!   `Core::drain`, which polls the woken futures and returns every
//!   finished batch's results, all in the loop's thread. No thread-pool
//!   hop, no GIL taken by the driver.
//!
//! Buffers handed to the kernel are either ours (reads into new bytes) or
//! exported Python buffers ([`pyo3::buffer::PyBuffer`]), held — and so kept alive and
//! unresizable — by the future until its completion arrives, even if the
//! Python side gave up waiting (a cancelled task). A buffer whose
//! operation was cancelled is dropped by the driver thread, which never
//! takes the GIL: `lent` parks it until the next call from Python.
//!
//! Modules: `engine` (`Core`, what it is made of and its lifecycle: `new`,
//! the closed and fork guard, the start and hand-back of batches, `close`),
//! `pymethods` (`Core`'s Python methods, each handed to the module or part
//! that owns what it uses), `sync_engine` (the engine of the synchronous
//! calls, made late on io_uring), `sync_calls` (the synchronous calls),
//! `submit` (the asynchronous operations on the rings), `fscalls` (the
//! file-system calls, each a job of the core's file-system threads),
//! `inline_calls` (the core's reads served inline, guarded and handed to
//! `inline_read`), `rings` (the async engines, made on first use), `inflight`
//! (the asynchronous batches by token, polled by `Core::drain`: the only
//! place that keeps token state in Rust), `pending` (one batch, its buffers
//! and its results as Python objects), `inline_read` (reads served inline
//! from the page cache), `owned` (the descriptors file objects own), `batch`
//! (the synchronous batches), `fsjobs` (open, stat, ftruncate, close, mkdir,
//! symlink and whole-file reads off the loop's thread: each call one of
//! blockio's operation kinds, run by its blocking form on the core's
//! file-system threads), `fresh` (reads into the new `bytes` objects they
//! return, in pieces), `args` (argument checks), `errors` (`OSError`s), `fds`
//! (what a descriptor is, duplicates, the fork guard), `lent` (buffers
//! released without the GIL), `inline` (a binary file object's whole state,
//! and its `seek`, `read`, `readline`, `tell` and `write` served inline from
//! it), `call` (the coroutine object those calls return), `coromethod` (the
//! methods that return it, coroutine functions to `inspect`), `wqueue` (a
//! file object's writes, queued and carried out in order by the core itself,
//! whether or not Python runs again), `stream` (reads of an unbuffered pipe
//! or socket that never wait: a line, a byte at a time, or up to a size),
//! `event_loop` (the ring of `blockio.new_event_loop()`'s proactor: socket
//! and pipe operations as completions), `gil` (releasing the GIL in a way
//! that survives interpreter exit), `turns` (when calls served without
//! suspending take a turn of the event loop), `inline_write` (writes
//! served inline), `bench` (a benchmark baseline).
//!
//! Locks: a mutex poisoned by a panic is taken back
//! (`unwrap_or_else(PoisonError::into_inner)`), never unwrapped, so that
//! a panic cannot cross into Python again at the next call. What each
//! mutex guards stays whole: every critical section is one operation on
//! a std collection, `Option` or channel (insert, remove, take, push,
//! replace, receive), which a panic inside leaves valid; the one that
//! polls (`InFlight::drain`) leaves a panicked batch in the map, where it
//! is cancelled or cut like any other. The mutexes of a core, what each
//! guards and the one order they nest in are listed in `Core`'s doc
//! (`engine.rs`).

use pyo3::prelude::*;

mod args;
mod batch;
mod bench;
mod cached;
mod call;
mod coromethod;
mod engine;
mod errors;
mod event_loop;
mod fds;
pub(crate) mod fresh;
mod fscalls;
pub(crate) mod fsjobs;
pub(crate) mod gil;
mod inflight;
mod inline;
mod inline_calls;
mod inline_read;
mod inline_write;
pub(crate) mod lent;
mod owned;
mod pending;
mod pymethods;
mod rings;
mod stream;
mod submit;
mod sync_calls;
mod sync_engine;
pub(crate) mod turns;
mod wqueue;
pub(crate) use args::*;
use bench::bench_engine;
pub(crate) use engine::*;
pub(crate) use errors::*;
pub(crate) use fds::*;
pub(crate) use pending::*;

#[pymodule]
fn _blockio(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add_class::<inline::FileState>()?;
    call::add(m)?;
    coromethod::add(m)?;
    m.add_class::<wqueue::WriteQueue>()?;
    m.add_class::<event_loop::LoopRing>()?;
    m.add_class::<event_loop::StreamRx>()?;
    m.add_class::<event_loop::StreamTx>()?;
    m.add_function(wrap_pyfunction!(event_loop::dispatch_batch, m)?)?;
    m.add_function(wrap_pyfunction!(event_loop::arm_receive, m)?)?;
    m.add_function(wrap_pyfunction!(event_loop::arm_ring_receive, m)?)?;
    m.add_function(wrap_pyfunction!(event_loop::select_batch, m)?)?;
    m.add_function(wrap_pyfunction!(event_loop::run_turn, m)?)?;
    m.add_function(wrap_pyfunction!(inline::seek_inline, m)?)?;
    m.add_function(wrap_pyfunction!(inline::read_inline, m)?)?;
    m.add_function(wrap_pyfunction!(inline::readline_inline, m)?)?;
    m.add_function(wrap_pyfunction!(inline::tell_inline, m)?)?;
    m.add_function(wrap_pyfunction!(inline::write_inline, m)?)?;
    m.add("TURN_BUDGET", turns::TURN_BUDGET)?;
    m.add("DEFAULT_QUEUE_DEPTH", blockio::DEFAULT_QUEUE_DEPTH)?;
    m.add("TURN_UNIT", turns::TURN_UNIT)?;
    m.add("INLINE_PIECE", inline_read::INLINE_PIECE)?;
    m.add("INLINE_MAX", inline_read::INLINE_MAX)?;
    m.add("INLINE_WRITE_AFTER_WAIT", inline_write::AFTER_WAIT)?;
    m.add("INLINE_OFFSET", inline::INLINE_OFFSET)?;
    m.add("FALLOC_FL_KEEP_SIZE", libc::FALLOC_FL_KEEP_SIZE)?;
    m.add("FALLOC_FL_PUNCH_HOLE", libc::FALLOC_FL_PUNCH_HOLE)?;
    m.add("FALLOC_FL_ZERO_RANGE", libc::FALLOC_FL_ZERO_RANGE)?;
    m.add_function(wrap_pyfunction!(turns::turn_due, m)?)?;
    m.add_function(wrap_pyfunction!(turns::count_copied, m)?)?;
    m.add_function(wrap_pyfunction!(turns::turn_count, m)?)?;
    m.add_function(wrap_pyfunction!(turns::set_turn_count, m)?)?;
    m.add_function(wrap_pyfunction!(turns::set_turn_time, m)?)?;
    m.add("TURN_TIME_NS", turns::TURN_TIME.as_nanos() as u64)?;
    m.add_function(wrap_pyfunction!(fresh::pieces_in_flight_peak, m)?)?;
    m.add_function(wrap_pyfunction!(bench_engine, m)?)?;
    m.add_function(wrap_pyfunction!(gil::exiting, m)?)?;
    m.add_function(wrap_pyfunction!(stream::read_line_inline, m)?)?;
    m.add_function(wrap_pyfunction!(stream::read_stream_inline, m)?)?;
    m.add_function(wrap_pyfunction!(stream::stream_in_pieces, m)?)?;
    m.add_function(wrap_pyfunction!(fds::stream_or_ring, m)?)?;
    m.add_function(wrap_pyfunction!(fds::ring_writes, m)?)?;
    m.add_function(wrap_pyfunction!(cached::range_cached, m)?)?;
    Ok(())
}
