//! One operation in flight on a loop's ring: what it does, the memory the
//! kernel reads or writes until its completion, and the submission entry
//! for its current step (the operation itself, or the readiness poll it
//! waits on after an `EAGAIN`).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use io_uring::types::{Fd, Fixed};
use io_uring::{opcode, squeue};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Receive into memory the ring owns (`recv`, or `read` on a pipe).
    Recv,
    /// Receive into the caller's buffer.
    RecvInto,
    /// Send the whole of the caller's buffer (`send`, or `write`).
    Send,
    /// Accept a connection.
    Accept,
    /// Wait for readiness (`POLL_ADD`, one-shot).
    Poll,
    /// Read a file at an offset (`pread`) into a new `bytes` object (the
    /// value) or the caller's buffer (the value: the count):
    /// one read, short at the end of the file, as the engine's. One whose
    /// memory is [`Memory::Held`] (its file in a slot of the ring's file
    /// table: any read while a slot is free, see [`INLINE_PREAD_MAX`]) is
    /// copied by the kernel's worker threads, never on the loop's thread.
    Pread,
    /// Write the caller's buffer to a file at an offset (`pwrite`): one
    /// write, whose count is the value (short only where the kernel cuts
    /// it, as the engine's). Never cancelled (see `LoopRing::pwrite`).
    Pwrite,
    /// Connect a socket to the address in its memory (`connect`): the
    /// value is 0.
    Connect,
    /// Open a path (`openat` from the working directory): the value is the
    /// new descriptor. Its flags are the operation's `mask`, its mode the
    /// `offset`.
    Open,
    /// Receive one datagram and its sender's address (`recvmsg`) into
    /// memory the ring owns (the value: `(bytes, address)`) or the
    /// caller's buffer (the value: `(count, address)`); see [`MsgSlot`].
    RecvMsg,
    /// Send one datagram, to the address in its memory or to the
    /// connected peer (`sendmsg`); the value is the count sent. See
    /// [`MsgSlot`].
    SendMsg,
}

/// A socket address as the kernel fills it in.
pub(crate) struct AddrSlot {
    /// The address.
    pub storage: libc::sockaddr_storage,
    /// Its length (in: the room; out: the length used).
    pub len: libc::socklen_t,
}

/// A datagram's `recvmsg` or `sendmsg` as the kernel reads and writes
/// it: the message header, its one `iovec`, the peer's address and the
/// datagram's bytes, in one box owned by the operation until its
/// completion is reaped (or leaked by the ring's close, as every
/// operation's memory), so that none of them moves or is freed while the
/// kernel holds their addresses: it reads the header and address at the
/// submission and writes the bytes, the address, its length and the
/// message's flags (`MSG_TRUNC`) until the completion.
pub(crate) struct MsgSlot {
    /// The header; its pointers are set by [`MsgSlot::header`] for each
    /// submission, to the fields below (the box never moves).
    hdr: libc::msghdr,
    /// The one buffer of the message.
    iov: libc::iovec,
    /// The sender's address (a receive, filled in by the kernel) or the
    /// destination (a send; a length of 0: the connected peer).
    pub addr: AddrSlot,
    /// The datagram's bytes: [`Memory::Owned`] (a receive into new bytes,
    /// room for `room` bytes, not set; a send's own copy) or
    /// [`Memory::Lent`] (the caller's buffer).
    pub data: Memory,
    /// Bytes of room a receive hands the kernel (at most the buffer's),
    /// or bytes a send writes.
    pub room: usize,
}

// SAFETY: the raw pointers of `hdr` and `iov` point only into the box
// itself and into `data`, which the slot owns (or holds through a buffer
// export, itself `Send`); they are dereferenced only by the kernel, and
// the slot is reached only under the ring's lock, by one thread at a time.
unsafe impl Send for MsgSlot {}

impl MsgSlot {
    /// A slot for a datagram of `room` bytes in `data`, to or from `addr`
    /// (a receive: none yet, the whole storage is room for it).
    pub fn new(data: Memory, room: usize, addr: Option<&[u8]>) -> Box<Self> {
        let mut slot = Box::new(MsgSlot {
            // SAFETY: msghdr and iovec are plain old data; all zeroes (null
            // pointers, zero lengths) is valid for both.
            hdr: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            iov: unsafe { std::mem::zeroed() },
            addr: *addr_slot(),
            data,
            room,
        });
        // (none yet: a send to the connected peer, or a receive's, whose
        // room `header` gives)
        slot.addr.len = 0;
        if let Some(addr) = addr {
            let n = addr
                .len()
                .min(std::mem::size_of::<libc::sockaddr_storage>());
            // SAFETY: `n` bytes fit in the storage (bounded above), and the
            // two do not overlap (the slot is new).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    addr.as_ptr(),
                    std::ptr::addr_of_mut!(slot.addr.storage).cast::<u8>(),
                    n,
                );
            }
            slot.addr.len = n as libc::socklen_t;
        }
        slot
    }

    /// The header for the next submission of a receive (`send` false:
    /// the whole storage is room for the sender's address) or a send (the
    /// destination's length, none when 0), pointing at this slot's
    /// fields; they stay where they are while the box lives.
    pub(crate) fn header(&mut self, send: bool) -> *mut libc::msghdr {
        let base: *mut u8 = match &mut self.data {
            Memory::Owned(v) => v.as_mut_ptr(),
            Memory::Lent(b) => b.buf_ptr().cast::<u8>(),
            _ => std::ptr::null_mut(),
        };
        self.iov = libc::iovec {
            iov_base: base.cast(),
            iov_len: self.room,
        };
        self.hdr.msg_iov = std::ptr::addr_of_mut!(self.iov);
        self.hdr.msg_iovlen = 1;
        self.hdr.msg_control = std::ptr::null_mut();
        self.hdr.msg_controllen = 0;
        self.hdr.msg_flags = 0;
        if send && self.addr.len == 0 {
            self.hdr.msg_name = std::ptr::null_mut();
            self.hdr.msg_namelen = 0;
        } else {
            if !send {
                self.addr.len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            }
            self.hdr.msg_name = std::ptr::addr_of_mut!(self.addr.storage).cast();
            self.hdr.msg_namelen = self.addr.len;
        }
        std::ptr::addr_of_mut!(self.hdr)
    }

    /// After a receive's completion: the sender's address length the
    /// kernel wrote into the header, kept as the address's.
    pub fn received(&mut self) {
        self.addr.len = self.hdr.msg_namelen;
    }
}

/// The memory an operation hands to the kernel.
pub(crate) enum Memory {
    /// None (a poll).
    Nothing,
    /// Bytes the ring allocated (a receive whose result is new bytes):
    /// made by [`Memory::fresh`], not zeroed; its length is set to what
    /// the kernel wrote when the receive completes, and only then read
    /// (through [`Memory::received`]).
    Owned(Vec<u8>),
    /// The caller's buffer, held until the completion.
    Lent(PyBuffer<u8>),
    /// A new `bytes` object the kernel fills (a file read whose result is
    /// new bytes, or a socket receive's grown first buffer, made as the
    /// receive is dispatched: made by `fresh::unfilled`, not set), and the
    /// address of its contents. Held until the completion, even after a
    /// cancel, and then cut to what the kernel wrote: the bytes are never
    /// copied.
    Bytes(Py<PyBytes>, usize),
    /// A socket address (an accept).
    Addr(Box<AddrSlot>),
    /// A path, NUL-terminated (an open).
    Path(std::ffi::CString),
    /// A datagram's message header, buffer and address (a `recvmsg` or
    /// `sendmsg`).
    Msg(Box<MsgSlot>),
    /// A file read's memory (`Bytes` or `Lent`) and what holds its file
    /// until the completion: such a read goes to the kernel's worker
    /// threads (`IOSQE_ASYNC`), which look a number up only when they
    /// start it, so the file must be taken at the submission whatever the
    /// caller does with its own number meanwhile (see `LoopRing::pread`).
    /// Boxed, so that no operation grows for it (`InFlight` is moved
    /// whole for every socket message).
    Held(Box<(Memory, Hold)>),
}

/// What holds the file of a read the kernel's workers copy (see
/// [`Memory::Held`]).
pub(crate) enum Hold {
    /// A slot of the ring's registered-file table (see `files`): the read
    /// is issued on it, and it is emptied when the completion is reaped,
    /// which closes no descriptor and so keeps the process's POSIX record
    /// locks on the file.
    Slot(u32),
    /// The read's own duplicate of the caller's descriptor, which the read
    /// is issued on (the operation's `fd` is its number), closed at the
    /// completion: where no
    /// slot could be had (see `files`). Its close releases the process's
    /// record locks on the file.
    Dup(OwnedFd),
}

impl Memory {
    /// A receive's own buffer of room for `len` bytes, allocated but not
    /// zeroed and empty: the kernel writes it, and its length becomes what
    /// the kernel reported writing once the receive completes. Zeroing
    /// cost a pass over 2 KiB per message that nothing read.
    pub fn fresh(len: usize) -> Self {
        Memory::Owned(Vec::with_capacity(len))
    }

    /// [`Memory::fresh`] of a length the caller chose (a receive's
    /// `nbytes`): `MemoryError`, as `socket.recv` raises, where the
    /// allocation fails, instead of aborting the process.
    pub fn try_fresh(len: usize) -> PyResult<Self> {
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| {
            pyo3::exceptions::PyMemoryError::new_err(format!(
                "cannot allocate a receive of {len} bytes"
            ))
        })?;
        Ok(Memory::Owned(v))
    }
}

/// A transport's receive that a stream receive completes (see
/// `dispatch`): kept with the operation in the ring's slab, so that its
/// completion reaches the transport with no entry in the proactor's Python
/// tables.
pub(crate) struct Owner {
    /// The receive (`StreamReceive`).
    pub rx: Py<super::dispatch::StreamRx>,
    /// What its completion calls, `callback(data, exc)`.
    pub callback: PyObject,
    /// The socket the operation holds open (`hold_open`) until it is
    /// done, or None (not holdable, or the hold ended at a cancel).
    pub hold: Option<PyObject>,
}

/// An operation the kernel has not answered yet.
pub(crate) struct InFlight {
    /// What it does.
    pub kind: Kind,
    /// The descriptor it works on.
    pub fd: RawFd,
    /// A socket (`recv`/`send`) rather than a pipe or other file
    /// (`read`/`write` at the current position).
    pub socket: bool,
    /// The memory the kernel uses.
    pub memory: Memory,
    /// Bytes to transfer (receives: at most; sends: all of them).
    pub len: usize,
    /// Bytes a send has already written; bytes a socket receive took
    /// beyond its first buffer (see `rest`).
    pub done: usize,
    /// Bytes a socket receive may take beyond its first buffer: when the
    /// kernel fills that buffer, they are received at once from the
    /// socket, without waiting.
    pub rest: usize,
    /// Bytes of a grown first buffer (larger than 2 KiB) of a socket
    /// receive, made as it is dispatched (see `ring::recv_op`); 0 for any
    /// other.
    pub grown: usize,
    /// The poll mask of a [`Kind::Poll`]; the `open` flags of a
    /// [`Kind::Open`]; the `recvmsg` flags of a [`Kind::RecvMsg`].
    pub mask: u32,
    /// The file offset a [`Kind::Pread`] or [`Kind::Pwrite`] starts at; the
    /// mode of a [`Kind::Open`].
    pub offset: u64,
    /// A readiness poll is in flight in its place (after `EAGAIN`).
    pub waiting_ready: bool,
    /// Its cancellation was asked for.
    pub cancelled: bool,
    /// A socket receive that the kernel finished with the bytes a send of
    /// this loop's own wrote, as that send's system call returned, and to
    /// whose sender the loop wrote again since: what that write sent is
    /// taken with it (see `State::mark_peer_receives`).
    pub peer_sent: bool,
    /// The transport's receive this operation completes, if it is one:
    /// kept in the operation itself, not boxed, so that arming and
    /// dispatching a message's receive allocate and free nothing for it
    /// (`malloc` and `free` of a box were some 150 instructions of each
    /// message, `docs/benchmarks.md`).
    pub owner: Option<Owner>,
}

impl InFlight {
    /// A new operation on `fd`, not yet submitted.
    pub fn new(kind: Kind, fd: RawFd, socket: bool, memory: Memory, len: usize) -> Self {
        InFlight {
            kind,
            fd,
            socket,
            memory,
            len,
            done: 0,
            rest: 0,
            grown: 0,
            mask: 0,
            offset: 0,
            waiting_ready: false,
            cancelled: false,
            peer_sent: false,
            owner: None,
        }
    }

    /// A transport's receive with a grown first buffer that waits for
    /// readiness (a one-shot poll, `waiting_ready` set from its arming)
    /// and receives when its completion is dispatched, into a `bytes`
    /// object made then (`State::receive_ready`), not into one lent to the
    /// kernel while it waits: see `ring::recv_op`. Told by its grown size
    /// with no memory yet, not by a flag of its own (a larger operation
    /// was moved by calls to `memcpy`, some 60 instructions more per small
    /// message, `docs/benchmarks.md`).
    pub fn deferred(&self) -> bool {
        self.grown > 0 && matches!(self.memory, Memory::Nothing)
    }

    /// The poll mask that says this operation can make progress.
    fn ready_mask(&self) -> u32 {
        match self.kind {
            Kind::Send | Kind::SendMsg => libc::POLLOUT as u32,
            Kind::Poll => self.mask,
            _ => libc::POLLIN as u32,
        }
    }

    /// The address and room of the memory a receive fills.
    fn recv_target(&mut self) -> (*mut u8, u32) {
        let room = clamp_len(self.len);
        let memory = match &mut self.memory {
            Memory::Held(held) => &mut held.0,
            memory => memory,
        };
        match memory {
            Memory::Owned(v) => (v.as_mut_ptr(), room),
            Memory::Lent(b) => (b.buf_ptr().cast::<u8>(), room),
            Memory::Bytes(_, at) => (*at as *mut u8, room),
            _ => (std::ptr::null_mut(), 0),
        }
    }

    /// The address and length of what a send has still to write.
    fn send_source(&self) -> (*const u8, u32) {
        let rest = clamp_len(self.len - self.done);
        // `done < len <= the buffer's length`: the pointer stays inside it.
        match &self.memory {
            Memory::Lent(b) => (
                b.buf_ptr()
                    .cast::<u8>()
                    .cast_const()
                    .wrapping_add(self.done),
                rest,
            ),
            Memory::Owned(v) => (v.as_ptr().wrapping_add(self.done), rest),
            _ => (std::ptr::null(), 0),
        }
    }

    /// The submission entry for the operation's next step, tagged `token`.
    ///
    /// The pointers in it stay valid while `self` is kept (the memory is
    /// owned by `self` or held through a Python buffer export).
    pub fn entry(&mut self, token: u64) -> squeue::Entry {
        let fd = Fd(self.fd);
        if self.waiting_ready || self.kind == Kind::Poll {
            return opcode::PollAdd::new(fd, self.ready_mask())
                .build()
                .user_data(token);
        }
        let e = match self.kind {
            Kind::Recv | Kind::RecvInto => {
                let (ptr, len) = self.recv_target();
                if self.socket {
                    opcode::Recv::new(fd, ptr, len).build()
                } else {
                    opcode::Read::new(fd, ptr, len).offset(u64::MAX).build()
                }
            }
            Kind::Pread => {
                let (ptr, len) = self.recv_target();
                match &self.memory {
                    Memory::Held(held) => match held.1 {
                        Hold::Slot(slot) => opcode::Read::new(Fixed(slot), ptr, len),
                        Hold::Dup(ref own) => opcode::Read::new(Fd(own.as_raw_fd()), ptr, len),
                    }
                    .offset(self.offset)
                    .build()
                    .flags(squeue::Flags::ASYNC),
                    _ => opcode::Read::new(fd, ptr, len).offset(self.offset).build(),
                }
            }
            Kind::Pwrite => {
                let (ptr, len) = self.send_source();
                opcode::Write::new(fd, ptr, len).offset(self.offset).build()
            }
            Kind::Send => {
                let (ptr, len) = self.send_source();
                if self.socket {
                    opcode::Send::new(fd, ptr, len)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                } else {
                    opcode::Write::new(fd, ptr, len).offset(u64::MAX).build()
                }
            }
            Kind::Accept => {
                let Memory::Addr(slot) = &mut self.memory else {
                    unreachable!("an accept always carries its address slot")
                };
                let addr = std::ptr::addr_of_mut!(slot.storage).cast::<libc::sockaddr>();
                opcode::Accept::new(fd, addr, std::ptr::addr_of_mut!(slot.len))
                    .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
                    .build()
            }
            Kind::Connect => {
                let Memory::Addr(slot) = &self.memory else {
                    unreachable!("a connect always carries its address")
                };
                let addr = std::ptr::addr_of!(slot.storage).cast::<libc::sockaddr>();
                opcode::Connect::new(fd, addr, slot.len).build()
            }
            Kind::RecvMsg | Kind::SendMsg => {
                let send = self.kind == Kind::SendMsg;
                let Memory::Msg(slot) = &mut self.memory else {
                    unreachable!("a datagram's message always carries its slot")
                };
                let hdr = slot.header(send);
                if send {
                    // `MSG_DONTWAIT`: a send the socket cannot take now is
                    // answered `EAGAIN` (then polled for, and submitted
                    // anew: see `State::advance`), not retried by the
                    // kernel on the same message, whose bytes a Unix
                    // datagram socket's refused try had consumed (the
                    // kernel's retry sent an empty datagram,
                    // `test_loop_datagrams.py`).
                    opcode::SendMsg::new(fd, hdr.cast_const())
                        .flags((libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) as u32)
                        .build()
                } else {
                    opcode::RecvMsg::new(fd, hdr).flags(self.mask).build()
                }
            }
            Kind::Open => {
                let Memory::Path(path) = &self.memory else {
                    unreachable!("an open always carries its path")
                };
                // (the flags and mode as the caller gave them: `mask` and
                // `offset` hold their bits)
                opcode::OpenAt::new(Fd(libc::AT_FDCWD), path.as_ptr())
                    .flags(self.mask as i32)
                    .mode(self.offset as libc::mode_t)
                    .build()
            }
            Kind::Poll => unreachable!("handled above"),
        };
        e.user_data(token)
    }
}

/// The longest file read ([`Kind::Pread`]) the kernel may try at its
/// submission, on the loop's thread, and then only when no slot of the
/// ring's registered-file table is free (or the kernel refused the
/// table). Every other read holds its file in such a slot (a longer one,
/// failing that, in a duplicate of the descriptor: see `files`) and is
/// marked `IOSQE_ASYNC`: the kernel's worker threads run it, and the loop
/// runs its other tasks meanwhile.
///
/// # Why every read, not only long ones
///
/// A read reaches the loop's ring only when the page cache did not serve
/// it at once (the file's inline reads, `loop.sendfile`'s native call of
/// a cached range, take those), so its pages are mostly still on the
/// disk. Tried at its submission, such a read starts the disk's work on
/// the loop's thread, inside `io_uring_enter`: the readahead's page
/// allocations, the file system's block mapping, the block layer's queue
/// and the device's doorbell (on a virtual machine an exit to the host),
/// some tens of microseconds per 4-64 KiB file during which no other
/// connection is served; only the wait for the data is then
/// asynchronous. Sending 3,000 cold 4-64 KiB files from 50 tasks, that
/// call took 10.9 % of the process's cycles (`perf`) and 21 % of its
/// wall-clock samples (`py-spy`), against 1-1.5 % for the sendfile's Python
/// steps around it. On a worker the loop's thread pays one
/// `io_uring_register` (the slot) and the submission, and the workers,
/// threads of the process like a thread pool's, start the disk's reads
/// and copy the pages: serving cold files over HTTP on the shared 2-core
/// machine, `loop.sendfile` went from 0.35x to 1.10x uvloop with
/// aiofiles' rate (whose reads run on a thread pool) and a whole-file
/// `read()` from 0.47x to 1.22x, at about the same CPU time per request
/// (`docs/benchmarks.md`, "File serving, cold: every ring read on the
/// kernel's workers").
///
/// A long read is never tried at its submission, where the loop's thread
/// would copy it (a 512 MiB read into a new `bytes` object, whose pages
/// fault in as they are filled: some 300 ms on the shared 2-core machine,
/// `docs/benchmarks.md`, "Large reads on the loop's ring"): out of slots,
/// it takes a duplicate of its descriptor. A short one out of slots (more
/// than the table's reads in flight at once) is tried at its submission,
/// on the caller's number, rather than take a duplicate whose
/// close would release the process's record locks on the file.
pub(crate) const INLINE_PREAD_MAX: usize = 256 << 10;

/// A length as the 32-bit field of a submission entry (a longer transfer
/// is done in several steps: sends resubmit the rest, receives return
/// what arrived).
fn clamp_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A new address slot for an accept.
pub(crate) fn addr_slot() -> Box<AddrSlot> {
    Box::new(AddrSlot {
        // SAFETY: sockaddr_storage is plain old data; all zeroes is valid.
        storage: unsafe { std::mem::zeroed() },
        len: std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
    })
}
