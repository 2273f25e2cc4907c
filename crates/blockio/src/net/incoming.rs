//! The loop behind every listener's `incoming()`: connections from the
//! listener's queue ([`AcceptQueue`]: a multishot accept, or one accept
//! each),
//! with a growing pause while descriptors are short (`EMFILE`/`ENFILE`),
//! so a server at its descriptor limit neither dies nor spins.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::accepts::{AcceptQueue, Accepted};

/// A listener, as its accept loop sees it.
pub(crate) trait Accepting: Sync {
    /// What one accept yields: the stream and the peer's address.
    type Item: Send;

    /// Its multishot accept.
    fn queue(&self) -> &AcceptQueue;

    /// The item for a connection the listener's queue gave, or its
    /// error, named.
    fn accepted(&self, conn: io::Result<Accepted>) -> io::Result<Self::Item>;
}

/// The shortest and longest pause after `EMFILE`/`ENFILE`.
const FD_BACKOFF: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(100));

/// The state of one `incoming()` stream.
pub(crate) struct AcceptLoop<'a, L: Accepting> {
    pub(crate) listener: &'a L,
    /// The pause before the next accept while descriptors are short.
    pub(crate) backoff: Option<Duration>,
    /// That pause, running.
    pause: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The waker last given to the listener's queue, while waiting.
    waker: Option<std::task::Waker>,
}

impl<'a, L: Accepting> AcceptLoop<'a, L> {
    pub(crate) fn new(listener: &'a L) -> Self {
        AcceptLoop {
            listener,
            backoff: None,
            pause: None,
            waker: None,
        }
    }

    /// Whether connections come from one multishot accept.
    pub(crate) fn multishot(&self) -> bool {
        self.listener.queue().multishot()
    }

    /// The next connection, or the next accept's error.
    pub(crate) fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<L::Item>> {
        if let Some(p) = self.pause.as_mut() {
            std::task::ready!(p.as_mut().poll(cx));
            self.pause = None;
        }
        let listener = self.listener;
        let fd = listener.queue().poll_next(cx);
        self.waker = fd.is_pending().then(|| cx.waker().clone());
        let r = listener.accepted(std::task::ready!(fd));
        self.settle(&r);
        Poll::Ready(r)
    }

    /// Sets the pause before the next accept from this one's result.
    fn settle(&mut self, r: &io::Result<L::Item>) {
        let short =
            matches!(r, Err(e) if matches!(crate::errno(e), Some(libc::EMFILE | libc::ENFILE)));
        self.backoff = short.then(|| match self.backoff {
            None => FD_BACKOFF.0,
            Some(d) => (d * 2).min(FD_BACKOFF.1),
        });
        self.pause = self.backoff.map(|d| {
            Box::pin(super::time_limit::pause(d)) as Pin<Box<dyn Future<Output = ()> + Send>>
        });
    }
}

impl<L: Accepting> Drop for AcceptLoop<'_, L> {
    /// Leaves the listener's queue: the accept stops unless another task
    /// waits; what it still accepts stays queued for the listener.
    fn drop(&mut self) {
        if let Some(w) = self.waker.take() {
            self.listener.queue().leave(&w);
        }
    }
}

/// Makes `$listener` an [`Accepting`] listener (its `accepts` field, its
/// `stream_of` and `accept` methods) and defines `$stream`, the public
/// stream of its `incoming()`, yielding `$item`.
macro_rules! incoming_stream {
    ($listener:ident, $stream:ident, $item:ty) => {
        impl $crate::net::incoming::Accepting for $listener {
            type Item = $item;

            fn queue(&self) -> &$crate::net::accepts::AcceptQueue {
                &self.accepts
            }

            fn accepted(
                &self,
                conn: std::io::Result<$crate::net::accepts::Accepted>,
            ) -> std::io::Result<$item> {
                self.stream_of(conn)
            }

        }

        #[doc = concat!("The stream of [`", stringify!($listener), "::incoming`].")]
        pub struct $stream<'a>($crate::net::incoming::AcceptLoop<'a, $listener>);

        impl $stream<'_> {
            /// The next connection (or the next accept's error).
            ///
            /// # Errors
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// let _client = std::net::TcpStream::connect(listener.local_addr()?)?;
            /// let mut incoming = listener.incoming();
            /// let (stream, peer) = incoming.next().await?;
            /// assert_eq!(stream.peer_addr()?, peer);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            #[doc = concat!("As [`", stringify!($listener), "::accept`]; the stream goes on after any of them.")]
            pub async fn next(&mut self) -> std::io::Result<$item> {
                std::future::poll_fn(|cx| self.0.poll_accept(cx)).await
            }

            /// Whether connections come from one multishot accept
            /// (io_uring, Linux 5.19 or later) rather than an accept each.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// // Multishot only when asked for (`TcpListenerOptions::multishot_accept`).
            /// assert!(!listener.incoming().multishot());
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn multishot(&self) -> bool {
                self.0.multishot()
            }
        }

        impl futures_core::Stream for $stream<'_> {
            type Item = std::io::Result<$item>;

            fn poll_next(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Self::Item>> {
                self.get_mut().0.poll_accept(cx).map(Some)
            }
        }

        impl std::fmt::Debug for $stream<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($stream))
                    .field("listener", self.0.listener)
                    .field("multishot", &self.multishot())
                    .field("backoff", &self.0.backoff)
                    .finish()
            }
        }
    };
}

pub(crate) use incoming_stream;
