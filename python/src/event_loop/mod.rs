//! The completion core of blockio's asyncio event loop
//! (`blockio.new_event_loop()`): one io_uring per loop, operations on
//! sockets, pipes and descriptors whose results arrive as completions.
//!
//! # Why a proactor
//!
//! Replacing only the poller of asyncio's selector loop (epoll readiness
//! through a ring) buys parity with epoll: every read still costs a wake-up
//! plus a `recv` system call. The loop is therefore a *proactor*: the
//! Python class (`blockio/_loop.py`) is built on asyncio's
//! `BaseProactorEventLoop`, whose socket, pipe and datagram transports ask
//! a proactor for whole operations (`recv_into`, `send`, `accept`, ...) and
//! react to their completion. [`LoopRing`] is that proactor's kernel side:
//! it submits the operation, owns its memory until the completion, and
//! hands back a batch of completions per wake-up, taken with the GIL
//! released while the thread waits in `io_uring_enter`.
//!
//! # What the ring does
//!
//! * `recv`/`read` into new `bytes`, or into a caller's writable buffer
//!   (`recv_into`), held and so kept alive and unresizable until the
//!   completion, even after a cancel; a socket's `recv` into new bytes
//!   lends the kernel a 2 KiB first buffer and, when that fills, takes the
//!   rest of what the socket holds at once through one scratch buffer of
//!   the ring (so that 10,000 idle connections pin 2 KiB each, not the
//!   64 KiB of asyncio's proactor transports); a transport's receive
//!   after a message that filled it waits for readiness instead (a
//!   one-shot poll, no buffer lent), then receives as it is dispatched
//!   into a `bytes` object sized from that message, made then and cut to
//!   size, no copy (`ring::next_first`, `State::receive_ready`; no
//!   budget: such a receive lends nothing while it waits);
//! * `send`/`write` of a caller's buffer: what the descriptor takes at
//!   once is written at once (non-blocking), the rest on the ring,
//!   resubmitted after each short write, so that one completion means the
//!   whole buffer went out;
//! * `pread` of a file at an offset into new bytes or a caller's buffer
//!   (`Engine.aread`'s read that the page cache cannot serve and
//!   `Engine.areadinto`'s, and so a `blockio.open` file's, on this loop:
//!   no driver thread, eventfd or thread hop), handed to the kernel at
//!   once so that the kernel holds the file from then on (a read the
//!   kernel's workers copy, in a slot of the ring's registered-file
//!   table, taken at the call: see `files`);
//! * `pwrite` of a caller's buffer to a file at an offset (`Engine.awrite`
//!   on this loop), handed to the kernel at once and never cancelled: a
//!   write begun lands, and the loop's close waits for it;
//! * `openat` of a path (a `blockio.open` on this loop), handed to the
//!   kernel at once; a cancelled open the kernel finished anyway has its
//!   descriptor closed by the proactor, and one the loop's close finds
//!   finished is closed there;
//! * `accept` with the peer's address read from the kernel's answer;
//! * `connect` of an IPv4, IPv6 or Unix stream socket to an address the
//!   proactor packs as the kernel's `sockaddr_in`/`sockaddr_in6`/
//!   `sockaddr_un`, handed to the kernel at once, which waits for the
//!   handshake itself;
//! * a datagram's `recvmsg` (into new bytes or a caller's buffer) and
//!   `sendmsg` (to a packed address or the connected peer), whose message
//!   header, `iovec`, address and bytes are one box the operation owns
//!   until its completion (`ops::MsgSlot`); the sender's address is made
//!   into what `socket.recvfrom` gives (`sockaddr`), and a datagram longer
//!   than the room is cut (`MSG_TRUNC`), as `recvfrom` cuts it. A send is
//!   submitted `MSG_DONTWAIT`: one the socket cannot take is answered
//!   `EAGAIN` and goes through the readiness poll below, then a new
//!   submission, never the kernel's own retry of the same message. A
//!   datagram endpoint's `recvmsg` is kept armed as a stream transport's
//!   receive is (`dispatch::StreamRx` with `datagram` set): its completion
//!   goes from the dispatch to the protocol's `datagram_received`, not
//!   through a future, and each datagram is taken by that `recvmsg` (none
//!   is tried in the loop's thread at the arming; `sock_recvfrom`'s
//!   one-shot receive is, see `ring::receive_now`);
//! * one-shot `POLL_ADD` (the loop's `add_reader`/`add_writer`, pidfds of
//!   subprocesses, and the operations asyncio drives by readiness);
//! * cancellation (`ASYNC_CANCEL`): the operation still completes once,
//!   and its memory is released only then;
//! * an operation the kernel answers with `EAGAIN` (a descriptor the
//!   caller set `O_NONBLOCK`, such as a pipe) waits for readiness with a
//!   poll under the same token and is then submitted again.
//!
//! Timers and the ready queue are asyncio's containers (the loop's
//! `_scheduled` heap and `_ready` deque); the turn that walks them,
//! asyncio's `BaseEventLoop._run_once`, is Rust (`turn`): the nearest
//! timer's deadline is the timeout of the ring's wait, which runs in the
//! same call (`select`, the body of `RingProactor.select`). The batch a
//! wait returns is dispatched by `dispatch_batch`: a socket transport's
//! receive reaches the transport from there, everything else the
//! proactor's Python code (futures, callbacks).
//!
//! # Lifecycle
//!
//! `close()` cancels everything in flight and reaps until the kernel has
//! answered each operation, so that no buffer is freed while the kernel may
//! still write it; an operation that does not answer within a bound has
//! its memory leaked on purpose rather than freed. After `fork()` the child
//! must never submit to the parent's ring (the ring is shared, so a cancel
//! from the child would cancel the parent's operations): a ring keeps the
//! core's fork guard from when it was made (`fds::Born`, which sees any
//! child made without `CLONE_VM`, with or without fork handlers), and in
//! a child it refuses further use and drops without submitting. No `SQPOLL`
//! (operations submitted through it keep the credentials from before a
//! `setuid`).
//!
//! Modules: `ring` (the Python class), `ops` (one operation in flight and
//! its submission entry), `files` (the registered-file table that holds
//! a large read's file without a descriptor, which keeps the process's
//! POSIX record locks), `inline` (the write tried before the ring),
//! `dispatch` (a completion batch dispatched to the proactor, and a socket
//! transport's receive armed, without Python frames), `select` (the
//! proactor's wait: the work before it, the wait, the dispatch), `turn`
//! (one turn of the loop, asyncio's `_run_once`), `own_run` (whether a
//! ready handle's `_run` is asyncio's own, kept per class), `sockaddr`
//! (a kernel socket address as Python spells it), `write` (a socket transport's
//! common write, without Python frames), `sendfile` (a transport's
//! `loop.sendfile` of a cached range, in one native call), `vcall` (a
//! Python call with its arguments in place).

mod dispatch;
mod files;
mod inline;
mod ops;
mod own_run;
mod ring;
mod select;
mod sendfile;
mod slots;
mod sockaddr;
mod turn;
mod vcall;
mod write;

pub(crate) use dispatch::{arm_receive, arm_ring_receive, dispatch_batch, StreamRx};
pub(crate) use ring::LoopRing;
pub(crate) use select::select_batch;
pub(crate) use turn::run_turn;
pub(crate) use write::StreamTx;
