//! The epoll fallback for socket operations.
//!
//! Where io_uring is blocked, file operations go to a pool of threads that
//! make blocking calls. A socket operation cannot: a read on an idle
//! connection may wait forever, and a pool thread per waiting connection
//! does not scale. So socket operations go here instead: the socket is
//! non-blocking (the `net` types make it so on this backend); the call is
//! tried at once on the submitting thread; if the kernel says `EAGAIN`
//! (or `EINPROGRESS`, for a connect) the request waits for readiness in an
//! epoll set (the `polling` crate) watched by one thread, which retries
//! the call when the socket is ready and completes the request.
//!
//! A request waiting here is cancelled by taking it out of the set: the
//! kernel holds nothing of it, so its memory is free at once.
//!
//! epoll takes a descriptor once, but a stream may have a read and a write
//! waiting at the same time. So each waiting request is registered under
//! a duplicate of its socket's descriptor, its own: the two are separate
//! entries of the set for the same socket. The duplicate is deleted from
//! the set before it is closed (closing a duplicate does not take it out
//! while the socket's own descriptor is open).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use polling::{Event, Events, Poller};

use super::driver::{call_user, Cancel, Request};
use crate::kind::OpKind;

/// One thread watching the sockets of waiting requests.
pub(crate) struct Readiness {
    shared: Arc<Shared>,
}

struct Shared {
    poller: Poller,
    waiting: Mutex<Waiting>,
    stop: AtomicBool,
}

/// The requests waiting for readiness, by key, each with the duplicate of
/// its socket's descriptor that the set watches.
#[derive(Default)]
struct Waiting {
    slots: Vec<Option<(Request, OwnedFd)>>,
    free: Vec<usize>,
}

/// What a request waits for.
fn interest(kind: OpKind, key: usize) -> Event {
    match kind {
        OpKind::Accept | OpKind::Recv | OpKind::RecvSelect => Event::readable(key),
        _ => Event::writable(key),
    }
}

/// The request's socket, borrowed.
fn socket(req: &Request) -> BorrowedFd<'_> {
    // SAFETY: the request keeps its socket open until it is completed or
    // dropped, and this borrow does not outlive it.
    unsafe { BorrowedFd::borrow_raw(req.op.fd) }
}

/// The result of a connect whose socket became writable: its `SO_ERROR`.
fn connect_result(req: &Request) -> i32 {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads one int into a live local.
    let rc = unsafe {
        libc::getsockopt(
            req.op.fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    match rc {
        0 => -err,
        _ => -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    }
}

/// Whether a raw result means "not ready yet".
fn would_block(res: i32) -> bool {
    res == -libc::EAGAIN || res == -libc::EWOULDBLOCK
}

impl Readiness {
    /// Starts the watching thread.
    pub(crate) fn new() -> io::Result<Readiness> {
        let shared = Arc::new(Shared {
            poller: Poller::new()?,
            waiting: Mutex::new(Waiting::default()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("blockio-net".into())
            .spawn(move || watch(&s))?;
        Ok(Readiness { shared })
    }

    /// Performs `req` now if its socket is ready, else waits for it.
    pub(crate) fn submit(&self, req: Request) {
        if req.abandoned() {
            return;
        }
        let res = req.op.run_blocking_raw();
        match (req.op.kind(), res) {
            (OpKind::Connect, r) if r == -libc::EINPROGRESS => self.wait(req),
            (_, r) if would_block(r) => self.wait(req),
            (_, r) => req.done.complete(r),
        }
    }

    /// Puts `req` in the set until its socket is ready.
    fn wait(&self, req: Request) {
        let mut w = self
            .shared
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = w.free.pop().unwrap_or_else(|| {
            w.slots.push(None);
            w.slots.len() - 1
        });
        let event = interest(req.op.kind(), key);
        let added = socket(&req).try_clone_to_owned().and_then(|dup| {
            // SAFETY: `dup` is kept beside the request while it is in the
            // set, and deleted from the set before it is closed.
            unsafe { self.shared.poller.add(dup.as_raw_fd(), event) }.map(|()| dup)
        });
        match added {
            Ok(dup) => w.slots[key] = Some((req, dup)),
            Err(e) => {
                w.free.push(key);
                drop(w);
                req.done.complete(-e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }

    /// Cancels the request whose target `c` names, if it is waiting.
    pub(crate) fn cancel(&self, c: &Cancel) {
        let mut w = self
            .shared
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(key) = w
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|(r, _)| c.names(&r.done)))
        else {
            return;
        };
        let (req, dup) = w.slots[key].take().expect("found above");
        let _ = self.shared.poller.delete(dup.as_fd());
        w.free.push(key);
        drop(w);
        req.done.complete(-libc::ECANCELED);
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.poller.notify();
    }
}

/// The watching thread: retries each request whose socket became ready.
fn watch(shared: &Shared) {
    let mut events = Events::new();
    while !shared.stop.load(Ordering::SeqCst) {
        events.clear();
        if shared.poller.wait(&mut events, None).is_err() {
            continue;
        }
        for ev in events.iter() {
            retry(shared, ev.key);
        }
    }
    // The engine is gone: nobody will await what still waits.
    let mut w = shared.waiting.lock().unwrap_or_else(|e| e.into_inner());
    let left: Vec<(Request, OwnedFd)> = w.slots.iter_mut().filter_map(Option::take).collect();
    drop(w);
    for (req, dup) in left {
        let _ = shared.poller.delete(dup.as_fd());
        // A panicking waker is reported by the panic hook; the others are
        // still completed.
        let _ = call_user(move || {
            req.done.complete(-libc::ECANCELED);
            drop(req);
        });
    }
}

/// Tries the request under `key` again, with the set unlocked during the
/// system call; completes it, or re-arms it if the socket is not ready
/// after all (and its future still wants it).
fn retry(shared: &Shared, key: usize) {
    let (req, dup) = {
        let mut w = shared.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // The key stays reserved (not in `free`) while the call runs.
        match w.slots.get_mut(key).and_then(Option::take) {
            Some(slot) => slot,
            None => return,
        }
    };
    let res = match req.op.kind() {
        OpKind::Connect => connect_result(&req),
        _ => req.op.run_blocking_raw(),
    };
    let mut w = shared.waiting.lock().unwrap_or_else(|e| e.into_inner());
    if would_block(res) && !req.abandoned() {
        let event = interest(req.op.kind(), key);
        if shared.poller.modify(dup.as_fd(), event).is_ok() {
            w.slots[key] = Some((req, dup));
            return;
        }
    }
    let _ = shared.poller.delete(dup.as_fd());
    w.free.push(key);
    drop(w);
    // On the watching thread: a panicking waker is reported by the panic
    // hook and the thread goes on serving the other sockets.
    let _ = call_user(move || {
        req.done.complete(res);
        drop(req);
    });
}
