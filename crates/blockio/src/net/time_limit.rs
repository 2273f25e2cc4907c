//! Time limits on socket operations that need no particular executor: a
//! future raced against a `futures-timer` delay (one timer thread per
//! process, woken by the waker of whichever task polls).

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use futures_timer::Delay;

/// `fut`'s output, or `None` once `limit` has passed first (`fut` is then
/// dropped, which cancels a socket operation in the kernel).
pub(crate) async fn with_limit<F: Future>(fut: F, limit: Duration) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut delay = Delay::new(limit);
    poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        std::pin::Pin::new(&mut delay).poll(cx).map(|()| None)
    })
    .await
}

/// Waits for `d` (a pause before retrying).
pub(crate) async fn pause(d: Duration) {
    Delay::new(d).await
}

/// Refuses a zero time limit, as std's `connect_timeout` does: a connect
/// that may take no time at all cannot succeed, and is a caller's mistake
/// (kind [`InvalidInput`](std::io::ErrorKind::InvalidInput)).
pub(crate) fn check_limit(limit: Duration) -> std::io::Result<()> {
    if limit.is_zero() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "connect_timeout: cannot set a 0 duration timeout",
        ));
    }
    Ok(())
}

/// A connect that its limit cut short: `ETIMEDOUT`, as the kernel reports
/// a connect that its own retries gave up on (kind
/// [`TimedOut`](std::io::ErrorKind::TimedOut), `raw_os_error()` set).
pub(crate) fn connect_timed_out() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::ETIMEDOUT)
}
