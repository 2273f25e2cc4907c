//! # blockio
//!
//! Batched disk I/O on Linux io_uring, from one thread or from many at once.
//!
//! You hand [`Engine::submit`] a batch of [`Op`]s (positional and vectored
//! reads and writes, `fsync`, `fdatasync`) and get one result per operation
//! back, in order. The call blocks only the calling thread; other threads
//! submit their own batches at the same time on rings of their own, and the
//! device sees them all. One kernel call submits a batch and waits for it;
//! the number of operations in flight is bounded engine-wide.
//!
//! Where io_uring is unavailable (old kernel, `kernel.io_uring_disabled`, a
//! container's seccomp profile) the same API runs on a `pread`/`pwrite`
//! thread pool; [`Engine::backend`] says which, and `BLOCKIO_BACKEND=threads`
//! forces the fallback.
//!
//! Operations borrow their buffers, and `submit` returns only when the kernel
//! is done with all of them, so safe code cannot free or reuse a buffer the
//! kernel may still write into.
//!
//! ```
//! use blockio::{Engine, Op};
//! use std::io::Write;
//!
//! # fn main() -> std::io::Result<()> {
//! let mut file = tempfile::tempfile()?;
//! file.write_all(&[7u8; 10_000])?;
//!
//! let engine = Engine::new()?;
//! let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
//! let mut ops = [
//!     Op::read(&file, 0, &mut a),
//!     Op::read(&file, 8192, &mut b), // crosses end of file: short read
//! ];
//! let results = engine.submit(&mut ops)?;
//! assert_eq!(results[0].as_ref().unwrap(), &4096);
//! assert_eq!(results[1].as_ref().unwrap(), &(10_000 - 8192));
//! assert!(a.iter().all(|&x| x == 7));
//! # Ok(())
//! # }
//! ```
//!
//! One operation on a thread that may wait anyway runs on that thread with
//! [`Op::run_blocking`] and the functions of [`blocking`], which perform
//! the same operation kinds without a ring.
//!
//! Direct I/O: [`DirectFile`] opens with `O_DIRECT` and knows the alignment
//! the file needs; [`AlignedBuf`] and [`BufferPool`] give buffers that meet
//! it; misaligned operations on a `DirectFile` are refused before submission
//! with an error that states the alignment.
//!
//! ```no_run
//! use blockio::{DirectFile, Engine, Op};
//! # fn main() -> std::io::Result<()> {
//! let file = DirectFile::open("/var/lib/db/pages")?;
//! let mut page = file.alloc_buf(4096);
//! let engine = Engine::new()?;
//! let n = engine.submit(&mut [Op::read(&file, 8 * 4096, &mut page)])?.remove(0)?;
//! # let _ = n; Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod aio;
pub mod arenas;
mod backend;
pub mod blocking;
mod buf;
mod depth;
mod direct;
mod engine;
mod error;
mod kind;
pub mod net;
mod op;
mod pool;
mod ring;

pub use backend::{Backend, BackendChoice, BACKEND_ENV, BACKEND_ENV_VALUES, FALLBACK_REQUESTED};
pub use buf::{AlignedBuf, BufferPool, PooledBuf};
pub use depth::{check_queue_depth, DEFAULT_QUEUE_DEPTH, MAX_QUEUE_DEPTH};
pub use direct::{device_supports_polling, Alignment, AlignmentSource, DirectFile};
pub use engine::{
    Engine, EngineBuilder, EngineStats, ProbeReport, ReadPath, RegisteredFile, MAX_REGISTERED_FILES,
};
pub use error::{errno, OpError, PathError, Refusal};
pub use kind::OpKind;
pub use op::path::{OpenRequest, PathAt};
pub use op::{clear_ops, Op, RawTarget, Target};

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The examples of `docs/sockets.md`, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sockets.md")]
struct SocketsDoctests;
