//! The default engine ([`AsyncEngine::current`]): what `TcpListener::bind`,
//! `TcpStream::connect` and the other constructors without an engine
//! argument use, so that code ported from tokio needs no engine handle.
//!
//! On a tokio runtime with I/O enabled (feature `tokio`) and io_uring
//! available, each runtime gets an engine of its own, driven by that
//! runtime's reactor (as [`AsyncEngine::new`] builds it there): the fastest
//! setup, with no driver thread. Everywhere else (no tokio runtime, a
//! runtime without I/O, the thread-pool backend) one engine serves the
//! whole process: its driver thread (or its pool) needs no runtime, so
//! any number of runtimes and executors share it.
//!
//! A runtime's engine is kept in a process-wide list until its
//! `drive_on_tokio` task is gone (the runtime shut down, or the task
//! aborted): the task's drop drops such entries (and, should the list be
//! busy then, the next look-up from any runtime does), so a program that
//! makes many runtimes (a test suite, one runtime per test) holds no ring
//! for a runtime that is gone, nor does one whose last runtime is gone. Streams still open keep
//! their engine, which goes on as any caller-driven engine whose runtime
//! went away (see [`Driving::Caller`](super::Driving::Caller)).

use std::io;
use std::sync::{Mutex, OnceLock};

use super::{AsyncEngine, Driving};

/// The process-wide engine: the driver thread's (or the pool's). Built at
/// the first look-up that needs it; an error is kept and returned to
/// every later look-up, as the kernel's refusal will not change, but for
/// a lack of descriptors or memory ([`short_of`]), which a later look-up
/// may find gone: that one builds again.
static PROCESS: OnceLock<Result<AsyncEngine, (io::ErrorKind, String)>> = OnceLock::new();

/// Held while the process-wide engine is built, so that one is.
static BUILDING: Mutex<()> = Mutex::new(());

/// The process-wide engine, built now if it is not yet.
fn process_engine() -> io::Result<AsyncEngine> {
    let built = match PROCESS.get() {
        Some(built) => built,
        None => {
            let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
            match PROCESS.get() {
                Some(built) => built,
                None => {
                    // On the thread pool, the set sockets wait in is still
                    // read on the runtime whose tasks wait in it, as with
                    // `Driving::Auto`.
                    let built = AsyncEngine::builder()
                        .driving(Driving::Thread)
                        .pool_set_on_runtimes()
                        .build();
                    match built {
                        Err(e) if short_of(&e) => {
                            let kind = out_of_memory(&e).unwrap_or(e.kind());
                            return Err(start_error("", kind, &e.to_string()));
                        }
                        built => PROCESS
                            .get_or_init(move || built.map_err(|e| (e.kind(), e.to_string()))),
                    }
                }
            }
        }
    };
    match built {
        Ok(engine) => Ok(engine.clone()),
        Err((kind, msg)) => Err(start_error("", *kind, msg)),
    }
}

/// Whether `e` is a lack of descriptors (`EMFILE`, `ENFILE`) or of
/// memory ([`out_of_memory`]): what a later attempt may not meet.
fn short_of(e: &io::Error) -> bool {
    matches!(crate::errno(e), Some(libc::EMFILE | libc::ENFILE)) || out_of_memory(e).is_some()
}

/// `Some(OutOfMemory)` where `e` says a thread or a ring could not be
/// made for lack of memory: `ENOMEM` (a ring's memory, locked memory
/// under `RLIMIT_MEMLOCK`), or `EAGAIN`, which is what a thread's creation
/// gives when its stack cannot be mapped (under `ulimit -v`) and what the
/// kernel's thread limit gives: never a "try again" from an engine's
/// start.
fn out_of_memory(e: &io::Error) -> Option<io::ErrorKind> {
    match crate::errno(e) {
        Some(libc::ENOMEM | libc::EAGAIN) => Some(io::ErrorKind::OutOfMemory),
        _ => None,
    }
}

/// The error of a default engine that could not start (`what` names it
/// in parentheses, or is empty) for the reason `msg`, of kind `kind`: for
/// lack of memory ([`out_of_memory`], kind `OutOfMemory`), it says so.
fn start_error(what: &str, kind: io::ErrorKind, msg: &str) -> io::Error {
    if kind == io::ErrorKind::OutOfMemory {
        io::Error::new(
            kind,
            format!(
                "not enough memory to start blockio's default engine{what}: {msg} (a thread \
                 or an io_uring ring could not be made: see `ulimit -v`, `ulimit -l` and the \
                 limit on threads)"
            ),
        )
    } else {
        io::Error::new(
            kind,
            format!("cannot start blockio's default engine{what}: {msg}"),
        )
    }
}

impl AsyncEngine {
    /// The default engine for the caller: with the `tokio` feature, on a
    /// tokio runtime with I/O enabled and io_uring available, the
    /// runtime's own (one per runtime, built at its first use and driven
    /// by that runtime as [`AsyncEngine::new`] would build it there);
    /// otherwise one engine per process, with its driver thread (or the
    /// thread pool where io_uring is unavailable or
    /// `BLOCKIO_BACKEND=threads`). Cheap after the first call: a clone of
    /// a handle.
    ///
    /// The constructors without an engine argument
    /// ([`TcpListener::bind`](crate::net::TcpListener::bind),
    /// [`TcpStream::connect`](crate::net::TcpStream::connect), ...) use it;
    /// their `*_with` forms take an engine of the caller's.
    ///
    /// # Errors
    /// The engine could not be started (neither io_uring nor the thread
    /// pool), with the reason: for lack of memory (a thread or a ring),
    /// "not enough memory to start blockio's default engine ...", kind
    /// [`OutOfMemory`](io::ErrorKind::OutOfMemory). A lack of descriptors
    /// or memory is not kept: a later call tries again; any other refusal
    /// of the process-wide engine is returned to every later call.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use blockio::aio::AsyncEngine;
    ///
    /// // Outside a tokio runtime: one engine per process, cloned.
    /// let engine = AsyncEngine::current()?;
    /// println!("the default engine runs on {}", engine.backend());
    /// # Ok(())
    /// # }
    /// ```
    pub fn current() -> io::Result<AsyncEngine> {
        #[cfg(feature = "tokio")]
        if let Some(engine) = per_runtime::engine()? {
            return Ok(engine);
        }
        process_engine()
    }
}

#[cfg(feature = "tokio")]
mod per_runtime {
    use std::io;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::super::{runtime_engines, tokio_drive, AsyncEngine, AsyncEngineBuilder};
    use crate::backend::{Backend, BackendChoice};

    /// Set once an engine built for a runtime turned out to be the thread
    /// pool's (io_uring refused): runtimes get the process engine from
    /// then on, without building (and dropping) a pool each time.
    static POOL_ONLY: AtomicBool = AtomicBool::new(false);

    /// The engine of the runtime the caller runs on, built now if it has
    /// none yet; `None` off tokio, on a runtime that cannot drive a ring
    /// (no I/O), or where the process engine is the thread pool's (a
    /// runtime's own engine would be a pool too, with threads of its own
    /// for nothing).
    pub(super) fn engine() -> io::Result<Option<AsyncEngine>> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Ok(None);
        };
        let pool_asked = matches!(
            BackendChoice::from_env(),
            Ok(Some(BackendChoice::ThreadPool))
        );
        if pool_asked || POOL_ONLY.load(Ordering::Relaxed) {
            return Ok(None);
        }
        runtime_engines::get_or_build(runtime.id(), || {
            let built = tokio_drive::build_on_runtime(&AsyncEngineBuilder::default());
            let built = built.map_err(|e| {
                super::start_error(
                    " (an io_uring ring driven by this tokio runtime)",
                    super::out_of_memory(&e).unwrap_or(e.kind()),
                    &e.to_string(),
                )
            })?;
            if built.is_none()
                && super::process_engine().is_ok_and(|e| e.backend() == Backend::ThreadPool)
            {
                // A runtime without I/O, or the thread pool (for every runtime).
                POOL_ONLY.store(true, Ordering::Relaxed);
            }
            Ok(built)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread or ring refused for lack of memory reads as that, of kind
    /// `OutOfMemory`, never as a "try again" (`EAGAIN`'s `WouldBlock`).
    #[test]
    fn an_engine_short_of_memory_says_so() {
        for errno in [libc::EAGAIN, libc::ENOMEM] {
            let e = io::Error::from_raw_os_error(errno);
            let kind = out_of_memory(&e).unwrap_or(e.kind());
            let err = start_error(" (a ring)", kind, &e.to_string());
            assert_eq!(err.kind(), io::ErrorKind::OutOfMemory, "{err}");
            let msg = err.to_string();
            assert!(
                msg.starts_with("not enough memory to start blockio's default engine (a ring): "),
                "{msg}"
            );
            assert!(msg.contains(&e.to_string()), "{msg}");
        }
        // Any other refusal keeps its kind and its wording.
        let e = io::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(out_of_memory(&e), None);
        let err = start_error("", e.kind(), &e.to_string());
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err
            .to_string()
            .starts_with("cannot start blockio's default engine: "));
    }
}
