//! Driving a caller-driven engine from tokio's own reactor.
//!
//! The fastest way to run sockets (and files) on tokio: no driver thread,
//! so no cross-thread wake-up per operation. The ring's descriptor is
//! registered with tokio's reactor, which wakes the driving task when
//! completions wait; the engine wakes it when an operation starts (with
//! [`Submit::PerRound`](super::Submit::PerRound),
//! so that a whole round of tasks reaches the kernel in one call). The
//! descriptor's readiness is the completion queue's state, so the task
//! reaps after clearing it and nothing is lost to a completion that races
//! the clearing.

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::AsyncEngine;

/// The ring's descriptor as tokio registers it; the engine (a clone)
/// keeps the ring open while it is registered.
struct RingFd(AsyncEngine);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
            .poll_fd()
            .expect("drive_on_tokio registers only engines with a ring")
            .as_raw_fd()
    }
}

/// Drives `engine`, built with
/// [`Driving::Caller`](super::Driving::Caller), from
/// the tokio task that awaits this: it completes operations and wakes their
/// tasks whenever tokio's reactor reports completions, and submits started
/// operations whenever it is woken. Spawn it once per engine and abort it
/// (or drop it) when done; it never returns otherwise.
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// use blockio::aio::{drive_on_tokio, AsyncEngine, CallerDriving, Driving, Submit};
/// use blockio::net::{TcpListener, TcpStream};
///
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// rt.block_on(async {
///     let engine = AsyncEngine::builder()
///         .driving(Driving::Caller(CallerDriving::new().submit(Submit::PerRound)))
///         .build()?;
///     let driver = tokio::spawn(drive_on_tokio(engine.clone()));
///     let listener = TcpListener::bind(&engine, "127.0.0.1:0")?;
///     let client = TcpStream::connect(&engine, listener.local_addr());
///     let (accepted, client) = tokio::join!(listener.accept(), client);
///     let (served, _) = accepted?;
///     client?.write_all(b"ping".to_vec()).await.0?;
///     let (n, buf) = served.read(vec![0u8; 4]).await;
///     assert_eq!(&buf[..n?], b"ping");
///     driver.abort();
///     Ok(())
/// })
/// # }
/// ```
///
/// Returns `Ok` at once for an engine with nothing to drive: one with its
/// own driver thread, or on the thread-pool backend, whose operations
/// complete on its threads.
///
/// # Errors
/// tokio's reactor could not watch the ring (not called within a runtime
/// with I/O enabled, `enable_io` or `enable_all`), or reports an error on
/// it.
pub async fn drive_on_tokio(engine: AsyncEngine) -> io::Result<()> {
    if engine.poll_fd().is_none() {
        return Ok(());
    }
    // SAFETY: the engine that `RingFd` owns keeps its ring open until the
    // `AsyncFd` is dropped (the ring is closed only when the engine's last
    // clone goes), and `poll_fd` names the same descriptor every time.
    let watched = unsafe { AsyncFd::register_with_interest(RingFd(engine), Interest::READABLE) }?;
    poll_fn(|cx| loop {
        let _ = watched.get_ref().0.poll_drive(cx);
        match watched.poll_read_ready(cx) {
            // Cleared before the next reap: a completion posted after that
            // reap makes the ring readable again.
            Poll::Ready(Ok(mut ready)) => ready.clear_ready(),
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    })
    .await
}
