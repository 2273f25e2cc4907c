//! What every stream type has: the owned-buffer methods, and the
//! `futures::io` traits, and tokio's with the `tokio` feature (see
//! [`PollIo`](super::poll_io::PollIo) for what the traits do underneath).

/// Implements the owned-buffer methods and the I/O traits for a stream
/// type with `core: StreamCore` and `poll: Mutex<PollIo>` fields.
macro_rules! stream_io_traits {
    ($t:ty) => {
        impl $t {
            /// Reads into `buf`: the byte count (0 at end of stream) and `buf`.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// client.write_all(b"ping".to_vec()).await.0?;
            /// // The buffer goes in and comes back with the count.
            /// let (n, buf) = server.read(vec![0u8; 16]).await;
            /// assert_eq!(&buf[..n?], b"ping");
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub async fn read<B: $crate::aio::IoBufMut>(
                &self,
                buf: B,
            ) -> $crate::aio::BufResult<usize, B> {
                self.core.read(buf).await
            }

            /// Reads into `buf` without taking the bytes: the next read
            /// returns them again, as tokio's `peek` (0 at the end of the
            /// stream). The bytes are read, then given back to the
            /// stream: a read of the stream running at the same time as
            /// a peek may get bytes that come after the peeked ones.
            ///
            /// # Errors
            /// As [`read`](Self::read)'s.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// client.write_all(b"GET /".to_vec()).await.0?;
            /// let mut head = [0u8; 3];
            /// let n = server.peek(&mut head).await?;
            /// assert_eq!(&head[..n], &b"GET"[..n]);
            /// // The peeked bytes are read again.
            /// let (m, buf) = server.read(vec![0u8; 5]).await;
            /// assert_eq!(&buf[..n], &head[..n]);
            /// assert!(m? >= n);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub async fn peek(&self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.core.peek(buf).await
            }

            /// Writes from `buf`: how many bytes went (maybe fewer than all).
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// let (n, _buf) = client.write(b"hello".to_vec()).await;
            /// let n = n?;
            /// assert!(n > 0 && n <= 5);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub async fn write<B: $crate::aio::IoBuf>(
                &self,
                buf: B,
            ) -> $crate::aio::BufResult<usize, B> {
                self.core.write(buf).await
            }

            /// Writes all of `buf`.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// client.write_all(vec![7u8; 100_000]).await.0?;
            /// client.shutdown(std::net::Shutdown::Write)?;
            /// let mut total = 0;
            /// loop {
            ///     let (n, _) = server.read(vec![0u8; 65536]).await;
            ///     match n? {
            ///         0 => break,
            ///         n => total += n,
            ///     }
            /// }
            /// assert_eq!(total, 100_000);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub async fn write_all<B: $crate::aio::IoBuf>(
                &self,
                buf: B,
            ) -> $crate::aio::BufResult<(), B> {
                self.core.write_all(buf).await
            }

            /// Writes `bufs` in order with one `sendmsg` (a vectored
            /// write): how many bytes went (maybe fewer than all; the count
            /// runs across the buffers) and the buffers. One call sends
            /// from the first 1,024 buffers at most (the kernel's limit),
            /// as tokio's `write_vectored`.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// let (n, bufs) = client.writev(vec![b"hel".to_vec(), b"lo".to_vec()]).await;
            /// assert_eq!(n?, 5);
            /// assert_eq!(bufs.len(), 2);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub async fn writev<B: $crate::aio::IoBuf>(
                &self,
                bufs: Vec<B>,
            ) -> $crate::aio::BufResult<usize, Vec<B>> {
                self.core.writev(bufs).await
            }

            /// The bytes this stream receives, as a stream of buffers
            /// taken from the engine's shared receive ring only when bytes
            /// arrive: an idle connection holds no buffer (see
            /// [`RecvStream`]($crate::net::RecvStream)).
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// client.write_all(b"ping".to_vec()).await.0?;
            /// client.shutdown(std::net::Shutdown::Write)?;
            /// let mut received = server.recv_stream();
            /// let mut got = Vec::new();
            /// while let Some(buf) = received.next().await {
            ///     got.extend_from_slice(&buf?);
            /// }
            /// assert_eq!(got, b"ping");
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn recv_stream(&self) -> $crate::net::RecvStream<'_> {
                $crate::net::RecvStream::new(&self.core)
            }

            /// How long bytes the I/O traits accepted may go on being sent
            /// after the stream is dropped, to a peer that does not read
            /// them (default 60 s). Past it the send is cancelled and the
            /// connection reset (`SO_LINGER` 0), so the peer reads
            /// `ECONNRESET` rather than a clean end; the rest is lost, as
            /// the peer was not taking it. The dropping thread never waits
            /// either way.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// use std::time::Duration;
            ///
            /// // A reply the traits accepted has 5 s to reach a peer that reads slowly.
            /// server.set_drop_linger(Duration::from_secs(5));
            /// drop(server);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn set_drop_linger(&self, limit: std::time::Duration) {
                self.core.writes.set_linger(limit);
            }

            /// Shuts down the reading side, the writing side or both.
            ///
            /// The writing side shuts after every byte the I/O traits
            /// accepted: at once if they are all in the kernel, else once
            /// the stream has sent them (this call does not wait; the
            /// peer sees them all, then the end). From then on writes
            /// fail with `EPIPE`, as on tokio. To wait for the bytes, use
            /// the traits' `close`/`shutdown`, which wait for the last
            /// send to complete (and report its error) first.
            ///
            /// # Errors
            /// `ENOTCONN` when the connection is already gone (reported
            /// at once only when nothing is queued).
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (client, (server, _)) = (client?, accepted?);
            ///
            /// client.shutdown(std::net::Shutdown::Write)?;
            /// // The peer reads the end of the stream.
            /// let (n, _) = server.read(vec![0u8; 8]).await;
            /// assert_eq!(n?, 0);
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn shutdown(&self, how: std::net::Shutdown) -> std::io::Result<()> {
                self.core.shutdown(how)
            }

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
                poll.poll_read(core, cx, &mut $crate::aio::op::SliceOut::new(buf))
            }
        }

        impl futures_io::AsyncWrite for $t {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                $crate::net::poll_io::PollIo::poll_write(&self.core, cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                $crate::net::poll_io::PollIo::poll_flush(&self.core, cx)
            }
            fn poll_close(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                $crate::net::poll_io::PollIo::poll_close(&self.core, cx)
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
                // Into the unfilled part as it is: only the bytes read are
                // written (no `initialize_unfilled`, whose zeroing of a
                // large buffer on every call would cost more than the copy).
                std::task::ready!(poll.poll_read(core, cx, buf))?;
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
                $crate::net::poll_io::PollIo::poll_write(&self.core, cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                $crate::net::poll_io::PollIo::poll_flush(&self.core, cx)
            }
            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                $crate::net::poll_io::PollIo::poll_close(&self.core, cx)
            }
        }
    };
}

pub(crate) use stream_io_traits;
