//! The gate that an interrupting signal closes before it removes the files
//! a copy created and has not finished (see `unfinished`).
//!
//! Every creation of a file (and every rename or link that changes what a
//! name holds) passes the gate from before its system call until the file
//! is listed. [`close`] stops new creations and waits until none is under
//! way, so that every file made by then is listed and none is made after:
//! the signal thread then removes exactly the unfinished ones.
//!
//! The wait is for an event, not for a time: a creation is one `openat`
//! with `O_CREAT | O_EXCL`, a `rename` or a `link`, which the kernel
//! answers. The one open that can wait without end, an open for writing
//! of an existing FIFO that has no reader, creates nothing: it runs
//! [`outside`] the gate, so the signal neither waits for it nor misses a
//! file it made. No bound of time: a creation that a loaded machine keeps
//! off the CPU for a while is waited for, never left unlisted with its
//! empty file in place.

use std::cell::Cell;
use std::sync::{Condvar, Mutex, MutexGuard};

struct State {
    /// Creations under way, over every thread.
    under_way: usize,
    /// Set once by [`close`]; never cleared (the process is ending).
    closed: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    under_way: 0,
    closed: false,
});

/// Signalled when the count of creations under way falls to zero.
static NONE_UNDER_WAY: Condvar = Condvar::new();

/// Signalled never: a thread that finds the gate closed waits here until
/// the signal thread ends the process.
static REOPENED: Condvar = Condvar::new();

thread_local! {
    /// The creations this thread is in (they nest: a backup's rename and
    /// the copy's creation).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts `n` creations of this thread in, once the gate is open.
fn pass(n: usize) {
    let mut s = state();
    while s.closed {
        s = REOPENED.wait(s).unwrap_or_else(|p| p.into_inner());
    }
    s.under_way += n;
}

/// Counts `n` creations of this thread out.
fn leave(n: usize) {
    let mut s = state();
    s.under_way -= n;
    if s.under_way == 0 {
        NONE_UNDER_WAY.notify_all();
    }
}

/// A creation under way on this thread; dropping it ends it.
pub(crate) struct Creation(());

/// Starts a creation: waits without end if the gate is closed (the process
/// is then about to end by the signal).
pub(crate) fn enter() -> Creation {
    pass(1);
    DEPTH.with(|d| d.set(d.get() + 1));
    Creation(())
}

impl Drop for Creation {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        leave(1);
    }
}

/// Runs `open`, an open of an existing file that may wait without end (a
/// FIFO with no reader), with this thread's creations counted out, so
/// that a signal meanwhile does not wait for it; they are counted in again
/// after it (or never, if the gate closed meanwhile).
pub(crate) fn outside<T>(open: impl FnOnce() -> T) -> T {
    let depth = DEPTH.with(|d| d.replace(0));
    if depth > 0 {
        leave(depth);
    }
    let out = open();
    if depth > 0 {
        pass(depth);
        DEPTH.with(|d| d.set(depth));
    }
    out
}

/// Closes the gate for good and returns once no creation is under way.
pub(crate) fn close() {
    let mut s = state();
    s.closed = true;
    while s.under_way > 0 {
        s = NONE_UNDER_WAY.wait(s).unwrap_or_else(|p| p.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    /// A bound that only a hang reaches (a watchdog, not a timing window).
    const HANG: Duration = Duration::from_secs(120);

    // One test: the gate is process-wide and closes for good.
    #[test]
    fn close_waits_for_creations_under_way_and_not_for_opens_outside() {
        static ENDED: AtomicBool = AtomicBool::new(false);
        // A thread in a creation that then waits in an open outside it.
        let (outside_tx, outside_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _c = enter();
            outside(|| {
                outside_tx.send(()).unwrap();
                // Never released: like a FIFO nobody opens.
                let _ = release_rx.recv();
            });
        });
        outside_rx.recv_timeout(HANG).unwrap();
        // A thread in a creation that ends once the gate is closing.
        let (entered_tx, entered_rx) = mpsc::channel();
        let creator = std::thread::spawn(move || {
            let c = enter();
            entered_tx.send(()).unwrap();
            while !state().closed {
                std::thread::yield_now();
            }
            ENDED.store(true, Ordering::SeqCst);
            drop(c);
        });
        entered_rx.recv_timeout(HANG).unwrap();
        let (closed_tx, closed_rx) = mpsc::channel();
        std::thread::spawn(move || {
            close();
            closed_tx.send(ENDED.load(Ordering::SeqCst)).unwrap();
        });
        // close() returned only after the creation under way ended, and
        // without waiting for the open outside the gate.
        assert!(closed_rx.recv_timeout(HANG).unwrap());
        creator.join().unwrap();
        assert_eq!(state().under_way, 0);
        // (The thread outside stays there, its release never sent.)
        std::mem::forget(release_tx);
    }
}
