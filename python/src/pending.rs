//! One asynchronous batch ([`Pending`]): a Rust future per operation,
//! the memory they read into or write from, and their results as Python
//! objects. The batches by token are kept in [`crate::inflight`].

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use blockio::aio::{BufResult, IoBuf, IoBufMut, Withdrawal};
use blockio::AlignedBuf;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::fsjobs::Out;
use crate::lent::Lent;
use crate::*;

/// Finished asynchronous batches as Python sees them: `(token, results)`,
/// the results a list, or the exception that kept the list from being
/// made (see [`results_or_error`]).
pub(crate) type Finished<'py> = Vec<(PyObject, Bound<'py, PyAny>)>;

/// What `Core::close` hands back: the finished batches, the waiters of
/// the cancelled ones, and the exception that interrupted the wait.
pub(crate) type Closed<'py> = (
    Finished<'py>,
    Vec<PyObject>,
    Option<Py<pyo3::exceptions::PyBaseException>>,
);

/// Memory an asynchronous operation reads into or writes from.
pub(crate) enum Buf {
    /// Ours, for reads that come back as new `bytes` (aligned, so that an
    /// `O_DIRECT` descriptor accepts it).
    Owned(AlignedBuf),
    /// A writable Python buffer (`readinto`).
    Exported(Lent),
    /// A part of a new `bytes` object (see [`crate::fresh`]).
    Fresh(crate::fresh::Piece),
}

// SAFETY: the pointer stays valid and unmoved while the value lives: an
// `AlignedBuf` owns its heap block; a `PyBuffer` keeps the buffer exported
// (the exporter alive, and a bytearray unresizable) until it is dropped.

unsafe impl IoBuf for Buf {
    fn stable_ptr(&self) -> *const u8 {
        match self {
            Buf::Owned(b) => b.as_ptr(),
            Buf::Exported(b) => b.buf_ptr() as *const u8,
            Buf::Fresh(b) => b.stable_ptr(),
        }
    }
    fn bytes_len(&self) -> usize {
        match self {
            Buf::Owned(b) => b.len(),
            Buf::Exported(b) => b.len_bytes(),
            Buf::Fresh(b) => b.bytes_len(),
        }
    }
}

// SAFETY: as above; exported buffers are checked writable before they are
// wrapped (see `writable`).

unsafe impl IoBufMut for Buf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Buf::Owned(b) => b.as_mut_ptr(),
            Buf::Exported(b) => b.buf_ptr() as *mut u8,
            Buf::Fresh(b) => b.stable_mut_ptr(),
        }
    }
}

/// A read-only Python buffer for writes.
pub(crate) struct RoBuf(pub(crate) Lent);

// SAFETY: see `Buf`; the kernel only reads through this pointer.

unsafe impl IoBuf for RoBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.0.buf_ptr() as *const u8
    }
    fn bytes_len(&self) -> usize {
        self.0.len_bytes()
    }
}

pub(crate) type Boxed<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// What a finished asynchronous batch hands back, per operation.
pub(crate) enum Done {
    /// Reads into our buffers: bytes.
    Read(Vec<BufResult<usize, Buf>>),
    /// Reads into new `bytes` objects, each made of this many pieces in a
    /// row (see [`crate::fresh`]).
    Fresh(Vec<BufResult<usize, Buf>>, usize),
    /// Reads into Python buffers, writes, fsyncs and file-system calls:
    /// counts (or a descriptor, owned until it is handed to Python).
    Count(Vec<io::Result<Out>>),
}

/// An asynchronous batch in flight.
pub(crate) struct Pending {
    pub(crate) futs: Vec<Option<Boxed<OneDone>>>,
    pub(crate) outs: Vec<Option<OneDone>>,
    pub(crate) yields: Yields,
    /// Wakes this batch's token; made once, by `Core::start`.
    pub(crate) waker: Option<Waker>,
    /// What the Python layer resolves with this batch's results (its
    /// future, and the objects the operations use): handed back by
    /// `Core::drain`, so that the Python side keeps no table of tokens.
    pub(crate) waiter: Option<PyObject>,
    /// What withdraws each operation before the kernel takes it (see
    /// `InFlight::withdraw`); empty for batches that cannot be withdrawn.
    pub(crate) withdrawals: Vec<Withdrawal>,
    /// The descriptors owned by file objects that its operations use
    /// without a duplicate (see [`crate::owned`]): counted until the
    /// batch leaves the core.
    pub(crate) borrowed: Vec<RawFd>,
}

/// An operation that fails at once with `errno` (a descriptor that cannot
/// be used), reported in its place like the synchronous calls do.
pub(crate) fn failed(yields: Yields, err: io::Error) -> Boxed<OneDone> {
    Box::pin(async move {
        match yields {
            Yields::Read | Yields::Fresh(_) => {
                OneDone::Read((Err(err), Buf::Owned(AlignedBuf::new(0, 4096))))
            }
            Yields::Count => OneDone::Count(Err(err)),
        }
    })
}

/// What each operation of a batch gives back: bytes read into a buffer,
/// or a count.
#[derive(Clone, Copy)]
pub(crate) enum Yields {
    Read,
    /// Reads into new `bytes` objects, of this many pieces each.
    Fresh(usize),
    Count,
}

pub(crate) enum OneDone {
    Read(BufResult<usize, Buf>),
    Count(io::Result<Out>),
}

impl Pending {
    pub(crate) fn new(futs: Vec<Boxed<OneDone>>, yields: Yields) -> Pending {
        Pending {
            outs: futs.iter().map(|_| None).collect(),
            futs: futs.into_iter().map(Some).collect(),
            yields,
            waker: None,
            waiter: None,
            withdrawals: Vec::new(),
            borrowed: Vec::new(),
        }
    }

    /// Polls every unfinished operation; `Some` when all are done.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Option<Done> {
        let mut all = true;
        for (f, out) in self.futs.iter_mut().zip(self.outs.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *f = None;
                    }
                    Poll::Pending => all = false,
                }
            }
        }
        if !all {
            return None;
        }
        let outs = self
            .outs
            .drain(..)
            .map(|o| o.expect("every operation finished"));
        let reads = |outs: &mut dyn Iterator<Item = OneDone>| -> Vec<BufResult<usize, Buf>> {
            outs.map(|o| match o {
                OneDone::Read(r) => r,
                OneDone::Count(_) => unreachable!("a read batch holds reads"),
            })
            .collect()
        };
        let mut outs = outs;
        Some(match self.yields {
            Yields::Read => Done::Read(reads(&mut outs)),
            Yields::Fresh(per) => Done::Fresh(reads(&mut outs), per),
            Yields::Count => Done::Count(
                outs.map(|o| match o {
                    OneDone::Count(r) => r,
                    OneDone::Read((r, _)) => r.map(Out::Count),
                })
                .collect(),
            ),
        })
    }
}

/// Tokens of woken batches, and the eventfd that tells the loop.
pub(crate) struct Wakeups {
    pub(crate) woken: Mutex<Vec<u64>>,
    pub(crate) efd: OwnedFd,
    /// Set while `drain` reaps: wake-ups then come from the loop's own
    /// thread, which reads `woken` next, so they need no eventfd write.
    pub(crate) draining: AtomicBool,
}

pub(crate) struct TokenWaker {
    pub(crate) token: u64,
    pub(crate) wakeups: Arc<Wakeups>,
}

impl Wake for TokenWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let mut w = self
            .wakeups
            .woken
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let first = w.is_empty();
        w.push(self.token);
        drop(w);
        if first && !self.wakeups.draining.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: an 8-byte write from a local to our eventfd.
            unsafe { libc::write(self.wakeups.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// Bytes of spare read buffers a core keeps at most.
pub(crate) const SPARE_BYTES: usize = 16 << 20;

/// [`results_to_py`], or the exception it met (a `MemoryError` when a
/// bytes object could not be made), for the batch's awaiting task to
/// raise: every finished batch is handed over, and none left unresolved.
pub(crate) fn results_or_error<'py>(
    py: Python<'py>,
    done: Done,
    spare: &Mutex<Vec<AlignedBuf>>,
) -> Bound<'py, PyAny> {
    match results_to_py(py, done, spare) {
        Ok(list) => list.into_any(),
        Err(e) => e.into_value(py).into_bound(py).into_any(),
    }
}

pub(crate) fn results_to_py<'py>(
    py: Python<'py>,
    done: Done,
    spare: &Mutex<Vec<AlignedBuf>>,
) -> PyResult<Bound<'py, PyList>> {
    match done {
        Done::Read(v) => {
            let mut back = Vec::new();
            let items: PyResult<Vec<PyObject>> = v
                .into_iter()
                .map(|(r, buf)| {
                    let item = match (&r, &buf) {
                        (Ok(n), Buf::Owned(b)) => new_bytes(py, &b[..*n])?.into_any().unbind(),
                        (Ok(_), Buf::Exported(_) | Buf::Fresh(_)) => {
                            PyBytes::new(py, &[]).into_any().unbind()
                        }
                        (Err(e), _) => os_error(py, e),
                    };
                    if let Buf::Owned(b) = buf {
                        back.push(b);
                    }
                    Ok(item)
                })
                .collect();
            let items = items?;
            // Kept while the pool, counted in buffers of this size, stays
            // under SPARE_BYTES (a reader of mixed sizes drops mismatches).
            let mut spare = spare.lock().unwrap_or_else(PoisonError::into_inner);
            for b in back {
                if !b.is_empty() && (spare.len() + 1) * b.len() <= SPARE_BYTES {
                    spare.push(b);
                }
            }
            drop(spare);
            PyList::new(py, items)
        }
        Done::Fresh(v, per) => {
            let mut items = Vec::with_capacity(v.len() / per.max(1));
            let mut v = v.into_iter();
            loop {
                let read: Vec<_> = v.by_ref().take(per).collect();
                if read.is_empty() {
                    break;
                }
                items.push(crate::fresh::assemble(py, read)?);
            }
            PyList::new(py, items)
        }
        Done::Count(v) => PyList::new(py, v.into_iter().map(|r| out_or_error(py, r))),
    }
}
