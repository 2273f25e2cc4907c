//! `LoopRing`: the ring of one event loop, as the Python class the loop's
//! proactor drives. Each submitting method returns a token; [`LoopRing::wait`]
//! returns the finished operations as `(token, result, value)`: `result`
//! is the kernel's answer (a negative errno on failure) and `value` what
//! the operation produced (the received bytes, the accepted descriptor and
//! address, the bytes sent, the poll's events). The proactor takes them
//! through [`LoopRing::fill`] and `dispatch_batch` instead, one at a time,
//! so that a transport's receive, kept in the slab with its owner
//! (`ops::Owner`: the receive, its callback, the socket it holds open),
//! reaches the transport with no Python table or tuple per message.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::PyTraverseError;

use super::dispatch::release_conn;
use super::files::{emptied_slot, FileTable, FILE_SLOTS};
use super::ops::{addr_slot, Hold, InFlight, Kind, Memory, MsgSlot, Owner, INLINE_PREAD_MAX};
use super::slots::{Slots, MAX_IN_FLIGHT};
use super::sockaddr;
use crate::fds::Born;

/// The token of the ring's own cancel requests, whose completions are
/// ignored.
const CANCEL_TOKEN: u64 = u64::MAX;

/// How long `close()` waits for cancelled operations to answer before
/// leaking their memory instead of freeing it.
const CLOSE_BOUND: Duration = Duration::from_secs(2);

/// The most a socket receive into new bytes takes at once (the size of
/// [`State::scratch`] at most).
const RECV_MAX: usize = 256 * 1024;

/// The buffer a socket receive into new bytes lends the kernel while it
/// waits: a request or a small message fits it, and 10,000 connections
/// waiting for data pin 20 MiB, not the 625 MiB of 64 KiB each.
pub(crate) const RECV_FIRST: usize = 2048;

/// How many first buffers of finished receives the ring keeps for the
/// receives armed next ([`Spares::small`]): a message's receive then takes
/// one back instead of allocating 2 KiB and freeing it (`malloc` and
/// `free` of a block too large for glibc's per-thread cache, measured in
/// `docs/benchmarks.md`), and at most 128 KiB stay allocated beside the
/// buffers in flight.
const SPARE_MAX: usize = 64;

/// The first buffer a transport's next receive lends the kernel, after
/// one that lent `lent` bytes took `got` (0 when it failed or ended the
/// stream): a message that filled it (and so needed `FIONREAD` and a
/// second `recv` for its rest) grows it to the power of two above the
/// message, at most [`RECV_MAX`], so that the next such message is taken
/// by the kernel's one receive; a message of a quarter of it or less
/// halves it, down to [`RECV_FIRST`], so that a connection back to small
/// messages (or idle) gives the memory back within a few messages.
pub(crate) fn next_first(lent: usize, got: usize) -> usize {
    if got >= lent {
        (got + 1).next_power_of_two().clamp(RECV_FIRST, RECV_MAX)
    } else if got <= lent / 4 {
        (lent / 2).max(RECV_FIRST)
    } else {
        lent
    }
}

/// Whether a receive with a grown first buffer of `lent` bytes that took
/// `got` likely took the first piece of a message whose rest was still on
/// its way: the buffer was grown for messages of more than half of it
/// (see [`next_first`]), and this one took more than a quarter (less is a
/// connection back to small messages) but at most half. The kernel's
/// receive returns what has arrived, and a 100 KiB message on loopback
/// arrives in pieces of at most 64 KiB: a receive that ran between them
/// took the first. Such a receive (see [`State::receive_ready`]) takes
/// what its socket holds at once ([`State::recv_rest`]: a `FIONREAD`,
/// and a `recv` into the rest of its buffer when there is some), so that
/// the protocol gets the message in one `data_received` more often (and
/// an echo sends it back in one send), as a readiness loop's `read` that
/// runs later does.
fn likely_piece(lent: usize, got: usize) -> bool {
    got > lent / 4 && got <= lent / 2
}

/// The first buffers of finished socket receives, empty, kept for the
/// next ones. A grown first buffer is a new `bytes` object made as its
/// receive is dispatched and cut to what the receive took (no copy of the
/// message; see [`recv_op`]), so none is kept; and none is lent to the
/// kernel while its receive waits (a readiness poll), so grown receives
/// need no budget: every connection whose last message was large takes
/// one, and what they hold at once is the one `bytes` object being
/// filled as a receive is dispatched (the protocol's, once handed on).
#[derive(Default)]
struct Spares {
    /// Buffers of [`RECV_FIRST`] bytes (at most [`SPARE_MAX`]).
    small: Vec<Vec<u8>>,
}

/// What a socket receive into new bytes asks for (see [`recv_op`]).
#[derive(Clone, Copy)]
pub(crate) struct RecvAsk {
    /// The descriptor.
    pub fd: RawFd,
    /// The most bytes the receive takes (256 KiB at most on a stream
    /// socket).
    pub nbytes: usize,
    /// A socket (`recv`), not another descriptor (`read`).
    pub socket: bool,
    /// A stream socket (`SOCK_STREAM`).
    pub stream: bool,
    /// The first buffer a stream socket's receive lends the kernel (see
    /// [`next_first`]): [`RECV_FIRST`] but for a transport's receive.
    pub first: usize,
    /// A datagram endpoint's receive: a `recvmsg` of one datagram and
    /// its sender into `nbytes` of new bytes (see [`LoopRing::recvmsg`]).
    pub datagram: bool,
}

/// A finished operation, reaped and not yet dispatched.
pub(crate) enum Done {
    /// Any operation but a transport's receive: `(token, result, value)`
    /// as [`LoopRing::wait`] returns it.
    Plain(u64, i64, PyObject),
    /// A transport's receive (armed by `arm_receive`), with its owner.
    Stream {
        /// Its token.
        token: u64,
        /// The kernel's answer (a negative errno on failure).
        res: i64,
        /// The bytes received (None on failure).
        value: PyObject,
        /// The descriptor received from.
        fd: RawFd,
        /// The receive, its callback and its hold on the socket.
        owner: Owner,
    },
}

/// A finished operation as the reap keeps it until its dispatch: a
/// transport's receive keeps its memory, not yet made into bytes (see
/// [`LoopRing::next_done`]).
enum Reaped {
    /// Made into its value at the reap.
    Done(Done),
    /// A transport's receive (`op.owner` set): its bytes are made, and
    /// the rest its socket holds taken when `rest`, as it is dispatched.
    Receive {
        token: u64,
        op: InFlight,
        res: i32,
        rest: bool,
    },
    /// A deferred transport's receive (see [`recv_op`]) whose poll
    /// answered: it stays in the slab under `token` and receives as it is
    /// dispatched ([`State::receive_ready`]).
    Ready(u64),
}

impl Reaped {
    /// The owner of a transport's receive.
    fn owner(&self) -> Option<&Owner> {
        match self {
            Reaped::Done(Done::Stream { owner, .. }) => Some(owner),
            Reaped::Done(Done::Plain(..)) => None,
            Reaped::Receive { op, .. } => op.owner.as_ref(),
            Reaped::Ready(_) => None,
        }
    }

    /// The owner of a transport's receive, taken.
    fn into_owner(self) -> Option<Owner> {
        match self {
            Reaped::Done(Done::Stream { owner, .. }) => Some(owner),
            Reaped::Done(Done::Plain(..)) => None,
            Reaped::Receive { mut op, .. } => op.owner.take(),
            Reaped::Ready(_) => None,
        }
    }
}

/// A ring and what is in flight on it.
struct State {
    ring: IoUring,
    ops: Slots,
    /// Finished operations not yet dispatched (see [`LoopRing::fill`]).
    pending: VecDeque<Reaped>,
    /// By descriptor: the token of its transport's latest receive, from
    /// its arming until its completion is dispatched (0: none). The
    /// proactor's `_receiving` for the receives kept in the slab.
    receiving: Vec<u64>,
    /// Entries were queued since the last submission.
    queued: bool,
    /// Where a socket receive into new bytes whose first buffer filled
    /// takes the rest of what the socket holds, before the bytes are made:
    /// one buffer for the ring, not one per connection.
    scratch: Vec<u8>,
    /// The socket receives finished since the last wait by a send of this
    /// loop's own: `(descriptor the send wrote to, receive's token)` (see
    /// [`State::mark_peer_receives`]). No inode is kept to tell a socket
    /// that took a closed one's number in the same step: a receive marked
    /// by such a write only takes what its own socket holds (a `FIONREAD`
    /// more), where asking the inode cost an `fstat` at every mark.
    peer_receives: Vec<(RawFd, u64)>,
    /// First buffers of finished socket receives, kept for the next ones.
    spare: Spares,
    /// The listening sockets whose accept finished since the last wait
    /// without `IORING_CQE_F_SOCK_NONEMPTY`. For a TCP listener that is
    /// the kernel's word that no connection waited behind it, and
    /// [`LoopRing::accept_now`] answers None without an `accept4` that
    /// would fail (`EAGAIN`): only where the kernel is known to set the
    /// flag, 6.10 and later ([`kernel_tells_nonempty`]) or once some
    /// accept of this ring has had it. The kernel sets it only for TCP
    /// (`inet_csk_accept`): an `AF_UNIX` accept never has it, even with
    /// connections waiting, so for any other listener every `accept_now`
    /// asks the kernel.
    accepts_alone: Vec<RawFd>,
    /// The kernel sets the flag on TCP accepts (see `accepts_alone`).
    nonempty_told: bool,
    /// The registered-file table that holds the files of the reads the
    /// kernel's workers copy (see `files`).
    files: FileTable,
}

/// The io_uring of one asyncio event loop (see the module's doc).
///
/// One thread drives it at a time (an event loop is not thread-safe); a
/// call from a second thread while the first waits is refused with
/// `RuntimeError` rather than blocked.
#[pyclass(module = "blockio._blockio")]
pub(crate) struct LoopRing {
    state: Mutex<Option<State>>,
    /// The core's fork guard when the ring was made (see `fds::forks`):
    /// in a child, by `fork()` or made without fork handlers (glibc's
    /// `_Fork`, a raw `clone`), the ring is the parent's.
    born: Born,
    /// File reads started (see [`LoopRing::file_reads`]).
    file_reads: AtomicU64,
    /// File writes started (see [`LoopRing::file_writes`]).
    file_writes: AtomicU64,
    /// Opens started (see [`LoopRing::file_opens`]).
    file_opens: AtomicU64,
    /// Datagram receives started (see [`LoopRing::msg_receives`]).
    msg_receives: AtomicU64,
    /// Datagram sends started (see [`LoopRing::msg_sends`]).
    msg_sends: AtomicU64,
}

#[pymethods]
impl LoopRing {
    /// A ring with `entries` submission slots and a registered-file table
    /// of `file_slots` slots, or as many as the process's soft
    /// `RLIMIT_NOFILE` when that is lower (see `files`: 0, none, makes
    /// every read of more than 256 KiB take a duplicate of its descriptor,
    /// and every shorter one be tried at its submission, as where the
    /// kernel refuses the table). `OSError` when the kernel refuses
    /// io_uring (`EPERM` under `kernel.io_uring_disabled` or seccomp,
    /// `ENOSYS` on old kernels).
    #[new]
    #[pyo3(signature = (entries = 256, file_slots = FILE_SLOTS))]
    fn new(entries: u32, file_slots: u32) -> PyResult<Self> {
        let ring = build_ring(entries).map_err(|e| {
            PyOSError::new_err((
                e.raw_os_error().unwrap_or(0),
                format!("io_uring_setup: {e}"),
            ))
        })?;
        let files = FileTable::new(&ring, file_slots);
        Ok(LoopRing {
            state: Mutex::new(Some(State {
                ring,
                ops: Slots::default(),
                pending: VecDeque::new(),
                receiving: Vec::new(),
                queued: false,
                scratch: Vec::new(),
                peer_receives: Vec::new(),
                spare: Spares::default(),
                accepts_alone: Vec::new(),
                nonempty_told: kernel_tells_nonempty(),
                files,
            })),
            born: Born::here(),
            file_reads: AtomicU64::new(0),
            file_writes: AtomicU64::new(0),
            file_opens: AtomicU64::new(0),
            msg_receives: AtomicU64::new(0),
            msg_sends: AtomicU64::new(0),
        })
    }

    /// Receives at most `nbytes` from `fd` into new bytes (`recv` on a
    /// socket, `read` otherwise).
    ///
    /// On a stream socket (`stream`: `SOCK_STREAM`) the kernel receives
    /// into a first buffer of 2 KiB, all that a connection waiting for data
    /// (idle for hours) pins; when that fills, the rest of what the socket
    /// holds is received at once, in the wait that reaps the completion,
    /// through the ring's one scratch buffer. At most 256 KiB in all (fewer
    /// than `nbytes`, as a receive may). Any other socket (a datagram or
    /// `SOCK_SEQPACKET` one) receives into one buffer of `nbytes`: the
    /// kernel drops what of a message does not fit, so a second receive
    /// would take the next message, not the rest of this one.
    pub(crate) fn recv(
        &self,
        fd: RawFd,
        nbytes: usize,
        socket: bool,
        stream: bool,
    ) -> PyResult<u64> {
        let ask = RecvAsk {
            fd,
            nbytes,
            socket,
            stream,
            first: RECV_FIRST,
            datagram: false,
        };
        let op = {
            let mut guard = self.lock()?;
            let st = guard.as_mut().ok_or_else(closed)?;
            recv_op(ask, &mut st.spare)?
        };
        self.submit(op)
    }

    /// Receives what the stream socket `fd` holds now, at most `nbytes`
    /// (256 KiB at most, as [`LoopRing::recv`]), without waiting, in the
    /// loop's thread: new bytes (empty at the end of the stream), None
    /// when nothing is queued, or False when the loop's turn is due first
    /// (see below). The try that asyncio's selector loop makes first:
    /// bytes already there cost no operation, no completion and no turn of
    /// the loop (`docs/benchmarks.md`, "A `sock_recv` tried at once").
    /// `OSError` as `socket.recv` raises it.
    ///
    /// A receive served so does not suspend its task, so a task receiving
    /// from a peer that keeps sending would starve the loop's other tasks
    /// and timers (as on asyncio's loop; not on uvloop, whose receives
    /// always wait for readiness). Each is counted as the file calls
    /// served without suspending are ([`crate::turns`]), and once the
    /// loop's turn is due the receive is not made here: the caller's
    /// receive then waits on the ring, a turn of the loop.
    fn recv_now(&self, py: Python<'_>, fd: RawFd, nbytes: usize) -> PyResult<PyObject> {
        let mut guard = self.lock()?;
        let st = guard.as_mut().ok_or_else(closed)?;
        if crate::turns::due() {
            return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind());
        }
        let want = nbytes.min(RECV_MAX);
        if st.scratch.len() < want {
            st.scratch.resize(want, 0);
        }
        match super::inline::recv_inline(fd, &mut st.scratch[..want])
            .map_err(crate::errors::io_err)?
        {
            Some(n) => {
                crate::turns::served(n);
                Ok(PyBytes::new(py, &st.scratch[..n]).into_any().unbind())
            }
            None => Ok(py.None()),
        }
    }

    /// As [`LoopRing::recv_now`], into at most `nbytes` (0: all) of the
    /// writable buffer `buf`: the count received (0 at the end of the
    /// stream), None when nothing is queued, or False when the loop's turn
    /// is due first.
    #[pyo3(signature = (fd, buf, nbytes = 0))]
    fn recv_into_now(
        &self,
        py: Python<'_>,
        fd: RawFd,
        buf: &Bound<'_, PyAny>,
        nbytes: usize,
    ) -> PyResult<PyObject> {
        let mut guard = self.lock()?;
        guard.as_mut().ok_or_else(closed)?;
        let (b, n) = receive_target(buf, nbytes, "recv_into")?;
        if crate::turns::due() {
            return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind());
        }
        // SAFETY: `b` holds the export of a writable, contiguous buffer of
        // at least `n` bytes (`receive_target` checked it), which stays
        // alive and unresized while held; the GIL is held, so no Python
        // code touches it during this call; the kernel writes at most `n`
        // bytes into it.
        let target = unsafe { std::slice::from_raw_parts_mut(b.buf_ptr().cast::<u8>(), n) };
        match super::inline::recv_inline(fd, target).map_err(crate::errors::io_err)? {
            Some(got) => {
                crate::turns::served(got);
                Ok(got.into_pyobject(py)?.into_any().unbind())
            }
            None => Ok(py.None()),
        }
    }

    /// The token of the transport's receive on `fd` armed last (see
    /// `arm_receive`), from its arming until its completion is dispatched;
    /// None when there is none.
    fn receiving(&self, fd: RawFd) -> PyResult<Option<u64>> {
        let guard = self.lock()?;
        let st = guard.as_ref().ok_or_else(closed)?;
        Ok(usize::try_from(fd)
            .ok()
            .and_then(|i| st.receiving.get(i).copied())
            .filter(|&t| t != 0))
    }

    /// Receives at most `nbytes` (0: the buffer's length) from `fd` into
    /// the writable buffer `buf`, held until the completion.
    fn recv_into(
        &self,
        fd: RawFd,
        buf: &Bound<'_, PyAny>,
        nbytes: usize,
        socket: bool,
    ) -> PyResult<u64> {
        let (b, n) = receive_target(buf, nbytes, "recv_into")?;
        self.submit(InFlight::new(
            Kind::RecvInto,
            fd,
            socket,
            Memory::Lent(b),
            n,
        ))
    }

    /// Sends the whole of `data` (any contiguous buffer) on `fd`. What the
    /// descriptor takes at once is written now, without waiting; the rest
    /// goes to the ring, which holds the buffer until the completion (the
    /// result is then the total sent). Returns `(token, sent)`: `token` is
    /// `None` when everything went out now.
    ///
    /// A write thus reaches the peer when `transport.write()` returns, as on
    /// asyncio's own loops, even if the caller then blocks; and a send that
    /// fits the socket's buffer costs no completion.
    fn send(
        &self,
        fd: RawFd,
        data: &Bound<'_, PyAny>,
        socket: bool,
    ) -> PyResult<(Option<u64>, usize)> {
        // A `bytes` object (a transport's common write) is read in place
        // for the write made now: no buffer export, whose `Py_buffer` is
        // allocated and freed per call. Only a rest left for the ring
        // takes the export, which holds the object until the completion.
        let sent_now = match data.downcast_exact::<PyBytes>() {
            Ok(bytes) => {
                let bytes = bytes.as_bytes();
                let sent = self.send_inline(fd, bytes, socket)?;
                if sent == bytes.len() {
                    return Ok((None, sent));
                }
                Some(sent)
            }
            Err(_) => None,
        };
        let b = PyBuffer::<u8>::get(data)?;
        if !b.is_c_contiguous() {
            return Err(PyValueError::new_err("send needs a contiguous buffer"));
        }
        let n = b.len_bytes();
        let sent = match sent_now {
            Some(sent) => sent,
            None => {
                // SAFETY: `b` holds the export of a contiguous buffer of
                // `n` bytes, which stays alive and unresized while held;
                // the GIL is held, so no Python code changes it during
                // this call.
                let bytes =
                    unsafe { std::slice::from_raw_parts(b.buf_ptr().cast::<u8>().cast_const(), n) };
                self.send_inline(fd, bytes, socket)?
            }
        };
        if sent == n {
            return Ok((None, n));
        }
        let mut op = InFlight::new(Kind::Send, fd, socket, Memory::Lent(b), n);
        op.done = sent;
        let token = self.submit(op)?;
        self.flush()?;
        Ok((Some(token), sent))
    }

    /// [`LoopRing::send`] on a socket, returning only the token (None
    /// when everything went out now): a transport's write, which needs no
    /// count, makes no tuple and no int per message.
    fn send_socket(&self, fd: RawFd, data: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        Ok(self.send(fd, data, true)?.0)
    }

    /// Reads at most `length` bytes of the file `fd` at `offset` into new
    /// bytes (one `pread`, short at the end of the file), handed to the
    /// kernel at once: the kernel takes the file from the descriptor's
    /// number now (a read the kernel's workers copy, any read while a
    /// slot is free, holds it in a slot of the ring's registered-file
    /// table from now: see `submit_pread`) and holds it until the
    /// completion, so the caller may
    /// close the number, or cancel the read, at any time after this
    /// returns and nothing reaches a file that takes the number next.
    /// (Where the kernel takes not all of the queue at once, as a ring
    /// whose completions overflow refuses it with `EBUSY`, the read waits
    /// for the loop's next wait, or for a cancel, which hands the queue
    /// over first; a close of the number before either is the one case in
    /// which it could reach another file.) The kernel reads into the
    /// `bytes` object that is the value (cut to what it read at the
    /// completion), so the read holds `length` bytes, not twice that.
    /// `MemoryError` when `length` bytes cannot be allocated.
    fn pread(&self, py: Python<'_>, fd: RawFd, offset: u64, length: usize) -> PyResult<u64> {
        let obj = crate::fresh::unfilled(py, length)?;
        // SAFETY: `obj` is a bytes object (`unfilled`'s); PyBytes_AsString
        // returns the address of its contents, `length` bytes, which stay
        // where they are while `obj` lives: the operation holds it until
        // the completion, and only `finish` resizes it, after that.
        let at = unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) } as usize;
        self.submit_pread(fd, offset, Memory::Bytes(obj, at), length)
    }

    /// Reads at most the length of `buf` (a writable, contiguous buffer,
    /// held and so unresizable until the completion, even after a cancel)
    /// of the file `fd` at `offset` into it, as [`LoopRing::pread`] (handed
    /// to the kernel at once); the value is the byte count.
    fn pread_into(&self, fd: RawFd, offset: u64, buf: &Bound<'_, PyAny>) -> PyResult<u64> {
        let b = PyBuffer::<u8>::get(buf)?;
        if b.readonly() || !b.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "pread_into needs a writable, contiguous buffer",
            ));
        }
        let n = b.len_bytes();
        self.submit_pread(fd, offset, Memory::Lent(b), n)
    }

    /// The first buffer of receive `token` in flight, in bytes (2 KiB,
    /// lent to the kernel while it waits, or a grown one's size, made as
    /// it is dispatched), None when it is not a receive in flight.
    fn first_lent(&self, token: u64) -> PyResult<Option<usize>> {
        let mut guard = self.lock()?;
        let st = guard.as_mut().ok_or_else(closed)?;
        Ok(st
            .ops
            .get_mut(token)
            .filter(|op| op.kind == Kind::Recv)
            .map(|op| op.len))
    }

    /// How many file reads ([`LoopRing::pread`], [`LoopRing::pread_into`])
    /// this ring has started.
    #[getter]
    fn file_reads(&self) -> u64 {
        self.file_reads.load(Ordering::Relaxed)
    }

    /// Writes `data` (a contiguous buffer, held until the completion) to
    /// the file `fd` at `offset` (one `pwrite`), handed to the kernel at
    /// once as [`LoopRing::pread`] is, so that the kernel holds the file
    /// from then on; the value is the byte count. A write is never
    /// cancelled: [`LoopRing::cancel`] refuses it and `close()` waits for
    /// it (bounded, as for every operation) instead of cancelling it, since
    /// a write its caller began lands whatever becomes of the caller.
    fn pwrite(&self, fd: RawFd, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let b = PyBuffer::<u8>::get(data)?;
        if !b.is_c_contiguous() {
            return Err(PyValueError::new_err("pwrite needs a contiguous buffer"));
        }
        let n = b.len_bytes();
        let mut op = InFlight::new(Kind::Pwrite, fd, false, Memory::Lent(b), n);
        op.offset = offset;
        let token = self.submit(op)?;
        self.flush()?;
        self.file_writes.fetch_add(1, Ordering::Relaxed);
        Ok(token)
    }

    /// How many file writes ([`LoopRing::pwrite`]) this ring has started.
    #[getter]
    fn file_writes(&self) -> u64 {
        self.file_writes.load(Ordering::Relaxed)
    }

    /// How many slots of the ring's registered-file table are free (see
    /// `files`): each read in flight that the kernel's workers copy holds
    /// one (see [`INLINE_PREAD_MAX`]), until
    /// both its completion and that of the entry emptying its slot are
    /// reaped.
    #[getter]
    fn free_file_slots(&self) -> PyResult<usize> {
        let guard = self.lock()?;
        Ok(guard.as_ref().ok_or_else(closed)?.files.free())
    }

    /// Whether the ring is a parent's, in a child forked after it was
    /// made: the proactor then takes no wait on it.
    #[getter]
    pub(super) fn inherited(&self) -> bool {
        !self.made_here()
    }

    /// Opens `path` (bytes, as `os.fsencode` gives it) with `flags` and
    /// `mode` (`openat` from the working directory, as `os.open`), handed
    /// to the kernel at once; the value is the new descriptor. `ValueError`
    /// for a path with a NUL byte, as `os.open`'s. A cancelled open that
    /// the kernel finished anyway leaves its descriptor to the caller to
    /// close (see the proactor), or closes it here when the ring is closed
    /// first (`shut_down`).
    fn openat(&self, path: &[u8], flags: i32, mode: u32) -> PyResult<u64> {
        let path = std::ffi::CString::new(path)
            .map_err(|_| PyValueError::new_err("embedded null byte"))?;
        let mut op = InFlight::new(Kind::Open, libc::AT_FDCWD, false, Memory::Path(path), 0);
        op.mask = flags as u32;
        op.offset = u64::from(mode);
        let token = self.submit(op)?;
        self.flush()?;
        self.file_opens.fetch_add(1, Ordering::Relaxed);
        Ok(token)
    }

    /// Connects the socket `fd` to `addr`, a socket address as the kernel
    /// takes it (`struct sockaddr_in` or `sockaddr_in6`, as bytes); the
    /// value is 0 once connected. Handed to the kernel at once; the kernel
    /// tries at once and waits for
    /// the handshake itself: no readiness poll, no `SO_ERROR` look-up.
    /// `ValueError` for an address longer than any socket address.
    fn connect(&self, fd: RawFd, addr: &[u8]) -> PyResult<u64> {
        let mut slot = addr_slot();
        if addr.len() > std::mem::size_of::<libc::sockaddr_storage>() {
            return Err(PyValueError::new_err("connect: address too long"));
        }
        // SAFETY: `addr.len()` bytes fit in the storage (checked above),
        // and the two do not overlap (the slot is new).
        unsafe {
            std::ptr::copy_nonoverlapping(
                addr.as_ptr(),
                std::ptr::addr_of_mut!(slot.storage).cast::<u8>(),
                addr.len(),
            );
        }
        slot.len = addr.len() as libc::socklen_t;
        let op = InFlight::new(Kind::Connect, fd, true, Memory::Addr(slot), 0);
        let token = self.submit(op)?;
        // Handed to the kernel at once, as the `connect` call of asyncio's
        // selector loop is made in the caller's step: a peer that accepts
        // right after that step (blocking) finds the connection there.
        self.flush()?;
        Ok(token)
    }

    /// Receives one datagram of at most `nbytes` bytes from the socket
    /// `fd` (`recvmsg`), into new bytes that the ring owns until the
    /// completion; the value is `(bytes, address)`, the address as
    /// `socket.recvfrom` gives it. A longer datagram is cut to `nbytes`
    /// and its rest dropped, as `recvfrom` does. `flags` are `recvmsg`'s
    /// (`MSG_PEEK`...). A datagram already queued is received at once,
    /// in this call (a `recvmsg` with `MSG_DONTWAIT` in the loop's thread,
    /// see [`receive_now`]), and its value returned (`OSError` for what
    /// that call refuses, as `recvfrom` raises it); else the receive goes
    /// on the ring and its token is returned.
    #[pyo3(signature = (fd, nbytes, flags = 0))]
    fn recvmsg(&self, py: Python<'_>, fd: RawFd, nbytes: usize, flags: u32) -> PyResult<PyObject> {
        let slot = MsgSlot::new(Memory::try_fresh(nbytes)?, nbytes, None);
        self.receive_datagram(py, fd, slot, flags)
    }

    /// As [`LoopRing::recvmsg`], into at most `nbytes` (0: all) of the
    /// writable buffer `buf`, held until the completion (even after a
    /// cancel); the value is `(count, address)`.
    #[pyo3(signature = (fd, buf, nbytes = 0, flags = 0))]
    fn recvmsg_into(
        &self,
        py: Python<'_>,
        fd: RawFd,
        buf: &Bound<'_, PyAny>,
        nbytes: usize,
        flags: u32,
    ) -> PyResult<PyObject> {
        let (b, n) = receive_target(buf, nbytes, "recvmsg_into")?;
        let slot = MsgSlot::new(Memory::Lent(b), n, None);
        self.receive_datagram(py, fd, slot, flags)
    }

    /// Sends `data` (any contiguous buffer, held until the completion)
    /// as one datagram on the socket `fd` (`sendmsg`) to
    /// `addr`, a socket address as the kernel takes it (`struct
    /// sockaddr_in`, `sockaddr_in6` or `sockaddr_un`, as bytes), or to
    /// the connected peer when `addr` is None; the value is the count
    /// sent. Handed to the kernel at once, which sends it when the
    /// socket's buffer has room: datagrams submitted one after the other's
    /// completion go out in that order. `ValueError` for an address
    /// longer than any socket address.
    #[pyo3(signature = (fd, data, addr = None))]
    fn sendmsg(&self, fd: RawFd, data: &Bound<'_, PyAny>, addr: Option<&[u8]>) -> PyResult<u64> {
        if addr.is_some_and(|a| a.len() > std::mem::size_of::<libc::sockaddr_storage>()) {
            return Err(PyValueError::new_err("sendmsg: address too long"));
        }
        let b = PyBuffer::<u8>::get(data)?;
        if !b.is_c_contiguous() {
            return Err(PyValueError::new_err("sendmsg needs a contiguous buffer"));
        }
        let n = b.len_bytes();
        let slot = MsgSlot::new(Memory::Lent(b), n, addr);
        let op = InFlight::new(Kind::SendMsg, fd, true, Memory::Msg(slot), n);
        let token = self.submit(op)?;
        self.flush()?;
        self.msg_sends.fetch_add(1, Ordering::Relaxed);
        Ok(token)
    }

    /// How many datagram receives ([`LoopRing::recvmsg`],
    /// [`LoopRing::recvmsg_into`]) this ring has started.
    #[getter]
    fn msg_receives(&self) -> u64 {
        self.msg_receives.load(Ordering::Relaxed)
    }

    /// How many datagram sends ([`LoopRing::sendmsg`]) this ring has
    /// started.
    #[getter]
    fn msg_sends(&self) -> u64 {
        self.msg_sends.load(Ordering::Relaxed)
    }

    /// How many opens ([`LoopRing::openat`]) this ring has started.
    #[getter]
    fn file_opens(&self) -> u64 {
        self.file_opens.load(Ordering::Relaxed)
    }

    /// Accepts a connection on the listening socket `fd`; the value is
    /// `(descriptor, address)`, the descriptor non-blocking and
    /// close-on-exec.
    fn accept(&self, fd: RawFd) -> PyResult<u64> {
        self.submit(InFlight::new(
            Kind::Accept,
            fd,
            true,
            Memory::Addr(addr_slot()),
            0,
        ))
    }

    /// Accepts a connection already waiting on the listening socket `fd`
    /// with `accept4` in the loop's thread, not on the ring: `(descriptor,
    /// address)` as [`LoopRing::accept`]'s value, or None when none waits.
    /// A server whose accept completed takes the rest of its backlog so,
    /// in the same turn of the loop, as asyncio's selector loop does on a
    /// readiness, instead of one connection per turn (each turn
    /// serving every connection made before: `docs/benchmarks.md`).
    /// `tcp` says that `fd` is a TCP listener (`AF_INET`/`AF_INET6`,
    /// `SOCK_STREAM`, TCP): when the accept that finished on it since the
    /// last wait came with the kernel's word that none waited behind it,
    /// None is answered at once, without the `accept4` (see
    /// `State::accepts_alone`). The kernel gives that word for TCP only,
    /// so any other listener (`AF_UNIX`...) is always asked.
    /// `OSError` for what the kernel refuses (`EMFILE`...).
    #[pyo3(signature = (fd, tcp = false))]
    fn accept_now(
        &self,
        py: Python<'_>,
        fd: RawFd,
        tcp: bool,
    ) -> PyResult<Option<(RawFd, PyObject)>> {
        {
            let mut guard = self.lock()?;
            let st = guard.as_mut().ok_or_else(closed)?;
            if let Some(i) = st.accepts_alone.iter().position(|&l| l == fd) {
                // (said once: a connection that came since is asked for)
                st.accepts_alone.swap_remove(i);
                if tcp && st.nonempty_told {
                    return Ok(None);
                }
            }
        }
        let mut slot = addr_slot();
        match super::inline::accept_inline(fd, &mut slot).map_err(crate::errors::io_err)? {
            Some(conn) => Ok(Some((conn, sockaddr::to_python(py, &slot)?))),
            None => Ok(None),
        }
    }

    /// Waits (once) until `fd` has one of the `mask` poll events; the value
    /// is the events it has.
    fn poll(&self, fd: RawFd, mask: u32) -> PyResult<u64> {
        let mut op = InFlight::new(Kind::Poll, fd, false, Memory::Nothing, 0);
        op.mask = mask;
        self.submit(op)
    }

    /// Asks the kernel to cancel the operation `token`. It still completes
    /// once (with `-ECANCELED`, or with its result if it won the race).
    ///
    /// The cancel, and whatever step of the operation is still queued (the
    /// rest of a short send, a retry after a readiness poll), are handed to
    /// the kernel at once: a step submitted takes its file from the
    /// descriptor's number then, and holds it, so once this returns True
    /// the caller may close that number and nothing of the operation can
    /// reach a file that takes the number next. False when `token` is not
    /// in flight or the kernel took not all of the queue (a busy ring):
    /// then the caller keeps the descriptor open until the completion.
    /// False, and nothing asked of the kernel, for a file write (see
    /// [`LoopRing::pwrite`]), which is never cancelled.
    ///
    /// A transport's receive (kept in the slab with its owner) ends its
    /// hold on its socket here when this returns True, as the proactor
    /// does for the operations of its own tables.
    ///
    /// In a child forked after the ring was made, True with nothing asked:
    /// the operations are the parent's, and none of them can reach the
    /// child's descriptors, so a loop closed there (or collected) lets go
    /// of them without touching the parent's ring.
    fn cancel(&self, py: Python<'_>, token: u64) -> PyResult<bool> {
        if !self.made_here() {
            return Ok(true);
        }
        let hold = {
            let mut guard = self.lock()?;
            let st = guard.as_mut().ok_or_else(closed)?;
            match st.ops.get_mut(token) {
                Some(op) if !op.cancelled && op.kind != Kind::Pwrite => op.cancelled = true,
                _ => return Ok(false),
            }
            st.push(
                opcode::AsyncCancel::new(token)
                    .build()
                    .user_data(CANCEL_TOKEN),
            )?;
            if !st.submit_all()? {
                return Ok(false);
            }
            st.ops
                .get_mut(token)
                .and_then(|op| op.owner.as_mut())
                .and_then(|o| o.hold.take())
        };
        if let Some(conn) = hold {
            release_conn(py, conn.bind(py))?;
        }
        Ok(true)
    }

    /// Submits what is queued and returns the finished operations, waiting
    /// at most `timeout` seconds (`None`: until one finishes; 0: not at
    /// all) with the GIL released. A signal that interrupts the wait runs
    /// Python's handlers here (so Ctrl-C raises `KeyboardInterrupt`).
    ///
    /// A transport's receive (see `arm_receive`) is returned as any other
    /// receive, and its hold on its socket ended: its transport is not
    /// called (the proactor dispatches with [`LoopRing::fill`]).
    #[pyo3(signature = (timeout))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<(u64, i64, PyObject)>> {
        self.wait_into(py, timeout)?;
        let mut out = Vec::new();
        while let Some(done) = self.next_done(py)? {
            match done {
                Done::Plain(token, res, value) => out.push((token, res, value)),
                Done::Stream {
                    token,
                    res,
                    value,
                    owner,
                    ..
                } => {
                    if let Some(conn) = owner.hold {
                        release_conn(py, conn.bind(py))?;
                    }
                    out.push((token, res, value));
                }
            }
        }
        Ok(out)
    }

    /// As [`LoopRing::wait`], but what finished is kept for the
    /// proactor's dispatch (`dispatch_batch`), which takes it one
    /// operation at a time; while any is left from a dispatch an
    /// exception interrupted, this neither waits nor reaps, so that the
    /// rest goes first.
    #[pyo3(signature = (timeout))]
    pub(super) fn fill(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        if !self.lock()?.as_ref().ok_or_else(closed)?.pending.is_empty() {
            return Ok(());
        }
        self.wait_into(py, timeout)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Held by this thread (a collection while the ring reaps) or
        // another: what the ring holds is then not visited, and stays.
        let Ok(guard) = self.state.try_lock() else {
            return Ok(());
        };
        let Some(st) = guard.as_ref() else {
            return Ok(());
        };
        let owners = st.ops.iter().filter_map(|op| op.owner.as_ref());
        let done = st.pending.iter().filter_map(Reaped::owner);
        for owner in owners.chain(done) {
            visit.call(&owner.rx)?;
            visit.call(&owner.callback)?;
            if let Some(conn) = &owner.hold {
                visit.call(conn)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        let mut guard = match self.state.try_lock() {
            Ok(g) => g,
            Err(_) => return,
        };
        if let Some(st) = guard.as_mut() {
            for op in st.ops.iter_mut() {
                op.owner = None;
            }
            st.pending.clear();
        }
    }

    /// The transports' receives (`StreamReceive`) whose operation is in
    /// flight or not yet dispatched, one entry per operation.
    fn receives(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        let guard = self.lock()?;
        let Some(st) = guard.as_ref() else {
            return Ok(Vec::new());
        };
        let owners = st.ops.iter().filter_map(|op| op.owner.as_ref());
        let done = st.pending.iter().filter_map(Reaped::owner);
        Ok(owners
            .chain(done)
            .map(|o| o.rx.clone_ref(py).into_any())
            .collect())
    }

    /// How many operations the kernel has not answered yet.
    fn in_flight(&self) -> PyResult<usize> {
        Ok(self.lock()?.as_ref().map_or(0, |st| st.ops.len()))
    }

    /// Cancels everything in flight but file writes (see
    /// [`LoopRing::pwrite`]), waits (bounded) until the kernel has
    /// answered each operation, and closes the ring. Idempotent. Returns
    /// the transports' receives that were in flight or not yet
    /// dispatched, each as `(receive, socket held or None)`: the caller
    /// ends each hold (its operation is done with the socket).
    fn close(&self, py: Python<'_>) -> PyResult<Vec<(PyObject, Option<PyObject>)>> {
        let state = match self.state.try_lock() {
            Ok(mut g) => g.take(),
            Err(_) => return Err(busy()),
        };
        let mut left = Vec::new();
        if let Some(st) = state {
            if self.made_here() {
                left = st.shut_down(py);
            } else {
                st.forget_in_child();
            }
        }
        Ok(left
            .into_iter()
            .map(|o| (o.rx.into_any(), o.hold))
            .collect())
    }
}

impl LoopRing {
    /// Waits as [`LoopRing::wait`] does, keeping what finished in
    /// `pending`.
    fn wait_into(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        // A signal that arrived since Python last looked is handled before
        // the wait, not after it.
        py.check_signals()?;
        let mut guard = self.lock()?;
        let st = guard.as_mut().ok_or_else(closed)?;
        let queued = std::mem::take(&mut st.queued);
        let held_back = st.ring.submission().taskrun();
        let overflow = st.ring.submission().cq_overflow();
        let ring = &st.ring;
        let entered = match timeout {
            // Nothing to hand over, no wait, no completion waiting for the
            // thread to post it (see `build_ring`) and none in the kernel's
            // overflow list: completions are read from the shared queue
            // without a system call.
            Some(t) if t <= 0.0 && !queued && !held_back && !overflow => Ok(()),
            Some(t) if t <= 0.0 => ring.submit().map(|_| ()),
            Some(t) => {
                let ts = timespec(t);
                crate::gil::detach(py, move || {
                    let args = types::SubmitArgs::new().timespec(&ts);
                    ring.submitter().submit_with_args(1, &args).map(|_| ())
                })
            }
            None => crate::gil::detach(py, move || ring.submit_and_wait(1).map(|_| ())),
        };
        match entered {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                drop(guard);
                py.check_signals()?;
                return Ok(());
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                return Err(PyOSError::new_err((
                    e.raw_os_error().unwrap_or(0),
                    format!("io_uring_enter: {e}"),
                )))
            }
        }
        st.reap(py)?;
        // Completions beyond the completion queue wait in the kernel's
        // overflow list (`CQ_OVERFLOW` set), which only an enter with
        // `GETEVENTS` (the crate sets it when the flag is up) moves to the
        // queue as room is made: the queue is emptied and the list flushed
        // until it is empty, so that no turn, blocking or not, leaves them
        // (and the operations they end) behind.
        while st.ring.submission().cq_overflow() {
            match st.ring.submit() {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    break
                }
                Err(e) => {
                    return Err(PyOSError::new_err((
                        e.raw_os_error().unwrap_or(0),
                        format!("io_uring_enter: {e}"),
                    )))
                }
            }
            st.reap(py)?;
        }
        Ok(())
    }

    /// The next finished operation to dispatch (see [`LoopRing::fill`]);
    /// None when none is left or the ring is closed. A transport's
    /// receive stops being its descriptor's latest here, and its bytes
    /// are made here, one receive at a time (with the rest its socket
    /// holds, when its first buffer filled): made at the reap, a batch of
    /// large messages was alive at once, which grew the heap and gave it
    /// back to the kernel at every batch (page faults and `brk` per
    /// message, `docs/benchmarks.md`).
    pub(crate) fn next_done(&self, py: Python<'_>) -> PyResult<Option<Done>> {
        let mut guard = self.lock()?;
        let Some(st) = guard.as_mut() else {
            return Ok(None);
        };
        let done = loop {
            match st.pending.pop_front() {
                None => break None,
                Some(Reaped::Done(done)) => break Some(done),
                Some(Reaped::Ready(token)) => {
                    if let Some((op, res, rest)) = st.receive_ready(py, token)? {
                        break st.finish_receive(py, token, op, res, rest)?;
                    }
                }
                Some(Reaped::Receive {
                    token,
                    op,
                    res,
                    rest,
                }) => break st.finish_receive(py, token, op, res, rest)?,
            }
        };
        if let Some(Done::Stream { token, fd, .. }) = &done {
            if let Some(latest) = usize::try_from(*fd)
                .ok()
                .and_then(|i| st.receiving.get_mut(i))
            {
                if *latest == *token {
                    *latest = 0;
                }
            }
        }
        Ok(done)
    }

    /// Arms a transport's receive (as [`LoopRing::recv`], its first
    /// buffer of `ask.first` bytes on a stream socket, see [`next_first`];
    /// a datagram endpoint's as [`LoopRing::recvmsg`]) kept in the slab
    /// with `owner`, and makes it the descriptor's latest (see
    /// [`LoopRing::receiving`]). On failure `owner` is handed back, so
    /// that the caller ends the hold it carries.
    ///
    /// A datagram receive is always the ring's `recvmsg`, never tried in
    /// the loop's thread first: a `recvmsg` with `MSG_DONTWAIT` at each
    /// arming failed with `EAGAIN` at every arming in ping-pong and at
    /// half of them in a burst, for no less CPU per round trip
    /// (`docs/benchmarks.md`, "A datagram endpoint's receive: no try at
    /// its arming").
    pub(crate) fn arm_stream(
        &self,
        ask: RecvAsk,
        owner: Owner,
    ) -> Result<u64, (PyErr, Option<Owner>)> {
        let fd = ask.fd;
        let mut guard = match self.lock() {
            Ok(g) => g,
            Err(e) => return Err((e, Some(owner))),
        };
        let Some(st) = guard.as_mut() else {
            return Err((closed(), Some(owner)));
        };
        let Some(token) = st.ops.vacant() else {
            return Err((too_many(), Some(owner)));
        };
        let op = match recv_op(ask, &mut st.spare) {
            Ok(op) => op,
            Err(e) => return Err((e, Some(owner))),
        };
        self.arm_op(st, token, op, owner, fd)
    }

    /// Keeps `op` under `token` in the slab with `owner` and queues its
    /// entry (see [`LoopRing::arm_stream`]).
    fn arm_op(
        &self,
        st: &mut State,
        token: u64,
        mut op: InFlight,
        owner: Owner,
        fd: RawFd,
    ) -> Result<u64, (PyErr, Option<Owner>)> {
        let datagram = op.kind == Kind::RecvMsg;
        let entry = op.entry(token);
        op.owner = Some(owner);
        st.ops.insert(token, op);
        if let Err(e) = st.push(entry) {
            let owner = st.ops.remove(token).and_then(|mut op| op.owner.take());
            return Err((e.into(), owner));
        }
        st.set_receiving(fd, token);
        if datagram {
            self.msg_receives.fetch_add(1, Ordering::Relaxed);
        }
        Ok(token)
    }

    /// The state, for the loop's thread; refused in a forked child and
    /// while another thread waits.
    fn lock(&self) -> PyResult<MutexGuard<'_, Option<State>>> {
        if !self.made_here() {
            return Err(PyRuntimeError::new_err(
                "this event loop's ring belongs to the parent process; a forked child must create its own loop",
            ));
        }
        match self.state.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(busy()),
        }
    }

    /// Hands what is queued to the kernel without waiting.
    fn flush(&self) -> PyResult<()> {
        let mut guard = self.lock()?;
        let st = guard.as_mut().ok_or_else(closed)?;
        match st.ring.submit() {
            Ok(_) => {
                st.queued = false;
                Ok(())
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Hands the kernel a read of `len` bytes of the file `fd` at `offset`
    /// into `memory` ([`LoopRing::pread`], [`LoopRing::pread_into`]) and
    /// returns its token. The read is copied by the kernel's worker
    /// threads, its file taken now in a slot of the ring's file table
    /// ([`State::hold_in_slot`]); where no slot is free, one longer than
    /// [`INLINE_PREAD_MAX`] takes a duplicate ([`State::hold_file`]) and a
    /// shorter one is tried at its submission. A descriptor that names no file
    /// (`EBADF`) raises `OSError`, and nothing is submitted.
    fn submit_pread(&self, fd: RawFd, offset: u64, memory: Memory, len: usize) -> PyResult<u64> {
        let token = {
            let mut guard = self.lock()?;
            let st = guard.as_mut().ok_or_else(closed)?;
            let (fd, memory) = if len > INLINE_PREAD_MAX {
                st.hold_file(fd, memory)?
            } else {
                st.hold_in_slot(fd, memory)?
            };
            let mut op = InFlight::new(Kind::Pread, fd, false, memory, len);
            op.offset = offset;
            st.queue(op)?
        };
        self.flush()?;
        self.file_reads.fetch_add(1, Ordering::Relaxed);
        Ok(token)
    }

    /// Queues `op` and returns its token.
    fn submit(&self, op: InFlight) -> PyResult<u64> {
        let mut guard = self.lock()?;
        let st = guard.as_mut().ok_or_else(closed)?;
        st.queue(op)
    }
}

impl Drop for LoopRing {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .map(Option::take)
            .unwrap_or_else(|p| p.into_inner().take());
        if let Some(st) = state {
            if self.made_here() {
                // (the holds of the receives left end with their
                // objects, as the proactor's tables' would)
                Python::with_gil(|py| drop(st.shut_down(py)));
            } else {
                st.forget_in_child();
            }
        }
    }
}

impl LoopRing {
    /// A datagram receive into `slot` on socket `fd` with `recvmsg` flags
    /// `flags`: received at once when one is queued (its value), else
    /// submitted (its token). See [`LoopRing::recvmsg`].
    fn receive_datagram(
        &self,
        py: Python<'_>,
        fd: RawFd,
        slot: Box<MsgSlot>,
        flags: u32,
    ) -> PyResult<PyObject> {
        let room = slot.room;
        let mut op = InFlight::new(Kind::RecvMsg, fd, true, Memory::Msg(slot), room);
        op.mask = flags;
        if let Memory::Msg(slot) = &mut op.memory {
            if let Some(n) = receive_now(fd, slot, flags).map_err(crate::errors::io_err)? {
                return finish(py, op, n, &mut [], &mut Spares::default());
            }
        }
        let token = self.submit(op)?;
        self.msg_receives.fetch_add(1, Ordering::Relaxed);
        Ok(token.into_pyobject(py)?.into_any().unbind())
    }

    /// Writes what `fd` takes of `bytes` now (see [`LoopRing::send`]), and
    /// marks the receives of this ring that the write finished (see
    /// [`State::mark_peer_receives`]): the completion queue's length is
    /// read before and after, which costs no system call.
    fn send_inline(&self, fd: RawFd, bytes: &[u8], socket: bool) -> PyResult<usize> {
        let mut guard = self.lock().ok();
        let before = guard
            .as_mut()
            .and_then(|g| g.as_mut())
            .map(|st| st.ring.completion().len());
        // An OSError with its errno (`EMSGSIZE` for an oversized datagram),
        // as asyncio's transports hand to `error_received`.
        let sent = super::inline::write_inline(fd, bytes, socket).map_err(crate::errors::io_err)?;
        if let (Some(before), Some(st)) = (before, guard.as_mut().and_then(|g| g.as_mut())) {
            st.wrote_again(fd);
            st.mark_peer_receives(fd, before, &bytes[..sent]);
        }
        Ok(sent)
    }

    /// Whether the ring was made in this process, not in a parent before a
    /// fork (by `fork()`, or made without fork handlers).
    fn made_here(&self) -> bool {
        !self.born.forked()
    }

    /// Whether a transport's write may use this ring now: open, and made
    /// in this process (not a parent's, after `fork()`).
    pub(crate) fn usable(&self) -> bool {
        self.made_here() && self.state.try_lock().is_ok_and(|g| g.is_some())
    }

    /// Writes what socket `fd` takes of `bytes` now (see
    /// [`LoopRing::send`]): a transport's write (`write::StreamTx`).
    pub(crate) fn send_now(&self, fd: RawFd, bytes: &[u8]) -> PyResult<usize> {
        self.send_inline(fd, bytes, true)
    }

    /// Hands the ring the rest of a send of which `sent` of the `b`'s
    /// bytes went out already (see [`LoopRing::send`]); the token of its
    /// completion, whose result is the whole length.
    pub(crate) fn send_rest(&self, fd: RawFd, b: PyBuffer<u8>, sent: usize) -> PyResult<u64> {
        let n = b.len_bytes();
        let mut op = InFlight::new(Kind::Send, fd, true, Memory::Lent(b), n);
        op.done = sent;
        let token = self.submit(op)?;
        self.flush()?;
        Ok(token)
    }
}

impl State {
    /// Makes `token` descriptor `fd`'s latest transport receive (see
    /// [`LoopRing::receiving`]).
    fn set_receiving(&mut self, fd: RawFd, token: u64) {
        if let Ok(i) = usize::try_from(fd) {
            if self.receiving.len() <= i {
                self.receiving.resize(i + 1, 0);
            }
            self.receiving[i] = token;
        }
    }

    /// A transport's receive `op` (`token`) whose kernel receive took
    /// `res` bytes, as it is dispatched: the rest its socket holds taken
    /// when `rest` ([`State::recv_rest`]), its bytes made, and its
    /// connection's next first buffer set ([`next_first`]). Inlined where
    /// it is called, so that the operation is not moved once more per
    /// message.
    #[inline(always)]
    fn finish_receive(
        &mut self,
        py: Python<'_>,
        token: u64,
        op: InFlight,
        res: i32,
        rest: bool,
    ) -> PyResult<Option<Done>> {
        let (mut op, res) = if rest {
            self.recv_rest(op, res)
        } else {
            (op, res)
        };
        let (owner, fd, lent) = (op.owner.take(), op.fd, op.len);
        let value = finish(py, op, res, &mut self.scratch, &mut self.spare)?;
        let got = usize::try_from(res).unwrap_or(0);
        // (the common small message, taken by a 2 KiB buffer, sets
        // nothing: the receive's size stays 2 KiB)
        let keeps = lent <= RECV_FIRST && got < lent;
        if let (Some(owner), false) = (&owner, keeps) {
            // (borrowed elsewhere only by `arm_ring_receive`,
            // which never runs within this call)
            if let Ok(mut rx) = owner.rx.bind(py).try_borrow_mut() {
                rx.first = next_first(lent, got);
            }
        }
        Ok(owner.map(|owner| Done::Stream {
            token,
            res: i64::from(res),
            value,
            fd,
            owner,
        }))
    }

    /// Receives for deferred receive `token` (see [`recv_op`]), whose
    /// poll answered, into a new `bytes` object of its first buffer's size
    /// made now: the object `malloc` gives back is the one the message
    /// dispatched before freed, still in the CPU's cache, where a buffer
    /// lent to the kernel while the connection waited was written after
    /// every other connection's messages had gone through the cache
    /// (`docs/benchmarks.md`). Returns the operation, taken out of the
    /// slab, with the receive's result and whether it takes the rest its
    /// socket holds ([`State::recv_rest`]); `-ECANCELED` without receiving
    /// when it was cancelled since its poll answered (the socket may be
    /// closed now). None when nothing had arrived after all: its poll is
    /// armed again under the same token.
    fn receive_ready(
        &mut self,
        py: Python<'_>,
        token: u64,
    ) -> PyResult<Option<(InFlight, i32, bool)>> {
        let Some(op) = self.ops.get_mut(token) else {
            return Ok(None);
        };
        if op.cancelled {
            return Ok(self
                .ops
                .remove(token)
                .map(|op| (op, -libc::ECANCELED, false)));
        }
        let (fd, len) = (op.fd, op.len);
        let memory = match grown_memory(py, len) {
            Ok(m) => m,
            Err(_) => return Ok(self.ops.remove(token).map(|op| (op, -libc::ENOMEM, false))),
        };
        let Memory::Bytes(_, at) = &memory else {
            unreachable!("grown_memory makes a bytes object")
        };
        // SAFETY: `at` is the contents of the `len`-byte bytes object just
        // made (`grown_memory`), which nothing else references yet; they
        // are not set, so they are seen as `MaybeUninit`, and only what
        // the receive writes is read after (`finish` cuts the object to
        // it).
        let room =
            unsafe { std::slice::from_raw_parts_mut(*at as *mut std::mem::MaybeUninit<u8>, len) };
        match recv_ready(fd, room) {
            Err(rustix::io::Errno::AGAIN) => {
                // (nothing to take after all: the poll again)
                op.waiting_ready = true;
                let entry = op.entry(token);
                if let Err(e) = self.push(entry) {
                    let res = -e.raw_os_error().unwrap_or(libc::EIO);
                    return Ok(self.ops.remove(token).map(|op| (op, res, false)));
                }
                Ok(None)
            }
            got => {
                let res = match got {
                    Ok(n) => i32::try_from(n).unwrap_or(i32::MAX),
                    Err(e) => -e.raw_os_error(),
                };
                Ok(self.ops.remove(token).map(|mut op| {
                    op.memory = memory;
                    let n = usize::try_from(res).unwrap_or(0);
                    let filled = n == op.len && op.rest > 0;
                    let rest = n > 0 && (filled || likely_piece(op.len, n));
                    (op, res, rest)
                }))
            }
        }
    }

    /// Notes the socket receives whose completions the kernel posted
    /// while this thread wrote `sent` to `fd` (those after the first
    /// `before` of the completion queue), when the bytes they took are the
    /// start of `sent`: a receive of this loop's own peer, finished as the
    /// send's system call returned. What the loop writes to `fd` later in
    /// the same step would wait for the peer's next receive, one loop
    /// iteration after asyncio's selector loop reads both at once; so a
    /// second write to `fd` before the wait marks the receive `peer_sent`
    /// ([`State::wrote_again`]), which then takes what its socket holds
    /// more when it is reaped ([`State::recv_rest`]). A remote peer's
    /// receive is marked only when the loop wrote the very bytes it took
    /// and then wrote again to the same socket in the same step (an echo
    /// of identical messages is one write per message): it costs no
    /// system call more otherwise.
    fn mark_peer_receives(&mut self, fd: RawFd, before: usize, sent: &[u8]) {
        let mut cq = self.ring.completion();
        if cq.len() <= before {
            return;
        }
        for cqe in cq.by_ref().skip(before) {
            let res = cqe.result();
            let Some(op) = self.ops.get_mut(cqe.user_data()) else {
                continue;
            };
            if op.kind != Kind::Recv || op.rest == 0 || op.waiting_ready || op.cancelled || res <= 0
            {
                continue;
            }
            let n = res as usize;
            if n >= op.len || n > sent.len() {
                continue; // (a full first buffer takes the rest anyway)
            }
            let start = match &op.memory {
                Memory::Owned(v) => Some(v.as_ptr()),
                Memory::Bytes(_, at) => Some(*at as *const u8),
                _ => None,
            };
            if let Some(start) = start {
                // SAFETY: `start` is the receive's memory (its own buffer,
                // or a `bytes` object it holds), lent to the kernel as
                // `op.len` bytes of room for this receive, and its
                // completion, posted, says the kernel wrote `n` < `op.len`
                // bytes from its start and is done with it; they are only
                // read here.
                let got = unsafe { std::slice::from_raw_parts(start, n) };
                if *got == sent[..n] {
                    self.peer_receives.push((fd, cqe.user_data()));
                }
            }
        }
        // The completions stay in the queue for the next wait to reap: the
        // queue's head, which the iteration moved, is not stored back.
        std::mem::forget(cq);
    }

    /// Marks `peer_sent` the receives noted since the last wait as
    /// finished by a write to `fd` (see [`State::mark_peer_receives`]):
    /// the loop has written to that socket again (no system call: see
    /// `peer_receives`).
    fn wrote_again(&mut self, fd: RawFd) {
        for &(sender, token) in &self.peer_receives {
            if sender == fd {
                if let Some(op) = self.ops.get_mut(token) {
                    op.peer_sent = true;
                }
            }
        }
    }

    /// Queues `op` and returns its token; on failure `op` is dropped, its
    /// slot of the file table given back. A read that holds a slot is
    /// queued with the entry that empties the slot linked after it (see
    /// `files`).
    fn queue(&mut self, mut op: InFlight) -> PyResult<u64> {
        let Some(token) = self.ops.vacant() else {
            self.let_go(&op);
            return Err(too_many());
        };
        let entry = op.entry(token);
        let slot = match &op.memory {
            Memory::Held(held) => match held.1 {
                Hold::Slot(slot) => Some(slot),
                Hold::Dup(_) => None,
            },
            _ => None,
        };
        self.ops.insert(token, op);
        let pushed = match slot {
            Some(slot) => self.push_linked(&[
                entry.flags(squeue::Flags::IO_HARDLINK),
                FileTable::empty_entry(slot),
            ]),
            None => self.push(entry),
        };
        if let Err(e) = pushed {
            if let Some(op) = self.ops.remove(token) {
                self.let_go(&op);
            }
            return Err(e.into());
        }
        Ok(token)
    }

    /// The file of a read of `fd` into `memory` that the kernel's workers
    /// copy, taken now (they look a number up only when they start it,
    /// and the caller may have closed `fd` and opened another file under
    /// it by then): the descriptor to issue the read on and its memory,
    /// which holds the file until the completion ([`Memory::Held`]).
    /// Held in a slot of the ring's file table, which keeps the process's
    /// POSIX record locks on the file (see `files`); where none can be
    /// had, in a duplicate of `fd` (whose close at the completion
    /// releases them); out of descriptors too, on `fd` itself, tried at
    /// the submission as a short read is (the loop's thread may copy it
    /// then), rather than fail where a `pread` would not.
    fn hold_file(&mut self, fd: RawFd, memory: Memory) -> io::Result<(RawFd, Memory)> {
        let (fd, memory) = self.hold_in_slot(fd, memory)?;
        if matches!(memory, Memory::Held(_)) {
            return Ok((fd, memory));
        }
        match own_duplicate(fd) {
            Ok(own) => Ok((
                own.as_raw_fd(),
                Memory::Held(Box::new((memory, Hold::Dup(own)))),
            )),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                Ok((fd, memory))
            }
            Err(e) => Err(e),
        }
    }

    /// The file of a read of `fd` into `memory`, held in a free slot of
    /// the ring's file table ([`Memory::Held`]: the kernel's workers then
    /// copy the read, see [`INLINE_PREAD_MAX`]), or, where no slot is free
    /// or the kernel refuses the table, `fd` and `memory` as they are (the
    /// read is tried at its submission, on the number, as before the
    /// caller could close it). `EBADF` for a number that names no file.
    fn hold_in_slot(&mut self, fd: RawFd, memory: Memory) -> io::Result<(RawFd, Memory)> {
        match self.files.take(&self.ring, fd)? {
            Some(slot) => Ok((fd, Memory::Held(Box::new((memory, Hold::Slot(slot)))))),
            None => Ok((fd, memory)),
        }
    }

    /// Gives back the file-table slot of `op`, which never reached the
    /// kernel, if it holds one.
    fn let_go(&mut self, op: &InFlight) {
        if let Memory::Held(held) = &op.memory {
            if let Hold::Slot(slot) = held.1 {
                self.files.give_back(&self.ring, slot);
            }
        }
    }

    /// Hands every queued entry to the kernel without waiting: true when
    /// none is left queued, false when the kernel took not all of them for
    /// now (interrupted, or busy with completions to reap).
    fn submit_all(&mut self) -> io::Result<bool> {
        match self.ring.submit() {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        let all = self.ring.submission().is_empty();
        if all {
            self.queued = false;
        }
        Ok(all)
    }

    /// Queues `entry`, flushing the submission queue to the kernel when it
    /// is full.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the memory `entry` points at belongs to an `InFlight`
            // kept in `self.ops` under the entry's token until its
            // completion is reaped (or leaked by `shut_down`); cancel
            // entries point at nothing.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.queued = true;
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Queues `entries` one after the other, flushing the submission queue
    /// to the kernel first when it has not room for all of them: a link
    /// is never cut by a submission between its entries.
    fn push_linked(&mut self, entries: &[squeue::Entry]) -> io::Result<()> {
        loop {
            // SAFETY: as in `push`; an entry that empties a file slot
            // points at a static (see `files`).
            if unsafe { self.ring.submission().push_multiple(entries) }.is_ok() {
                self.queued = true;
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Takes every completion the ring holds and keeps those that finish
    /// an operation in `pending`, as `(token, result, value)` (with the
    /// owner of a transport's receive).
    fn reap(&mut self, py: Python<'_>) -> PyResult<()> {
        // (their completions are reaped now)
        self.peer_receives.clear();
        self.accepts_alone.clear();
        let cqes: Vec<(u64, i32, u32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result(), c.flags()))
            .collect();
        for (token, res, flags) in cqes {
            if token == CANCEL_TOKEN {
                continue;
            }
            if let Some(slot) = emptied_slot(token) {
                self.files.emptied(&self.ring, slot, res);
                continue;
            }
            if let Some((op, res, rest)) = self.advance(token, res)? {
                if let Memory::Held(held) = &op.memory {
                    if let Hold::Slot(slot) = held.1 {
                        self.files.read_done(&self.ring, slot);
                    }
                }
                if op.kind == Kind::Accept && res >= 0 {
                    self.accepted(op.fd, flags);
                }
                if op.owner.is_some() && op.kind == Kind::Recv {
                    self.pending.push_back(Reaped::Receive {
                        token,
                        op,
                        res,
                        rest,
                    });
                    continue;
                }
                let (mut op, res) = if rest {
                    self.recv_rest(op, res)
                } else {
                    (op, res)
                };
                let (owner, fd) = (op.owner.take(), op.fd);
                let value = finish(py, op, res, &mut self.scratch, &mut self.spare)?;
                let res = i64::from(res);
                self.pending.push_back(Reaped::Done(match owner {
                    Some(owner) => Done::Stream {
                        token,
                        res,
                        value,
                        fd,
                        owner,
                    },
                    None => Done::Plain(token, res, value),
                }));
            }
        }
        Ok(())
    }

    /// Notes what the kernel said of listening socket `fd`'s queue as its
    /// accept finished with completion `flags` (see `accepts_alone`).
    fn accepted(&mut self, fd: RawFd, flags: u32) {
        if io_uring::cqueue::sock_nonempty(flags) {
            self.nonempty_told = true;
        } else {
            self.accepts_alone.push(fd);
        }
    }

    /// Moves operation `token` on after a completion with `res`: the next
    /// step is submitted (the rest of a short send, the retry after a
    /// readiness poll, the poll after `EAGAIN`), a deferred receive whose
    /// poll answered is queued for its dispatch, or the finished operation
    /// is returned with its result, and whether it is a socket receive
    /// that takes what more its socket holds ([`State::recv_rest`]).
    fn advance(&mut self, token: u64, res: i32) -> io::Result<Option<(InFlight, i32, bool)>> {
        let Some(op) = self.ops.get_mut(token) else {
            return Ok(None);
        };
        if op.waiting_ready && !op.cancelled && res >= 0 && op.deferred() {
            self.queue_ready(token);
            return Ok(None);
        }
        if op.waiting_ready && res >= 0 && op.kind != Kind::Poll && op.cancelled {
            // The readiness poll (after `EAGAIN`) answered, but nothing
            // was transferred: a readiness is no byte count.
            return Ok(self
                .ops
                .remove(token)
                .map(|op| (op, -libc::ECANCELED, false)));
        }
        // A file read's `EAGAIN` (a descriptor in non-blocking mode) goes
        // to the caller: a poll finds a regular file always ready, and the
        // retry would fail again.
        let again = if op.cancelled {
            false
        } else if op.waiting_ready {
            // Any event (an error or hang-up too) lets the retry report it.
            op.waiting_ready = res < 0;
            res >= 0
        } else if res == -libc::EAGAIN
            && !matches!(
                op.kind,
                Kind::Poll | Kind::Pread | Kind::Pwrite | Kind::Open | Kind::Connect
            )
        {
            op.waiting_ready = true;
            true
        } else if op.kind == Kind::Send && res > 0 && op.done + (res as usize) < op.len {
            op.done += res as usize;
            true
        } else {
            false
        };
        if again {
            let entry = op.entry(token);
            self.push(entry)?;
            return Ok(None);
        }
        let filled = res > 0 && res as usize == op.len && op.rest > 0;
        // (a grown receive's piece is told as it is dispatched: see
        // `receive_ready`)
        let rest = (filled || op.peer_sent && res > 0) && !op.cancelled;
        Ok(self.ops.remove(token).map(|op| (op, res, rest)))
    }

    /// Queues deferred receive `token`, whose poll answered (any event, an
    /// error or hang-up too: its receive at the dispatch reports it), for
    /// its dispatch; it stays in the slab until then. Apart from
    /// [`State::advance`], so that a small message's completion, which
    /// never comes here, runs no more code for it.
    #[cold]
    #[inline(never)]
    fn queue_ready(&mut self, token: u64) {
        if let Some(op) = self.ops.get_mut(token) {
            op.waiting_ready = false;
        }
        self.pending.push_back(Reaped::Ready(token));
    }

    /// Finishes socket receive `op`, whose kernel receive took `res`
    /// bytes and which takes what more its socket holds now without
    /// waiting: its first buffer filled and `rest` room is left, it took
    /// what is likely the first piece of a message ([`likely_piece`]), or
    /// it took a send of this loop's own and the loop wrote to that socket
    /// again in the same step (`peer_sent`). The first buffer's room is filled, then
    /// (when full) at most `rest` bytes go to [`State::scratch`] after
    /// the first buffer's length (see [`finish`]), their
    /// count kept in `done`; both are added to the result.
    ///
    /// Only the bytes the socket holds (`FIONREAD`) are asked for: a
    /// receive with nothing queued would consume a pending error (a peer's
    /// reset, reported once), so an error or the end of the stream stays
    /// for the next receive to report.
    fn recv_rest(&mut self, mut op: InFlight, res: i32) -> (InFlight, i32) {
        let mut got = res as usize;
        let mut held = queued_bytes(op.fd);
        if let (Memory::Bytes(_, at), true) = (&op.memory, got < op.len && held > 0) {
            let want = (op.len - got).min(held);
            // SAFETY: the object's contents are `op.len` bytes at `at`
            // (see `grown_memory`), of a bytes object this operation made
            // and alone references (count 1: no Python code has seen it,
            // and none does until `finish` cuts it to the bytes written and
            // hands it out), so nothing else reads or writes them now; the
            // kernel is done with them (this is the completion). Bytes
            // `got..got + want` lie within them (`got + want <= op.len`);
            // they are not set yet, so they are seen as `MaybeUninit`, and
            // only what the receive writes is read after.
            let room = unsafe {
                std::slice::from_raw_parts_mut(
                    (*at as *mut std::mem::MaybeUninit<u8>).add(got),
                    want,
                )
            };
            let n = recv_now_uninit(op.fd, room);
            (got, held) = (got + n, held - n);
        }
        if let Memory::Owned(v) = &mut op.memory {
            if got < op.len && held > 0 {
                // SAFETY: the kernel wrote `got` <= `op.len` bytes (this
                // completion's result) from the start of `v`, whose
                // capacity is the `op.len` bytes lent to it, and is done
                // with it: they are initialised.
                unsafe { v.set_len(got) };
                v.resize(op.len, 0);
                let want = (op.len - got).min(held);
                let n = recv_now(op.fd, &mut v[got..got + want]);
                v.truncate(got + n);
                (got, held) = (got + n, held - n);
            }
        }
        if got == op.len && op.rest > 0 && held > 0 {
            // After room for the first buffer's bytes, which `finish`
            // copies in front: the message's bytes are then one slice,
            // made into `bytes` by one copy (no zeroed object filled in
            // two pieces: a memset of the message per receive).
            let want = op.rest.min(held);
            let end = op.len + want;
            if self.scratch.len() < end {
                self.scratch.resize(end, 0);
            }
            op.done = recv_now(op.fd, &mut self.scratch[op.len..end]);
        }
        let total = i32::try_from(got + op.done).unwrap_or(i32::MAX);
        (op, total)
    }

    /// Cancels everything but file writes (see [`LoopRing::pwrite`]),
    /// reaps until every operation has answered or [`CLOSE_BOUND`] passes,
    /// then leaks what is left (its memory may still be written by the
    /// kernel, and a read's own descriptor may still be looked up by a
    /// worker: its number must not name another file) and closes the ring. Returns the owners of the transports'
    /// receives in flight or not yet dispatched.
    fn shut_down(mut self, py: Python<'_>) -> Vec<Owner> {
        let mut owners = Vec::new();
        for reaped in std::mem::take(&mut self.pending) {
            if let Reaped::Ready(token) = reaped {
                // (in the slab, but not in the kernel: nothing to cancel)
                if let Some(mut op) = self.ops.remove(token) {
                    owners.extend(op.owner.take());
                }
            } else {
                owners.extend(reaped.into_owner());
            }
        }
        let tokens = self.ops.tokens();
        for t in tokens {
            // A file write is waited for, not cancelled (see `pwrite`).
            if self
                .ops
                .get_mut(t)
                .is_some_and(|op| op.kind == Kind::Pwrite)
            {
                continue;
            }
            let _ = self.push(opcode::AsyncCancel::new(t).build().user_data(CANCEL_TOKEN));
        }
        let deadline = Instant::now() + CLOSE_BOUND;
        while !self.ops.is_empty() && Instant::now() < deadline {
            let ring = &self.ring;
            let ts = timespec(0.05);
            let _ = crate::gil::detach(py, move || {
                ring.submitter()
                    .submit_with_args(1, &types::SubmitArgs::new().timespec(&ts))
            });
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (t, res) in cqes {
                let Some(mut op) = self.ops.remove(t) else {
                    continue;
                };
                if op.kind == Kind::Open && res >= 0 {
                    // SAFETY: the kernel made descriptor `res` for this
                    // open, whose caller never gets it (the ring is
                    // closing): nothing else owns or knows the number.
                    drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(res) });
                }
                if let Some(owner) = op.owner.take() {
                    owners.push(owner);
                }
            }
        }
        for mut op in self.ops.drain() {
            owners.extend(op.owner.take());
            std::mem::forget(op);
        }
        owners
    }

    /// Drops the state in a forked child without submitting anything:
    /// the ring's mappings and descriptor are the child's own copies, and
    /// the kernel writes the parent's memory, not the child's.
    fn forget_in_child(self) {
        drop(self);
    }
}

/// A new descriptor for the file `fd` names now (`F_DUPFD_CLOEXEC`).
fn own_duplicate(fd: RawFd) -> io::Result<OwnedFd> {
    // (The caller's descriptor, borrowed for this one call; if it was
    // closed meanwhile the duplicate fails with EBADF, reported as such.)
    let borrowed = super::inline::borrow(fd)?;
    Ok(rustix::io::fcntl_dupfd_cloexec(borrowed, 0)?)
}

/// Receives the datagram socket `fd` holds now, if any, into `slot`
/// (`recvmsg` with `flags` and `MSG_DONTWAIT`, in the loop's thread): its
/// length (cut to the room, as the ring's receive), or None when none is
/// queued (`EAGAIN`, or a signal interrupted the call: the ring's receive
/// then takes it). Cheaper than `socket.recvfrom` tried from Python,
/// whose failure raises and catches an exception per receive
/// (`docs/benchmarks.md`, "Datagrams on the ring").
fn receive_now(fd: RawFd, slot: &mut MsgSlot, flags: u32) -> io::Result<Option<i32>> {
    let hdr = slot.header(false);
    // SAFETY: `hdr` is the slot's own header, pointing at its `iovec`
    // (room for `slot.room` bytes of its buffer, owned or held) and its
    // address storage, all alive for this call; the kernel writes only
    // into them. The descriptor is the caller's, borrowed for this one
    // call: if it was closed meanwhile, the call fails with `EBADF`.
    let n = unsafe { libc::recvmsg(fd, hdr, flags as i32 | libc::MSG_DONTWAIT) };
    if n >= 0 {
        // (the address's length is taken from the header by `finish`)
        return Ok(Some(i32::try_from(n).unwrap_or(i32::MAX)));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EINTR) => Ok(None),
        _ => Err(e),
    }
}

/// The bytes socket `fd` holds unread (`FIONREAD`), 0 when it cannot say.
fn queued_bytes(fd: RawFd) -> usize {
    // SAFETY: the receive's descriptor, borrowed for this one call; the
    // proactor holds the socket object until the receive's completion is
    // dispatched, so the number stays open unless the program closes it
    // behind the transport's back (`os.close`: the call then fails with
    // `EBADF` or asks the file given the number next, as python/README.md
    // says); the ioctl writes only into its own result either way.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::io::ioctl_fionread(borrowed).map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Receives into `buf` what socket `fd` holds now, 0 when nothing came
/// (the caller asked only for queued bytes, so no error is consumed).
fn recv_now(fd: RawFd, buf: &mut [u8]) -> usize {
    match super::inline::recv_inline(fd, buf) {
        Ok(Some(n)) => n,
        Ok(None) | Err(_) => 0,
    }
}

/// As [`recv_now`], into memory not set yet: only what the receive
/// writes is read after.
fn recv_now_uninit(fd: RawFd, buf: &mut [std::mem::MaybeUninit<u8>]) -> usize {
    // SAFETY: as in `recv_now`'s `recv_inline`: the caller's descriptor,
    // borrowed for this one call, held open by the proactor until the
    // receive's completion is dispatched unless the program closes it
    // behind the transport's back (see `queued_bytes`); the receive writes
    // only into the buffer given here either way.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    loop {
        return match rustix::net::recv(borrowed, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok(((written, _), _)) => written.len(),
            Err(e) if e == rustix::io::Errno::INTR => continue,
            Err(_) => 0,
        };
    }
}

/// Receives into `buf` what socket `fd` holds now, without waiting: the
/// count (0 at the end of the stream) or the error, `EAGAIN` when nothing
/// is there.
fn recv_ready(fd: RawFd, buf: &mut [std::mem::MaybeUninit<u8>]) -> rustix::io::Result<usize> {
    // SAFETY: a deferred receive's descriptor, borrowed for this one call,
    // held open by the proactor until the receive's completion is
    // dispatched (it is not cancelled: a cancel ends the hold), unless the
    // program closes it behind the transport's back (see `queued_bytes`);
    // the receive writes only into the buffer given here either way.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    loop {
        match rustix::net::recv(borrowed, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok(((written, _), _)) => return Ok(written.len()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The Python value of a finished operation (`scratch`: where a socket
/// receive put its bytes). A socket receive's first buffer, once copied
/// into the bytes, goes back to `spare` for the next receive.
fn finish(
    py: Python<'_>,
    mut op: InFlight,
    res: i32,
    scratch: &mut [u8],
    spare: &mut Spares,
) -> PyResult<PyObject> {
    if res < 0 {
        return Ok(py.None());
    }
    let n = res as usize;
    if let (Kind::Recv, Memory::Owned(v)) = (op.kind, &mut op.memory) {
        let written = n.min(op.len);
        // SAFETY: `v` was lent to the kernel as `op.len` bytes of room
        // (its capacity, at least) for this receive, whose result `res` >= 0
        // is the count of bytes the kernel wrote from its start (the
        // whole of it when `recv_rest` added more: the result then exceeds
        // `op.len`). So the first `written` bytes are initialised, and the
        // kernel is done with the buffer: this is its completion.
        unsafe { v.set_len(written) }
    }
    let memory = match op.memory {
        Memory::Held(held) => {
            // (the read's own descriptor closed: the kernel is done with it)
            let (memory, _own) = *held;
            memory
        }
        memory => memory,
    };
    Ok(match (op.kind, memory) {
        (Kind::Recv, Memory::Owned(mut first)) => {
            // The first buffer, then (when it filled) what `recv_rest`
            // added.
            let more = op.done;
            let obj = if more > 0 {
                // `recv_rest` put the rest after the first buffer's
                // length (the first buffer filled): the first buffer's
                // bytes go in front, and the whole is copied once.
                let head = first.len();
                scratch[..head].copy_from_slice(&first);
                PyBytes::new(py, &scratch[..head + more])
            } else {
                PyBytes::new(py, &first)
            };
            if first.capacity() == RECV_FIRST && spare.small.len() < SPARE_MAX {
                first.clear();
                spare.small.push(first);
            }
            obj.into_any().unbind()
        }
        // A grown first buffer (see `recv_op`) that filled, with the rest
        // `recv_rest` put after its length: its bytes go in front, and the
        // whole is copied once.
        (Kind::Recv, Memory::Bytes(obj, _)) if op.done > 0 => {
            let head = op.len;
            scratch[..head].copy_from_slice(&obj.bind(py).as_bytes()[..head]);
            PyBytes::new(py, &scratch[..head + op.done])
                .into_any()
                .unbind()
        }
        // The kernel wrote the first `res` bytes of the object, and is done
        // with it: this is its completion.
        (Kind::Recv | Kind::Pread, Memory::Bytes(obj, _)) => {
            crate::fresh::shrunk(py, obj, n.min(op.len))?
        }
        (Kind::RecvMsg, Memory::Msg(mut slot)) => {
            slot.received();
            let addr = sockaddr::to_python(py, &slot.addr)?;
            let written = n.min(slot.room);
            match slot.data {
                Memory::Owned(mut v) => {
                    // SAFETY: `v` was lent to the kernel as `slot.room`
                    // bytes of room (its capacity, at least) for this
                    // receive, whose result `res` >= 0 is the count of
                    // bytes the kernel wrote from its start (at most the
                    // room: a longer datagram is cut, `MSG_TRUNC`, and its
                    // length not asked for); this is its completion.
                    unsafe { v.set_len(written) };
                    (PyBytes::new(py, &v), addr)
                        .into_pyobject(py)?
                        .into_any()
                        .unbind()
                }
                _ => (written, addr).into_pyobject(py)?.into_any().unbind(),
            }
        }
        (Kind::Accept, Memory::Addr(slot)) => (res, sockaddr::to_python(py, &slot)?)
            .into_pyobject(py)?
            .into_any()
            .unbind(),
        (Kind::Send, _) => (op.done + n).into_pyobject(py)?.into_any().unbind(),
        _ => n.into_pyobject(py)?.into_any().unbind(),
    })
}

/// A ring with `entries` submission slots whose completions the kernel
/// posts when the loop's thread next enters or leaves the kernel
/// (`COOP_TASKRUN`), not by interrupting it wherever it runs (the default,
/// an inter-processor interrupt per completion that lands while the loop
/// runs Python code); `TASKRUN_FLAG` marks the submission queue while any
/// are held back, so that a wait that would not enter the kernel enters it
/// (see [`LoopRing::wait`]). Kernels before 5.19 refuse the flags (`EINVAL`):
/// the ring is then made without them.
fn build_ring(entries: u32) -> io::Result<IoUring> {
    let cq = entries.saturating_mul(8);
    match IoUring::builder()
        .setup_cqsize(cq)
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(entries)
    {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            IoUring::builder().setup_cqsize(cq).build(entries)
        }
        made => made,
    }
}

/// Whether the running kernel's accept completions say when more
/// connections wait (`IORING_CQE_F_SOCK_NONEMPTY`, set by accepts since
/// Linux 6.10); a release it cannot read says no.
fn kernel_tells_nonempty() -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_bytes();
    let mut parts = release.split(|&b| !b.is_ascii_digit()).map(|p| {
        std::str::from_utf8(p)
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
    });
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (6, 10),
        _ => false,
    }
}

/// `seconds` as the ring's timeout.
fn timespec(seconds: f64) -> types::Timespec {
    let s = seconds.clamp(0.0, 1e9);
    types::Timespec::new()
        .sec(s.trunc() as u64)
        .nsec((s.fract() * 1e9) as u32)
}

/// A receive into new bytes of at most `nbytes` from `fd` (see
/// [`LoopRing::recv`]), not yet submitted; a stream socket's first buffer
/// is of `first` bytes (at least [`RECV_FIRST`]): one kept in `spare`
/// when there is one. A grown one is lent nothing while it waits: the
/// operation is a readiness poll ([`InFlight::deferred`]) and, once that
/// answers, receives as it is dispatched into a new `bytes` object of
/// `first` bytes made then ([`State::receive_ready`]), cut to what it
/// took, so that a large message is never copied in user space and the
/// kernel writes memory that the message before it just freed (in the
/// CPU's cache) rather than a buffer lent while the connection waited
/// (written after every other connection's messages went through the
/// cache: on 100 KiB echo at 50 connections the kernel's two copies of a
/// message cost twice as much, `docs/benchmarks.md`).
#[inline(always)]
fn recv_op(ask: RecvAsk, spare: &mut Spares) -> PyResult<InFlight> {
    let RecvAsk {
        fd,
        nbytes,
        socket,
        stream,
        first,
        ..
    } = ask;
    if socket && stream {
        let want = nbytes.min(RECV_MAX);
        let first = want.min(first.clamp(RECV_FIRST, RECV_MAX));
        let memory = if first > RECV_FIRST {
            Memory::Nothing
        } else {
            match spare.small.pop() {
                Some(v) if first == RECV_FIRST => Memory::Owned(v),
                kept => {
                    spare.small.extend(kept);
                    Memory::fresh(first)
                }
            }
        };
        let mut op = InFlight::new(Kind::Recv, fd, true, memory, first);
        op.rest = want - first;
        if first > RECV_FIRST {
            op.grown = first;
            op.waiting_ready = true;
        }
        return Ok(op);
    }
    if ask.datagram {
        let slot = MsgSlot::new(Memory::try_fresh(nbytes)?, nbytes, None);
        return Ok(InFlight::new(
            Kind::RecvMsg,
            fd,
            true,
            Memory::Msg(slot),
            nbytes,
        ));
    }
    Ok(InFlight::new(
        Kind::Recv,
        fd,
        socket,
        Memory::try_fresh(nbytes)?,
        nbytes,
    ))
}

/// A grown first buffer of `first` bytes (see [`recv_op`]): a new
/// `bytes` object the receive fills, made as it is dispatched.
#[inline(never)]
fn grown_memory(py: Python<'_>, first: usize) -> PyResult<Memory> {
    let obj = crate::fresh::unfilled(py, first)?;
    // SAFETY: `obj` is a bytes object (`unfilled`'s); its contents,
    // `first` bytes, stay where they are while the operation holds it,
    // and only `finish` resizes it, after the completion.
    let at = unsafe { pyo3::ffi::PyBytes_AsString(obj.as_ptr()) } as usize;
    Ok(Memory::Bytes(obj, at))
}

/// The export of `buf` for a receive into it (`what` names the call in
/// the error), refused unless writable and contiguous, and the room the
/// receive takes: at most `nbytes` of it (0: all).
fn receive_target(
    buf: &Bound<'_, PyAny>,
    nbytes: usize,
    what: &str,
) -> PyResult<(PyBuffer<u8>, usize)> {
    let b = PyBuffer::<u8>::get(buf)?;
    if b.readonly() || !b.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} needs a writable, contiguous buffer"
        )));
    }
    let room = b.len_bytes();
    let n = if nbytes == 0 { room } else { nbytes.min(room) };
    Ok((b, n))
}

fn too_many() -> PyErr {
    PyRuntimeError::new_err(format!(
        "{MAX_IN_FLIGHT} operations are in flight on the event loop's ring: none can be added"
    ))
}

fn closed() -> PyErr {
    PyRuntimeError::new_err("the event loop's ring is closed")
}

fn busy() -> PyErr {
    PyRuntimeError::new_err(
        "the event loop's ring is in use by another thread (an event loop is not thread-safe)",
    )
}
