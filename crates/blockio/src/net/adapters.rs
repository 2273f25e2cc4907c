//! The `futures::io` traits, and tokio's with the `tokio` feature, over
//! every stream type (see [`PollIo`](super::poll_io::PollIo) for what they
//! do underneath).

/// Implements the I/O traits for a stream type with `core: StreamCore` and
/// `poll: Mutex<PollIo>` fields.
macro_rules! stream_io_traits {
    ($t:ty) => {
        impl $t {
            fn poll_parts(
                self: std::pin::Pin<&mut Self>,
            ) -> (
                &$crate::net::stream::StreamCore,
                &mut $crate::net::poll_io::PollIo,
            ) {
                let this = self.get_mut();
                let poll = this.poll.get_mut().unwrap_or_else(|e| e.into_inner());
                (&this.core, poll)
            }
        }

        impl futures_io::AsyncRead for $t {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let (core, poll) = self.poll_parts();
                poll.poll_read(core, cx, buf)
            }
        }

        impl futures_io::AsyncWrite for $t {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let (core, poll) = self.poll_parts();
                poll.poll_write(core, cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let (core, poll) = self.poll_parts();
                poll.poll_flush(core, cx)
            }
            fn poll_close(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let (core, poll) = self.poll_parts();
                poll.poll_close(core, cx)
            }
        }

        #[cfg(feature = "tokio")]
        impl tokio::io::AsyncRead for $t {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let (core, poll) = self.poll_parts();
                let n = std::task::ready!(poll.poll_read(core, cx, buf.initialize_unfilled()))?;
                buf.advance(n);
                std::task::Poll::Ready(Ok(()))
            }
        }

        #[cfg(feature = "tokio")]
        impl tokio::io::AsyncWrite for $t {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let (core, poll) = self.poll_parts();
                poll.poll_write(core, cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let (core, poll) = self.poll_parts();
                poll.poll_flush(core, cx)
            }
            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let (core, poll) = self.poll_parts();
                poll.poll_close(core, cx)
            }
        }
    };
}

pub(crate) use stream_io_traits;
