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
//! exported Python buffers ([`PyBuffer`]), held — and so kept alive and
//! unresizable — by the future until its completion arrives, even if the
//! Python side gave up waiting (a cancelled task). A buffer whose
//! operation was cancelled is dropped by the driver thread, which never
//! takes the GIL: `lent` parks it until the next call from Python.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::task::{Context, Poll, Wake, Waker};

use blockio::aio::{AsyncEngine, AsyncFile, BufResult, CallerDriving, Driving, IoBuf, IoBufMut};
use blockio::{AlignedBuf, Backend, BackendChoice, Engine, Op, RawTarget};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

mod fsjobs;
mod lent;
use fsjobs::{Job, Out};
use lent::{release_parked, Lent};

/// The most one read or write moves on Linux (`MAX_RW_COUNT`, 2 GiB less
/// a page): a longer length would only reserve memory no read fills.
const MAX_IO: i64 = 0x7fff_f000;

/// A caller's `length`, checked: never negative, never more than one read
/// can return.
fn length_arg(length: i64) -> PyResult<usize> {
    if length < 0 {
        return Err(PyValueError::new_err(format!(
            "length must be at least 0, got {length}"
        )));
    }
    if length > MAX_IO {
        return Err(PyValueError::new_err(format!(
            "length {length} is more than one read returns on Linux ({MAX_IO} bytes): read it in parts"
        )));
    }
    Ok(length as usize)
}

/// A caller's file offset, checked: never negative. `index` names its
/// place in a batch.
fn offset_arg(offset: i64, index: Option<usize>) -> PyResult<u64> {
    u64::try_from(offset).map_err(|_| {
        let at = index.map_or(String::new(), |i| format!(" (item {i} of the batch)"));
        PyValueError::new_err(format!("offset must be at least 0, got {offset}{at}"))
    })
}

fn offsets_arg(offsets: &[i64]) -> PyResult<Vec<u64>> {
    offsets
        .iter()
        .enumerate()
        .map(|(i, &o)| offset_arg(o, (offsets.len() > 1).then_some(i)))
        .collect()
}

/// `(fd, buffer, offset)` operations with their offsets checked.
fn buffer_ops<'py>(
    ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
) -> PyResult<Vec<(RawFd, Bound<'py, PyAny>, u64)>> {
    let many = ops.len() > 1;
    ops.into_iter()
        .enumerate()
        .map(|(i, (fd, b, off))| Ok((fd, b, offset_arg(off, many.then_some(i))?)))
        .collect()
}

/// `count` reads of `length` bytes, refused with `MemoryError` up front
/// when their buffers would not fit in this machine's memory (rather than
/// reserving address space that faults in, or fails, part-way).
fn total_arg(count: usize, length: usize) -> PyResult<()> {
    // SAFETY: sysconf only reads system parameters.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let memory = (pages.max(0) as u128) * (page.max(0) as u128);
    let total = count as u128 * length as u128;
    if memory > 0 && total > memory {
        return Err(PyMemoryError::new_err(format!(
            "{count} reads of {length} bytes need {total} bytes of buffers, more than this machine's memory ({memory} bytes)"
        )));
    }
    Ok(())
}

/// A buffer of `len` bytes the caller asked for, or `MemoryError`.
fn alloc_for(len: usize, what: &str) -> PyResult<AlignedBuf> {
    AlignedBuf::try_new(len, 4096)
        .map_err(|_| PyMemoryError::new_err(format!("cannot allocate {len} bytes for {what}")))
}

/// The result of an operation on the caller's `fd`, with an `EINVAL` on
/// an `O_DIRECT` descriptor explained: the kernel only says "Invalid
/// argument", so the error names the alignment this file needs (looked up
/// only when that happens).
fn explain_direct(r: io::Result<usize>, fd: RawFd) -> io::Result<usize> {
    let e = match r {
        Err(e) if errno_of(&e) == libc::EINVAL && is_direct(fd) => e,
        other => return other,
    };
    // SAFETY: borrowed for one statx; if another thread closed the number
    // meanwhile, statx fails (or describes the file now open there) and
    // only this message is affected.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    match blockio::Alignment::of(&borrowed) {
        Ok((a, _)) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{e}: O_DIRECT on this file needs offsets and lengths that are multiples of {} bytes \
                 and buffer addresses that are multiples of {} bytes (blockio.aligned_buffer(n) allocates such a buffer)",
                a.offset, a.memory
            ),
        )),
        Err(_) => Err(e),
    }
}

/// Whether `fd` was opened with `O_DIRECT` (false if `fcntl` fails: the
/// read itself will then report the bad descriptor).
fn is_direct(fd: RawFd) -> bool {
    let flags = fd_flags(fd);
    flags != -1 && flags & libc::O_DIRECT != 0
}

/// `fd`'s `F_GETFL` flags, or -1 (an invalid descriptor).
fn fd_flags(fd: RawFd) -> i32 {
    // SAFETY: F_GETFL only reads the descriptor's flags; any fd value is
    // acceptable (an invalid one gives -1).
    unsafe { libc::fcntl(fd, libc::F_GETFL) }
}

/// `read_batch` on a buffered descriptor: each read goes straight into a new
/// `bytes` object, as `os.pread` does, so the data is copied once (by the
/// kernel). Through an arena it was copied twice, which made a batch of 64
/// cached 4 KiB reads 10 % slower than an `os.pread` loop.
fn read_into_new_bytes<'py>(
    py: Python<'py>,
    engine: &Engine,
    fd: RawFd,
    offsets: &[u64],
    length: usize,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let size = pyo3::ffi::Py_ssize_t::try_from(length)
        .map_err(|_| PyValueError::new_err(format!("length {length} is too large")))?;
    let mut objs: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(offsets.len());
    for _ in offsets {
        // SAFETY: with a null source, PyBytes_FromStringAndSize returns a new
        // reference to a bytes object of `size` uninitialised bytes, or NULL
        // with an exception set (turned into Err here).
        let obj = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size),
            )?
        };
        // SAFETY: PyBytes_FromStringAndSize returned a bytes object.
        objs.push(unsafe { obj.downcast_into_unchecked() });
    }
    // The objects are new and referenced only by `objs`, so nothing else can
    // read them while the kernel fills them, and they outlive `submit`.
    let slots: Vec<usize> = objs
        .iter()
        // SAFETY: PyBytes_AsString on a bytes object returns its data
        // pointer, valid for `length` bytes while the object lives.
        .map(|b| unsafe { pyo3::ffi::PyBytes_AsString(b.as_ptr()) } as usize)
        .collect();
    let target = RawTarget(fd);
    let results = py.allow_threads(|| {
        let mut ops: Vec<Op<'_>> = slots
            .iter()
            .zip(offsets)
            .map(|(&p, &off)| {
                // SAFETY: `p` points at `length` bytes owned by a bytes
                // object in `objs`, which lives past this closure; no one
                // else has a reference to it (see above). MaybeUninit: the
                // bytes are not initialised until the read writes them.
                let buf = unsafe {
                    std::slice::from_raw_parts_mut(p as *mut std::mem::MaybeUninit<u8>, length)
                };
                Op::read_uninit(&target, off, buf)
            })
            .collect();
        engine.submit(&mut ops)
    });
    let results = results.map_err(io_err)?;
    let items: Vec<PyObject> = results
        .iter()
        .zip(objs)
        .zip(&slots)
        .map(|((r, obj), &p)| match r {
            Ok(n) if *n == length => obj.into_any().unbind(),
            Ok(n) => {
                // Short (end of file): copy out the first n bytes.
                // SAFETY: the read wrote (initialised) exactly these n
                // bytes of `obj`, which is alive here.
                let got = unsafe { std::slice::from_raw_parts(p as *const u8, *n) };
                PyBytes::new(py, got).into_any().unbind()
            }
            Err(e) => os_error(py, e),
        })
        .collect();
    with_failures(py, items, &results)
}

/// A job's count, or its descriptor (whose ownership passes to Python),
/// as an int; or the OSError.
fn out_or_error(py: Python<'_>, r: io::Result<Out>) -> PyObject {
    match r {
        Ok(Out::Count(n)) => n.into_pyobject(py).expect("int").into_any().unbind(),
        Ok(Out::Stat(st)) => stat_tuple(&st)
            .into_pyobject(py)
            .expect("tuple")
            .into_any()
            .unbind(),
        Ok(Out::Fd(fd)) => std::os::fd::IntoRawFd::into_raw_fd(fd)
            .into_pyobject(py)
            .expect("int")
            .into_any()
            .unbind(),
        Ok(Out::Files(files)) => {
            let items = files.into_iter().map(|r| match r {
                Ok(b) => PyBytes::new(py, &b).into_any().unbind(),
                Err(e) => os_error(py, &e),
            });
            PyList::new(py, items).expect("list").into_any().unbind()
        }
        Err(e) => os_error(py, &e),
    }
}

/// A path for the kernel, refusing an embedded NUL as `os` functions do.
fn c_path(path: Vec<u8>) -> PyResult<std::ffi::CString> {
    std::ffi::CString::new(path).map_err(|_| PyValueError::new_err("embedded null byte"))
}

/// A `statx` result as the Python layer builds `os.stat_result` from it:
/// `(mode, ino, dev_major, dev_minor, nlink, uid, gid, size, atime,
/// atime_nsec, mtime, mtime_nsec, ctime, ctime_nsec, blksize, blocks,
/// rdev_major, rdev_minor)`.
fn stat_tuple(st: &libc::statx) -> [i64; 18] {
    [
        i64::from(st.stx_mode),
        st.stx_ino as i64,
        i64::from(st.stx_dev_major),
        i64::from(st.stx_dev_minor),
        i64::from(st.stx_nlink),
        i64::from(st.stx_uid),
        i64::from(st.stx_gid),
        st.stx_size as i64,
        st.stx_atime.tv_sec,
        i64::from(st.stx_atime.tv_nsec),
        st.stx_mtime.tv_sec,
        i64::from(st.stx_mtime.tv_nsec),
        st.stx_ctime.tv_sec,
        i64::from(st.stx_ctime.tv_nsec),
        i64::from(st.stx_blksize),
        st.stx_blocks as i64,
        i64::from(st.stx_rdev_major),
        i64::from(st.stx_rdev_minor),
    ]
}

/// A byte count as an int, or the OSError.
fn count_or_error(py: Python<'_>, r: &io::Result<usize>) -> PyObject {
    match r {
        Ok(n) => n.into_pyobject(py).expect("int").into_any().unbind(),
        Err(e) => os_error(py, e),
    }
}

/// An exported buffer, its descriptor and the offset, for [`buffer_batch`].
type BufferOp = (RawTarget, PyBuffer<u8>, u64);

/// A read into all of an exported, writable buffer.
fn read_into_buffer<'a>(t: &'a RawTarget, b: &'a PyBuffer<u8>, off: u64) -> Op<'a> {
    // SAFETY: the buffer is exported (held by the caller of
    // `buffer_batch` for longer than the batch) and writable for
    // `len_bytes` bytes; the engine returns only when the operation
    // completed.
    let s = unsafe { std::slice::from_raw_parts_mut(b.buf_ptr() as *mut u8, b.len_bytes()) };
    Op::read(t, off, s)
}

/// A write of all of an exported buffer.
fn write_from_buffer<'a>(t: &'a RawTarget, b: &'a PyBuffer<u8>, off: u64) -> Op<'a> {
    // SAFETY: exported and readable for `len_bytes` bytes for longer than
    // the batch (see `read_into_buffer`).
    let s = unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) };
    Op::write(t, off, s)
}

/// Runs one engine batch, the GIL released, of the operations `make`
/// builds over exported Python buffers; the byte counts or OSErrors, and
/// how many failed. The buffers stay exported until the batch is over.
fn buffer_batch<'py>(
    py: Python<'py>,
    engine: &Engine,
    bufs: Vec<BufferOp>,
    make: for<'a> fn(&'a RawTarget, &'a PyBuffer<u8>, u64) -> Op<'a>,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let results = py.allow_threads(|| {
        let mut ops: Vec<Op<'_>> = bufs.iter().map(|(t, b, off)| make(t, b, *off)).collect();
        engine.submit(&mut ops)
    });
    let results: Vec<io::Result<usize>> = results
        .map_err(io_err)?
        .into_iter()
        .zip(&bufs)
        .map(|(r, (t, ..))| explain_direct(r, t.0))
        .collect();
    let items: Vec<PyObject> = results.iter().map(|r| count_or_error(py, r)).collect();
    drop(bufs);
    with_failures(py, items, &results)
}

/// The list of a synchronous batch's results and how many of them failed,
/// so that the Python layer walks the list only when something did.
fn with_failures<'py>(
    py: Python<'py>,
    items: Vec<PyObject>,
    results: &[io::Result<usize>],
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let failed = results.iter().filter(|r| r.is_err()).count();
    Ok((PyList::new(py, items)?, failed))
}

/// Refuses a batch whose read buffers share memory (the same buffer
/// twice, or two views of one): two reads would write the same bytes at
/// once, and the core would hold two mutable slices over them. The error
/// names the items of `ops`.
fn refuse_overlaps<'a>(bufs: impl Iterator<Item = &'a PyBuffer<u8>>) -> PyResult<()> {
    let mut spans: Vec<(usize, usize, usize)> = bufs
        .enumerate()
        .filter(|(_, b)| b.len_bytes() > 0)
        .map(|(i, b)| {
            (
                b.buf_ptr() as usize,
                b.buf_ptr() as usize + b.len_bytes(),
                i,
            )
        })
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((_, end, i), (start, _, j)) = (w[0], w[1]);
        if start < end {
            let (i, j) = (i.min(j), i.max(j));
            return Err(PyValueError::new_err(format!(
                "ops: items {i} and {j} read into the same memory (one buffer twice, or overlapping views of one); \
                 give each read its own buffer"
            )));
        }
    }
    Ok(())
}

/// [`refuse_overlaps`] on the `(fd, buffer, offset)` items of an
/// asynchronous read batch, before any of it is submitted.
fn distinct_read_buffers(ops: &[(RawFd, Bound<'_, PyAny>, u64)]) -> PyResult<()> {
    if ops.len() < 2 {
        return Ok(());
    }
    let bufs = ops
        .iter()
        .map(|(_, b, _)| writable(b))
        .collect::<PyResult<Vec<_>>>()?;
    refuse_overlaps(bufs.iter())
}

/// Each descriptor of `fds` once, in order of first appearance.
fn distinct_fds(fds: impl Iterator<Item = RawFd>) -> Vec<RawFd> {
    let mut out: Vec<RawFd> = Vec::new();
    for fd in fds {
        if !out.contains(&fd) {
            out.push(fd);
        }
    }
    out
}

/// Waits until `fd` is ready for `events` (`POLLIN` or `POLLOUT`), so that
/// a blocking batch on a pipe, socket or terminal can be interrupted: the
/// wait is in slices of 100 ms with the GIL released, and Python's signal
/// handlers run between them (Ctrl-C raises `KeyboardInterrupt`). A
/// regular file or block device is always ready, which costs one `poll`
/// call; so is a descriptor `poll` refuses, whose operation then reports
/// the error.
fn wait_ready(py: Python<'_>, fd: RawFd, events: libc::c_short) -> PyResult<()> {
    let poll = |timeout: libc::c_int| {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd on the stack.
        let n = unsafe { libc::poll(&mut p, 1, timeout) };
        n != 0 && !(n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR))
    };
    if fd < 0 || poll(0) {
        return Ok(());
    }
    loop {
        py.check_signals()?;
        if py.allow_threads(|| poll(100)) {
            return Ok(());
        }
    }
}

/// Finished asynchronous batches as Python sees them: `(token, results)`.
type Finished<'py> = Vec<(u64, Bound<'py, PyList>)>;

/// Memory an asynchronous operation reads into or writes from.
enum Buf {
    /// Ours, for reads that come back as new `bytes` (aligned, so that an
    /// `O_DIRECT` descriptor accepts it).
    Owned(AlignedBuf),
    /// A writable Python buffer (`readinto`).
    Exported(Lent),
}

// SAFETY: the pointer stays valid and unmoved while the value lives: an
// `AlignedBuf` owns its heap block; a `PyBuffer` keeps the buffer exported
// (the exporter alive, and a bytearray unresizable) until it is dropped.
unsafe impl IoBuf for Buf {
    fn stable_ptr(&self) -> *const u8 {
        match self {
            Buf::Owned(b) => b.as_ptr(),
            Buf::Exported(b) => b.buf_ptr() as *const u8,
        }
    }
    fn bytes_len(&self) -> usize {
        match self {
            Buf::Owned(b) => b.len(),
            Buf::Exported(b) => b.len_bytes(),
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
        }
    }
}

/// A read-only Python buffer for writes.
struct RoBuf(Lent);

// SAFETY: see `Buf`; the kernel only reads through this pointer.
unsafe impl IoBuf for RoBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.0.buf_ptr() as *const u8
    }
    fn bytes_len(&self) -> usize {
        self.0.len_bytes()
    }
}

type Boxed<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// What a finished asynchronous batch hands back, per operation.
enum Done {
    /// Reads into our buffers: bytes.
    Read(Vec<BufResult<usize, Buf>>),
    /// Reads into Python buffers, writes, syncs and file-system calls:
    /// counts (or a descriptor, owned until it is handed to Python).
    Count(Vec<io::Result<Out>>),
}

/// An asynchronous batch in flight.
struct Pending {
    futs: Vec<Option<Boxed<OneDone>>>,
    outs: Vec<Option<OneDone>>,
    kind: Kind,
    /// Wakes this batch's token; made once, by `Core::start`.
    waker: Option<Waker>,
}

/// An operation that fails at once with `errno` (a descriptor that cannot
/// be used), reported in its place like the synchronous calls do.
fn failed(kind: Kind, errno: i32) -> Boxed<OneDone> {
    Box::pin(async move {
        let err = io::Error::from_raw_os_error(errno);
        match kind {
            Kind::Read => OneDone::Read((Err(err), Buf::Owned(AlignedBuf::new(0, 4096)))),
            Kind::Count => OneDone::Count(Err(err)),
        }
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Count,
}

enum OneDone {
    Read(BufResult<usize, Buf>),
    Count(io::Result<Out>),
}

impl Pending {
    fn new(futs: Vec<Boxed<OneDone>>, kind: Kind) -> Pending {
        Pending {
            outs: futs.iter().map(|_| None).collect(),
            futs: futs.into_iter().map(Some).collect(),
            kind,
            waker: None,
        }
    }

    /// Polls every unfinished operation; `Some` when all are done.
    fn poll(&mut self, cx: &mut Context<'_>) -> Option<Done> {
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
        Some(match self.kind {
            Kind::Read => Done::Read(
                outs.map(|o| match o {
                    OneDone::Read(r) => r,
                    OneDone::Count(_) => unreachable!("a read batch holds reads"),
                })
                .collect(),
            ),
            Kind::Count => Done::Count(
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
struct Wakeups {
    woken: Mutex<Vec<u64>>,
    efd: OwnedFd,
    /// Set while `drain` reaps: wake-ups then come from the loop's own
    /// thread, which reads `woken` next, so they need no eventfd write.
    draining: AtomicBool,
}

struct TokenWaker {
    token: u64,
    wakeups: Arc<Wakeups>,
}

impl Wake for TokenWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let mut w = self.wakeups.woken.lock().expect("wakeups lock");
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

/// The engine as the Python layer sees it.
#[pyclass(module = "blockio._blockio")]
struct Core {
    /// `None` once closed. Cloned out (an `Arc` inside) for each call, so
    /// no lock is held across I/O.
    engine: Mutex<Option<Engine>>,
    /// The async engines, made on first use.
    aio: Mutex<AioEngines>,
    wakeups: Arc<Wakeups>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Batches that finished when started, until the next drain.
    ready: Mutex<Vec<(u64, Done)>>,
    /// [`forks`] when this core was made: another value means this is a
    /// forked child.
    born: u64,
    queue_depth: u32,
    /// Read buffers of finished asynchronous reads, for the next ones.
    spare: Mutex<Vec<AlignedBuf>>,
    /// Threads for open, fstat, ftruncate and close (see [`fsjobs`]).
    fs: fsjobs::Pool,
}

/// The two async engines behind the asyncio API. Measured here with 64
/// tasks of random 4 KiB reads: on `O_DIRECT` descriptors a ring the event
/// loop drives itself did 74-78k reads/s against 52-62k through a driver
/// thread (two cross-thread wake-ups per read bound a fixed number of
/// tasks); on buffered ones the driver thread did 83-92k cold against
/// 57-59k, because submitting a page-cache miss is costly kernel work that
/// the driver thread does on the other core.
#[derive(Default)]
struct AioEngines {
    /// Driver-thread engine: buffered descriptors, syncs, and everything on
    /// the thread-pool backend.
    threaded: Option<AsyncEngine>,
    /// Caller-driven ring for `O_DIRECT` descriptors: submitted on the
    /// loop's thread, reaped by `drain` when the eventfd fires.
    direct: Option<AsyncEngine>,
}

/// Bytes of spare read buffers a core keeps at most.
const SPARE_BYTES: usize = 16 << 20;

static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// How many times this process is a fork away from the one that loaded
/// the module (a child's count is its parent's plus one). Cheaper than
/// `getpid`, which is a system call on every check.
fn forks() -> u64 {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only bumps an atomic counter,
        // which is async-signal-safe as fork's child handlers must be.
        unsafe { libc::pthread_atfork(None, None, Some(count_fork)) };
    });
    FORKS.load(Ordering::SeqCst)
}

/// The errno to give Python for `e`: its own; else the one its kind
/// stands for, so that an error the engine rewords keeps its cause (a
/// required io_uring that the kernel or a seccomp profile denies is
/// `EPERM`, not `EIO`); else `EIO`.
fn errno_of(e: &io::Error) -> i32 {
    if let Some(r) = e.get_ref().and_then(|r| r.downcast_ref::<Renamed>()) {
        return r.errno;
    }
    blockio::errno(e).unwrap_or(match e.kind() {
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::PermissionDenied => libc::EPERM,
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::Unsupported => libc::ENOSYS,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::Interrupted => libc::EINTR,
        _ => libc::EIO,
    })
}

/// An operation's error reworded to name the caller's descriptor instead
/// of the duplicate the operation ran on (see [`hold_file`]), with its
/// errno kept.
#[derive(Debug)]
struct Renamed {
    errno: i32,
    text: String,
}

impl std::fmt::Display for Renamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Renamed {}

/// `r` with the duplicate `dup` named as the caller's `fd` in its message.
fn name_caller_fd<T>(r: io::Result<T>, dup: RawFd, fd: RawFd) -> io::Result<T> {
    r.map_err(|e| {
        let errno = errno_of(&e);
        let text = message(&e, errno);
        let dup_name = format!("fd {dup}");
        if dup == fd || !text.contains(&dup_name) {
            return e;
        }
        let text = text.replace(&dup_name, &format!("fd {fd}"));
        io::Error::new(e.kind(), Renamed { errno, text })
    })
}

/// `e`'s message without Rust's " (os error N)": Python prints the errno
/// first (`[Errno N] ...`).
fn message(e: &io::Error, code: i32) -> String {
    e.to_string().replace(&format!(" (os error {code})"), "")
}

fn os_error(py: Python<'_>, e: &io::Error) -> PyObject {
    let code = errno_of(e);
    PyOSError::new_err((code, message(e, code)))
        .into_value(py)
        .into_any()
}

fn io_err(e: io::Error) -> PyErr {
    let code = errno_of(&e);
    PyOSError::new_err((code, message(&e, code)))
}

/// A writable, C-contiguous byte buffer from any buffer-protocol object.
fn writable(obj: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let b = PyBuffer::<u8>::get(obj)?;
    if b.readonly() {
        return Err(PyTypeError::new_err(
            "readinto needs a writable buffer (bytearray, memoryview, numpy array, mmap), got a read-only one",
        ));
    }
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "readinto needs a C-contiguous buffer",
        ));
    }
    Ok(b)
}

fn readable(obj: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let b = PyBuffer::<u8>::get(obj)?;
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err("write needs a C-contiguous buffer"));
    }
    Ok(b)
}

/// `O_LARGEFILE` as `F_GETFL` reports it on 64-bit Linux (the C headers
/// define it as 0 there, as it is implied): set on every descriptor made
/// by `open`, never on a pipe, socket or anonymous inode.
const KERNEL_O_LARGEFILE: i32 = 0o100000;

/// Whether `fd` is an epoll instance, which an io_uring read or write
/// never completes on (the kernel's own read of one fails at once with
/// `EINVAL`). Costs nothing for a descriptor made by `open`: only one
/// that lacks `O_LARGEFILE` (a pipe, socket, or anonymous inode) is
/// looked at further, with `fstat` and, for an anonymous inode, its name
/// in `/proc/self/fd`.
/// `flags` are the descriptor's `F_GETFL` flags ([`fd_flags`]).
fn is_epoll(fd: RawFd, flags: i32) -> bool {
    if flags == -1 || flags & KERNEL_O_LARGEFILE != 0 {
        return false;
    }
    // SAFETY: fstat writes into the zeroed struct on the stack.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is valid for writes.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != 0 {
        return false;
    }
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|p| p.as_os_str() == "anon_inode:[eventpoll]")
}

/// An async file over a duplicate of the caller's descriptor, or the
/// errno that made the duplicate fail (`EBADF` for a number that is not
/// open). Every operation of the batch holds the duplicate until the
/// kernel has completed it, even when the awaiting task was cancelled and
/// the caller's file object closed: the number an operation was issued on
/// cannot be closed and reused for another file while it runs (a
/// cancelled write cannot land in a file opened later). An epoll
/// descriptor fails with `EINVAL`, as the thread pool and the synchronous
/// calls report it (see [`is_epoll`]). Two system calls
/// per batch: `fcntl(F_DUPFD_CLOEXEC)` here, `close` after the last
/// completion.
fn hold_file(aio: &AsyncEngine, fd: RawFd, flags: i32) -> Result<(AsyncFile, RawFd), i32> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    if is_epoll(fd, flags) {
        return Err(libc::EINVAL);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor or fails; no memory
    // is passed.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EBADF));
    }
    // SAFETY: `dup` is a new descriptor that nothing else owns.
    let file = unsafe { std::fs::File::from_raw_fd(dup) };
    Ok((AsyncFile::from_file(aio, file), dup))
}

impl Core {
    fn check(&self) -> PyResult<Engine> {
        if self.born != forks() {
            return Err(PyRuntimeError::new_err(
                "this blockio.Engine was created before fork(): its rings belong to the parent; create a new Engine in the child",
            ));
        }
        self.engine
            .lock()
            .expect("engine lock")
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("the engine is closed"))
    }

    /// The async engine for a descriptor opened with (`direct`) or without
    /// `O_DIRECT` (see [`AioEngines`]).
    fn aio(&self, direct: bool) -> PyResult<AsyncEngine> {
        let engine = self.check()?;
        let mut aio = self.aio.lock().expect("aio lock");
        let pool = engine.backend() == Backend::ThreadPool;
        let (slot, caller_driven) = if direct && !pool {
            (&mut aio.direct, true)
        } else {
            (&mut aio.threaded, false)
        };
        if slot.is_none() {
            let mut b = AsyncEngine::builder().queue_depth(self.queue_depth as usize);
            if pool {
                b = b.backend(BackendChoice::ThreadPool);
            } else if caller_driven {
                b = b.driving(Driving::Caller(
                    CallerDriving::new().completion_eventfd(self.wakeups.efd.as_raw_fd()),
                ));
            }
            *slot = Some(b.build().map_err(io_err)?);
        }
        Ok(slot.clone().expect("built above"))
    }

    /// Starts a batch: polls it once (which hands its operations to the
    /// driver) and keeps it under `token` until it is finished.
    fn start(&self, token: u64, mut p: Pending) {
        let waker = self.waker(token);
        p.waker = Some(waker.clone());
        match p.poll(&mut Context::from_waker(&waker)) {
            // Finished at once (every descriptor unusable): reported at the
            // next drain like any other.
            Some(done) => {
                self.ready.lock().expect("ready lock").push((token, done));
                waker.wake();
            }
            None => {
                self.pending.lock().expect("pending lock").insert(token, p);
            }
        }
    }

    fn waker(&self, token: u64) -> Waker {
        Waker::from(Arc::new(TokenWaker {
            token,
            wakeups: Arc::clone(&self.wakeups),
        }))
    }

    /// The batches finished since the last call, removed. Reaps the
    /// caller-driven ring first (after the eventfd was cleared).
    fn finished(&self) -> Vec<(u64, Done)> {
        let direct = self.aio.lock().expect("aio lock").direct.clone();
        if let Some(aio) = direct {
            self.wakeups.draining.store(true, Ordering::SeqCst);
            aio.reap();
            self.wakeups.draining.store(false, Ordering::SeqCst);
        }
        let mut tokens = std::mem::take(&mut *self.wakeups.woken.lock().expect("wakeups lock"));
        // Every operation of a batch wakes its token: poll each batch once.
        tokens.sort_unstable();
        tokens.dedup();
        let mut out = std::mem::take(&mut *self.ready.lock().expect("ready lock"));
        let mut pending = self.pending.lock().expect("pending lock");
        for token in tokens {
            let Some(p) = pending.get_mut(&token) else {
                continue;
            };
            let waker = p.waker.clone().expect("set by start");
            if let Some(done) = p.poll(&mut Context::from_waker(&waker)) {
                pending.remove(&token);
                out.push((token, done));
            }
        }
        out
    }

    /// Starts one operation per `(fd, buffer, offset)`: `prepare` checks the
    /// buffer, `issue` makes the operation.
    fn submit_each<'py, B>(
        &self,
        token: u64,
        ops: Vec<(RawFd, Bound<'py, PyAny>, u64)>,
        prepare: impl Fn(&Bound<'py, PyAny>) -> PyResult<B>,
        issue: impl Fn(&AsyncFile, B, u64, RawFd, RawFd) -> Boxed<OneDone>,
    ) -> PyResult<()> {
        let mut files: HashMap<RawFd, Result<(AsyncFile, RawFd), i32>> = HashMap::new();
        let mut futs = Vec::with_capacity(ops.len());
        for (fd, obj, off) in &ops {
            let buf = prepare(obj)?;
            if !files.contains_key(fd) {
                let flags = fd_flags(*fd);
                let direct = flags != -1 && flags & libc::O_DIRECT != 0;
                let file = hold_file(&self.aio(direct)?, *fd, flags);
                files.insert(*fd, file);
            }
            futs.push(match &files[fd] {
                Ok((f, dup)) => issue(f, buf, *off, *fd, *dup),
                Err(errno) => failed(Kind::Count, *errno),
            });
        }
        self.start(token, Pending::new(futs, Kind::Count));
        Ok(())
    }

    /// Starts one file-system job as the batch `token` (or reports the
    /// errno that made preparing it fail).
    fn start_job(&self, token: u64, job: Result<Job, i32>) -> PyResult<()> {
        let fut: Boxed<OneDone> = match job {
            Ok(job) => {
                let f = self.fs.submit(job).map_err(io_err)?;
                Box::pin(async move { OneDone::Count(f.await) })
            }
            Err(errno) => failed(Kind::Count, errno),
        };
        self.start(token, Pending::new(vec![fut], Kind::Count));
        Ok(())
    }

    fn clear_eventfd(&self) {
        let mut v: u64 = 0;
        // SAFETY: an 8-byte read into a local from our non-blocking eventfd.
        unsafe { libc::read(self.wakeups.efd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

fn results_to_py<'py>(
    py: Python<'py>,
    done: Done,
    spare: &Mutex<Vec<AlignedBuf>>,
) -> PyResult<Bound<'py, PyList>> {
    match done {
        Done::Read(v) => {
            let mut back = Vec::new();
            let items: Vec<PyObject> = v
                .into_iter()
                .map(|(r, buf)| {
                    let item = match (&r, &buf) {
                        (Ok(n), Buf::Owned(b)) => PyBytes::new(py, &b[..*n]).into_any().unbind(),
                        (Ok(_), Buf::Exported(_)) => PyBytes::new(py, &[]).into_any().unbind(),
                        (Err(e), _) => os_error(py, e),
                    };
                    if let Buf::Owned(b) = buf {
                        back.push(b);
                    }
                    item
                })
                .collect();
            // Kept while the pool, counted in buffers of this size, stays
            // under SPARE_BYTES (a reader of mixed sizes drops mismatches).
            let mut spare = spare.lock().expect("spare lock");
            for b in back {
                if !b.is_empty() && (spare.len() + 1) * b.len() <= SPARE_BYTES {
                    spare.push(b);
                }
            }
            drop(spare);
            PyList::new(py, items)
        }
        Done::Count(v) => PyList::new(py, v.into_iter().map(|r| out_or_error(py, r))),
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (queue_depth = 256, backend = None))]
    fn new(queue_depth: i64, backend: Option<&str>) -> PyResult<Core> {
        let choice = match backend {
            None | Some("auto") => BackendChoice::Auto,
            Some("io_uring") => BackendChoice::IoUring,
            Some("threads") => BackendChoice::ThreadPool,
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "backend must be 'auto', 'io_uring' or 'threads', got {other:?}"
                )))
            }
        };
        let queue_depth = match u32::try_from(queue_depth) {
            Ok(q @ 1..=32768) => q,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "queue_depth must be between 1 and 32768, got {queue_depth}"
                )))
            }
        };
        let engine = Engine::builder()
            .queue_depth(queue_depth as usize)
            .backend(choice)
            .build()
            .map_err(io_err)?;
        // SAFETY: eventfd has no memory effects; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io_err(io::Error::last_os_error()));
        }
        Ok(Core {
            engine: Mutex::new(Some(engine)),
            aio: Mutex::new(AioEngines::default()),
            wakeups: Arc::new(Wakeups {
                woken: Mutex::new(Vec::new()),
                // SAFETY: a new descriptor, owned here only.
                efd: unsafe { OwnedFd::from_raw_fd(efd) },
                draining: AtomicBool::new(false),
            }),
            pending: Mutex::new(HashMap::new()),
            ready: Mutex::new(Vec::new()),
            born: forks(),
            queue_depth,
            spare: Mutex::new(Vec::new()),
            fs: fsjobs::Pool::default(),
        })
    }

    /// "io_uring" or "threads".
    #[getter]
    fn backend(&self) -> PyResult<&'static str> {
        Ok(match self.check()?.backend() {
            Backend::IoUring => "io_uring",
            Backend::ThreadPool => "threads",
        })
    }

    /// Why the thread pool is in use, if it is.
    #[getter]
    fn fallback_reason(&self) -> PyResult<Option<String>> {
        Ok(self.check()?.fallback_reason().map(str::to_string))
    }

    /// Reads `length` bytes at each offset of `fd`; a list of bytes or
    /// OSError, in order, and how many failed.
    fn read_batch<'py>(
        &self,
        py: Python<'py>,
        fd: RawFd,
        offsets: Vec<i64>,
        length: i64,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let (offsets, length) = (offsets_arg(&offsets)?, length_arg(length)?);
        total_arg(offsets.len(), length)?;
        let engine = &self.check()?;
        if length == 0 {
            let empty = PyList::new(py, offsets.iter().map(|_| PyBytes::new(py, &[])))?;
            return Ok((empty, 0));
        }
        wait_ready(py, fd, libc::POLLIN)?;
        if !is_direct(fd) {
            return read_into_new_bytes(py, engine, fd, &offsets, length);
        }
        // O_DIRECT needs aligned memory, which `bytes` are not: read into
        // one page-aligned arena per thread, reused (no allocation and no
        // zeroing per read), and copy out.
        thread_local! {
            static ARENA: std::cell::RefCell<AlignedBuf> = std::cell::RefCell::new(AlignedBuf::new(0, 4096));
        }
        ARENA.with(|arena| {
            let mut arena = arena.borrow_mut();
            let need = offsets.len().checked_mul(length).ok_or_else(|| {
                PyMemoryError::new_err(format!(
                    "{} reads of {length} bytes do not fit in memory",
                    offsets.len()
                ))
            })?;
            if arena.len() < need {
                let size = need.checked_next_power_of_two().unwrap_or(need);
                *arena = alloc_for(size, "the O_DIRECT read buffers")?;
            }
            let target = RawTarget(fd);
            let results = {
                let slots = arena[..need].chunks_mut(length.max(1));
                py.allow_threads(|| {
                    let mut ops: Vec<Op<'_>> = slots
                        .zip(&offsets)
                        .map(|(b, &off)| Op::read(&target, off, b))
                        .collect();
                    engine.submit(&mut ops)
                })
            };
            let results: Vec<io::Result<usize>> = results
                .map_err(io_err)?
                .into_iter()
                .map(|r| explain_direct(r, fd))
                .collect();
            let items: Vec<PyObject> = results
                .iter()
                .enumerate()
                .map(|(k, r)| match r {
                    Ok(n) => PyBytes::new(py, &arena[k * length..k * length + *n])
                        .into_any()
                        .unbind(),
                    Err(e) => os_error(py, e),
                })
                .collect();
            with_failures(py, items, &results)
        })
    }

    /// Reads into each `(fd, buffer, offset)`; a list of byte counts or
    /// OSError, in order, and how many failed.
    fn readinto_batch<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let ops = buffer_ops(ops)?;
        let engine = &self.check()?;
        let bufs: Vec<BufferOp> = ops
            .iter()
            .map(|(fd, b, off)| Ok((RawTarget(*fd), writable(b)?, *off)))
            .collect::<PyResult<_>>()?;
        refuse_overlaps(bufs.iter().map(|(_, b, _)| b))?;
        for fd in distinct_fds(bufs.iter().map(|(t, ..)| t.0)) {
            wait_ready(py, fd, libc::POLLIN)?;
        }
        buffer_batch(py, engine, bufs, read_into_buffer)
    }

    /// Writes each `(fd, data, offset)`; a list of byte counts or OSError,
    /// and how many failed.
    fn write_batch<'py>(
        &self,
        py: Python<'py>,
        ops: Vec<(RawFd, Bound<'py, PyAny>, i64)>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let ops = buffer_ops(ops)?;
        let engine = &self.check()?;
        let bufs: Vec<BufferOp> = ops
            .iter()
            .map(|(fd, b, off)| Ok((RawTarget(*fd), readable(b)?, *off)))
            .collect::<PyResult<_>>()?;
        for fd in distinct_fds(bufs.iter().map(|(t, ..)| t.0)) {
            wait_ready(py, fd, libc::POLLOUT)?;
        }
        buffer_batch(py, engine, bufs, write_from_buffer)
    }

    /// fsync (or fdatasync) of `fd`.
    #[pyo3(signature = (fd, data_only = false))]
    fn sync(&self, py: Python<'_>, fd: RawFd, data_only: bool) -> PyResult<()> {
        let engine = &self.check()?;
        let target = RawTarget(fd);
        let r = py.allow_threads(|| {
            let mut ops = [if data_only {
                Op::fdatasync(&target)
            } else {
                Op::fsync(&target)
            }];
            engine.submit(&mut ops)
        });
        match r.map_err(io_err)?.remove(0) {
            Ok(_) => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    /// The eventfd the event loop watches for finished asynchronous batches.
    fn eventfd(&self) -> PyResult<RawFd> {
        self.check()?;
        Ok(self.wakeups.efd.as_raw_fd())
    }

    /// Starts reading `length` bytes at each offset; finished under `token`.
    /// The buffers are page-aligned, so an `O_DIRECT` descriptor takes them.
    fn submit_read(&self, token: u64, fd: RawFd, offsets: Vec<i64>, length: i64) -> PyResult<()> {
        let (offsets, length) = (offsets_arg(&offsets)?, length_arg(length)?);
        total_arg(offsets.len(), length)?;
        let flags = fd_flags(fd);
        let aio = self.aio(flags != -1 && flags & libc::O_DIRECT != 0)?;
        let file = hold_file(&aio, fd, flags);
        let mut spare = self.spare.lock().expect("spare lock");
        let futs = offsets
            .iter()
            .map(|&off| {
                Ok(match &file {
                    Ok((file, dup)) => {
                        let dup = *dup;
                        let buf = match spare.pop() {
                            Some(b) if b.len() == length => b,
                            _ => alloc_for(length, "a read")?,
                        };
                        let f = file.read_at(Buf::Owned(buf), off);
                        let b: Boxed<OneDone> = Box::pin(async move {
                            let (r, buf) = f.await;
                            OneDone::Read((explain_direct(name_caller_fd(r, dup, fd), fd), buf))
                        });
                        b
                    }
                    Err(errno) => failed(Kind::Read, *errno),
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        drop(spare);
        self.start(token, Pending::new(futs, Kind::Read));
        Ok(())
    }

    /// Starts reading into each `(fd, buffer, offset)`.
    fn submit_readinto(
        &self,
        token: u64,
        ops: Vec<(RawFd, Bound<'_, PyAny>, i64)>,
    ) -> PyResult<()> {
        let ops = buffer_ops(ops)?;
        distinct_read_buffers(&ops)?;
        self.submit_each(token, ops, writable, |file, buf, off, fd, dup| {
            let f = file.read_at(Buf::Exported(Lent::new(buf)), off);
            Box::pin(async move {
                let r = name_caller_fd(f.await.0, dup, fd);
                OneDone::Count(explain_direct(r, fd).map(Out::Count))
            })
        })
    }

    /// Starts writing each `(fd, data, offset)`.
    fn submit_write(&self, token: u64, ops: Vec<(RawFd, Bound<'_, PyAny>, i64)>) -> PyResult<()> {
        self.submit_each(
            token,
            buffer_ops(ops)?,
            readable,
            |file, buf, off, fd, dup| {
                let f = file.write_at(RoBuf(Lent::new(buf)), off);
                Box::pin(async move {
                    let r = name_caller_fd(f.await.0, dup, fd);
                    OneDone::Count(explain_direct(r, fd).map(Out::Count))
                })
            },
        )
    }

    /// Starts an fsync (or fdatasync) of `fd`.
    #[pyo3(signature = (token, fd, data_only = false))]
    fn submit_sync(&self, token: u64, fd: RawFd, data_only: bool) -> PyResult<()> {
        let aio = self.aio(false)?;
        let fut = match hold_file(&aio, fd, fd_flags(fd)) {
            Ok((file, dup)) => {
                let f = if data_only {
                    file.fdatasync()
                } else {
                    file.fsync()
                };
                let b: Boxed<OneDone> = Box::pin(async move {
                    let r = name_caller_fd(f.await.0, dup, fd);
                    OneDone::Count(r.map(|_| Out::Count(0)))
                });
                b
            }
            Err(errno) => failed(Kind::Count, errno),
        };
        self.start(token, Pending::new(vec![fut], Kind::Count));
        Ok(())
    }

    /// Starts `open(path, flags, mode)` on the core's file-system threads;
    /// the result is the new descriptor (close-on-exec), which the caller
    /// then owns. A directory fails with `EISDIR` unless `O_DIRECTORY` is
    /// in `flags`.
    fn submit_open(&self, token: u64, path: Vec<u8>, flags: i32, mode: u32) -> PyResult<()> {
        let engine = self.check()?;
        let path = c_path(path)?;
        self.start_job(
            token,
            Ok(Job::Open {
                engine,
                path,
                flags,
                mode,
            }),
        )
    }

    /// Starts a `statx` of `path` (of a final symbolic link itself unless
    /// `follow`) on the core's file-system threads, through the engine's
    /// ring where io_uring has `STATX`; the result is the tuple of
    /// [`stat_tuple`].
    fn submit_stat(&self, token: u64, path: Vec<u8>, follow: bool) -> PyResult<()> {
        let engine = self.check()?;
        let path = c_path(path)?;
        self.start_job(
            token,
            Ok(Job::Stat {
                engine,
                path,
                follow,
            }),
        )
    }

    /// Starts an `fstat` of `fd` (through a duplicate); the result is the
    /// file's size.
    fn submit_size(&self, token: u64, fd: RawFd) -> PyResult<()> {
        let engine = self.check()?;
        self.start_job(token, fsjobs::dup(fd).map(|d| Job::Size(engine, d)))
    }

    /// Starts an `ftruncate` of `fd` (through a duplicate) to `length`.
    fn submit_truncate(&self, token: u64, fd: RawFd, length: i64) -> PyResult<()> {
        self.check()?;
        let length = u64::try_from(length).map_err(|_| {
            PyValueError::new_err(format!("length must not be negative, got {length}"))
        })?;
        self.start_job(token, fsjobs::dup(fd).map(|d| Job::Truncate(d, length)))
    }

    /// Starts closing `fd`, whose ownership the caller hands over: the
    /// number must not be used or closed by anyone else afterwards. The
    /// close runs even if the batch is cancelled.
    fn submit_close(&self, token: u64, fd: RawFd) -> PyResult<()> {
        let engine = self.check()?;
        if fd < 0 {
            return self.start_job(token, Err(libc::EBADF));
        }
        // SAFETY: the caller hands over its only ownership of `fd` (the
        // Python layer passes the descriptor of a file object it is
        // closing and never uses the number again).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        self.start_job(token, Ok(Job::Close(engine, owned)))
    }

    /// Starts a `mkdir` of `path` with `mode` (before the umask), through
    /// the engine's `MKDIRAT` where io_uring has it; the result is 0.
    fn submit_mkdir(&self, token: u64, path: Vec<u8>, mode: u32) -> PyResult<()> {
        let engine = self.check()?;
        let path = c_path(path)?;
        self.start_job(token, Ok(Job::Mkdir { engine, path, mode }))
    }

    /// Starts making the symbolic link `link` pointing at `target`, through
    /// the engine's `SYMLINKAT` where io_uring has it; the result is 0.
    fn submit_symlink(&self, token: u64, target: Vec<u8>, link: Vec<u8>) -> PyResult<()> {
        let engine = self.check()?;
        let (target, link) = (c_path(target)?, c_path(link)?);
        self.start_job(
            token,
            Ok(Job::Symlink {
                engine,
                target,
                link,
            }),
        )
    }

    /// Starts reading every file of `paths` whole (see
    /// [`fsjobs::read_files`]); the result is a list of bytes or OSError,
    /// one per path, in order.
    fn submit_read_files(&self, token: u64, paths: Vec<Vec<u8>>) -> PyResult<()> {
        let engine = self.check()?;
        let paths = paths.into_iter().map(c_path).collect::<PyResult<_>>()?;
        self.start_job(token, Ok(Job::ReadFiles { engine, paths }))
    }

    /// Reads every file of `paths` whole, the GIL released; a list of
    /// bytes or OSError, one per path, in order, and how many failed.
    fn read_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<Vec<u8>>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let engine = self.check()?;
        let paths: Vec<std::ffi::CString> =
            paths.into_iter().map(c_path).collect::<PyResult<_>>()?;
        let results = py
            .allow_threads(|| fsjobs::read_files(&engine, &paths))
            .map_err(io_err)?;
        let failed = results.iter().filter(|r| r.is_err()).count();
        let items = results.iter().map(|r| match r {
            Ok(b) => PyBytes::new(py, b).into_any().unbind(),
            Err(e) => os_error(py, e),
        });
        Ok((PyList::new(py, items)?, failed))
    }

    /// The finished batches since the last call: `(token, results)` pairs,
    /// results as the synchronous calls return them. Called by the event
    /// loop when the eventfd is readable.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u64, Bound<'py, PyList>)>> {
        self.clear_eventfd();
        release_parked(py);
        self.finished()
            .into_iter()
            .map(|(t, d)| Ok((t, results_to_py(py, d, &self.spare)?)))
            .collect()
    }

    /// Gives up on the batch `token` whose awaiting task was cancelled: its
    /// operations not yet handed to the kernel are never submitted; those
    /// in flight keep their buffers and their duplicate descriptor until
    /// they complete. Its results are never reported. A token already
    /// finished or unknown is ignored.
    fn cancel(&self, token: u64) {
        let batch = self.pending.lock().expect("pending lock").remove(&token);
        // Dropped outside the lock: dropping the futures may free buffers.
        drop(batch);
        self.ready
            .lock()
            .expect("ready lock")
            .retain(|(t, _)| *t != token);
    }

    /// Asynchronous batches not finished yet.
    fn pending(&self) -> usize {
        self.pending.lock().expect("pending lock").len()
    }

    /// Shuts the engine down and hands back what became of the
    /// asynchronous batches still pending: `(finished, cancelled)`, the
    /// `(token, results)` of those that completed while it waited, and the
    /// tokens of those it cancelled. It waits (GIL released, signals
    /// checked every 100 ms) while operations keep completing; once a whole
    /// second passes without one (a read of an empty pipe, a write to a
    /// full one), or a signal handler raises, it cancels the rest: those
    /// not yet in the kernel are never submitted, those in flight are
    /// cancelled there and keep their buffers until the kernel lets go of
    /// them. Idempotent.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<(Finished<'py>, Vec<u64>)> {
        if self.born != forks() {
            // A forked child never touches the parent's rings; forget them.
            std::mem::forget(std::mem::take(&mut *self.aio.lock().expect("aio lock")));
            std::mem::forget(self.engine.lock().expect("engine lock").take());
            std::mem::forget(std::mem::take(
                &mut *self.pending.lock().expect("pending lock"),
            ));
            return Ok((Vec::new(), Vec::new()));
        }
        let mut finished = Vec::new();
        let mut interrupted = None;
        let mut idle = 0;
        loop {
            self.clear_eventfd();
            let done = self.finished();
            idle = if done.is_empty() { idle + 1 } else { 0 };
            for (t, d) in done {
                finished.push((t, results_to_py(py, d, &self.spare)?));
            }
            if self.pending() == 0 || idle > 10 {
                break;
            }
            if let Err(e) = py.check_signals() {
                interrupted = Some(e);
                break;
            }
            let efd = self.wakeups.efd.as_raw_fd();
            py.allow_threads(|| {
                let mut p = libc::pollfd {
                    fd: efd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd on the stack.
                unsafe { libc::poll(&mut p, 1, 100) };
            });
        }
        let cut: HashMap<u64, Pending> =
            std::mem::take(&mut *self.pending.lock().expect("pending lock"));
        let mut cancelled: Vec<u64> = cut.keys().copied().collect();
        cancelled.sort_unstable();
        // Dropping the futures cancels their operations (outside the lock).
        drop(cut);
        *self.aio.lock().expect("aio lock") = AioEngines::default();
        *self.engine.lock().expect("engine lock") = None;
        release_parked(py);
        match interrupted {
            Some(e) => Err(e),
            None => Ok((finished, cancelled)),
        }
    }

    /// Whether `close` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.engine.lock().expect("engine lock").is_none()
    }
}

/// Random 4 KiB reads with the Rust engine's batch API for `seconds`, as
/// a baseline in the Python benchmark's own run; returns IOPS.
#[pyfunction]
#[pyo3(signature = (fd, file_size, block, in_flight, seconds))]
fn bench_engine(
    py: Python<'_>,
    fd: RawFd,
    file_size: u64,
    block: usize,
    in_flight: usize,
    seconds: f64,
) -> PyResult<f64> {
    py.allow_threads(|| {
        let engine = Engine::builder()
            .queue_depth(in_flight)
            .max_batch(in_flight as u32)
            .build()?;
        let target = RawTarget(fd);
        let mut bufs: Vec<AlignedBuf> = (0..in_flight)
            .map(|_| AlignedBuf::new(block, 4096))
            .collect();
        let blocks = (file_size / block as u64).max(1);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let start = std::time::Instant::now();
        let mut done = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let mut ops: Vec<Op<'_>> = bufs
                .iter_mut()
                .map(|b| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    Op::read(&target, (x % blocks) * block as u64, &mut b[..])
                })
                .collect();
            for r in engine.submit(&mut ops)? {
                r?;
            }
            done += in_flight as u64;
        }
        Ok(done as f64 / start.elapsed().as_secs_f64())
    })
    .map_err(io_err)
}

#[pymodule]
fn _blockio(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add_function(wrap_pyfunction!(bench_engine, m)?)?;
    Ok(())
}
