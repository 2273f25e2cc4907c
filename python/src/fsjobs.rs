//! File-system calls that may block (open, fstat, ftruncate, close, stat,
//! mkdir, symlink, whole-file reads), run on a few threads of the core's
//! own so that the event loop's thread never waits on the file system.
//!
//! A job on one path or descriptor (open, statx, ftruncate, close, mkdir,
//! symlink) is one of blockio's operation kinds, performed by its blocking
//! form on the pool thread ([`blockio::blocking`], the same kinds, flags
//! and checks the engine's batches use), not through a ring: a batch of
//! one would cost a submission and a wait for one call, and would make
//! every job wait for the ring while another's call is in the kernel (a
//! stat on a hung mount would hold up every other file call). The pool
//! thread is what makes the call asynchronous for the event loop; its
//! [`MAX_THREADS`] threads are what let one call wait on its file while
//! the others go on. [`read_files`], many files at once, goes through the
//! core's batch engine ([`blockio::Engine`]), as the blocking `read_files`
//! does.
//!
//! Each call is a [`JobFuture`], completed by a pool thread and woken like
//! any operation of a batch. Rules that make cancellation safe:
//! * a job whose future is gone before a thread takes it is not run (an
//!   open is never made for nobody), except a close, which always runs;
//! * a descriptor opened is owned ([`Out::Fd`]) until Python takes its
//!   number, so one opened for a future that was dropped meanwhile is
//!   closed, never leaked;
//! * a job on an existing descriptor works on its own duplicate, so closing
//!   or reusing the caller's number meanwhile cannot redirect it; or, on a
//!   file object's own descriptor, on the number itself, which the file
//!   closes only once the job is done ([`crate::owned`]).

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use blockio::{blocking, OpenRequest, PathAt};

/// Threads a pool starts at most: enough that one open blocked on a FIFO
/// or a slow mount does not hold up the others.
const MAX_THREADS: usize = 8;

/// One blocking call.
pub(crate) enum FsCall {
    /// `open(path, flags, mode)`; the result is the new descriptor. A
    /// directory opened without `O_DIRECTORY` fails with `EISDIR`, as
    /// Python's `open` does.
    Open {
        path: CString,
        flags: i32,
        mode: u32,
    },
    /// The size of the file (`statx` of the descriptor).
    Size(Held),
    /// `ftruncate` to the length.
    Ftruncate(Held, u64),
    /// `close`; the result is 0.
    Close(OwnedFd),
    /// `mkdir(path, mode)`; the result is 0.
    Mkdir { path: CString, mode: u32 },
    /// `symlink(target, link)`: `link` will point at `target`; the result
    /// is 0.
    Symlink { target: CString, link: CString },
    /// Every file's whole content ([`read_files`]).
    ReadFiles {
        engine: blockio::Engine,
        paths: Vec<CString>,
    },
    /// `statx` of a path. `follow`: of the file a final symbolic link
    /// names, else of the link.
    Stat { path: CString, follow: bool },
}

/// What a job gives back.
pub(crate) enum Out {
    /// A size, or 0.
    Count(usize),
    /// A descriptor just opened.
    Fd(OwnedFd),
    /// A file's status.
    Stat(Box<libc::statx>),
    /// Each file's bytes, or why they could not be read.
    Files(Vec<io::Result<Vec<u8>>>),
}

impl FsCall {
    /// Runs the call: each is the blocking form of one of blockio's
    /// operation kinds ([`blockio::blocking`]), with the OS error alone
    /// kept (see [`unwrapped`]).
    fn run(self) -> io::Result<Out> {
        match self {
            FsCall::Open { path, flags, mode } => open(&path, flags, mode).map(Out::Fd),
            FsCall::Size(fd) => Ok(Out::Count(fstat(&fd)?.stx_size as usize)),
            FsCall::Ftruncate(fd, len) => {
                blocking::ftruncate(&*fd, len).map_err(unwrapped)?;
                Ok(Out::Count(0))
            }
            FsCall::Stat { path, follow } => {
                let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
                let st = blocking::stat(PathAt::cwd(&path), flags).map_err(unwrapped)?;
                Ok(Out::Stat(Box::new(st)))
            }
            FsCall::Close(fd) => {
                blocking::close(fd).map_err(unwrapped)?;
                Ok(Out::Count(0))
            }
            FsCall::Mkdir { path, mode } => {
                blocking::mkdir(PathAt::cwd(&path), mode).map_err(unwrapped)?;
                Ok(Out::Count(0))
            }
            FsCall::Symlink { target, link } => {
                blocking::symlink(PathAt::cwd(&link), &target).map_err(unwrapped)?;
                Ok(Out::Count(0))
            }
            FsCall::ReadFiles { engine, paths } => Ok(Out::Files(read_files(&engine, &paths)?)),
        }
    }
}

/// Opens `path` with blockio's open kind on this thread, which makes the
/// `openat(2)` call itself (with `O_CLOEXEC`) and so waits for a FIFO's
/// other end as Python's `open` does; a batch through the ring would not
/// (io_uring first tries an open without blocking, which for a FIFO
/// succeeds at once). A directory without `O_DIRECTORY` in `flags` is
/// refused with `EISDIR` (and closed), as Python's `open` refuses it.
fn open(path: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let req = OpenRequest::new(PathAt::cwd(path)).flags(flags).mode(mode);
    let fd = blocking::open(&req).map_err(unwrapped)?;
    if flags & libc::O_DIRECTORY == 0 && is_dir(&fstat(&fd)?) {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok(fd)
}

/// `statx` of an open descriptor, through blockio's stat kind.
fn fstat(fd: &OwnedFd) -> io::Result<libc::statx> {
    blocking::stat(PathAt::file(fd), 0).map_err(unwrapped)
}

/// Whether `st` is of a FIFO or a socket (read in order, not by offset).
fn is_stream(st: &libc::statx) -> bool {
    matches!(
        u32::from(st.stx_mode) & libc::S_IFMT,
        libc::S_IFIFO | libc::S_IFSOCK
    )
}

/// Everything `fd` (a FIFO or socket) gives until its end, read in order;
/// waits for data when the descriptor is non-blocking.
fn read_stream(fd: RawFd) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            let n = n as usize;
            out.try_reserve(n)
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
            out.extend_from_slice(&buf[..n]);
            continue;
        }
        if n == 0 {
            return Ok(out);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd on the stack.
                unsafe { libc::poll(&mut p, 1, -1) };
            }
            _ => return Err(e),
        }
    }
}

fn is_dir(st: &libc::statx) -> bool {
    u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR
}

/// Files one round of [`read_files`] has open at once at most.
const FILES_PER_ROUND: usize = 16;

/// Threads [`read_files`] reads on at most, each through rounds of its
/// own; with [`FILES_PER_ROUND`], what all hold at once (256 files) stays
/// well under the usual limit of 1,024 descriptors per process. Many small
/// rounds measured faster than a few large ones, cold (figures in
/// `docs/benchmarks.md`): a small round waits less for its slowest file,
/// and the copies of cold reads run on the threads that submitted them,
/// so on a busy machine more threads get more of the CPUs.
const READERS: usize = 16;

/// One file's content as [`read_files`] reads it.
struct Whole {
    /// The bytes read so far (its length); the reads go into its spare
    /// capacity, never zeroed first.
    buf: Vec<u8>,
    /// The size a regular file had at its `statx`; `None` for any other.
    regular: Option<usize>,
    done: bool,
}

/// One file's result as [`read_files`] gives it.
pub(crate) type FileResult = io::Result<Vec<u8>>;

/// Each file's whole content, in order, or the error that stopped it (which
/// names neither the verb nor the path: the caller knows the path; a file
/// too large for memory fails with [`io::ErrorKind::OutOfMemory`]).
///
/// The files are read in rounds of up to [`FILES_PER_ROUND`], by up to
/// [`READERS`] threads at once, each taking the next round as it finishes
/// one. A round costs four batches through the engine, each with every
/// file's operation in flight at once: the opens, the `statx`es of the
/// open descriptors (for the size and to refuse a directory with
/// `EISDIR`), the reads, and the closes. A round waits for its slowest
/// operation at each step; the other threads' rounds keep the device and
/// both the submitting and the copying going meanwhile (a cold buffered
/// read's copy into the buffer runs on the thread that submitted it, so
/// one thread alone is bound by one CPU). Each read asks for the size plus
/// one byte, so that a regular file whose read stops at the size it had
/// is known whole at once; any other (a file grown or shrunk since its
/// `statx`, a file in `/proc`, whose reads come back short before its end)
/// is read on, into more room when full, until a read returns nothing.
///
/// Near the process's descriptor limit (`RLIMIT_NOFILE`), the call never
/// fails as a whole and never fails a file that could be opened alone, as a
/// loop of `Path.read_bytes` would find. Each reader may hold a round's
/// files and a ring of the engine's (a ring is a descriptor, made when a
/// thread finds none idle, and kept by the engine), so the readers are
/// only as many as the descriptor numbers free when the call starts leave
/// room for ([`free_descriptors`]); with no room for one, every file is
/// read alone on this thread ([`read_alone`]: plain system calls, one
/// descriptor at a time, no ring). A file whose open fails with `EMFILE`
/// or `ENFILE` anyway (another thread took the room meanwhile), and every
/// file of a round the engine could not run for the limit (it found no
/// descriptor for a ring), is read again alone once the readers are done.
pub(crate) fn read_files(
    engine: &blockio::Engine,
    paths: &[CString],
) -> io::Result<Vec<FileResult>> {
    let slots: Mutex<Vec<Option<FileResult>>> =
        Mutex::new((0..paths.len()).map(|_| None).collect());
    read_files_by_round(engine, paths, &|first, results| {
        let mut slots = slots.lock().unwrap_or_else(|e| e.into_inner());
        for (k, r) in results.into_iter().enumerate() {
            slots[first + k] = Some(r);
        }
    })?;
    Ok(slots
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every round delivered"))
        .collect())
}

/// [`read_files`], handing each round's results to `deliver` as soon as
/// the round is done, with the index of its first path (the rounds in any
/// order, each once), so that the caller can turn them into its own
/// objects while the other rounds are read: the memory of a round it has
/// taken is then free for the next (a call that handed every file over
/// at the end spent a third of its time in that hand-over, cold). On an
/// error of the engine (other than the descriptor limit) the call fails
/// with it, and the rounds delivered before are to be discarded.
pub(crate) fn read_files_by_round(
    engine: &blockio::Engine,
    paths: &[CString],
    deliver: &(dyn Fn(usize, Vec<FileResult>) + Sync),
) -> io::Result<()> {
    let rounds: Vec<&[CString]> = paths.chunks(FILES_PER_ROUND).collect();
    let room = free_descriptors().saturating_sub(SPARE_DESCRIPTORS) / (FILES_PER_ROUND + 1);
    let readers = rounds.len().min(READERS).min(room);
    if readers == 0 {
        deliver(0, paths.iter().map(|p| read_alone(p)).collect());
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<io::Error>> = Mutex::new(None);
    // Rounds with files left to read alone for the limit, kept until the
    // readers are done and their descriptors free: by index, with what the
    // engine gave (`None`: it could not run the round).
    let later: Mutex<Vec<(usize, Option<Vec<FileResult>>)>> = Mutex::new(Vec::new());
    let read = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(round) = rounds.get(i) else { break };
        match read_round(engine, round) {
            Ok(r) if !r.iter().any(|res| matches!(res, Err(e) if is_limit(e))) => {
                deliver(i * FILES_PER_ROUND, r);
            }
            Ok(r) => later
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, Some(r))),
            Err(e) if is_limit(&e) => later
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, None)),
            // The engine failed: the call fails, with the first such
            // error; no more rounds.
            Err(e) => {
                failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                next.store(rounds.len(), Ordering::Relaxed);
            }
        }
    };
    if readers <= 1 {
        read();
    } else {
        std::thread::scope(|s| {
            // A reader that cannot be started leaves its rounds to the
            // others; with none started, this thread reads them all.
            let started = (0..readers)
                .filter(|_| blockio::arenas::spawn_scoped(s, "blockio-read", None, read).is_ok())
                .count();
            if started == 0 {
                read();
            }
        });
    }
    if failure.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
        // Read alone, one descriptor at a time, now that the readers'
        // descriptors are closed: a file fails for the limit only if it
        // cannot be opened alone.
        for (i, r) in later.into_inner().unwrap_or_else(|e| e.into_inner()) {
            let round = rounds[i];
            let r = match r {
                Some(mut r) => {
                    for (p, res) in round.iter().zip(r.iter_mut()) {
                        if matches!(res, Err(e) if is_limit(e)) {
                            *res = read_alone(p);
                        }
                    }
                    r
                }
                None => round.iter().map(|p| read_alone(p)).collect(),
            };
            deliver(i * FILES_PER_ROUND, r);
        }
    }
    match failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Descriptor numbers kept free for others (the event loop's, Python's)
/// when [`read_files`] sizes its readers.
const SPARE_DESCRIPTORS: usize = 4;

/// Whether `e` is the descriptor limit: `EMFILE` (the process's) or
/// `ENFILE` (the system's).
fn is_limit(e: &io::Error) -> bool {
    matches!(
        blockio::errno(e).or(e.raw_os_error()),
        Some(libc::EMFILE | libc::ENFILE)
    )
}

/// How many descriptor numbers below the soft `RLIMIT_NOFILE` are not in
/// use (what the process can still open), counted in `/proc/self/fd`; 0
/// when not even that listing can be opened for the limit, and
/// `usize::MAX` when the limit is infinite or the count cannot be made
/// otherwise (no `/proc`).
fn free_descriptors() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return usize::MAX;
    }
    let soft = usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX);
    let dir = match std::fs::read_dir("/proc/self/fd") {
        Ok(d) => d,
        Err(e) if is_limit(&e) => return 0,
        Err(_) => return usize::MAX,
    };
    // The listing's own descriptor is among the entries, and free again
    // once the count is made.
    let used = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<usize>().ok())
        .filter(|&n| n < soft)
        .count();
    soft.saturating_sub(used.saturating_sub(1))
}

/// One file whole, as `Path.read_bytes` reads it: opened, checked with a
/// `statx` (a directory is `EISDIR`), read in order to its end and closed,
/// with plain system calls on this thread. It holds one descriptor and no
/// ring: what [`read_files`] falls back to near the descriptor limit.
fn read_alone(path: &CStr) -> FileResult {
    // Non-blocking: a FIFO opens without waiting for a writer (as through
    // the ring); `read_stream` waits for its data. A lease's `EAGAIN` is
    // waited out by a blocking open.
    let req = OpenRequest::new(PathAt::cwd(path)).flags(libc::O_RDONLY | libc::O_NONBLOCK);
    let fd = match blocking::open(&req).map_err(unwrapped) {
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => open_waiting(path)?,
        r => r?,
    };
    if is_dir(&fstat(&fd)?) {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    read_stream(fd.as_raw_fd())
}

/// Opens `path` read-only, waiting as long as the open does: for a file
/// whose non-blocking open met `EAGAIN` (a lease another process holds,
/// which a blocking open waits to see broken).
fn open_waiting(path: &CStr) -> io::Result<OwnedFd> {
    blocking::open(&OpenRequest::new(PathAt::cwd(path))).map_err(unwrapped)
}

/// One round of [`read_files`]: every file of `paths` open at once, each
/// step a batch through the engine (see [`read_files`]).
fn read_round(engine: &blockio::Engine, paths: &[CString]) -> io::Result<Vec<FileResult>> {
    let files = open_round(engine, paths)?;
    let mut wholes = sized_round(&files);
    let targets: Vec<Option<blockio::RawTarget>> = files
        .iter()
        .map(|f| f.as_ref().ok().map(|fd| blockio::RawTarget(fd.as_raw_fd())))
        .collect();
    while read_step(engine, &mut wholes, &targets)? {}
    let mut out = Vec::with_capacity(paths.len());
    let mut open = Vec::new();
    for (f, w) in files.into_iter().zip(wholes) {
        out.push(match f {
            Err(e) => Err(e),
            Ok(fd) => {
                open.push(fd);
                match w {
                    Some(Ok(w)) => Ok(w.buf),
                    Some(Err(e)) => Err(e),
                    // Every open file has had its statx.
                    None => Err(io::Error::from_raw_os_error(libc::EIO)),
                }
            }
        });
    }
    // A file only read has no write-back whose failure a close could
    // report: the results stand whatever the closes say.
    engine.close_batch(open)?;
    Ok(out)
}

/// The opens of one round of [`read_files`], one batch: each file's
/// descriptor or the error that refused it.
fn open_round(engine: &blockio::Engine, paths: &[CString]) -> io::Result<Vec<io::Result<OwnedFd>>> {
    // io_uring opens a FIFO without waiting for a writer (it tries a
    // non-blocking open first); the pool's `openat` would wait, so it
    // opens non-blocking, which changes nothing for a regular file's
    // reads (and `read_stream` waits for a FIFO's data); a file whose
    // non-blocking open meets `EAGAIN` (a lease) is opened again,
    // waiting.
    let flags = match engine.backend() {
        blockio::Backend::IoUring => libc::O_RDONLY,
        blockio::Backend::ThreadPool => libc::O_RDONLY | libc::O_NONBLOCK,
    };
    let reqs: Vec<OpenRequest<'_>> = paths
        .iter()
        .map(|p| OpenRequest::new(PathAt::cwd(p)).flags(flags))
        .collect();
    let opened = engine.open_batch(&reqs)?;
    Ok(opened
        .into_iter()
        .zip(paths)
        .map(|(r, path)| match r.map_err(unwrapped) {
            Err(e) if flags & libc::O_NONBLOCK != 0 && e.raw_os_error() == Some(libc::EAGAIN) => {
                open_waiting(path)
            }
            r => r,
        })
        .collect())
}

/// Each open file of a round sized by its `statx`: room for a regular
/// file's size and a byte more, a stream read whole here, a directory
/// refused with `EISDIR`; `None` for a file that did not open.
fn sized_round(files: &[io::Result<OwnedFd>]) -> Vec<Option<io::Result<Whole>>> {
    // The `statx` of a descriptor just opened finds its inode in memory:
    // called here, it costs a system call, where a batch through the ring
    // would cost a round trip through the ring's worker threads (io_uring
    // performs every `statx` there).
    files
        .iter()
        .map(|f| {
            let fd = f.as_ref().ok()?;
            Some(match blocking::stat(PathAt::file(fd), 0) {
                Ok(st) if is_dir(&st) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
                // A FIFO or socket has no offsets for the ring's
                // positional reads: read in order, to its end, as
                // `Path.read_bytes` does.
                Ok(st) if is_stream(&st) => read_stream(fd.as_raw_fd()).map(|buf| Whole {
                    buf,
                    regular: None,
                    done: true,
                }),
                Ok(st) => {
                    let size = usize::try_from(st.stx_size).unwrap_or(usize::MAX - 1);
                    let regular = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG;
                    room(size.saturating_add(1)).map(|buf| Whole {
                        buf,
                        regular: regular.then_some(size),
                        done: false,
                    })
                }
                Err(e) => Err(unwrapped(e)),
            })
        })
        .collect()
}

/// One batch of reads, one for each file of the round not read whole yet,
/// into the room left in its buffer (grown when full); whether there was
/// any to make.
fn read_step(
    engine: &blockio::Engine,
    wholes: &mut [Option<io::Result<Whole>>],
    targets: &[Option<blockio::RawTarget>],
) -> io::Result<bool> {
    let mut ops = Vec::new();
    let mut who = Vec::new();
    for (i, (w, t)) in wholes.iter_mut().zip(targets).enumerate() {
        if let (Some(Ok(w)), Some(t)) = (w.as_mut(), t) {
            if !w.done {
                let at = w.buf.len() as u64;
                ops.push(blockio::Op::read_uninit(t, at, w.buf.spare_capacity_mut()));
                who.push(i);
            }
        }
    }
    if ops.is_empty() {
        return Ok(false);
    }
    let results = engine.submit(&mut ops)?;
    drop(ops);
    for (i, r) in who.into_iter().zip(results) {
        let Some(Ok(w)) = wholes[i].as_mut() else {
            continue;
        };
        match r {
            Ok(0) => w.done = true,
            Ok(n) => {
                if !w.took(n) {
                    wholes[i] = Some(Err(io::ErrorKind::OutOfMemory.into()));
                }
            }
            Err(e) => wholes[i] = Some(Err(unwrapped(e))),
        }
    }
    Ok(true)
}

impl Whole {
    /// Records a read of `n` bytes (not 0) into the spare capacity: done
    /// if it was short at a regular file's size, else more room if the
    /// buffer is full; false if that room could not be had.
    fn took(&mut self, n: usize) -> bool {
        let asked = self.buf.capacity() - self.buf.len();
        // SAFETY: the read wrote its first `n` bytes (`n` <= `asked`) of
        // the spare capacity, which follow the initialised ones.
        unsafe { self.buf.set_len(self.buf.len() + n.min(asked)) };
        if n < asked && self.regular == Some(self.buf.len()) {
            self.done = true;
        } else if self.buf.len() == self.buf.capacity() {
            let more = self.buf.len().max(4096);
            return self.buf.try_reserve_exact(more).is_ok();
        }
        true
    }
}

/// An empty buffer with room for `n` bytes, or an
/// [`io::ErrorKind::OutOfMemory`] error where the allocator refuses them (a
/// file larger than memory): that file fails with `MemoryError`, the
/// others are still read, and the process lives on.
fn room(n: usize) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    Ok(v)
}

/// The OS error inside one of the engine's path errors (which name the
/// verb and path), so the caller can name the path its own way.
fn unwrapped(e: io::Error) -> io::Error {
    match blockio::errno(&e) {
        Some(code) => io::Error::from_raw_os_error(code),
        None => e,
    }
}

/// The descriptor a job on an existing file works on.
pub(crate) enum Held {
    /// A duplicate of the caller's, the job's own.
    Dup(OwnedFd),
    /// The number of a descriptor a file object owns, which it closes
    /// only once the job has left the core (see [`crate::owned`]); never
    /// closed here.
    Borrowed(std::mem::ManuallyDrop<OwnedFd>),
}

impl Held {
    /// `fd` borrowed (see [`Held::Borrowed`]).
    pub(crate) fn borrowed(fd: RawFd) -> Held {
        // SAFETY: the number stays open until the job has left the core
        // (its owner's close waits for that), and is never closed here.
        Held::Borrowed(std::mem::ManuallyDrop::new(unsafe {
            OwnedFd::from_raw_fd(fd)
        }))
    }
}

impl std::ops::Deref for Held {
    type Target = OwnedFd;

    fn deref(&self) -> &OwnedFd {
        match self {
            Held::Dup(fd) => fd,
            Held::Borrowed(fd) => fd,
        }
    }
}

/// A duplicate of the caller's descriptor for a job to own, or the errno
/// (`EBADF` for a number that is not open).
pub(crate) fn dup(fd: RawFd) -> Result<OwnedFd, i32> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor or fails; no memory is
    // passed.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EBADF));
    }
    // SAFETY: `d` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(d) })
}

/// What a job's future and the thread running it share.
#[derive(Default)]
struct Slot {
    result: Option<io::Result<Out>>,
    waker: Option<Waker>,
}

/// The future of one job: its result once a pool thread has run it.
pub(crate) struct JobFuture(Arc<Mutex<Slot>>);

impl Future for JobFuture {
    type Output = io::Result<Out>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<Out>> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

struct Queue {
    jobs: VecDeque<(FsCall, Arc<Mutex<Slot>>)>,
    /// Threads waiting for a job.
    idle: usize,
    /// Threads running a job (until its result is stored: a thread about
    /// to wake the job's waiter takes the next job queued).
    busy: usize,
    threads: usize,
    stop: bool,
}

/// The pool: a queue, and threads started on demand up to [`MAX_THREADS`].
pub(crate) struct Pool {
    q: Arc<(Mutex<Queue>, Condvar)>,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            q: Arc::new((
                Mutex::new(Queue {
                    jobs: VecDeque::new(),
                    idle: 0,
                    busy: 0,
                    threads: 0,
                    stop: false,
                }),
                Condvar::new(),
            )),
        }
    }
}

impl Pool {
    /// Queues `job`; its future resolves when a thread has run it.
    pub(crate) fn submit(&self, job: FsCall) -> io::Result<JobFuture> {
        submit(&self.q, job)
    }

    /// A handle that queues jobs on this pool later, from any thread (a
    /// file's write queue, submitting its `ftruncate` in its turn); it
    /// does not keep the pool's threads from stopping when the pool is
    /// dropped (a job queued after that starts a thread that runs it and
    /// stops).
    pub(crate) fn handle(&self) -> PoolHandle {
        PoolHandle(Arc::clone(&self.q))
    }
}

/// See [`Pool::handle`].
pub(crate) struct PoolHandle(Arc<(Mutex<Queue>, Condvar)>);

impl PoolHandle {
    /// As [`Pool::submit`].
    pub(crate) fn submit(&self, job: FsCall) -> io::Result<JobFuture> {
        submit(&self.0, job)
    }
}

/// A pool thread's stack: its jobs are one blocking system call and the
/// wake of their waiter, a few frames deep; the default 2 MiB of each would
/// reserve address space that a limit on it (`ulimit -v`) counts.
const THREAD_STACK: usize = 256 << 10;

/// Queues `job` on the pool `shared`, starting a thread if none is idle.
/// A thread that cannot be started (a limit on address space or threads)
/// leaves the job to the threads not running a job, which take it after
/// the jobs queued before it; with every thread running one it is an error
/// (`EAGAIN`), as they may all be blocked for good (the open of a FIFO no
/// writer opens).
fn submit(shared: &Arc<(Mutex<Queue>, Condvar)>, job: FsCall) -> io::Result<JobFuture> {
    let slot = Arc::new(Mutex::new(Slot::default()));
    let (lock, cv) = &**shared;
    let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
    q.jobs.push_back((job, Arc::clone(&slot)));
    if q.idle >= q.jobs.len() || q.threads >= MAX_THREADS {
        cv.notify_one();
        return Ok(JobFuture(slot));
    }
    let mine = Arc::clone(shared);
    match blockio::arenas::spawn("blockio-fs", Some(THREAD_STACK), move || serve(&mine)) {
        Ok(_) => q.threads += 1,
        Err(_) if q.busy < q.threads => cv.notify_one(),
        Err(e) => {
            q.jobs.pop_back();
            return Err(e);
        }
    }
    Ok(JobFuture(slot))
}

impl Drop for Pool {
    fn drop(&mut self) {
        let (lock, cv) = &*self.q;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        cv.notify_all();
    }
}

/// A pool thread: runs queued jobs until the pool is dropped and the queue
/// is empty.
fn serve(shared: &(Mutex<Queue>, Condvar)) {
    let (lock, cv) = shared;
    let mut q = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some((job, slot)) = q.jobs.pop_front() {
            q.busy += 1;
            drop(q);
            let waker = finish(job, &slot);
            q = lock.lock().unwrap_or_else(|e| e.into_inner());
            q.busy -= 1;
            if let Some(w) = waker {
                // (woken once this thread counts as free, so that the
                // waiter's next call finds it)
                drop(q);
                w.wake();
                q = lock.lock().unwrap_or_else(|e| e.into_inner());
            }
        } else if q.stop {
            q.threads -= 1;
            return;
        } else {
            q.idle += 1;
            q = cv.wait(q).unwrap_or_else(|e| e.into_inner());
            q.idle -= 1;
        }
    }
}

/// Runs one job for `slot`, unless its future is gone (then dropping the
/// job closes the duplicate it owns); a close always runs. The waker of
/// its waiter, for the caller to wake.
fn finish(job: FsCall, slot: &Arc<Mutex<Slot>>) -> Option<Waker> {
    if Arc::strong_count(slot) == 1 && !matches!(job, FsCall::Close(..)) {
        return None;
    }
    let res = job.run();
    let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
    s.result = Some(res);
    s.waker.take()
}
