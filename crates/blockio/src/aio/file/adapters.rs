//! The `futures::io` and tokio I/O traits, over the stream.

use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::AsyncFile;

impl futures_io::AsyncRead for AsyncFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_read_inner(cx, &mut crate::aio::op::SliceOut::new(buf))
    }
}

impl futures_io::AsyncWrite for AsyncFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_inner(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_inner(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_inner(cx)
    }
}

impl futures_io::AsyncSeek for AsyncFile {
    fn poll_seek(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        pos: SeekFrom,
    ) -> Poll<io::Result<u64>> {
        self.get_mut().poll_seek_inner(cx, pos)
    }
}

#[cfg(feature = "tokio")]
mod tokio_io {
    use super::*;
    use std::task::ready;
    use tokio::io::ReadBuf;

    impl tokio::io::AsyncRead for AsyncFile {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            // The bytes are copied into the unfilled part, which is never
            // zeroed first (`ReadOut for ReadBuf` advances the buffer).
            ready!(self.get_mut().poll_read_inner(cx, buf))?;
            Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncWrite for AsyncFile {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().poll_write_inner(cx, buf)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().poll_flush_inner(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.get_mut().poll_flush_inner(cx)
        }
    }

    impl tokio::io::AsyncSeek for AsyncFile {
        fn start_seek(self: Pin<&mut Self>, pos: SeekFrom) -> io::Result<()> {
            self.get_mut().stream.pending_seek = Some(pos);
            Ok(())
        }
        fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
            let this = self.get_mut();
            match this.stream.pending_seek {
                Some(pos) => {
                    let r = ready!(this.poll_seek_inner(cx, pos));
                    this.stream.pending_seek = None;
                    Poll::Ready(r)
                }
                None => {
                    if this.seekable() {
                        Poll::Ready(Ok(this.stream.pos))
                    } else {
                        // A file without offsets has no position to report,
                        // as `lseek` (and `std`'s `stream_position`) says.
                        Poll::Ready(Err(io::Error::from_raw_os_error(libc::ESPIPE)))
                    }
                }
            }
        }
    }
}
