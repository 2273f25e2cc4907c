//! Descriptors a `blockio.open` file owns: its operations use the number
//! itself, with no duplicate, and its close waits for them.
//!
//! An operation on a descriptor the caller owns (`Engine.aread(fd)`)
//! holds a duplicate until the kernel is done with it (see
//! [`hold_file`]), because the caller may close the number and open
//! another file under it meanwhile. A file object owns its descriptor:
//! nobody else closes it, and its own close is the one moment the number
//! can be reused. So its operations borrow the number, each batch counted
//! here until it has left the core (completed, or given up and then
//! completed), and a close asked for while any is counted is made once
//! the last has left. One descriptor per file, not one more per
//! operation: a process can have as many files written at once as its
//! limit allows (`RLIMIT_NOFILE`), as with the built-in `open`.

use std::collections::HashMap;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use blockio::aio::{AsyncEngine, AsyncFile};
use pyo3::prelude::*;

use crate::fds::{fd_flags, hold_file, refusal};
use crate::fsjobs;

/// One owned descriptor: its batches in the core, and its close if one
/// was asked for while they ran.
#[derive(Default)]
struct Entry {
    busy: usize,
    close: Option<(PyObject, OwnedFd)>,
}

/// The descriptors owned by file objects of one engine.
#[derive(Default)]
pub(crate) struct Owned(Mutex<HashMap<RawFd, Entry>>);

/// A close to start: its waiter and the descriptor.
pub(crate) type Close = (PyObject, OwnedFd);

impl Owned {
    /// Records `fd` as owned by a file object of this engine (Python's
    /// `Core.own`): its operations borrow the number, with no duplicate,
    /// and its close (`submit_close`) waits for them.
    pub(crate) fn own(&self, fd: RawFd) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(fd)
            .or_default();
    }

    /// Counts a batch borrowing `fd` if a file owns it: whether it does.
    fn borrow(&self, fd: RawFd) -> bool {
        match self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&fd)
        {
            Some(e) if e.close.is_none() => {
                e.busy += 1;
                true
            }
            _ => false,
        }
    }

    /// A batch borrowing `fds` has left the core: the closes now due.
    pub(crate) fn release(&self, fds: &[RawFd]) -> Vec<Close> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut due = Vec::new();
        for fd in fds {
            let Some(e) = map.get_mut(fd) else { continue };
            e.busy = e.busy.saturating_sub(1);
            if e.busy == 0 {
                if let Some(close) = e.close.take() {
                    map.remove(fd);
                    due.push(close);
                }
            }
        }
        due
    }

    /// The close of `fd`, handed over: given back to make now, or kept
    /// (None) until the last batch borrowing it has left.
    pub(crate) fn close(&self, waiter: PyObject, fd: OwnedFd, num: RawFd) -> Option<Close> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get_mut(&num) {
            Some(e) if e.busy > 0 => {
                e.close = Some((waiter, fd));
                None
            }
            _ => {
                map.remove(&num);
                Some((waiter, fd))
            }
        }
    }

    /// Forgets that a file object owns `fd` (it hands the descriptor
    /// back to the caller; Python's `Core.disown`): false, and nothing
    /// changed, while operations of the file that were given up still
    /// borrow it.
    pub(crate) fn disown(&self, fd: RawFd) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(&fd).is_some_and(|e| e.busy > 0) {
            return false;
        }
        map.remove(&fd);
        true
    }

    /// Every close still waiting (the engine closes: nothing borrows any
    /// more), and forgets every descriptor.
    pub(crate) fn take_all(&self) -> Vec<Close> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.drain().filter_map(|(_, e)| e.close).collect()
    }

    /// An async file for an operation on `fd` (`F_GETFL` `flags`): over the
    /// number itself if a file object of this engine owns it (the batch then
    /// borrows it: `true`, for
    /// [`Pending::borrowed`](crate::pending::Pending::borrowed)), else over a
    /// duplicate ([`hold_file`]).
    pub(crate) fn hold_for_batch(
        &self,
        aio: &AsyncEngine,
        fd: RawFd,
        flags: i32,
    ) -> (Result<(AsyncFile, RawFd), i32>, bool) {
        if fd >= 0 && self.borrow(fd) {
            let flags = if flags == -1 { fd_flags(fd) } else { flags };
            if let Some(errno) = refusal(fd, flags) {
                let _ = self.release(&[fd]);
                return (Err(errno), false);
            }
            // SAFETY: a file object owns `fd` and closes it only through
            // `Owned::close`, which waits until this batch has left the
            // core, its operations all completed.
            let file = unsafe { AsyncFile::from_raw_fd(aio, fd) };
            return (Ok((file, fd)), true);
        }
        (hold_file(aio, fd, flags), false)
    }

    /// Counts a call borrowing `fd` if a file object of this engine owns
    /// it (whether it does): the file's close then waits until the call
    /// gives it back with [`Owned::release`].
    pub(crate) fn borrow_fd(&self, fd: RawFd) -> bool {
        fd >= 0 && self.borrow(fd)
    }

    /// A descriptor for a file-system job on `fd`: the number itself if a
    /// file object owns it (borrowed, as in
    /// [`hold_for_batch`](Self::hold_for_batch)), else a duplicate; and
    /// whether it is borrowed.
    pub(crate) fn hold_for_job(&self, fd: RawFd) -> (Result<fsjobs::Held, i32>, bool) {
        if fd >= 0 && self.borrow(fd) {
            return (Ok(fsjobs::Held::borrowed(fd)), true);
        }
        (fsjobs::dup(fd).map(fsjobs::Held::Dup), false)
    }
}
