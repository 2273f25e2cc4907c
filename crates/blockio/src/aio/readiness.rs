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
//! epoll takes a descriptor once, and a stream may have a read and a write
//! waiting at the same time. So the set watches each socket once, keyed by
//! its descriptor, for the union of what its waiting requests want
//! (readable for receives and accepts, writable for the rest), and an
//! event retries the requests it concerns. A waiting request holds its
//! socket open, so the descriptor names that socket for as long as the
//! socket has requests here; it is deleted from the set when its last
//! request leaves, before that request can let the socket close. Waiting
//! opens no descriptor: a connection costs one whether idle or not.

use std::collections::HashMap;
use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use polling::{Event, Events, Poller};

use super::request::{call_user, Cancel, Complete, Request};
use crate::kind::{OpClass, OpKind};

/// One thread watching the sockets of waiting requests.
pub(crate) struct Readiness {
    watcher: Arc<Watcher>,
}

/// What the watching thread shares with the engine: the epoll set and
/// the requests waiting in it.
struct Watcher {
    poller: Poller,
    waiting: Mutex<Waiting>,
    stop: AtomicBool,
}

/// The requests waiting for readiness, by socket (the descriptor is the
/// set's key for it).
#[derive(Default)]
struct Waiting {
    sockets: HashMap<RawFd, Watched>,
    /// The socket each waiting request waits on, by its target's address
    /// ([`target_key`]), so that a cancel finds its request without a
    /// scan of every socket (a server with thousands of idle connections
    /// whose reads time out cancels thousands of requests a second).
    /// Entries leave with their requests; one left behind would only send
    /// a cancel to a socket whose requests it then does not name.
    fds: HashMap<usize, RawFd>,
}

/// The key of a request's target in [`Waiting::fds`]: its address, which
/// names one operation while the request or a [`Cancel`] of it lives.
fn target_key(done: &Arc<dyn Complete>) -> usize {
    Arc::as_ptr(done).cast::<()>() as usize
}

/// One socket in the set.
#[derive(Default)]
struct Watched {
    reqs: Vec<Request>,
    /// The watching thread is retrying some of its requests, unlocked:
    /// the socket stays in the set until it has put them back.
    retrying: bool,
}

/// What a waiting request waits for its socket to become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaits {
    Readable,
    Writable,
}

/// What a request of `kind` waits for, as its kind's class says; `None`
/// for the classes that never wait in the set (file data and metadata: a
/// file is always ready, so their first result stands).
fn awaits(kind: OpKind) -> Option<Awaits> {
    match kind.class() {
        OpClass::SocketIn => Some(Awaits::Readable),
        OpClass::SocketOut => Some(Awaits::Writable),
        OpClass::FileData | OpClass::Metadata => None,
    }
}

/// What the set watches `fd` for: the union of what `reqs` want.
fn interest(fd: RawFd, reqs: &[Request]) -> Event {
    let wants = |a: Awaits| reqs.iter().any(|r| awaits(r.op.kind()) == Some(a));
    Event::new(
        fd as usize,
        wants(Awaits::Readable),
        wants(Awaits::Writable),
    )
}

/// A waiting request's socket, borrowed.
///
/// # Safety
/// A request that holds `fd` open (one of those waiting on it) must live
/// as long as the borrow.
unsafe fn socket<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: the caller's promise.
    unsafe { BorrowedFd::borrow_raw(fd) }
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
    if rc == 0 {
        -err
    } else {
        -io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

/// Whether the kind is a connect, which is not retried once in progress:
/// its outcome is the socket's `SO_ERROR` when it becomes writable. Every
/// other kind is retried with its own system call.
fn is_connect(kind: OpKind) -> bool {
    use OpKind::*;
    match kind {
        Connect => true,
        Accept | Recv | Send | SendVectored | RecvSelect => false,
        Read | Write | ReadVectored | WriteVectored | Fsync | Fdatasync => false,
        Open | Stat | Close | Mkdir | Symlink | Ftruncate => false,
    }
}

/// Whether a raw result means "not ready yet".
fn would_block(res: i32) -> bool {
    res == -libc::EAGAIN || res == -libc::EWOULDBLOCK
}

impl Readiness {
    /// Starts the watching thread.
    pub(crate) fn new() -> io::Result<Readiness> {
        let watcher = Arc::new(Watcher {
            poller: Poller::new()?,
            waiting: Mutex::new(Waiting::default()),
            stop: AtomicBool::new(false),
        });
        let w = watcher.clone();
        std::thread::Builder::new()
            .name("blockio-net".into())
            .spawn(move || watch(&w))?;
        Ok(Readiness { watcher })
    }

    /// Performs `req` now if its socket is ready, else waits for it.
    pub(crate) fn submit(&self, req: Request) {
        if req.abandoned() {
            return;
        }
        let res = req.op.run_blocking_raw();
        let kind = req.op.kind();
        let not_ready = would_block(res) || (res == -libc::EINPROGRESS && is_connect(kind));
        if not_ready && awaits(kind).is_some() {
            self.wait(req)
        } else {
            req.done.complete(res)
        }
    }

    /// Puts `req` in the set until its socket is ready.
    fn wait(&self, req: Request) {
        let mut w = self
            .watcher
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let fd = req.op.fd;
        let watched = w.sockets.contains_key(&fd);
        let reqs = &mut w.sockets.entry(fd).or_default().reqs;
        reqs.push(req);
        let event = interest(fd, reqs);
        let armed = if watched {
            // SAFETY: the requests of `reqs`, which hold `fd` open, stay
            // in the set while the lock is held.
            self.watcher.poller.modify(unsafe { socket(fd) }, event)
        } else {
            // SAFETY: `fd` is deleted from the set before its last waiting
            // request leaves it (see `settle`), and that request holds the
            // socket open until then.
            unsafe { self.watcher.poller.add(fd, event) }
        };
        match armed {
            Ok(()) => {
                let key = reqs.last().map(|r| target_key(&r.done));
                if let Some(key) = key {
                    w.fds.insert(key, fd);
                }
            }
            Err(e) => {
                let req = reqs.pop().expect("pushed above");
                if !watched {
                    w.sockets.remove(&fd);
                }
                drop(w);
                req.done.complete(-e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }

    /// Cancels the request whose target `c` names, if it is waiting.
    pub(crate) fn cancel(&self, c: &Cancel) {
        let mut w = self
            .watcher
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = c.0.as_ptr().cast::<()>() as usize;
        let Some(&fd) = w.fds.get(&key) else {
            return;
        };
        // Not found while a retry has it out of the set: the retry
        // completes it, or puts it back to wait (and the cancel's future
        // is gone, so that retry or the next sees it abandoned).
        let Some(reqs) = w.sockets.get_mut(&fd).map(|s| &mut s.reqs) else {
            return;
        };
        let Some(i) = reqs.iter().position(|r| c.names(&r.done)) else {
            return;
        };
        let req = reqs.remove(i);
        w.fds.remove(&key);
        let failed = settle(&self.watcher.poller, &mut w, fd);
        drop(w);
        req.done.complete(-libc::ECANCELED);
        fail_unwatchable(failed);
    }
}

/// Brings the set's watch of `fd` in line with the requests waiting on
/// it: deleted when none is left, else re-armed for what they want (an
/// event disarms the socket it reports). Called with the set locked,
/// while a request that holds `fd` open is still alive (waiting, or just
/// taken out and not yet dropped). Returns the requests that can no
/// longer wait, for the caller to complete once the lock is let go (their
/// wakers are user code).
#[must_use]
fn settle(poller: &Poller, w: &mut Waiting, fd: RawFd) -> Vec<Request> {
    let Some(Watched { reqs, retrying }) = w.sockets.get(&fd) else {
        return Vec::new();
    };
    // SAFETY: the caller keeps a request that holds `fd` open alive.
    let sock = unsafe { socket(fd) };
    if reqs.is_empty() {
        if !*retrying {
            // (A retry settles it once its requests are back.)
            let _ = poller.delete(sock);
            w.sockets.remove(&fd);
        }
        Vec::new()
    } else if poller.modify(sock, interest(fd, reqs)).is_err() {
        // Unreachable while the socket is open; the requests must not
        // wait for an event that cannot come.
        let left = w.sockets.remove(&fd).unwrap_or_default();
        let _ = poller.delete(sock);
        for req in &left.reqs {
            w.fds.remove(&target_key(&req.done));
        }
        left.reqs
    } else {
        Vec::new()
    }
}

/// Completes requests that could not wait with `EIO`, with no lock held; a
/// panicking waker is reported by the panic hook and the others are still
/// completed.
fn fail_unwatchable(reqs: Vec<Request>) {
    for req in reqs {
        let _ = call_user(move || {
            req.done.complete(-libc::EIO);
            drop(req);
        });
    }
}

impl Drop for Readiness {
    fn drop(&mut self) {
        self.watcher.stop.store(true, Ordering::SeqCst);
        let _ = self.watcher.poller.notify();
    }
}

/// The watching thread: retries the requests whose socket became ready.
fn watch(watcher: &Watcher) {
    let mut events = Events::new();
    while !watcher.stop.load(Ordering::SeqCst) {
        events.clear();
        if watcher.poller.wait(&mut events, None).is_err() {
            continue;
        }
        for ev in events.iter() {
            retry(watcher, ev.key as RawFd, ev.readable, ev.writable);
        }
    }
    // The engine is gone: nobody will await what still waits.
    let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
    let left: Vec<(RawFd, Watched)> = w.sockets.drain().collect();
    w.fds.clear();
    drop(w);
    for (fd, s) in left {
        // SAFETY: `s.reqs`, which hold `fd` open, are alive here.
        let _ = watcher.poller.delete(unsafe { socket(fd) });
        for req in s.reqs {
            // A panicking waker is reported by the panic hook; the others
            // are still completed.
            let _ = call_user(move || {
                req.done.complete(-libc::ECANCELED);
                drop(req);
            });
        }
    }
}

/// Tries again the requests waiting on `fd` that its event concerns, with
/// the set unlocked during the system calls; completes those that are
/// done and puts back those still not ready (whose futures still want
/// them), then re-arms the socket or deletes it from the set.
fn retry(watcher: &Watcher, fd: RawFd, readable: bool, writable: bool) {
    let ready = |r: &Request| match awaits(r.op.kind()) {
        Some(Awaits::Readable) => readable,
        Some(Awaits::Writable) => writable,
        None => true,
    };
    let taken: Vec<Request> = {
        let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = w.sockets.get_mut(&fd) else {
            return;
        };
        let (now, later): (Vec<Request>, Vec<Request>) = s.reqs.drain(..).partition(ready);
        s.reqs = later;
        // The socket stays in the set (disarmed by this event) while the
        // calls run, so that a request arriving meanwhile re-arms it.
        s.retrying = true;
        now
    };
    let mut done = Vec::new();
    let mut again = Vec::new();
    for req in taken {
        let res = if is_connect(req.op.kind()) {
            connect_result(&req)
        } else {
            req.op.run_blocking_raw()
        };
        if would_block(res) && !req.abandoned() {
            again.push(req);
        } else {
            done.push((req, res));
        }
    }
    let mut w = watcher.waiting.lock().unwrap_or_else(|e| e.into_inner());
    let s = w.sockets.get_mut(&fd).expect("kept while retrying");
    s.retrying = false;
    s.reqs.extend(again);
    for (req, _) in &done {
        w.fds.remove(&target_key(&req.done));
    }
    let failed = settle(&watcher.poller, &mut w, fd);
    drop(w);
    fail_unwatchable(failed);
    // On the watching thread: a panicking waker is reported by the panic
    // hook and the thread goes on serving the other sockets.
    for (req, res) in done {
        let _ = call_user(move || {
            req.done.complete(res);
            drop(req);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::op::action::{Action, RecvArgs};
    use crate::op::Op;

    /// A receive's target: its result, and the buffer the kernel fills.
    struct Received {
        result: Mutex<Option<i32>>,
        buf: Box<[u8; 8]>,
    }

    impl Complete for Received {
        fn complete(&self, res: i32) {
            *self.result.lock().unwrap() = Some(res);
        }
    }

    fn result(t: &Received) -> Option<i32> {
        *t.result.lock().unwrap()
    }

    /// A receive on `sock` into the target's own buffer.
    fn recv(sock: &UnixStream) -> (Arc<Received>, Request) {
        let mut buf = Box::new([0u8; 8]);
        let args = RecvArgs {
            buf: buf.as_mut_ptr(),
            len: buf.len(),
        };
        // SAFETY: the buffer is on the heap, owned by the target, which
        // the request keeps until it is completed; the socket outlives the
        // test's set.
        let op = unsafe { Op::from_action(sock.as_raw_fd(), Action::Recv(args), None) };
        let target = Arc::new(Received {
            result: Mutex::new(None),
            buf,
        });
        let done: Arc<dyn Complete> = target.clone();
        (target, Request { op, done })
    }

    fn indexed(r: &Readiness) -> usize {
        r.watcher.waiting.lock().unwrap().fds.len()
    }

    /// Among many sockets with a receive waiting, a cancel takes out the
    /// one it names, alone, and every request leaves the cancel index
    /// with it (cancelled, completed by an event): nothing is left behind
    /// to grow with the connections served.
    #[test]
    fn a_cancel_takes_out_its_own_request_among_many() {
        let r = Readiness::new().unwrap();
        let pairs: Vec<(UnixStream, UnixStream)> = (0..64)
            .map(|_| {
                let (a, b) = UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                (a, b)
            })
            .collect();
        let targets: Vec<Arc<Received>> = pairs
            .iter()
            .map(|(a, _)| {
                let (target, req) = recv(a);
                r.submit(req);
                target
            })
            .collect();
        assert!(targets.iter().all(|t| result(t).is_none()));
        assert_eq!(indexed(&r), pairs.len());

        let cancelled = 17;
        let name: Arc<dyn Complete> = targets[cancelled].clone();
        r.cancel(&Cancel(Arc::downgrade(&name)));
        assert_eq!(result(&targets[cancelled]), Some(-libc::ECANCELED));
        assert_eq!(indexed(&r), pairs.len() - 1);
        for (i, t) in targets.iter().enumerate() {
            if i != cancelled {
                assert_eq!(result(t), None, "a cancel took out receive {i}");
            }
        }

        for (_, b) in &pairs {
            std::io::Write::write_all(&mut &*b, b"x").unwrap();
        }
        let start = Instant::now();
        for (i, t) in targets.iter().enumerate() {
            if i == cancelled {
                continue;
            }
            while result(t).is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "receive {i} never completed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(result(t), Some(1));
            assert_eq!(t.buf[0], b'x');
        }
        // The index entries leave under the lock before the completions
        // are delivered.
        assert_eq!(indexed(&r), 0);
        drop(r);
    }
}
