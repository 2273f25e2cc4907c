//! What a descriptor is (`O_DIRECT`, a stream, an epoll instance or
//! pidfd), the duplicate an asynchronous operation works on, and the fork
//! count that tells a forked child.

use std::collections::HashMap;
use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock, PoisonError};

use blockio::aio::{AsyncEngine, AsyncFile};
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

/// Whether `fd` was opened with `O_DIRECT` (false if `fcntl` fails: the
/// read itself will then report the bad descriptor).
pub(crate) fn is_direct(fd: RawFd) -> bool {
    let flags = fd_flags(fd);
    flags != -1 && flags & libc::O_DIRECT != 0
}

/// `fd`'s `F_GETFL` flags, or -1 (an invalid descriptor).
pub(crate) fn fd_flags(fd: RawFd) -> i32 {
    // SAFETY: F_GETFL only reads the descriptor's flags; any fd value is
    // acceptable (an invalid one gives -1).
    unsafe { libc::fcntl(fd, libc::F_GETFL) }
}

/// Waits until `fd` is ready for `events` (`POLLIN` or `POLLOUT`), so that
/// a blocking batch on a pipe, socket or terminal can be interrupted: the
/// wait is in slices of 100 ms with the GIL released, and Python's signal
/// handlers run between them (Ctrl-C raises `KeyboardInterrupt`). A
/// regular file or block device is always ready, which costs one `poll`
/// call; so is a descriptor `poll` refuses, whose operation then reports
/// the error, and one not opened for `events` (a pipe's write end to
/// read), which never becomes ready. A descriptor no operation may reach
/// is not waited for: its errno comes back instead (`Ok(Some)`), for the
/// batch to fail each of its operations with (see [`refusal`]); and the
/// wait ends with `ECANCELED` when `closed` says the engine was closed
/// meanwhile (from another thread), as its asynchronous operations are
/// cancelled then. `flags`: `fd`'s `F_GETFL` flags ([`fd_flags`]).
pub(crate) fn wait_ready(
    py: Python<'_>,
    fd: RawFd,
    flags: i32,
    events: libc::c_short,
    closed: &dyn Fn() -> bool,
) -> PyResult<Option<i32>> {
    let poll = |timeout: libc::c_int| {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd on the stack.
        let n = unsafe { libc::poll(&mut p, 1, timeout) };
        n != 0 && !(n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR))
    };
    if fd < 0 {
        return Ok(None);
    }
    if let Some(errno) = refusal(fd, flags) {
        return Ok(Some(errno));
    }
    if flags != -1 && !opened_for(flags, events) {
        // A pipe's write end is never readable (nor its read end
        // writable): the operation itself fails at once, with `EBADF`, as
        // `os.read` and `os.write` do.
        return Ok(None);
    }
    if poll(0) {
        return Ok(None);
    }
    loop {
        py.check_signals()?;
        if closed() {
            return Ok(Some(libc::ECANCELED));
        }
        if crate::gil::detach(py, || poll(100)) {
            return Ok(None);
        }
    }
}

/// The errno of an operation on `fd` (`F_GETFL` `flags`) refused before it
/// reaches the kernel: `EBADF` for a number that became one of the
/// engine's own descriptors (see [`is_own`]); `EINVAL` for an epoll
/// instance, pidfd or io_uring, as `os.read` of one fails, where an
/// io_uring operation on it would wait for readiness (see
/// [`is_unreadable`]).
pub(crate) fn refusal(fd: RawFd, flags: i32) -> Option<i32> {
    if is_own(fd, flags) {
        Some(libc::EBADF)
    } else if is_unreadable(fd, flags) {
        Some(libc::EINVAL)
    } else {
        None
    }
}

/// Whether a read of `fd` (`F_GETFL` `flags`) at an offset other than 0
/// is refused with `ESPIPE`, as `os.pread`'s is: `fd` is a pipe, socket
/// or character device without offsets (a terminal), where io_uring would
/// ignore the offset and read. Its flags cannot tell: a FIFO opened by
/// its path has `open`'s flags, as a regular file has. So an `fstat`
/// tells (one system call per descriptor per batch with such offsets),
/// and for a character device an `lseek` (`/dev/zero` has offsets). An
/// `O_PATH` descriptor, which `fstat` sees through, is left to the read,
/// which fails with `EBADF` as `os.pread`'s does.
pub(crate) fn without_offsets(fd: RawFd, flags: i32) -> bool {
    use rustix::fs::FileType;
    if fd < 0 || flags == -1 || flags & libc::O_PATH != 0 {
        return false;
    }
    // SAFETY: `F_GETFL` just found `fd` open; the borrow lasts only for
    // the two calls below, which only look at it (were it closed
    // meanwhile by another thread, they fail with `EBADF`, and the read
    // reports that).
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false; // (the read reports what is wrong with the descriptor)
    };
    is_stream(fd, FileType::from_raw_mode(st.st_mode))
}

/// Whether `fd`, of `kind` (from its `fstat`), has no offsets: a pipe,
/// FIFO or socket, or a character device whose `lseek` fails with
/// `ESPIPE` (a terminal; `/dev/zero` has offsets).
pub(crate) fn is_stream(fd: rustix::fd::BorrowedFd<'_>, kind: rustix::fs::FileType) -> bool {
    use rustix::fs::FileType;
    match kind {
        FileType::Fifo | FileType::Socket => true,
        FileType::CharacterDevice => {
            rustix::fs::seek(fd, rustix::fs::SeekFrom::Current(0)) == Err(rustix::io::Errno::SPIPE)
        }
        _ => false,
    }
}

/// The `ESPIPE` of a read of `length` bytes at `offset` (not 0) of `fd`,
/// which has none (see [`without_offsets`]), worded as `Engine.aread`'s.
pub(crate) fn offset_refused(fd: RawFd, length: usize, offset: u64) -> io::Error {
    crate::refused(
        &format!("read of {length} bytes at offset {offset}"),
        fd,
        libc::ESPIPE,
    )
}

/// Operations of a batch refused before they are made, the error of each
/// in its place (`None`: it is made; an empty list: none is refused), and
/// the `F_GETFL` flags of the descriptors looked up meanwhile.
pub(crate) type Given = (Vec<Option<io::Error>>, HashMap<RawFd, i32>);

/// For reads into `ops` (`(fd, buffer, offset)`): in the place of each
/// at an offset other than 0 of a descriptor without offsets (see
/// [`without_offsets`]), its `ESPIPE`; `None` in the others'. With the
/// `F_GETFL` flags of each descriptor, looked up once, for the caller.
pub(crate) fn refused_offsets(ops: &[(RawFd, Bound<'_, PyAny>, u64)]) -> Given {
    let mut flags: HashMap<RawFd, i32> = HashMap::new();
    let mut streams: HashMap<RawFd, bool> = HashMap::new();
    let refused = ops
        .iter()
        .map(|(fd, obj, off)| {
            let stream = *streams.entry(*fd).or_insert_with(|| {
                let f = fd_flags(*fd);
                flags.insert(*fd, f);
                without_offsets(*fd, f)
            });
            (stream && *off != 0).then(|| {
                // (not a buffer: its read names it, if it is made)
                let size = PyBuffer::<u8>::get(obj).map_or(0, |b| b.len_bytes());
                offset_refused(*fd, size, *off)
            })
        })
        .collect();
    (refused, flags)
}

/// Whether a descriptor with `F_GETFL` `flags` was opened for `events`
/// (`POLLIN`: reading; `POLLOUT`: writing).
pub(crate) fn opened_for(flags: i32, events: libc::c_short) -> bool {
    match flags & libc::O_ACCMODE {
        libc::O_RDONLY => events & libc::POLLOUT == 0,
        libc::O_WRONLY => events & libc::POLLIN == 0,
        _ => true,
    }
}

/// The fork guard of a core: [`forks`] when it was made, so that a
/// forked child, which must not touch its parent's rings, knows it is one;
/// and the process's id then, asked only where the kernel refuses the
/// mark that [`forks`] reads (a child made without fork handlers is seen
/// by its id there, at a `getpid` per check; one that has its parent's id,
/// a pid namespace's first process made by its first process, is not).
pub(crate) struct Born(u64, u32);

impl Born {
    /// Made in this process, as it stands.
    pub(crate) fn here() -> Born {
        Born(forks().0, std::process::id())
    }

    /// Whether this process is a child forked since.
    pub(crate) fn forked(&self) -> bool {
        let (count, marked) = forks();
        self.0 != count || (!marked && self.1 != std::process::id())
    }
}

pub(crate) static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// How many times this process is a fork away from the one that loaded
/// the module (a child's count is more than its parent's; only whether two
/// counts differ means anything). Cheaper than `getpid`, which is a system
/// call on every check: a load of [`wipe_mark`]'s word, which the kernel
/// zeroes in any child made without `CLONE_VM`, however it was made (glibc's
/// `_Fork` and a raw `clone` run no `pthread_atfork` handler), and the count
/// the handler keeps where the kernel refuses the mark (before Linux 4.14);
/// and whether the mark is kept (false: the count of handler runs alone).
pub(crate) fn forks() -> (u64, bool) {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only bumps an atomic counter,
        // which is async-signal-safe as fork's child handlers must be.
        unsafe { libc::pthread_atfork(None, None, Some(count_fork)) };
    });
    let mark = wipe_mark();
    if let Some(mark) = mark {
        count_wiped(mark);
    }
    (FORKS.load(Ordering::SeqCst), mark.is_some())
}

/// Counts a fork when `mark` was wiped (0): the first thread that sees it
/// so sets it to 2 while it counts, and 1 once counted; a thread that
/// comes meanwhile waits for the count, so that no thread reads the count
/// of the parent after the child's first look (which a raced count would
/// let a core made then keep as its own, and then find itself forked).
fn count_wiped(mark: &AtomicU64) {
    while mark.load(Ordering::SeqCst) != 1 {
        match mark.compare_exchange(0, 2, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => {
                FORKS.fetch_add(1, Ordering::SeqCst);
                mark.store(1, Ordering::SeqCst);
            }
            Err(_) => std::hint::spin_loop(),
        }
    }
}

/// The word on a private page of its own mapped with `MADV_WIPEONFORK`:
/// 1 in the process that mapped it and in any that has counted its fork
/// since ([`count_wiped`]), 0 in a child made without `CLONE_VM` that has
/// not; `None` when the page or the advice is refused.
fn wipe_mark() -> Option<&'static AtomicU64> {
    static MARK: OnceLock<Option<usize>> = OnceLock::new();
    let page = (*MARK.get_or_init(map_wipe_mark))?;
    // SAFETY: `page` is the start of a private, readable and writable page
    // mapped by `map_wipe_mark` and never unmapped, so a reference to its
    // first 8 bytes lives as long as the process; the page is aligned for
    // an `AtomicU64`, and only atomic operations ever touch the word (the
    // kernel's zeroing in a child happens before the child runs).
    Some(unsafe { &*(page as *const AtomicU64) })
}

/// Maps [`wipe_mark`]'s page and sets its word to 1: its address, or
/// `None` when the kernel refuses the page or `MADV_WIPEONFORK`.
fn map_wipe_mark() -> Option<usize> {
    let len = rustix::param::page_size();
    // SAFETY: a new private anonymous mapping, with no address asked for
    // and no descriptor: it overlaps nothing the process holds.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `page` and `len` are the mapping just made.
    if unsafe { libc::madvise(page, len, libc::MADV_WIPEONFORK) } != 0 {
        // SAFETY: the mapping just made, which nothing refers to.
        unsafe { libc::munmap(page, len) };
        return None;
    }
    // SAFETY: the page just mapped, readable and writable, aligned for an
    // `AtomicU64` (a page is), and not yet shared with anything.
    let word = unsafe { &*(page as *const AtomicU64) };
    word.store(1, Ordering::SeqCst);
    Some(page as usize)
}

/// `O_LARGEFILE` as `F_GETFL` reports it on 64-bit Linux (the C headers
/// define it as 0 there, as it is implied): set on every descriptor made
/// by `open`, never on a pipe, socket or anonymous inode.
pub(crate) const KERNEL_O_LARGEFILE: i32 = 0o100000;

/// Whether `fd` is an anonymous inode that has no read or write but can be
/// polled: an epoll instance, a pidfd or an io_uring. An io_uring read or
/// write of one waits for it to become readable (for a pidfd, until the
/// process exits; for an epoll instance, perhaps for ever), and so does
/// a synchronous call that waits for readiness first, where the kernel's
/// own `read` fails at once with `EINVAL`. Costs nothing for a descriptor
/// made by `open`: only one that lacks `O_LARGEFILE` (a pipe, socket, or
/// anonymous inode) is looked at further, with `fstat` and, for an
/// anonymous inode, its name in `/proc/self/fd`.
/// `flags` are the descriptor's `F_GETFL` flags ([`fd_flags`]).
pub(crate) fn is_unreadable(fd: RawFd, flags: i32) -> bool {
    if flags == -1 || flags & KERNEL_O_LARGEFILE != 0 {
        return false;
    }
    // SAFETY: fstat writes into the zeroed struct on the stack.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is valid for writes.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != 0 {
        return false;
    }
    std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|p| {
        [
            "anon_inode:[eventpoll]",
            "anon_inode:[pidfd]",
            "anon_inode:[io_uring]",
        ]
        .iter()
        .any(|name| p.as_os_str() == *name)
    })
}

/// An async file over a duplicate of the caller's descriptor, or the
/// errno that made the duplicate fail (`EBADF` for a number that is not
/// open). Every operation of the batch holds the duplicate until the
/// kernel has completed it, even when the awaiting task was cancelled and
/// the caller's file object closed: the number an operation was issued on
/// cannot be closed and reused for another file while it runs (a
/// cancelled write cannot land in a file opened later). An epoll
/// instance, pidfd or io_uring fails with `EINVAL`, as the thread pool and the synchronous
/// calls report it (see [`is_unreadable`]). Two system calls
/// per batch: `fcntl(F_DUPFD_CLOEXEC)` here, `close` after the last
/// completion.
pub(crate) fn hold_file(
    aio: &AsyncEngine,
    fd: RawFd,
    flags: i32,
) -> Result<(AsyncFile, RawFd), i32> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // Looked at again if the number was not open then: making the async
    // engine on first use may have just given it to one of its own.
    let flags = if flags == -1 { fd_flags(fd) } else { flags };
    if let Some(errno) = refusal(fd, flags) {
        return Err(errno);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor or fails; no memory
    // is passed.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EBADF));
    }
    // SAFETY: `dup` is a new descriptor that nothing else owns.
    let file = unsafe { std::fs::File::from_raw_fd(dup) };
    Ok((AsyncFile::from_file(aio, file), dup))
}

/// The anonymous-inode descriptors (eventfds, rings) the engines made
/// lazily, on first use: the number of a descriptor the caller closed
/// can become one of them, and an operation on that stale number would
/// then wait on the engine's own eventfd for ever (or steal its
/// wake-ups). Such a number fails with `EBADF`, as it would have before.
static OWN: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// The anonymous-inode descriptors open now (`/proc/self/fd`).
pub(crate) fn anon_fds() -> Vec<RawFd> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let fd: RawFd = e.file_name().to_str()?.parse().ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        target
            .as_os_str()
            .to_str()?
            .starts_with("anon_inode:")
            .then_some(fd)
    })
    .collect()
}

/// Records as the engines' own the anonymous descriptors open now that
/// were not in `before` (taken with [`anon_fds`] before making them); the
/// numbers recorded, for [`disown`].
pub(crate) fn own_new(before: &[RawFd]) -> Vec<RawFd> {
    let new: Vec<RawFd> = anon_fds()
        .into_iter()
        .filter(|fd| !before.contains(fd))
        .collect();
    OWN.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(&new);
    new
}

/// Forgets `fds` (their engine is closed: the numbers are free again).
pub(crate) fn disown(fds: &[RawFd]) {
    let mut own = OWN.lock().unwrap_or_else(PoisonError::into_inner);
    for fd in fds {
        if let Some(i) = own.iter().position(|o| o == fd) {
            own.swap_remove(i);
        }
    }
}

/// Whether `fd` is one of the engines' own descriptors (see [`OWN`]).
/// Free for a descriptor made by `open` (`flags` with `O_LARGEFILE`).
pub(crate) fn is_own(fd: RawFd, flags: i32) -> bool {
    flags != -1
        && flags & KERNEL_O_LARGEFILE == 0
        && OWN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&fd)
}

/// Whether a write of `fd` may go on blockio's event loop's ring (what
/// `Engine.awrite` asks on that loop, in one `F_GETFL` and one `fstat`
/// with no Python object made but the answer): a regular file or block
/// device open for writing, neither `O_DIRECT` (whose writes need aligned
/// memory), non-blocking (`EAGAIN`) nor `O_PATH`. False for a descriptor
/// `fcntl` or `fstat` refuses (the engine then reports what is wrong).
#[pyfunction]
pub(crate) fn ring_writes(fd: RawFd) -> bool {
    let flags = fd_flags(fd);
    if flags == -1
        || flags & (libc::O_DIRECT | libc::O_NONBLOCK | libc::O_PATH) != 0
        || flags & libc::O_ACCMODE == libc::O_RDONLY
    {
        return false;
    }
    // SAFETY: `fcntl` just found `fd` open (so it is not -1); the caller's
    // descriptor, borrowed for this call, never closed here.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::fs::fstat(borrowed)
        .is_ok_and(|st| matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFBLK))
}

/// What `Engine.aread` asks of a descriptor whose read was not served on
/// the calling thread, in one `F_GETFL` and one `fstat` and with no
/// Python object made but the answer: for a pipe, socket, FIFO or
/// character device, however it was opened (a FIFO or terminal opened by
/// path has a regular file's flags: only `fstat` tells it apart), the
/// stream's key `(fd, device, inode, readable)`, `readable` saying it is
/// not open for writing only; for anything else whether a read of it may
/// go on blockio's event loop's ring (Python's `_ring_serves`: a regular
/// file or block device open for reading, neither `O_DIRECT`, non-blocking
/// nor `O_PATH`). False for a descriptor `fcntl` or `fstat` refuses (the
/// read then reports what is wrong with it).
#[pyfunction]
pub(crate) fn stream_or_ring(py: Python<'_>, fd: RawFd) -> PyResult<PyObject> {
    let flags = fd_flags(fd);
    if flags == -1 {
        return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind());
    }
    // SAFETY: `fcntl` just found `fd` open (so it is not -1); the caller's
    // descriptor, borrowed for this call, never closed here.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let Ok(st) = rustix::fs::fstat(borrowed) else {
        return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind());
    };
    let kind = st.st_mode & libc::S_IFMT;
    if matches!(kind, libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR) {
        let readable = flags & libc::O_ACCMODE != libc::O_WRONLY;
        let key = (fd, st.st_dev, st.st_ino, readable);
        return Ok(key.into_pyobject(py)?.into_any().unbind());
    }
    let refused = flags & (libc::O_DIRECT | libc::O_NONBLOCK | libc::O_PATH) != 0
        || flags & libc::O_ACCMODE == libc::O_WRONLY;
    let ring = !refused && matches!(kind, libc::S_IFREG | libc::S_IFBLK);
    Ok(ring.into_pyobject(py)?.to_owned().into_any().unbind())
}
