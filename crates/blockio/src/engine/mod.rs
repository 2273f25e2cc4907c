//! The batch engine: the handle and its builder, and its backends.
//!
//! [`Engine`] takes batches of [`Op`]s and blocks the calling thread until
//! they complete. It runs them on io_uring ([`uring`]: a pool of rings,
//! each used by one thread at a time) or on a thread pool ([`threads`]),
//! serves page-cache hits on the calling thread where that is faster
//! ([`inline`]), bounds the operations in flight ([`in_flight_bound`]) and batches
//! metadata operations ([`meta`]). What it shares with the async engine
//! (operation kinds, buffers, ring setup, the worker pool) is in the crate
//! root's shared modules.

mod in_flight_bound;
pub(crate) mod inline;
mod meta;
mod threads;
mod uring;

pub use inline::ReadPath;
pub use uring::ProbeReport;

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::{self, Backend, BackendChoice};
use crate::buf::BufferPool;
use crate::op::{Op, Target};
use inline::{run_inline_blocking, serve_inline, InlineBlocking};
use threads::ThreadBackend;
use uring::{UringBackend, UringConfig};

/// Builds an [`Engine`]. Every setting has a default.
#[derive(Debug, Clone)]
pub struct EngineBuilder {
    queue_depth: usize,
    max_batch: u32,
    max_rings: usize,
    sqpoll: bool,
    sqpoll_idle_ms: u32,
    iopoll: bool,
    registered_buffers: Option<BufferPool>,
    file_slots: u32,
    threads: usize,
    backend: BackendChoice,
    submit_chunk: Option<u32>,
    read_path: ReadPath,
    inline_if_no_threads: bool,
    no_pool_threads: bool,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        EngineBuilder {
            queue_depth: crate::DEFAULT_QUEUE_DEPTH,
            max_batch: 128,
            max_rings: (4 * cpus).max(16),
            sqpoll: false,
            sqpoll_idle_ms: 50,
            iopoll: false,
            registered_buffers: None,
            file_slots: 0,
            threads: 0,
            backend: BackendChoice::Auto,
            submit_chunk: None,
            read_path: ReadPath::Auto,
            inline_if_no_threads: false,
            no_pool_threads: false,
        }
    }
}

impl EngineBuilder {
    /// Most operations in flight at once, over all threads: 1 to
    /// [`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH) (default
    /// [`DEFAULT_QUEUE_DEPTH`](crate::DEFAULT_QUEUE_DEPTH), 256, the async
    /// engine's too); outside that, [`build`](Self::build) fails with the
    /// error of [`check_queue_depth`](crate::check_queue_depth).
    ///
    /// A batch bigger than what is free proceeds with what is free and
    /// refills as operations complete. Each batch is submitted through a
    /// ring of [`max_batch`](Self::max_batch) entries, so the default lets
    /// two full batches of the default size be in flight at once.
    pub fn queue_depth(mut self, n: usize) -> Self {
        self.queue_depth = n;
        self
    }

    /// Most operations one kernel call submits: the size of each ring
    /// (default 128, rounded up to a power of two by the kernel). Batches
    /// larger than this are split.
    pub fn max_batch(mut self, n: u32) -> Self {
        self.max_batch = n.clamp(1, 32768);
        self
    }

    /// Most rings (default 4 × CPUs, at least 16). Each submitting thread
    /// uses a ring of its own for the length of a batch; when more threads
    /// submit at once than there are rings, the rest wait for one.
    pub fn rings(mut self, n: usize) -> Self {
        self.max_rings = n.max(1);
        self
    }

    /// Use a kernel thread to poll the submission queue (`IORING_SETUP_SQPOLL`;
    /// all rings share one poller). Costs a CPU while busy. Dropped, and
    /// reported in [`Engine::probe`], if the kernel refuses it.
    pub fn sqpoll(mut self, on: bool) -> Self {
        self.sqpoll = on;
        self
    }

    /// Idle time before the SQPOLL thread sleeps (default 50 ms).
    pub fn sqpoll_idle_ms(mut self, ms: u32) -> Self {
        self.sqpoll_idle_ms = ms;
        self
    }

    /// Complete direct I/O by polling the device (`IORING_SETUP_IOPOLL`).
    ///
    /// Used only for batches whose operations are all on [`DirectFile`](crate::DirectFile)s
    /// whose device has poll queues; every other batch (buffered files, or a
    /// device without poll queues) goes to ordinary rings, so turning this on
    /// never breaks anything. If the kernel refuses IOPOLL it is dropped and
    /// [`Engine::probe`] says so.
    pub fn iopoll(mut self, on: bool) -> Self {
        self.iopoll = on;
        self
    }

    /// Register the buffers of `pool` with every ring. Reads and writes whose
    /// buffer lies within one of the pool's buffers then use the fixed-buffer
    /// opcodes, which skip pinning pages per request.
    pub fn registered_buffers(mut self, pool: &BufferPool) -> Self {
        self.registered_buffers = Some(pool.clone());
        self
    }

    /// Reserve `slots` registered-file slots in every ring (at most
    /// [`MAX_REGISTERED_FILES`] and the process's open-file limit,
    /// `RLIMIT_NOFILE`, which the kernel enforces; more makes
    /// [`build`](Self::build) fail); fill them with
    /// [`Engine::register_file`]. Operations on the [`RegisteredFile`] it
    /// returns use its slot, which skips the per-request file lookup.
    pub fn registered_files(mut self, slots: u32) -> Self {
        self.file_slots = slots;
        self
    }

    /// Submit each batch in kernel calls of at most `n` operations, or in
    /// one call with `n = 0`, instead of the default ramp. io_uring backend
    /// only; the thread pool has no kernel calls to batch.
    ///
    /// Why the default is a ramp: the kernel plugs the block layer for a
    /// call that submits more than two requests and dispatches them together
    /// when the call ends, so with one call per batch the device starts on
    /// the first request only after the last one was prepared; on a
    /// virtual disk whose host serves requests one at a time that idle gap
    /// costs IOPS (figures in `docs/benchmarks.md`, "The submit ramp"). So
    /// a batch that finds its ring idle submits its
    /// first 2 operations at once (below the plug threshold: the device
    /// starts at once), then chunks of 4, 8, 16, ... while the device works
    /// on the earlier ones: about log2(batch) calls per batch, 6 for 64
    /// operations.
    ///
    /// `submit_chunk(0)` saves those calls where dispatch does not idle the
    /// device, for example page-cache hits; `submit_chunk(2)` keeps the
    /// device fed most evenly at one call per two operations.
    pub fn submit_chunk(mut self, n: u32) -> Self {
        self.submit_chunk = Some(n);
        self
    }

    /// How reads of buffered files are performed (default
    /// [`ReadPath::Auto`]: page-cache hits of reads in small batches are
    /// served on the calling thread, where that measured faster than the
    /// ring; everything else goes to the backend). [`ReadPath::AlwaysSubmit`]
    /// sends every read to io_uring (or the pool).
    pub fn read_path(mut self, path: ReadPath) -> Self {
        self.read_path = path;
        self
    }

    /// Threads of the thread-pool backend; 0 (the default) means the queue
    /// depth, at most 64. A bound: one starts with the engine, the others
    /// as batches need them (with 256 KiB stacks), and one that cannot be
    /// started (a limit on address space or threads) leaves the work to
    /// those running.
    pub fn fallback_threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// With the thread-pool backend, whether the engine may start with no
    /// pool thread at all, each batch then run by the thread that submits
    /// it (default false: building fails when no thread can be started).
    /// For a process at its limit on processes (`ulimit -u`), where no
    /// thread can be had and io_uring, which needs worker threads for what
    /// it cannot do inline, cancels such operations.
    pub fn inline_if_no_threads(mut self, yes: bool) -> Self {
        self.inline_if_no_threads = yes;
        self
    }

    /// With the thread-pool backend, whether to start no pool thread at
    /// all, each batch then run by the thread that submits it (default
    /// false). For a process whose address space is limited (`ulimit -v`,
    /// `RLIMIT_AS`) and fitted to one thread: a pool thread's stack would
    /// take 2 MiB of the room its work needs.
    pub fn no_pool_threads(mut self, yes: bool) -> Self {
        self.no_pool_threads = yes;
        self
    }

    /// Which backend to use (default [`BackendChoice::Auto`]).
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.backend = choice;
        self
    }

    /// Builds the engine. With [`BackendChoice::Auto`] this fails only if
    /// even the thread pool cannot start, if [`BACKEND_ENV`](crate::BACKEND_ENV) holds an
    /// unknown value, or if an argument is invalid (an error naming it:
    /// a [`queue_depth`](Self::queue_depth) outside 1 to
    /// [`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH), more [`registered_files`](Self::registered_files) than
    /// [`MAX_REGISTERED_FILES`] or the process's open-file limit, a
    /// [`registered_buffers`](Self::registered_buffers) pool with no
    /// buffer). Only the kernel refusing io_uring falls back to the pool.
    pub fn build(self) -> io::Result<Engine> {
        // The caller's mistakes are errors; only the kernel refusing
        // io_uring itself makes `Auto` fall back to the thread pool.
        self.check()?;
        let threads = backend::fallback_threads(self.threads, self.queue_depth);
        let uring = || {
            UringBackend::new(UringConfig {
                entries: self.max_batch.next_power_of_two(),
                queue_depth: self.queue_depth,
                max_rings: self.max_rings,
                sqpoll: self.sqpoll,
                sqpoll_idle_ms: self.sqpoll_idle_ms,
                iopoll: self.iopoll,
                bufs: self.registered_buffers.clone(),
                file_slots: self.file_slots,
                submit_chunk: self.submit_chunk.map(|n| n as usize),
            })
            .map(|u| (EngineBackend::Uring(Box::new(u)), None))
        };
        let pool = |reason| {
            Ok((
                EngineBackend::Threads(if self.no_pool_threads {
                    ThreadBackend::inline_only()
                } else {
                    ThreadBackend::new(threads, self.inline_if_no_threads)?
                }),
                Some(reason),
            ))
        };
        let (backend, fallback_reason) = backend::select(self.backend, uring, pool)?;
        Ok(Engine {
            shared: Arc::new(EngineShared {
                backend,
                fallback_reason,
                read_path: self.read_path,
                inline_blocking: self.read_path == ReadPath::Auto && !self.sqpoll && !self.iopoll,
                served_inline: AtomicU64::new(0),
                served_inline_blocking: AtomicU64::new(0),
                sent_to_backend: AtomicU64::new(0),
            }),
        })
    }
}

/// The most registered-file slots an engine may reserve: the kernel's
/// limit before Linux 5.15 (later kernels allow more, but every slot costs
/// memory in every ring).
pub const MAX_REGISTERED_FILES: u32 = 1 << 15;

impl EngineBuilder {
    /// Refuses arguments no kernel can accept, naming them.
    fn check(&self) -> io::Result<()> {
        crate::check_queue_depth(self.queue_depth)?;
        let invalid = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        let slots = self.file_slots;
        if slots > MAX_REGISTERED_FILES {
            return invalid(format!(
                "EngineBuilder::registered_files: {slots} slots; at most {MAX_REGISTERED_FILES}"
            ));
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if slots > 0
            // SAFETY: getrlimit writes one rlimit through a live pointer.
            && unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0
            && u64::from(slots) > lim.rlim_cur
        {
            return invalid(format!(
                "EngineBuilder::registered_files: {slots} slots exceed the open-file limit \
                 (RLIMIT_NOFILE) of {}",
                lim.rlim_cur
            ));
        }
        if let Some(pool) = &self.registered_buffers {
            if pool.buffers().count() == 0 || pool.buffers().buf_size() == 0 {
                return invalid(
                    "EngineBuilder::registered_buffers: the pool has no buffer to register"
                        .to_string(),
                );
            }
        }
        Ok(())
    }
}

/// The backend an engine runs its batches on.
enum EngineBackend {
    Uring(Box<UringBackend>),
    Threads(ThreadBackend),
}

/// What every clone of an [`Engine`] shares.
struct EngineShared {
    backend: EngineBackend,
    fallback_reason: Option<String>,
    read_path: ReadPath,
    /// Whether a batch's single remaining read runs with its blocking
    /// system call on the calling thread (see [`run_inline_blocking`]).
    inline_blocking: bool,
    served_inline: AtomicU64,
    served_inline_blocking: AtomicU64,
    sent_to_backend: AtomicU64,
}

/// Counts of where an engine's operations went, since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineStats {
    /// Reads served from the page cache on the calling thread
    /// ([`ReadPath::Auto`]).
    pub served_inline: u64,
    /// Reads that were alone in their batch, performed with a blocking
    /// system call on the calling thread, cached or not ([`ReadPath::Auto`]
    /// on an engine without `sqpoll` or `iopoll`).
    pub served_inline_blocking: u64,
    /// Operations handed to the backend (io_uring or the thread pool).
    pub sent_to_backend: u64,
}

/// A batched disk-I/O engine. Cheap to clone; clones share the rings.
///
/// See the [crate documentation](crate) for an example.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<EngineShared>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("backend", &self.backend())
            .field("fallback_reason", &self.shared.fallback_reason)
            .finish()
    }
}

impl Engine {
    /// An engine with default settings (see [`EngineBuilder`]).
    pub fn new() -> io::Result<Engine> {
        EngineBuilder::default().build()
    }

    /// A builder for the other settings.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        match self.shared.backend {
            EngineBackend::Uring(_) => Backend::IoUring,
            EngineBackend::Threads(_) => Backend::ThreadPool,
        }
    }

    /// Why the thread pool is in use, when it is.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.shared.fallback_reason.as_deref()
    }

    /// What probing the kernel found (io_uring backend only).
    pub fn probe(&self) -> Option<&ProbeReport> {
        match &self.shared.backend {
            EngineBackend::Uring(u) => Some(u.report()),
            EngineBackend::Threads(_) => None,
        }
    }

    /// How reads of buffered files are performed.
    pub fn read_path(&self) -> ReadPath {
        self.shared.read_path
    }

    /// Where this engine's operations went so far.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            served_inline: self.shared.served_inline.load(Ordering::Relaxed),
            served_inline_blocking: self.shared.served_inline_blocking.load(Ordering::Relaxed),
            sent_to_backend: self.shared.sent_to_backend.load(Ordering::Relaxed),
        }
    }

    /// Threads of the fallback pool (0 on io_uring).
    pub fn fallback_threads(&self) -> usize {
        match &self.shared.backend {
            EngineBackend::Uring(_) => 0,
            EngineBackend::Threads(t) => t.threads(),
        }
    }

    /// Performs every operation of `ops` and returns one result per
    /// operation, in the same order: the byte count (short at end of file,
    /// 0 for fsyncs) or the error of that operation alone.
    ///
    /// Blocks the calling thread, and only it, until all operations have
    /// completed. Allocates the returned vector; [`Engine::submit_into`]
    /// reuses one instead.
    ///
    /// # Errors
    /// The outer `Err` means the engine itself failed (for example the kernel
    /// refused `io_uring_enter`); results of single operations are inside.
    pub fn submit(&self, ops: &mut [Op<'_>]) -> io::Result<Vec<io::Result<usize>>> {
        let mut results = Vec::with_capacity(ops.len());
        self.submit_into(ops, &mut results)?;
        Ok(results)
    }

    /// Like [`Engine::submit`], writing the results into `results` (cleared
    /// first). Allocates nothing once `results` has the capacity.
    pub fn submit_into(
        &self,
        ops: &mut [Op<'_>],
        results: &mut Vec<io::Result<usize>>,
    ) -> io::Result<()> {
        results.clear();
        let mut pending = 0;
        results.extend(ops.iter_mut().map(|op| {
            let refused = op.precheck();
            op.settled = refused.is_some();
            pending += usize::from(!op.settled);
            match refused {
                Some(err) => Err(err),
                None => Ok(0),
            }
        }));
        if pending == 1
            && self.shared.inline_blocking
            && run_inline_blocking(ops, results) == InlineBlocking::Done
        {
            self.shared
                .served_inline_blocking
                .fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if pending > 0 && self.shared.read_path == ReadPath::Auto {
            let before = pending;
            pending = serve_inline(ops, results, pending);
            if before > pending {
                let served = (before - pending) as u64;
                self.shared
                    .served_inline
                    .fetch_add(served, Ordering::Relaxed);
            }
        }
        if let EngineBackend::Uring(u) = &self.shared.backend {
            if !u.report().performs_all() {
                pending = settle_unperformed(u.report(), ops, results, pending);
            }
        }
        if pending == 0 {
            return Ok(());
        }
        self.shared
            .sent_to_backend
            .fetch_add(pending as u64, Ordering::Relaxed);
        match &self.shared.backend {
            EngineBackend::Uring(u) => u.run(ops, results),
            EngineBackend::Threads(t) => t.run(ops, results),
        }
    }

    /// Puts a duplicate of `file`'s descriptor in a registered-file slot
    /// of every ring (see [`EngineBuilder::registered_files`]). Operations
    /// on the returned [`RegisteredFile`] use the slot; dropping it empties
    /// the slot.
    ///
    /// The registration owns its duplicate, so closing `file` (and a new
    /// file getting its descriptor number) never makes an operation reach
    /// the registered file through the slot: operations on `file` itself
    /// go to whatever its number names, as always. On the thread-pool
    /// backend the handle works the same, with no slot.
    ///
    /// # Errors
    /// `file`'s descriptor cannot be duplicated, its direct-I/O alignment
    /// is invalid, or every slot is in use (or the engine has none).
    pub fn register_file<T: Target + ?Sized>(&self, file: &T) -> io::Result<RegisteredFile> {
        // Everything the target (user code, which may panic) has to say is
        // asked before anything is allocated, so a panic leaves no
        // duplicate and no slot behind.
        let direct = file.direct_alignment();
        let polling = file.supports_polling();
        let raw = file.raw_fd();
        if let Some(a) = direct {
            a.check()
                .map_err(|e| io::Error::new(e.kind(), format!("register_file: the file's {e}")))?;
        }
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor (or fails); it
        // touches no memory.
        let dup = unsafe { libc::fcntl(raw, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("register_file: cannot duplicate descriptor {raw}: {e}"),
            ));
        }
        // SAFETY: `dup` is a new descriptor that nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        let fixed = match &self.shared.backend {
            EngineBackend::Uring(u) => Some(u.register_file(fd.as_raw_fd())?),
            EngineBackend::Threads(_) => None,
        };
        Ok(RegisteredFile {
            fd,
            fixed,
            direct,
            polling,
            engine: self.clone(),
        })
    }
}

/// A file in a registered-file slot of an [`Engine`]'s rings, made by
/// [`Engine::register_file`]. Operations on it (it is a [`Target`]) use
/// the slot, which saves the kernel a file lookup per operation.
///
/// It owns a duplicate of the registered descriptor. Only operations built
/// from the `RegisteredFile` itself use the slot; an operation on any other
/// target, [`RawTarget`](crate::RawTarget) of the same number included, is
/// issued on its own descriptor. An operation borrows the `RegisteredFile`,
/// so the registration outlives every batch that uses its slot.
pub struct RegisteredFile {
    /// The duplicate, closed only after its slot was emptied.
    fd: OwnedFd,
    /// The slot (io_uring backend only); `None` once released.
    fixed: Option<crate::op::sealed::FixedSlot>,
    direct: Option<crate::Alignment>,
    polling: bool,
    engine: Engine,
}

impl RegisteredFile {
    /// Empties the slot (as dropping does) and reports whether every idle
    /// ring let go of the file; a ring that did not is brought up to date
    /// before its next use.
    pub fn unregister(mut self) -> io::Result<()> {
        self.release()
    }

    fn release(&mut self) -> io::Result<()> {
        let Some(fixed) = self.fixed.take() else {
            return Ok(());
        };
        match &self.engine.shared.backend {
            EngineBackend::Uring(u) => u.unregister_file(fixed.slot),
            EngineBackend::Threads(_) => Ok(()),
        }
    }
}

impl Drop for RegisteredFile {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl fmt::Debug for RegisteredFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredFile")
            .field("fd", &self.raw_fd())
            .field("slot", &self.fixed.map(|f| f.slot))
            .finish()
    }
}

impl Target for RegisteredFile {
    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
    fn direct_alignment(&self) -> Option<crate::Alignment> {
        self.direct
    }
    fn supports_polling(&self) -> bool {
        self.polling
    }
    fn registered_slot(&self, _: crate::op::sealed::Token) -> Option<crate::op::sealed::FixedSlot> {
        self.fixed
    }
}

impl AsFd for RegisteredFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Performs right here, with their system calls, the batch's operations
/// whose opcode the ring lacks (see [`ProbeReport::performs`]); returns
/// how many operations are still pending.
fn settle_unperformed(
    report: &ProbeReport,
    ops: &mut [Op<'_>],
    results: &mut [io::Result<usize>],
    mut pending: usize,
) -> usize {
    for (op, result) in ops.iter_mut().zip(results.iter_mut()) {
        if !op.settled && !report.performs(op.kind()) {
            *result = op.run_checked();
            op.settled = true;
            pending -= 1;
        }
    }
    pending
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpKind;

    /// A ring without `IORING_OP_FTRUNCATE` (before Linux 6.9): the batch's
    /// truncations are performed on the submitting thread, and only they.
    #[test]
    fn a_kind_the_ring_lacks_is_performed_by_its_system_call() {
        let report = ProbeReport {
            entries: 8,
            sqpoll: false,
            iopoll: false,
            coop_taskrun: false,
            submit_all: false,
            registered_buffers: false,
            registered_file_slots: 0,
            metadata_ops: true,
            ftruncate: false,
            refused_flags: Vec::new(),
        };
        assert!(!report.performs_all());
        assert!(!report.performs(OpKind::Ftruncate));
        assert!(report.performs(OpKind::Stat) && report.performs(OpKind::Read));
        let file = tempfile::tempfile().unwrap();
        let mut buf = [0u8; 4];
        let mut ops = [Op::ftruncate(&file, 777), Op::read(&file, 0, &mut buf)];
        let mut results: Vec<io::Result<usize>> = vec![Ok(9), Ok(9)];
        let pending = settle_unperformed(&report, &mut ops, &mut results, 2);
        assert_eq!(pending, 1);
        assert!(ops[0].settled && !ops[1].settled);
        assert_eq!(results[0].as_ref().unwrap(), &0);
        assert_eq!(results[1].as_ref().unwrap(), &9, "left for the ring");
        assert_eq!(file.metadata().unwrap().len(), 777);
        let all = ProbeReport {
            ftruncate: true,
            ..report
        };
        assert!(all.performs_all());
    }
}
