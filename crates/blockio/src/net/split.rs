//! A stream's reading and writing halves, as tokio's `split` and
//! `into_split` give them: one task reads while another writes.
//!
//! A stream's operations already take `&self`, so the halves share it: the
//! borrowed halves through a reference, the owned ones through an `Arc`.
//! What the halves add is the I/O traits, which take `&mut`: the reading
//! half's polls lock the stream's poll state (only reads use it), and the
//! writing half's go to the stream's write side, which needs no lock.

/// Declares, in the module of the stream type `$t`, tokio's half types
/// (`ReadHalf`, `WriteHalf`, `OwnedReadHalf`, `OwnedWriteHalf`,
/// `ReuniteError`) and `$t::split`/`into_split`. `$t` has `core:
/// StreamCore` and `poll: Mutex<PollIo>` fields, and `$name` is how its
/// docs call it.
macro_rules! stream_halves {
    ($t:ident, $name:literal) => {
        #[doc = concat!("The reading half of a borrowed [`", stringify!($t), "`], from [`",
            stringify!($t), "::split`]: reads through the I/O traits, and the stream's other ",
            "methods through `as_ref()`.")]
        #[derive(Debug)]
        pub struct ReadHalf<'a>(&'a $t);

        #[doc = concat!("The writing half of a borrowed [`", stringify!($t), "`], from [`",
            stringify!($t), "::split`]: writes through the I/O traits, and the stream's other ",
            "methods through `as_ref()`.")]
        #[derive(Debug)]
        pub struct WriteHalf<'a>(&'a $t);

        #[doc = concat!("The reading half of a [`", stringify!($t), "`], from [`",
            stringify!($t), "::into_split`], to move into a task of its own: reads through ",
            "the I/O traits, the stream's other methods through `as_ref()`.")]
        #[derive(Debug)]
        pub struct OwnedReadHalf {
            inner: std::sync::Arc<$t>,
        }

        #[doc = concat!("The writing half of a [`", stringify!($t), "`], from [`",
            stringify!($t), "::into_split`]: writes through the I/O traits, the stream's ",
            "other methods through `as_ref()`. Dropping it shuts the writing side down ",
            "(after the bytes the traits accepted), as tokio's does, unless it is ",
            "[`forget`](OwnedWriteHalf::forget)-ten.")]
        #[derive(Debug)]
        pub struct OwnedWriteHalf {
            inner: std::sync::Arc<$t>,
            shutdown_on_drop: bool,
        }

        /// The halves given to [`OwnedReadHalf::reunite`] were not of one
        /// stream: here they are back.
        #[derive(Debug)]
        pub struct ReuniteError(pub OwnedReadHalf, pub OwnedWriteHalf);

        impl std::fmt::Display for ReuniteError {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!("tried to reunite halves of two different ", $name, "s"))
            }
        }

        impl std::error::Error for ReuniteError {}

        impl $t {
            /// The reading and writing halves of this stream, borrowed, as
            /// tokio's `split`: one future may read through the I/O
            /// traits while another writes. Nothing is allocated.
            ///
            /// # Examples
            ///
            /// ```
            /// # fn main() -> std::io::Result<()> {
            /// # futures::executor::block_on(async {
            /// # let listener = blockio::net::TcpListener::bind("127.0.0.1:0").await?;
            /// # let connect = blockio::net::TcpStream::connect(listener.local_addr()?);
            /// # let (client, accepted) = futures::join!(connect, listener.accept());
            /// # let (mut client, (server, _)) = (client?, accepted?);
            /// use futures::io::{AsyncReadExt, AsyncWriteExt};
            ///
            /// server.write_all(b"ping".to_vec()).await.0?;
            /// let (mut reader, mut writer) = client.split();
            /// let mut got = [0u8; 4];
            /// let (read, written) =
            ///     futures::join!(reader.read_exact(&mut got), writer.write_all(b"pong"));
            /// read?;
            /// written?;
            /// assert_eq!(&got, b"ping");
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
                (ReadHalf(self), WriteHalf(self))
            }

            /// The reading and writing halves of this stream, owned, as
            /// tokio's `into_split`: each can move into a task of its own,
            /// and [`OwnedReadHalf::reunite`] gives the stream back.
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
            /// use futures::io::{AsyncReadExt, AsyncWriteExt};
            ///
            /// let (mut reader, mut writer) = client.into_split();
            /// let writing = std::thread::spawn(move || {
            ///     futures::executor::block_on(writer.write_all(b"ping"))
            /// });
            /// let (n, buf) = server.read(vec![0u8; 4]).await;
            /// assert_eq!(&buf[..n?], b"ping");
            /// writing.join().unwrap()?;
            /// // The writing half was dropped with its thread: the
            /// // writing side is shut down, the peer reads the end.
            /// let (n, _) = server.read(vec![0u8; 1]).await;
            /// assert_eq!(n?, 0);
            /// // The reading half reads on.
            /// server.write_all(b"pong".to_vec()).await.0?;
            /// server.shutdown(std::net::Shutdown::Write)?;
            /// let mut got = Vec::new();
            /// reader.read_to_end(&mut got).await?;
            /// assert_eq!(got, b"pong");
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
                let inner = std::sync::Arc::new(self);
                let write = OwnedWriteHalf {
                    inner: inner.clone(),
                    shutdown_on_drop: true,
                };
                (OwnedReadHalf { inner }, write)
            }

            /// A trait read through `&self`: the poll state under its lock.
            fn poll_read_shared(
                &self,
                cx: &mut std::task::Context<'_>,
                out: &mut dyn $crate::aio::op::ReadOut,
            ) -> std::task::Poll<std::io::Result<usize>> {
                let mut poll = self.poll.lock().unwrap_or_else(|e| e.into_inner());
                poll.poll_read(&self.core, cx, out)
            }
        }

        impl OwnedReadHalf {
            #[doc = concat!("The [`", stringify!($t), "`] again, from its two halves; ",
                "[`ReuniteError`] (with both) when `other` is another stream's.")]
            ///
            /// # Errors
            /// `other` is not this stream's writing half.
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
            /// let (reader, writer) = client.into_split();
            /// let (_, server_writer) = server.into_split();
            /// // Halves of two streams are refused, and given back.
            /// let blockio::net::tcp::ReuniteError(reader, _) =
            ///     reader.reunite(server_writer).unwrap_err();
            /// let client = reader.reunite(writer).expect("one stream's halves");
            /// client.write_all(b"still open".to_vec()).await.0?;
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn reunite(self, other: OwnedWriteHalf) -> Result<$t, ReuniteError> {
                if !std::sync::Arc::ptr_eq(&self.inner, &other.inner) {
                    return Err(ReuniteError(self, other));
                }
                other.forget();
                Ok(std::sync::Arc::try_unwrap(self.inner)
                    .ok()
                    .expect("a stream's two halves hold its only references"))
            }
        }

        impl OwnedWriteHalf {
            /// Drops this half without shutting the writing side down:
            /// the peer reads no end of stream until the stream itself
            /// closes.
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
            /// let (reader, writer) = client.into_split();
            /// writer.forget();
            /// // The writing side is still open through the reading half.
            /// reader.as_ref().write_all(b"ping".to_vec()).await.0?;
            /// let (n, buf) = server.read(vec![0u8; 4]).await;
            /// assert_eq!(&buf[..n?], b"ping");
            /// # Ok(())
            /// # })
            /// # }
            /// ```
            pub fn forget(mut self) {
                self.shutdown_on_drop = false;
            }
        }

        impl Drop for OwnedWriteHalf {
            fn drop(&mut self) {
                if self.shutdown_on_drop {
                    // After the bytes the traits accepted; an error (the
                    // connection already gone) leaves nothing to shut.
                    let _ = self.inner.core.shutdown(std::net::Shutdown::Write);
                }
            }
        }

        impl AsRef<$t> for ReadHalf<'_> {
            fn as_ref(&self) -> &$t {
                self.0
            }
        }

        impl AsRef<$t> for WriteHalf<'_> {
            fn as_ref(&self) -> &$t {
                self.0
            }
        }

        impl AsRef<$t> for OwnedReadHalf {
            fn as_ref(&self) -> &$t {
                &self.inner
            }
        }

        impl AsRef<$t> for OwnedWriteHalf {
            fn as_ref(&self) -> &$t {
                &self.inner
            }
        }

        $crate::net::split::half_read_traits!($t, ReadHalf<'_>);
        $crate::net::split::half_read_traits!($t, OwnedReadHalf);
        $crate::net::split::half_write_traits!($t, WriteHalf<'_>);
        $crate::net::split::half_write_traits!($t, OwnedWriteHalf);
    };
}

/// `futures::io`'s `AsyncRead` for the reading half `$half` of a `$t`, and
/// tokio's with the `tokio` feature.
macro_rules! half_read_traits {
    ($t:ident, $half:ty) => {
        impl futures_io::AsyncRead for $half {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut [u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let stream: &$t = (*self).as_ref();
                stream.poll_read_shared(cx, &mut $crate::aio::op::SliceOut::new(buf))
            }
        }

        #[cfg(feature = "tokio")]
        impl tokio::io::AsyncRead for $half {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let stream: &$t = (*self).as_ref();
                // As the stream's own: only the bytes read are written.
                std::task::ready!(stream.poll_read_shared(cx, buf))?;
                std::task::Poll::Ready(Ok(()))
            }
        }
    };
}

/// `futures::io`'s `AsyncWrite` for the writing half `$half` of a `$t`,
/// and tokio's with the `tokio` feature.
macro_rules! half_write_traits {
    ($t:ident, $half:ty) => {
        impl futures_io::AsyncWrite for $half {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let stream: &$t = (*self).as_ref();
                $crate::net::poll_io::PollIo::poll_write(&stream.core, cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let stream: &$t = (*self).as_ref();
                $crate::net::poll_io::PollIo::poll_flush(&stream.core, cx)
            }
            fn poll_close(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let stream: &$t = (*self).as_ref();
                $crate::net::poll_io::PollIo::poll_close(&stream.core, cx)
            }
        }

        #[cfg(feature = "tokio")]
        impl tokio::io::AsyncWrite for $half {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let stream: &$t = (*self).as_ref();
                $crate::net::poll_io::PollIo::poll_write(&stream.core, cx, buf)
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let stream: &$t = (*self).as_ref();
                $crate::net::poll_io::PollIo::poll_flush(&stream.core, cx)
            }
            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                let stream: &$t = (*self).as_ref();
                $crate::net::poll_io::PollIo::poll_close(&stream.core, cx)
            }
        }
    };
}

pub(crate) use {half_read_traits, half_write_traits, stream_halves};
