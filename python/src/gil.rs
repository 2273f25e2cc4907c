//! Releasing the GIL in a way that survives interpreter exit.
//!
//! When the interpreter finalizes, a daemon thread that asks for the GIL
//! back is ended by CPython with `pthread_exit`, whose forced unwind would
//! run through this module's Rust frames; Rust cannot catch it and the
//! process aborts (or crashes). [`detach`] therefore never asks for the GIL
//! once the interpreter has begun to exit: a thread whose blocking call
//! returns after that point parks for good, as a daemon thread blocked in
//! `os.read` does, and the process exits around it.
//!
//! [`exiting`] is registered with `atexit` by the Python layer, so it runs
//! before CPython starts finalizing: it raises [`EXITING`] and then waits,
//! with the GIL released, for every thread that already decided to take
//! the GIL back (counted in [`RETURNING`]) to have it. Sequentially
//! consistent ordering makes the two checks exclusive: a thread either sees
//! [`EXITING`] and parks, or `exiting` sees its count and waits for it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use pyo3::prelude::*;

/// Set once the interpreter has begun to exit.
static EXITING: AtomicBool = AtomicBool::new(false);
/// The thread that runs `exiting` (the one finalizing the interpreter,
/// which CPython never ends): it keeps taking the GIL back.
static EXITER: AtomicUsize = AtomicUsize::new(0);
/// Threads between the check of [`EXITING`] and holding the GIL again.
static RETURNING: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with the GIL released, like `Python::allow_threads`, but parks
/// the calling thread for good instead of taking the GIL back once the
/// interpreter is exiting (except in the thread that exits it). (A panic in `f` takes the GIL back as `allow_threads` does.)
pub(crate) fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    let r = py.allow_threads(move || {
        let r = f();
        RETURNING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) && EXITER.load(Ordering::SeqCst) != self_id() {
            RETURNING.fetch_sub(1, Ordering::SeqCst);
            loop {
                std::thread::park();
            }
        }
        r
    });
    RETURNING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Marks the interpreter as exiting (called from `atexit`, before
/// finalization) and waits until no thread is on its way back to the GIL.
#[pyfunction]
pub(crate) fn exiting(py: Python<'_>) {
    EXITER.store(self_id(), Ordering::SeqCst);
    EXITING.store(true, Ordering::SeqCst);
    py.allow_threads(|| {
        while RETURNING.load(Ordering::SeqCst) != 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}

/// The calling thread's `pthread_t`, as a number.
fn self_id() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as usize }
}
