//! How a completion wakes the task waiting for it.
//!
//! Completions reaped by a `drive_on_tokio` task wake their tasks from
//! inside that task, on a worker of the runtime. tokio's multi-thread
//! scheduler puts a task woken from a running task on that worker's own
//! queue and, once the queue holds more than one, wakes an idle worker to
//! steal from it: on two workers nearly every turn of the ring woke the
//! other worker (an eventfd write, and two context switches), which cost
//! more than the requests themselves. tokio's own reactor wakes its tasks
//! while the worker is parked, and notifies another worker at most once for
//! the whole batch.
//!
//! So within a driving turn ([`deferring`]) a wake-up is handed to the
//! scheduler's list of deferred wake-ups, through tokio's public
//! [`yield_now`](tokio::task::yield_now) polled once with the woken task's
//! waker (what it does with its own task's): the worker wakes them once it
//! has run out of other tasks and polled its drivers, as its reactor's
//! wake-ups come, and notifies another worker at most once for them all.
//! Outside a runtime's worker (a `block_on`, a worker inside
//! `block_in_place`) tokio wakes the task at once. Outside a driving turn,
//! and without the `tokio` feature, a wake-up is a plain [`Waker::wake`].

use std::task::Waker;

#[cfg(feature = "tokio")]
thread_local! {
    /// Whether this thread is in a driving turn ([`deferring`]).
    static DEFERRING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, a driving turn of a `drive_on_tokio` task, with the wake-ups
/// it makes ([`wake`]) deferred to the scheduler. Nested calls keep the
/// flag; a panic out of `f` restores it.
#[cfg(feature = "tokio")]
pub(crate) fn deferring<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back as it was, even when `f` unwinds.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFERRING.set(self.0);
        }
    }
    let _restore = Restore(DEFERRING.replace(true));
    f()
}

/// Wakes `waker`'s task: deferred to the scheduler in a driving turn
/// ([`deferring`]), at once otherwise.
pub(crate) fn wake(waker: Waker) {
    #[cfg(feature = "tokio")]
    if DEFERRING.get() {
        defer(waker);
        return;
    }
    waker.wake();
}

/// Wakes `waker`'s task once the tokio scheduler of this thread has run
/// out of other tasks ([`defer`]), at once where no tokio scheduler runs
/// on this thread or without the `tokio` feature. For the task that drives
/// a ring with [`Submit::PerRound`](super::Submit::PerRound), woken by
/// each operation started: woken at once, it went into the worker's LIFO
/// slot and ran right after the task that started the operation, so that
/// each task's operation cost an `io_uring_enter` of its own; deferred, it
/// runs once the round's tasks have run, and submits what they all
/// started in one call.
pub(crate) fn wake_after_round(waker: Waker) {
    #[cfg(feature = "tokio")]
    defer(waker);
    #[cfg(not(feature = "tokio"))]
    waker.wake();
}

/// Hands `waker` to the running tokio scheduler's deferred wake-ups: the
/// first poll of `yield_now` does that with the waker of the context it is
/// polled in (or wakes it at once where there is no scheduler to defer
/// to), and returns pending. What is handed over is a [`Deferred`] around
/// `waker`, never lost (see there). Inside the wake-up of another
/// [`Deferred`], which tokio makes with its list borrowed, the task is
/// woken at once.
#[cfg(feature = "tokio")]
fn defer(waker: Waker) {
    use std::future::Future;
    if WAKING_DEFERRED.get() {
        waker.wake();
        return;
    }
    let deferred = Waker::from(std::sync::Arc::new(Deferred {
        waker,
        woken: std::sync::atomic::AtomicBool::new(false),
    }));
    let mut cx = std::task::Context::from_waker(&deferred);
    let yielded = std::pin::pin!(tokio::task::yield_now());
    if yielded.poll(&mut cx).is_ready() {
        deferred.wake();
    }
}

#[cfg(feature = "tokio")]
thread_local! {
    /// Whether this thread is making the wake-up of a [`Deferred`].
    static WAKING_DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A wake-up handed to tokio's scheduler, made once: when the scheduler
/// makes it, or when the scheduler drops it unmade. A current-thread
/// runtime keeps its deferred wake-ups per `block_on` and drops them
/// unmade when the future given to `block_on` returns first (the relay
/// thread's driving, which returns as soon as its last operation has
/// completed; a future that starts an operation and returns): a wake-up
/// lost so would leave its task asleep for good.
///
/// tokio makes deferred wake-ups with its list borrowed, so a waker that
/// runs code as it wakes (a socket's send queue, which starts its next
/// send) must not defer again from there: the flag [`WAKING_DEFERRED`]
/// makes [`defer`] wake at once meanwhile.
#[cfg(feature = "tokio")]
struct Deferred {
    waker: Waker,
    woken: std::sync::atomic::AtomicBool,
}

#[cfg(feature = "tokio")]
impl Deferred {
    /// Wakes the task unless that was done, with [`WAKING_DEFERRED`] set.
    fn wake_once(&self) {
        use std::sync::atomic::Ordering;
        if self.woken.swap(true, Ordering::AcqRel) {
            return;
        }
        /// Puts the flag back as it was, even when the waker unwinds.
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                WAKING_DEFERRED.set(self.0);
            }
        }
        let _restore = Restore(WAKING_DEFERRED.replace(true));
        self.waker.wake_by_ref();
    }
}

#[cfg(feature = "tokio")]
impl std::task::Wake for Deferred {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_once();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.wake_once();
    }
}

#[cfg(feature = "tokio")]
impl Drop for Deferred {
    /// Dropped unmade by the scheduler: the task is woken now.
    fn drop(&mut self) {
        self.wake_once();
    }
}

#[cfg(all(test, feature = "tokio"))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// In a driving turn on a runtime, the wake-up waits for the
    /// scheduler, which makes it once the running task has returned;
    /// outside a turn it is made at once.
    #[test]
    fn a_wake_in_a_driving_turn_is_made_by_the_scheduler_after_the_turn() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let count = Arc::new(Count::default());
        let woken = count.clone();
        rt.block_on(async {
            tokio::spawn(async move {
                deferring(|| wake(Waker::from(woken.clone())));
                assert_eq!(woken.0.load(Ordering::SeqCst), 0, "woken inside the turn");
                wake(Waker::from(woken.clone()));
                assert_eq!(woken.0.load(Ordering::SeqCst), 1, "not woken at once");
            })
            .await
            .expect("the task");
            // The scheduler makes deferred wake-ups when it runs out of
            // tasks: each yield here lets it.
            for _ in 0..100 {
                if count.0.load(Ordering::SeqCst) == 2 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        });
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "the deferred wake-up was lost"
        );
    }

    /// A deferred wake-up still waiting when the future given to a
    /// current-thread `block_on` returns is made, not lost with the
    /// scheduler's list.
    #[test]
    fn a_deferred_wake_is_made_when_block_on_returns_first() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let count = Arc::new(Count::default());
        rt.block_on(async { deferring(|| wake(Waker::from(count.clone()))) });
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the deferred wake-up was lost"
        );
        rt.block_on(async { wake_after_round(Waker::from(count.clone())) });
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }

    /// A waker that, as it is woken, wakes the task of another after the
    /// round (as a send queue's waker starts its next send).
    struct Relaying {
        woken: Arc<Count>,
        next: Arc<Count>,
    }

    impl Wake for Relaying {
        fn wake(self: Arc<Self>) {
            self.woken.0.fetch_add(1, Ordering::SeqCst);
            wake_after_round(Waker::from(self.next.clone()));
        }
    }

    /// A deferred waker that defers another as tokio wakes it (with its
    /// list borrowed) does not panic, and both are woken.
    #[test]
    fn a_deferred_waker_may_defer_another_as_it_wakes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let woken = Arc::new(Count::default());
        let next = Arc::new(Count::default());
        let relaying = Arc::new(Relaying {
            woken: woken.clone(),
            next: next.clone(),
        });
        rt.block_on(async {
            tokio::spawn(async move { deferring(|| wake(Waker::from(relaying))) })
                .await
                .expect("the task");
            for _ in 0..100 {
                if next.0.load(Ordering::SeqCst) == 1 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        });
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(next.0.load(Ordering::SeqCst), 1);
    }

    /// With no runtime to defer to, a wake-up in a driving turn is made
    /// at once.
    #[test]
    fn without_a_runtime_a_deferred_wake_is_made_at_once() {
        let count = Arc::new(Count::default());
        deferring(|| wake(Waker::from(count.clone())));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
