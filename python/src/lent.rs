//! Python buffers lent to the kernel by asynchronous operations.
//!
//! Releasing an exported buffer (`PyBuffer_Release`) needs the GIL. The
//! thread that drops a buffer of a cancelled operation is the engine's
//! driver or pool thread, when the kernel completes it; that thread must
//! never take the GIL. At interpreter exit a thread that asks for the GIL
//! is killed mid-drop (or, once finalization is over, cannot get it at
//! all), which aborts the process. So [`Lent`] releases its buffer at once
//! only on a thread that holds the GIL, and otherwise parks it in a global
//! list that [`release_parked`] empties on the next call from Python.
//! Buffers still parked when the interpreter is gone are never released:
//! the process is ending, and its memory with it.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Mutex;

use pyo3::buffer::PyBuffer;
use pyo3::{ffi, Python};

/// Buffers dropped on threads without the GIL, waiting for their release.
static PARKED: Mutex<Vec<PyBuffer<u8>>> = Mutex::new(Vec::new());

/// An exported Python buffer that never takes the GIL to drop.
pub(crate) struct Lent(ManuallyDrop<PyBuffer<u8>>);

impl Lent {
    /// Wraps an exported buffer.
    pub(crate) fn new(buf: PyBuffer<u8>) -> Lent {
        Lent(ManuallyDrop::new(buf))
    }
}

impl Deref for Lent {
    type Target = PyBuffer<u8>;
    fn deref(&self) -> &PyBuffer<u8> {
        &self.0
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: `self.0` is taken exactly once, here, and never used again.
        let buf = unsafe { ManuallyDrop::take(&mut self.0) };
        // SAFETY: `PyGILState_Check` only reads this thread's state; it
        // is callable on any thread, with or without an interpreter.
        if unsafe { ffi::PyGILState_Check() } == 1 {
            drop(buf);
        } else {
            PARKED.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
        }
    }
}

/// Releases the buffers parked by other threads; called with the GIL held.
pub(crate) fn release_parked(_py: Python<'_>) {
    let parked = std::mem::take(&mut *PARKED.lock().unwrap_or_else(|e| e.into_inner()));
    drop(parked);
}
