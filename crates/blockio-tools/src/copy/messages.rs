//! `-v`'s lines on standard output, and the first error writing them.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::options::CopyOptions;
use crate::quote::quote;

/// With `verbose`, one line on standard output (whole, under the lock, so
/// that lines from several threads never mix).
pub(crate) fn say(opts: &CopyOptions, line: std::fmt::Arguments<'_>) {
    if opts.verbose {
        use std::os::fd::AsFd;
        let out = std::io::stdout().lock();
        if let Err(e) = write_all_to(out.as_fd(), format!("{line}\n").as_bytes()) {
            // The copy goes on; the caller reports it at the end (see
            // `CopyReport::output_error`), as GNU's "write error".
            let code = blockio::errno(&e).unwrap_or(libc::EIO);
            let _ = OUTPUT_ERROR.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Writes all of `buf` to `fd` itself: `std::io::stdout` takes a closed
/// standard output (`EBADF`) for success, and GNU reports it.
fn write_all_to(fd: std::os::fd::BorrowedFd<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The first error of writing `-v`'s lines to standard output, as an
/// errno; 0 for none. Cleared when a copy starts, read into its report
/// when it ends ([`CopyReport::output_error`]). Standard output is one
/// per process, and so is this.
///
/// [`CopyReport::output_error`]: super::outcome::CopyReport::output_error
pub(super) static OUTPUT_ERROR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// With `verbose`: `'src' -> 'dst'`, as `cp -v` says it.
pub(crate) fn say_copied(opts: &CopyOptions, src: &Path, dst: &Path, backup: Option<&Path>) {
    match backup {
        Some(b) => say(
            opts,
            format_args!("{} -> {} (backup: {})", quote(src), quote(dst), quote(b)),
        ),
        None => say(opts, format_args!("{} -> {}", quote(src), quote(dst))),
    }
}
