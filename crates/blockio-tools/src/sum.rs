//! `blockio sum`: checksums of many files at once on the engine.
//!
//! # How the work is spread
//!
//! Worker threads (one per CPU) take files in groups, in order. A group's
//! small files (up to [`SumOptions::small`] bytes) are read whole in **one
//! engine batch** — dozens of reads in flight from one thread, one kernel
//! call — and then hashed. A large file is streamed so that I/O and hashing
//! overlap:
//! * if it is mostly in the page cache (`cachestat`), a reader thread keeps
//!   [`SumOptions::depth`] blocks in flight through the batch engine while
//!   the worker hashes the blocks already read (BLAKE3 on every core for
//!   blocks of 1 MiB or more);
//! * if not, it is read with `O_DIRECT` through the async engine, which
//!   keeps [`SumOptions::direct_depth`] reads in flight at all times while
//!   the worker hashes each block as its turn comes. The page cache is left
//!   alone. Buffered batches were slower and far less steady on a cold file
//!   (readahead stalls now and then, and the queue drains at every batch);
//!   this keeps pace with fio (`docs/benchmarks.md`, "`sum` block sizes").
//!
//! Results are printed in the input order as soon as all earlier files are
//! done.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use blockio::aio::{AsyncEngine, AsyncFile, AsyncOpenOptions, OpFuture};
use blockio::{AlignedBuf, Engine, Op};

use crate::algo::{Algo, Hasher};

/// How `sum` works.
#[derive(Debug, Clone)]
pub struct SumOptions {
    /// The algorithm.
    pub algo: Algo,
    /// Worker threads (default: the CPUs).
    pub threads: usize,
    /// Files up to this size are read whole, a group per batch (default 256 KiB).
    pub small: usize,
    /// Small files per batch (default 32).
    pub group: usize,
    /// Bytes per read of a large file in the page cache (default 1 MiB).
    pub block: usize,
    /// Reads of a large file in the page cache in flight (default 4).
    pub depth: usize,
    /// Read large files that are not in the page cache with `O_DIRECT`
    /// (default true; see the module docs).
    pub direct: bool,
    /// Bytes per `O_DIRECT` read (default 2 MiB).
    pub direct_block: usize,
    /// `O_DIRECT` reads in flight (default 16).
    pub direct_depth: usize,
    /// Threads of the async engine that streams `O_DIRECT` reads, on its
    /// thread-pool backend (default 0: that engine's own default, the
    /// queue depth, at most 64).
    pub direct_pool_threads: usize,
    /// Bytes of a checksum list read, and its lines checked, at a time
    /// by `-c` (default 256 KiB). A batch's lines, names and results take
    /// some eight times its bytes.
    pub list_batch: usize,
}

impl Default for SumOptions {
    fn default() -> Self {
        SumOptions {
            algo: Algo::Blake3,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            small: 256 << 10,
            group: 32,
            // From the cache, 4 x 1 MiB was the faster of the two
            // measured (docs/benchmarks.md, "`sum` block sizes").
            block: 1 << 20,
            depth: 4,
            direct: true,
            // From the disk, 32 MiB in flight as 16 x 2 MiB kept pace
            // with fio's sequential read (docs/benchmarks.md, "`sum` block sizes").
            direct_block: 2 << 20,
            direct_depth: 16,
            direct_pool_threads: 0,
            list_batch: crate::list_batches::BATCH,
        }
    }
}

/// A file that could not be hashed.
#[derive(Debug)]
pub struct SumError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub error: io::Error,
}

impl std::fmt::Display for SumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

/// Hashes `files` with `engine`, calling `emit(index, result)` in index
/// order (from the calling thread) as results become available.
///
/// A file that cannot be opened for want of descriptors (`EMFILE`) is
/// tried again once its worker's group is read, and if it still cannot,
/// alone on this thread once every worker is done: it fails only if one
/// file at a time cannot be had.
pub fn hash_files(
    engine: &Engine,
    files: &[PathBuf],
    opts: &SumOptions,
    mut emit: impl FnMut(usize, Result<String, SumError>),
) {
    let next = AtomicUsize::new(0);
    let io = LargeFileIo {
        engine,
        aio: OnceLock::new(),
    };
    let io = &io;
    let (tx, rx) = mpsc::channel::<(usize, Result<String, SumError>)>();
    let mut order = InOrder {
        pending: BTreeMap::new(),
        want: 0,
    };
    let deferred = Mutex::new(Vec::new());
    let deferred = &deferred;
    std::thread::scope(|s| {
        let wanted = opts.threads.max(1).min(files.len().max(1));
        let mut started = 0;
        // One worker is this thread (no stack of its own to map: under a
        // limit on address space, 2 MiB of the room).
        for _ in 0..wanted * usize::from(wanted > 1) {
            let tx = tx.clone();
            let next = &next;
            let spawned = std::thread::Builder::new()
                .spawn_scoped(s, move || worker(io, files, opts, next, &tx, deferred));
            // Under a limit on address space or threads, as many as can be
            // had.
            match spawned {
                Ok(_) => started += 1,
                Err(_) => break,
            }
        }
        if started == 0 {
            // This thread works alone, handing on each group's results
            // before it takes the next group.
            let out = Results {
                files,
                tx: &tx,
                deferred: Some(deferred),
            };
            let mut bufs = Vec::new();
            while next_group(io, files, opts, &next, &out, &mut bufs) {
                rx.try_iter().for_each(|(i, r)| order.put(i, r, &mut emit));
            }
        }
        drop(tx);
        rx.iter().for_each(|(i, r)| order.put(i, r, &mut emit));
    });
    let mut deferred = deferred.lock().unwrap_or_else(|e| e.into_inner());
    deferred.sort_unstable();
    for &i in deferred.iter() {
        let r = hash_alone(io, files, i, opts);
        order.put(i, r, &mut emit);
    }
}

/// Hashes `files[i]` on this thread, alone: what a file that could not be
/// opened beside others gets. Its error, if any, is final.
fn hash_alone(
    io: &LargeFileIo<'_>,
    files: &[PathBuf],
    i: usize,
    opts: &SumOptions,
) -> Result<String, SumError> {
    let (tx, rx) = mpsc::channel();
    let out = Results {
        files,
        tx: &tx,
        deferred: None,
    };
    let mut bufs = Vec::new();
    let small = open_group(io, files, i..i + 1, opts, &out, &mut bufs);
    if !small.is_empty() {
        hash_small(io.engine, &small, &mut bufs, opts, &out);
    }
    drop(tx);
    rx.recv().expect("one result per file").1
}

/// Results put back in index order.
struct InOrder {
    /// Results that came before an earlier one.
    pending: BTreeMap<usize, Result<String, SumError>>,
    /// The index to hand on next.
    want: usize,
}

impl InOrder {
    /// Takes the result of file `i` and hands on, in order, every result
    /// that no earlier one is missing for.
    fn put(
        &mut self,
        i: usize,
        r: Result<String, SumError>,
        emit: &mut impl FnMut(usize, Result<String, SumError>),
    ) {
        self.pending.insert(i, r);
        while let Some(r) = self.pending.remove(&self.want) {
            emit(self.want, r);
            self.want += 1;
        }
    }
}

/// The engines a worker reads with: the batch engine for small files and
/// cached large ones, an async engine (started on first use) for streaming
/// uncached large files with `O_DIRECT`.
struct LargeFileIo<'e> {
    engine: &'e Engine,
    aio: OnceLock<Option<AsyncEngine>>,
}

impl LargeFileIo<'_> {
    /// Hashes a large file: with `O_DIRECT` reads through the async engine
    /// if less than half of it is cached (see [`stream_direct`]), else (or
    /// if the filesystem refuses `O_DIRECT`) through the page cache.
    fn stream(&self, path: &Path, file: &File, len: u64, opts: &SumOptions) -> io::Result<String> {
        if opts.direct && !looks_cached(file, len) {
            let aio = self.aio.get_or_init(|| {
                AsyncEngine::builder()
                    .queue_depth(256)
                    .fallback_threads(opts.direct_pool_threads)
                    .build()
                    .ok()
            });
            if let Some(aio) = aio {
                match stream_direct(aio, path, len, opts) {
                    // A filesystem that opens with O_DIRECT but refuses the
                    // reads: start again through the page cache.
                    Some(Err(e)) if blockio::errno(&e) == Some(libc::EINVAL) => {}
                    // No worker thread to read with (`ulimit -u` reached):
                    // the same.
                    Some(Err(e)) if no_worker(&e) => {}
                    Some(Ok((h, end))) => return read_to_end_at(file, end, h),
                    Some(Err(e)) => return Err(e),
                    None => {}
                }
            }
        }
        stream(self.engine, file, len, opts)
    }
}

/// Whether `e` says a read could not be had for want of a worker thread
/// (`ulimit -u` reached): io_uring cancels what it cannot hand to one
/// (`ECANCELED`), a pool that cannot start one says `EAGAIN`. A regular
/// file's read says neither of itself.
fn no_worker(e: &io::Error) -> bool {
    matches!(blockio::errno(e), Some(libc::ECANCELED | libc::EAGAIN))
}

/// Where a worker sends each file's result: to `tx`, with its index, and
/// an error naming the file; and where it leaves a file it could not open
/// for want of descriptors, to be hashed alone later (`None`: it fails).
struct Results<'a> {
    files: &'a [PathBuf],
    tx: &'a mpsc::Sender<(usize, Result<String, SumError>)>,
    deferred: Option<&'a Mutex<Vec<usize>>>,
}

impl Results<'_> {
    fn send(&self, i: usize, r: io::Result<String>) {
        let r = r.map_err(|error| SumError {
            path: self.files[i].clone(),
            error,
        });
        // The receiver is gone only if the caller stopped listening.
        let _ = self.tx.send((i, r));
    }

    /// Leaves file `i` to be hashed alone later; false if this is that
    /// later.
    fn defer(&self, i: usize) -> bool {
        let Some(deferred) = self.deferred else {
            return false;
        };
        deferred.lock().unwrap_or_else(|e| e.into_inner()).push(i);
        true
    }
}

/// A small file, open, with its size: read whole in a batch.
type Small = (usize, File, usize);

/// Takes groups of `opts.group` files until none is left: large files are
/// streamed one by one, the small ones of a group read in one batch.
fn worker(
    io: &LargeFileIo<'_>,
    files: &[PathBuf],
    opts: &SumOptions,
    next: &AtomicUsize,
    tx: &mpsc::Sender<(usize, Result<String, SumError>)>,
    deferred: &Mutex<Vec<usize>>,
) {
    let out = Results {
        files,
        tx,
        deferred: Some(deferred),
    };
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    while next_group(io, files, opts, next, &out, &mut bufs) {}
}

/// Takes the next group of `opts.group` files and hashes it (reading its
/// small files into `bufs`); false when none was left.
fn next_group(
    io: &LargeFileIo<'_>,
    files: &[PathBuf],
    opts: &SumOptions,
    next: &AtomicUsize,
    out: &Results<'_>,
    bufs: &mut Vec<Vec<u8>>,
) -> bool {
    let group = opts.group.max(1);
    let start = next.fetch_add(group, Ordering::Relaxed);
    if start >= files.len() {
        return false;
    }
    let end = (start + group).min(files.len());
    let small = open_group(io, files, start..end, opts, out, bufs);
    if !small.is_empty() {
        hash_small(io.engine, &small, bufs, opts, out);
    }
    true
}

/// Opens `files[range]`: streams (and reports) each large one now, reports
/// those that cannot be opened or are directories, and returns the small
/// ones. Out of descriptors, it reads the small files opened so far (into
/// `bufs`) to close them and tries again, and failing that leaves the
/// file to be hashed alone ([`Results::defer`]).
fn open_group(
    io: &LargeFileIo<'_>,
    files: &[PathBuf],
    range: std::ops::Range<usize>,
    opts: &SumOptions,
    out: &Results<'_>,
    bufs: &mut Vec<Vec<u8>>,
) -> Vec<Small> {
    let mut small = Vec::new();
    let out_of_descriptors =
        |r: &io::Result<_>| matches!(r, Err(e) if e.raw_os_error() == Some(libc::EMFILE));
    for i in range {
        let path = &files[i];
        let mut opened = open_to_hash(path);
        if out_of_descriptors(&opened) && !small.is_empty() {
            hash_small(io.engine, &small, bufs, opts, out);
            small.clear();
            opened = open_to_hash(path);
        }
        if out_of_descriptors(&opened) && out.defer(i) {
            continue;
        }
        match opened {
            // A pipe, a socket or a device has no size to read up to and
            // may not be read at offsets (a read at offset 0 of a pipe
            // takes its next bytes): read from start to end, in order.
            Ok((f, false, _)) => out.send(i, hash_reader(opts.algo, f)),
            Ok((f, true, len)) if len as usize <= opts.small => small.push((i, f, len as usize)),
            Ok((f, true, len)) => out.send(i, io.stream(path, &f, len, opts)),
            Err(error) => out.send(i, Err(error)),
        }
    }
    small
}

/// Opens `path` to hash it: the file, whether it is a regular file, and
/// its size. A directory is an error (`EISDIR`), as GNU reports it.
fn open_to_hash(path: &Path) -> io::Result<(File, bool, u64)> {
    let f = File::open(path)?;
    let m = f.metadata()?;
    if m.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok((f, m.is_file(), m.len()))
}

/// Reads every small file whole in one batch (one byte more than its size,
/// to notice a file that grew since `fstat`) and hashes it. A read that
/// returns exactly the size ends the file; any other count (a file that
/// grew, one that reports size 0 but has data, a read that came back short
/// before the size) streams the file like a large one, to a read that
/// returns nothing.
fn hash_small(
    engine: &Engine,
    small: &[Small],
    bufs: &mut Vec<Vec<u8>>,
    opts: &SumOptions,
    out: &Results<'_>,
) {
    bufs.resize_with(small.len(), Vec::new);
    for (b, (_, _, len)) in bufs.iter_mut().zip(small) {
        b.resize(len + 1, 0);
    }
    let results = {
        let mut ops: Vec<Op> = small
            .iter()
            .zip(bufs.iter_mut())
            .map(|((_, f, _), b)| Op::read(f, 0, b))
            .collect();
        engine.submit(&mut ops)
    };
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            for (i, _, _) in small {
                out.send(*i, Err(io::Error::new(e.kind(), e.to_string())));
            }
            return;
        }
    };
    for (((i, f, len), b), r) in small.iter().zip(bufs.iter()).zip(results) {
        let r = match r {
            // The read stopped where the size said, one byte short of
            // what was asked: the file ends there.
            Ok(n) if n == *len => {
                let mut h = Hasher::new(opts.algo);
                h.update(&b[..n]);
                Ok(h.finish_hex())
            }
            // Short before the size (or a file reporting size 0 that has
            // data, as /proc's do), or grown: streamed to a read that
            // returns nothing.
            Ok(_) => stream(engine, f, *len as u64, opts),
            // No worker thread to read with (`ulimit -u` reached): read
            // on this thread instead.
            Err(e) if no_worker(&e) => read_to_end_at(f, 0, Hasher::new(opts.algo)),
            Err(e) => Err(e),
        };
        out.send(*i, r);
    }
}

/// Streams one file read through the page cache: a reader thread keeps
/// `depth` blocks in flight (batches up to the `len` the file had when
/// opened; past it, or after a short read, one block at a time until a
/// read returns nothing), this thread hashes them in order.
fn stream(engine: &Engine, file: &File, len: u64, opts: &SumOptions) -> io::Result<String> {
    // A sequential read: let the kernel read further ahead (advisory; a
    // failure changes nothing but speed).
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::Sequential);
    let depth = opts.depth.max(1);
    let block = opts.block.max(4096);
    // Filled blocks go to the hasher, emptied ones come back.
    let (full_tx, full_rx) = mpsc::sync_channel::<Filled>(depth);
    let (empty_tx, empty_rx) = mpsc::channel::<Vec<u8>>();
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
            let reader = Reader {
                engine,
                file,
                len,
                block,
                depth,
                // Up to 2 x depth buffers, made as needed (a file of a few
                // blocks needs a few).
                buffers: Buffers {
                    empty: empty_rx,
                    spare: Vec::new(),
                    made: 0,
                    most: 2 * depth,
                    block,
                },
                full: full_tx,
            };
            reader.run();
        });
        match spawned {
            Ok(_) => hash_blocks(opts.algo, full_rx, empty_tx),
            // No thread to read ahead with (a limit on address space or
            // threads): read and hash in turn, on this thread.
            Err(_) => read_to_end_at(file, 0, Hasher::new(opts.algo)),
        }
    })
}

/// A block read, and how many of its bytes are data; a block of length 0
/// marks the end of the file.
type Filled = io::Result<(Vec<u8>, usize)>;

/// Hashes blocks in the order they come, handing each buffer back.
fn hash_blocks(
    algo: Algo,
    full: mpsc::Receiver<Filled>,
    empty: mpsc::Sender<Vec<u8>>,
) -> io::Result<String> {
    let mut h = Hasher::new(algo);
    loop {
        match full.recv() {
            Ok(Ok((b, n))) => {
                if b.is_empty() {
                    return Ok(h.finish_hex());
                }
                h.update(&b[..n]);
                let _ = empty.send(b);
            }
            // Dropping both channels stops the reader.
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("the reader stopped early")),
        }
    }
}

/// The buffers of one stream: those handed back, and new ones up to
/// `most`.
struct Buffers {
    empty: mpsc::Receiver<Vec<u8>>,
    /// Buffers the reader kept itself (read past a short read).
    spare: Vec<Vec<u8>>,
    made: usize,
    most: usize,
    block: usize,
}

impl Buffers {
    /// A buffer to read into; `None` once the hasher has stopped.
    fn take(&mut self) -> Option<Vec<u8>> {
        if let Some(b) = self.spare.pop() {
            return Some(b);
        }
        match self.empty.try_recv() {
            Ok(b) => Some(b),
            Err(_) if self.made < self.most => {
                self.made += 1;
                Some(vec![0u8; self.block])
            }
            Err(_) => self.empty.recv().ok(),
        }
    }
}

/// The reading side of [`stream`].
struct Reader<'a> {
    engine: &'a Engine,
    file: &'a File,
    len: u64,
    block: usize,
    depth: usize,
    buffers: Buffers,
    full: mpsc::SyncSender<Filled>,
}

impl Reader<'_> {
    /// Reads batches of blocks and sends them on in order until a read
    /// returns nothing (the end of the file), an error, or the hasher
    /// stops. After a short read the blocks behind it in its batch were
    /// read at the wrong offsets: they are dropped, and reading goes on one
    /// block at a time from where the data stopped (a file in /proc returns
    /// a page or so per read, whatever its size says).
    fn run(mut self) {
        let mut offset = 0u64;
        let mut one_at_a_time = false;
        loop {
            let Some(batch) = self.buffers_for(offset, one_at_a_time) else {
                return;
            };
            match self.read_and_send(offset, batch) {
                Step::Full(n) => offset += n,
                Step::Short(n) => {
                    offset += n;
                    one_at_a_time = true;
                }
                Step::Stop => return,
            }
        }
    }

    /// Buffers for the next batch at `offset`: one if `one`, else `depth`
    /// of them, fewer past the size the file had when opened (but always
    /// one, to find out whether it grew).
    fn buffers_for(&mut self, offset: u64, one: bool) -> Option<Vec<Vec<u8>>> {
        let mut batch = Vec::with_capacity(self.depth);
        for k in 0..self.depth {
            if k > 0 && (one || offset + (k * self.block) as u64 > self.len) {
                break;
            }
            batch.push(self.buffers.take()?);
        }
        Some(batch)
    }

    /// Reads `batch` at `offset` in one engine batch and sends the blocks
    /// up to the first short one; says how far the data went.
    fn read_and_send(&mut self, offset: u64, mut batch: Vec<Vec<u8>>) -> Step {
        let results = {
            let mut ops: Vec<Op> = batch
                .iter_mut()
                .enumerate()
                .map(|(k, b)| Op::read(self.file, offset + (k * self.block) as u64, b))
                .collect();
            self.engine.submit(&mut ops)
        };
        let results = match results {
            Ok(r) => r,
            Err(e) => {
                let _ = self.full.send(Err(e));
                return Step::Stop;
            }
        };
        let mut done = 0u64;
        let mut blocks = batch.into_iter().zip(results);
        while let Some((b, r)) = blocks.next() {
            match r {
                Ok(0) => {
                    // End of file: a zero-length marker ends the stream.
                    let _ = self.full.send(Ok((Vec::new(), 0)));
                    return Step::Stop;
                }
                Ok(n) => {
                    if self.full.send(Ok((b, n))).is_err() {
                        return Step::Stop;
                    }
                    done += n as u64;
                    if n < self.block {
                        // The rest of the batch lies past a gap: its
                        // buffers are kept for the next reads.
                        self.buffers.spare.extend(blocks.map(|(b, _)| b));
                        return Step::Short(done);
                    }
                }
                Err(e) => {
                    let _ = self.full.send(Err(e));
                    return Step::Stop;
                }
            }
        }
        Step::Full(done)
    }
}

/// How a batch of [`Reader`] went.
enum Step {
    /// Every block came back full: this many bytes.
    Full(u64),
    /// A block came back short (not empty): this many bytes up to its end.
    Short(u64),
    /// The end of the file, an error, or the hasher stopped.
    Stop,
}

/// Whether at least half of the file's pages are in the page cache, asked
/// with `cachestat(2)` (Linux 6.5+), which only counts: no I/O, one system
/// call. A cached file is hashed from the cache; one that is not is read
/// with `O_DIRECT`, which skips the cache (and leaves it as it was). Where
/// `cachestat` is missing the answer is "not cached": direct reads are
/// correct either way, only slower for a file that was cached.
fn looks_cached(file: &File, len: u64) -> bool {
    /// The same number on every architecture (the generic syscall table).
    const SYS_CACHESTAT: libc::c_long = 451;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let range = Range { off: 0, len: 0 };
    let mut stat = Stat::default();
    let fd = std::os::fd::AsRawFd::as_raw_fd(file);
    // SAFETY: cachestat reads `range` and writes one `struct cachestat`
    // into `stat`; both are live, correctly laid out (repr(C), five u64)
    // and outlive the synchronous call. (A raw syscall: neither rustix nor
    // libc wraps cachestat.)
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    let pages = len.div_ceil(4096).max(1);
    rc == 0 && stat.nr_cache * 2 >= pages
}

/// Streams a file read with `O_DIRECT` through the async engine: `depth`
/// reads of `block` bytes are always in flight (the driver thread submits
/// and reaps them), while this thread hashes the oldest one that completed.
/// Returns None if the file cannot be opened with `O_DIRECT` (tmpfs, some
/// network filesystems): the caller reads it buffered instead. Why this
/// path exists, with measurements: see the module docs.
fn stream_direct(
    aio: &AsyncEngine,
    path: &Path,
    len: u64,
    opts: &SumOptions,
) -> Option<io::Result<(Hasher, u64)>> {
    let options = AsyncOpenOptions::new().read(true).direct(true);
    let file = AsyncFile::open_with(aio, path, &options).ok()?;
    let align = file.direct_alignment()?.max().max(4096);
    let block = opts.direct_block.max(4096).div_ceil(align) * align;
    let depth = opts.direct_depth.max(1);
    Some(hash_in_order(
        &file,
        len,
        (block, align, depth),
        Hasher::new(opts.algo),
    ))
}

/// Keeps up to `depth` reads of `block` bytes (in buffers aligned to
/// `align`) in flight and feeds completed blocks, in file order, to `h` until
/// a short read. Reads go up to the `len` the file had when it was opened,
/// and on, one at a time, if it has grown since. Returns the hasher and the
/// offset the data stopped at: a short read is not proof of the end of the
/// file (reads after it must be aligned, which its end need not be), so the
/// caller reads on from there to a read that returns nothing.
fn hash_in_order(
    file: &AsyncFile,
    len: u64,
    (block, align, depth): (usize, usize, usize),
    mut h: Hasher,
) -> io::Result<(Hasher, u64)> {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut in_flight: VecDeque<OpFuture<AlignedBuf>> = VecDeque::with_capacity(depth);
    let mut spare: Vec<AlignedBuf> = Vec::with_capacity(depth);
    let mut offset = 0u64;
    // The bytes hashed: the offset of the oldest read in flight.
    let mut done = 0u64;
    loop {
        // Top up: `start` submits a read without waiting for it.
        while in_flight.len() < depth && (offset <= len || in_flight.is_empty()) {
            let buf = spare.pop().unwrap_or_else(|| AlignedBuf::new(block, align));
            let mut read = file.read_at(buf, offset);
            read.start();
            in_flight.push_back(read);
            offset += block as u64;
        }
        let mut oldest = in_flight.pop_front().expect("depth is at least 1");
        let (r, buf) = loop {
            match Pin::new(&mut oldest).poll(&mut cx) {
                Poll::Ready(v) => break v,
                Poll::Pending => std::thread::park(),
            }
        };
        let n = r?;
        h.update(&buf[..n]);
        done += n as u64;
        if n < block {
            // A read still in flight (past the gap) is dropped: the
            // driver keeps its buffer until it completes.
            return Ok((h, done));
        }
        spare.push(buf);
    }
}

/// Feeds `file` from `offset` to `h` with plain reads until one returns
/// nothing, and returns the digest.
fn read_to_end_at(file: &File, mut offset: u64, mut h: Hasher) -> io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match file.read_at(&mut buf, offset) {
            Ok(0) => return Ok(h.finish_hex()),
            Ok(n) => {
                h.update(&buf[..n]);
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Wakes the thread that waits in [`hash_in_order`].
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The digest of one file, streamed (for callers that need just one).
pub fn hash_one(engine: &Engine, path: &Path, opts: &SumOptions) -> Result<String, SumError> {
    let mut out = None;
    hash_files(engine, &[path.to_owned()], opts, |_, r| out = Some(r));
    out.expect("one result per file")
}

/// How `print_sums` writes its list.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// `--tag` lines (`BLAKE3 (name) = hex`) instead of `hex  name`.
    pub tag: bool,
    /// Leave out, without a word, what a walk meets that cannot be hashed
    /// (links to directories, dangling links, FIFOs, sockets, devices);
    /// by default each is reported and the exit status is 1.
    pub skip_special: bool,
}

/// The name standard input goes by, as an input or a list entry.
pub const STDIN: &str = "-";

/// `paths`, or standard input when there are none (as the coreutils read).
pub(crate) fn or_stdin(paths: &[PathBuf]) -> std::borrow::Cow<'_, [PathBuf]> {
    if paths.is_empty() {
        std::borrow::Cow::Owned(vec![PathBuf::from(STDIN)])
    } else {
        std::borrow::Cow::Borrowed(paths)
    }
}

/// Hashes each `(path, algorithm)` in order (`-` is standard input),
/// calling `emit(index, result)` in index order as results come. Runs of
/// files with one algorithm are hashed together by [`hash_files`].
pub fn hash_inputs(
    engine: &Engine,
    inputs: &[(PathBuf, Algo)],
    opts: &SumOptions,
    mut emit: impl FnMut(usize, Result<String, SumError>),
) {
    let mut start = 0;
    while start < inputs.len() {
        let (first, algo) = &inputs[start];
        if first.as_os_str() == STDIN {
            let r = stdin()
                .and_then(|f| hash_reader(*algo, f))
                .map_err(|error| SumError {
                    path: first.clone(),
                    error,
                });
            emit(start, r);
            start += 1;
            continue;
        }
        let end = start
            + inputs[start..]
                .iter()
                .take_while(|(p, a)| a == algo && p.as_os_str() != STDIN)
                .count();
        let paths: Vec<PathBuf> = inputs[start..end].iter().map(|(p, _)| p.clone()).collect();
        let run = SumOptions {
            algo: *algo,
            ..opts.clone()
        };
        hash_files(engine, &paths, &run, |i, r| emit(start + i, r));
        start = end;
    }
}

/// Standard input, to read from: a duplicate of descriptor 0, not
/// `std::io::stdin`, which reads a descriptor that is closed or open only
/// for writing (`EBADF`) as empty; the tools report it as GNU's do.
pub fn stdin() -> io::Result<File> {
    use std::os::fd::AsFd;
    Ok(File::from(io::stdin().as_fd().try_clone_to_owned()?))
}

/// The digest of everything `r` yields, read in 1 MiB pieces.
pub fn hash_reader(algo: Algo, mut r: impl io::Read) -> io::Result<String> {
    let mut h = Hasher::new(algo);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(h.finish_hex()),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes `problem` about `path` as the coreutils do:
/// `blockio sum: <name>: <reason>`.
pub(crate) fn report(err: &mut impl io::Write, path: &Path, problem: &str) -> io::Result<()> {
    writeln!(
        err,
        "blockio sum: {}: {problem}",
        crate::quote::quote_if_needed(path)
    )
}

/// Hashes every file under `inputs` (standard input for `-`, or when there
/// are none) and writes `<hex>  <name>` lines (GNU escaping), or `--tag`
/// lines, to `out`, in input order; problems go to `err` as
/// `blockio sum: <name>: <reason>`. Returns whether every file was hashed.
pub fn print_sums(
    engine: &Engine,
    inputs: &[PathBuf],
    opts: &SumOptions,
    list: &ListOptions,
    out: &mut impl io::Write,
    err: &mut impl io::Write,
) -> io::Result<bool> {
    let inputs = or_stdin(inputs);
    let (files, walk_errors) = crate::walk::files(&inputs);
    let mut ok = true;
    for e in walk_errors {
        if list.skip_special && e.special {
            continue;
        }
        ok = false;
        report(err, &e.path, &crate::reason::reason(&e.error))?;
    }
    let inputs: Vec<(PathBuf, Algo)> = files.into_iter().map(|p| (p, opts.algo)).collect();
    let mut io_result = Ok(());
    hash_inputs(engine, &inputs, opts, |i, r| {
        if io_result.is_err() {
            return;
        }
        let name = inputs[i].0.as_os_str();
        io_result = match r {
            Ok(hex) if list.tag => {
                out.write_all(&crate::names::tag_line(&opts.algo.tag(), &hex, name))
            }
            // BLAKE3 lines are b3sum 1.2's, the others sha256sum's: they
            // differ in whether a carriage return is escaped.
            Ok(hex) if opts.algo == Algo::Blake3 => {
                out.write_all(&crate::names::b3sum_line(&hex, name))
            }
            Ok(hex) => out.write_all(&crate::names::line(&hex, name)),
            Err(e) => {
                ok = false;
                report(err, &e.path, &crate::reason::reason(&e.error))
            }
        };
    });
    io_result?;
    out.flush()?;
    Ok(ok)
}
