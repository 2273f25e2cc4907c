//! The standard streams as the tools find them, and writers that behave
//! as the coreutils' do when those streams fail.
//!
//! The binary starts without Rust's runtime setup (see `main`), which would
//! point closed standard descriptors at a readable and writable
//! `/dev/null` and ignore SIGPIPE. [`init`] instead fills a closed
//! descriptor with `/dev/null` opened the wrong way round (standard input
//! write-only, standard output and error read-only), so that the file
//! descriptor stays taken (no file the tool opens becomes its standard
//! output) and any use of it fails with `EBADF`, as the closed descriptor
//! fails in the GNU tools; [`stdin_was_closed`] and [`stdout_was_closed`]
//! remember what was found, for the messages GNU prints at exit.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};

static STDIN_CLOSED: AtomicBool = AtomicBool::new(false);
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static SIGPIPE_INHERITED_IGNORED: AtomicBool = AtomicBool::new(false);

/// Sets SIGPIPE's action for the process (`ignore`: writes to a closed
/// pipe fail with `EPIPE`; else the default, which ends the process),
/// remembering the first time how the parent had left it, for
/// [`end_as_a_closed_pipe_would`]. Call before any thread starts.
pub fn set_sigpipe(ignore: bool) {
    static FIRST: std::sync::Once = std::sync::Once::new();
    let action = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: sets the action of one signal to a predefined disposition
    // (no handler is installed); called before any thread starts.
    let old = unsafe { libc::signal(libc::SIGPIPE, action) };
    FIRST.call_once(|| SIGPIPE_INHERITED_IGNORED.store(old == libc::SIG_IGN, Ordering::Relaxed));
}

/// After standard output failed with `EPIPE` (its reader gone): ends the
/// process as the coreutils end on that pipe, killed by SIGPIPE, if the
/// parent left SIGPIPE at its default action; returns if the parent
/// ignored it (the coreutils then report a "write error").
pub fn end_as_a_closed_pipe_would() {
    if SIGPIPE_INHERITED_IGNORED.load(Ordering::Relaxed) {
        return;
    }
    let _ = io::stderr().flush();
    // SAFETY: restores the default action of SIGPIPE and sends it to
    // this thread, which ends the process; no handler is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached unless SIGPIPE is blocked: end with the status a shell
    // reports for it.
    std::process::exit(128 + libc::SIGPIPE);
}

/// How [`init`] fills a closed standard descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// `/dev/null`, readable and writable, as Rust programs (`b3sum`) get.
    Usable,
    /// `/dev/null`, the wrong way round: reading standard input and
    /// writing standard output or error fail with `EBADF`, as on the closed
    /// descriptor GNU's tools see.
    Failing,
}

/// Looks at descriptors 0, 1 and 2 and fills each closed one as `fill`
/// says. Call first thing in `main`, before any file is opened.
pub fn init(fill: Fill) {
    for fd in 0..3 {
        // SAFETY: F_GETFD on any number only asks about the descriptor.
        let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
        if !closed {
            continue;
        }
        match fd {
            0 => STDIN_CLOSED.store(true, Ordering::Relaxed),
            1 => STDOUT_CLOSED.store(true, Ordering::Relaxed),
            _ => {}
        }
        let flags = match (fill, fd) {
            (Fill::Usable, _) => libc::O_RDWR,
            (Fill::Failing, 0) => libc::O_WRONLY,
            (Fill::Failing, _) => libc::O_RDONLY,
        };
        // SAFETY: the path is a NUL-terminated literal. The lower
        // descriptors are all open by now, so the lowest free one, which
        // open returns, is `fd`.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), flags | libc::O_CLOEXEC) };
        if got != fd {
            // No /dev/null: the descriptor stays closed, and a file opened
            // later may take its number. Nothing better can be done.
            if got >= 0 {
                // SAFETY: `got` was just opened here and is not used.
                unsafe { libc::close(got) };
            }
        }
    }
}

/// Standard input was closed when the program started.
pub fn stdin_was_closed() -> bool {
    STDIN_CLOSED.load(Ordering::Relaxed)
}

/// Standard output was closed when the program started.
pub fn stdout_was_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Standard output as GNU's tools write it: line by line (they buffer it,
/// but flush it before each message on standard error, so that both come
/// out in the order they were made); the first failure is kept and later
/// writes are dropped, so
/// that the work goes on (and its errors are reported on standard error)
/// and the failure is reported at the end ([`Stdout::finish`]). It writes
/// to descriptor 1 itself ([`Fd1`]), not through `std::io::stdout`, which
/// takes `EBADF` for success.
pub struct Stdout {
    inner: Option<io::BufWriter<Fd1>>,
    error: Option<io::Error>,
}

impl Stdout {
    /// Standard output.
    pub fn lock() -> Stdout {
        Stdout {
            inner: Some(io::BufWriter::with_capacity(64 << 10, Fd1)),
            error: None,
        }
    }

    /// Flushes what is buffered and returns the first failure, if any.
    pub fn finish(&mut self) -> Option<io::Error> {
        let _ = self.flush();
        self.error.take()
    }

    fn keep(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            self.error = Some(e);
            self.inner = None;
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(w) = &mut self.inner {
            let mut r = w.write_all(buf);
            if r.is_ok() && buf.contains(&b'\n') {
                r = w.flush();
            }
            self.keep(r);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(w) = &mut self.inner {
            let r = w.flush();
            self.keep(r);
        }
        Ok(())
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        // Dropping the BufWriter would flush it again after a failure.
        if let Some(w) = self.inner.take() {
            let _ = w.into_parts();
        }
    }
}

/// Descriptor 1, written with `write(2)` itself: no duplicate is made,
/// which would take a descriptor that, under a limit on open files
/// (`ulimit -n 4`), the file being hashed needs, as GNU's tools need none.
/// [`init`] keeps descriptor 1 taken, so it is standard output or fails.
pub struct Fd1;

impl Write for Fd1 {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match rustix::io::write(io::stdout().as_fd(), buf) {
                Err(rustix::io::Errno::INTR) => {}
                r => return r.map_err(io::Error::from),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Standard error, whose failures are ignored: a message that cannot be
/// written changes nothing else (the exit status already says that
/// something failed), as GNU's `error()` ignores them.
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// Writes `line` and a newline to standard error, ignoring failure.
pub fn say(line: &str) {
    let _ = writeln!(Stderr, "{line}");
}

/// `eprintln!` that ignores a failure to write (`2>/dev/full`), where
/// `eprintln!` panics: a message that cannot be written changes nothing
/// but the message, as with GNU's tools.
macro_rules! say_err {
    ($($arg:tt)*) => {
        $crate::stdio::say(&format!($($arg)*))
    };
}
pub(crate) use say_err;
