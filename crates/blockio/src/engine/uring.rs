//! The io_uring backend: a pool of rings, each used by one thread at a time.
//!
//! # Design
//!
//! A thread that submits a batch first takes permits from the engine-wide
//! in-flight bound (waiting only if none are free), then checks a ring out
//! of the pool (a mutex held only to pop or push an entry), pushes as many
//! operations as the ring and its permits allow, and makes **one**
//! `io_uring_enter` call that both submits them and waits for their
//! completions. It reaps every completion itself (user data is the
//! operation's index in the batch), refills if the batch was larger than
//! what could be in flight, and returns the ring when its whole batch is
//! done, or when it has nothing in flight and no permit left (it then waits
//! for permits without a ring, and checks one out again).
//!
//! Why this shape:
//! * no lock is held across a kernel round trip, and threads never share a
//!   ring at the same time, so many threads submit in parallel (a lock
//!   held across `io_uring_enter` would serialise them on the slowest
//!   kernel call);
//! * the thread that submitted an operation is the one waiting in the kernel
//!   for it, so task work (completion and retry of buffered I/O) always runs
//!   on a live thread that is in `io_uring_enter` — the submitting thread
//!   cannot exit or wander off while its requests are in flight (task work
//!   queued to a thread that left would never run, and its requests would
//!   never complete), and `COOP_TASKRUN` is safe;
//! * at most `entries` operations are in flight per ring and the completion
//!   queue has `2 * entries` slots, so it cannot overflow; the overflow flag
//!   is still honoured by flushing with `GETEVENTS` (completions the
//!   kernel kept aside are otherwise never seen);
//! * a batch that panics part way (it should not) still waits for its
//!   in-flight operations before its buffers can be released.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use io_uring::{opcode, IoUring, Probe};

use super::in_flight_bound::InFlightBound;
use crate::buf::{BufferPool, PoolBuffers};
use crate::kind::OpKind;
use crate::op::sealed::FixedSlot;
use crate::op::Op;
use crate::ring::{build_entry, submit_and_wait_or_abort, RingFlags};

struct Ring {
    io: IoUring,
    files_version: u64,
}

/// The rings of a pool not checked out, and how many the pool made.
struct IdleRings {
    /// Boxed: a ring is a few hundred bytes, and every batch checks one
    /// out and gives it back, so the pool moves a pointer instead.
    #[allow(clippy::vec_box)]
    idle: Vec<Box<Ring>>,
    created: usize,
}

/// Rings created with the same flags.
struct RingPool {
    state: Mutex<IdleRings>,
    returned: Condvar,
    max_rings: usize,
    entries: u32,
    /// The flags every ring of the pool has (with SQPOLL, later rings
    /// attach to the first ring's poller thread).
    flags: RingFlags,
    /// Buffers every ring registers.
    bufs: Option<BufferPool>,
    /// Registered-file slots every ring reserves.
    file_slots: u32,
}

/// What probing the kernel found.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// Ring size (submission queue entries) of each ring.
    pub entries: u32,
    /// SQPOLL is in use.
    pub sqpoll: bool,
    /// IOPOLL is in use (for files whose device has poll queues).
    pub iopoll: bool,
    /// `IORING_SETUP_COOP_TASKRUN` is in use.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SUBMIT_ALL` is in use.
    pub submit_all: bool,
    /// Registered buffers are in use.
    pub registered_buffers: bool,
    /// Slots for registered files (0: not in use).
    pub registered_file_slots: u32,
    /// The ring has the metadata opcodes (OPENAT, STATX, CLOSE: Linux 5.6;
    /// MKDIRAT, SYMLINKAT: 5.15). Without them the engine performs
    /// metadata operations with plain system calls on the calling thread.
    pub metadata_ops: bool,
    /// The ring has `IORING_OP_FTRUNCATE` (Linux 6.9). Without it the
    /// engine performs [`Op::ftruncate`](crate::Op::ftruncate) with the
    /// system call on the submitting thread.
    pub ftruncate: bool,
    /// Setup flags the kernel refused, dropped so that setup could succeed.
    pub refused_flags: Vec<&'static str>,
}

impl ProbeReport {
    /// Whether the ring performs operations of `kind` itself. The engine
    /// performs the others with their plain system call on the thread
    /// that submits the batch, before the rest of the batch goes to the
    /// ring, so a batch gives the same results on every kernel.
    pub fn performs(&self, kind: OpKind) -> bool {
        match kind {
            OpKind::Open | OpKind::Stat | OpKind::Close | OpKind::Mkdir | OpKind::Symlink => {
                self.metadata_ops
            }
            OpKind::Ftruncate => self.ftruncate,
            OpKind::Read
            | OpKind::Write
            | OpKind::ReadVectored
            | OpKind::WriteVectored
            | OpKind::Fsync
            | OpKind::Fdatasync
            | OpKind::Fallocate
            | OpKind::Accept
            | OpKind::Connect
            | OpKind::Recv
            | OpKind::Send
            | OpKind::SendVectored
            | OpKind::RecvSelect => true,
        }
    }

    /// Whether the ring performs every kind of operation a batch may hold
    /// (see [`ProbeReport::performs`]).
    pub(crate) fn performs_all(&self) -> bool {
        self.metadata_ops && self.ftruncate
    }
}

/// The registered files, as one version of the table every ring is
/// brought to before it is used.
///
/// Each descriptor is a duplicate owned by a [`RegisteredFile`](crate::RegisteredFile),
/// removed from the table before it is closed. A ring is brought to the
/// table only while the table's lock is held (a short `io_uring_register`
/// on a ring nobody else uses, never an `io_uring_enter`), so it never
/// meets a number that was closed (`EBADF`) or that another file took
/// meanwhile. Only operations built from a `RegisteredFile` (which they
/// borrow for the whole batch) use its slot, so a slot a batch uses names
/// that file in the ring for as long as the batch runs.
#[derive(Clone)]
pub(crate) struct FileTable {
    /// The backend the table belongs to (slots of another engine's rings
    /// are never used).
    owner: u64,
    version: u64,
    /// Slot -> fd (-1 when empty), as handed to the kernel.
    slots: Vec<RawFd>,
}

impl FileTable {
    /// The slot of this table `op` is issued on: only when it was built
    /// from a [`RegisteredFile`](crate::RegisteredFile) of this engine
    /// (any other operation uses its own descriptor) and its kind may use
    /// a registered file.
    fn slot_for(&self, op: &Op<'_>) -> Option<u32> {
        let fixed: FixedSlot = op.fixed?;
        (fixed.owner == self.owner
            && (fixed.slot as usize) < self.slots.len()
            && op.action.takes_registered_file())
        .then_some(fixed.slot)
    }
}

/// Tells the backends apart, for [`FixedSlot::owner`].
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

pub(crate) struct UringBackend {
    plain: RingPool,
    polled: Option<RingPool>,
    bound: InFlightBound,
    bufs: Option<BufferPool>,
    /// The current table; a batch takes a snapshot (the `Arc`) per ring
    /// check-out, so no lock is held across its kernel calls.
    files: Option<Mutex<Arc<FileTable>>>,
    report: ProbeReport,
    /// Fixed submit chunk (0: whole batch) or None for the ramp.
    submit_chunk: Option<usize>,
}

pub(crate) struct UringConfig {
    pub entries: u32,
    pub queue_depth: usize,
    pub max_rings: usize,
    pub sqpoll: bool,
    pub sqpoll_idle_ms: u32,
    pub iopoll: bool,
    pub bufs: Option<BufferPool>,
    pub file_slots: u32,
    pub submit_chunk: Option<usize>,
}

impl RingPool {
    /// A pool whose first ring, `first`, was built (and probed) with `flags`.
    fn with_first(cfg: &UringConfig, flags: RingFlags, first: IoUring) -> io::Result<RingPool> {
        let mut ring = Box::new(Ring {
            io: first,
            files_version: 0,
        });
        UringBackend::setup_ring(&mut ring, cfg.bufs.as_ref(), cfg.file_slots)?;
        Ok(RingPool {
            state: Mutex::new(IdleRings {
                idle: vec![ring],
                created: 1,
            }),
            returned: Condvar::new(),
            max_rings: cfg.max_rings.max(1),
            entries: cfg.entries,
            flags,
            bufs: cfg.bufs.clone(),
            file_slots: cfg.file_slots,
        })
    }

    fn new_ring(&self) -> io::Result<Box<Ring>> {
        let mut flags = self.flags;
        let io = flags.build(self.entries, &mut Vec::new())?;
        if flags != self.flags {
            return Err(io::Error::other(
                "io_uring setup flags changed after probing",
            ));
        }
        let mut ring = Box::new(Ring {
            io,
            files_version: 0,
        });
        UringBackend::setup_ring(&mut ring, self.bufs.as_ref(), self.file_slots)?;
        Ok(ring)
    }

    fn checkout(&self) -> io::Result<Box<Ring>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(ring) = st.idle.pop() {
                return Ok(ring);
            }
            if st.created < self.max_rings {
                st.created += 1;
                drop(st);
                return self.new_ring().inspect_err(|_| {
                    self.state.lock().unwrap_or_else(|e| e.into_inner()).created -= 1;
                    self.returned.notify_one();
                });
            }
            st = self.returned.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn give_back(&self, ring: Box<Ring>) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .idle
            .push(ring);
        self.returned.notify_one();
    }
}

/// The optional opcodes a ring has (see [`ProbeReport`]).
struct Optional {
    metadata_ops: bool,
    ftruncate: bool,
}

/// Checks the opcodes every engine needs; returns which optional ones
/// are there too.
fn probe_supported(ring: &IoUring) -> io::Result<Optional> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    for (code, name) in [
        (opcode::Read::CODE, "READ"),
        (opcode::Write::CODE, "WRITE"),
        (opcode::Readv::CODE, "READV"),
        (opcode::Writev::CODE, "WRITEV"),
        (opcode::Fsync::CODE, "FSYNC"),
        (opcode::Fallocate::CODE, "FALLOCATE"),
    ] {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the kernel's io_uring lacks IORING_OP_{name} (Linux 5.6 or later is needed)"
                ),
            ));
        }
    }
    let metadata_ops = [
        opcode::OpenAt::CODE,
        opcode::Statx::CODE,
        opcode::Close::CODE,
        opcode::MkDirAt::CODE,
        opcode::SymlinkAt::CODE,
    ]
    .into_iter()
    .all(|code| probe.is_supported(code));
    Ok(Optional {
        metadata_ops,
        ftruncate: probe.is_supported(opcode::Ftruncate::CODE),
    })
}

impl UringBackend {
    /// Probes the kernel and creates the first ring. Errors mean io_uring is
    /// unusable here (ENOSYS, EPERM, disabled, too old).
    pub(crate) fn new(cfg: UringConfig) -> io::Result<UringBackend> {
        let mut refused = Vec::new();
        let mut flags = RingFlags {
            coop_taskrun: true,
            submit_all: true,
            sqpoll: cfg.sqpoll.then_some(cfg.sqpoll_idle_ms),
            ..RingFlags::default()
        };
        let first = flags.build(cfg.entries, &mut refused)?;
        let optional = probe_supported(&first)?;
        if flags.sqpoll.is_some() {
            flags.attach = Some(first.as_raw_fd());
        }
        let plain = RingPool::with_first(&cfg, flags, first)?;
        let polled = if cfg.iopoll {
            let mut pflags = RingFlags {
                iopoll: true,
                sqpoll: None,
                attach: None,
                ..flags
            };
            match pflags.build(cfg.entries, &mut refused) {
                Ok(ring) if pflags.iopoll => Some(RingPool::with_first(&cfg, pflags, ring)?),
                _ => None,
            }
        } else {
            None
        };
        let report = ProbeReport {
            entries: cfg.entries,
            sqpoll: flags.sqpoll.is_some(),
            iopoll: polled.is_some(),
            coop_taskrun: flags.coop_taskrun,
            submit_all: flags.submit_all,
            registered_buffers: cfg.bufs.is_some(),
            registered_file_slots: cfg.file_slots,
            metadata_ops: optional.metadata_ops,
            ftruncate: optional.ftruncate,
            refused_flags: refused,
        };
        Ok(UringBackend {
            plain,
            polled,
            bound: InFlightBound::new(cfg.queue_depth.max(1)),
            bufs: cfg.bufs,
            files: (cfg.file_slots > 0).then(|| {
                Mutex::new(Arc::new(FileTable {
                    owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
                    version: 0,
                    slots: vec![-1; cfg.file_slots as usize],
                }))
            }),
            report,
            submit_chunk: cfg.submit_chunk,
        })
    }

    fn setup_ring(ring: &mut Ring, bufs: Option<&BufferPool>, file_slots: u32) -> io::Result<()> {
        if let Some(pool) = bufs {
            let buffers = pool.buffers();
            let (base, _) = buffers.region();
            let iovecs: Vec<libc::iovec> = (0..buffers.count())
                .map(|i| libc::iovec {
                    // SAFETY: i < count, so the address stays inside the region.
                    iov_base: unsafe { base.add(i * buffers.buf_size()) }.cast(),
                    iov_len: buffers.buf_size(),
                })
                .collect();
            // SAFETY: the iovecs describe the pool's region, which the backend
            // keeps alive (it holds a `BufferPool` handle) for longer than any
            // ring: rings are dropped with the backend, before `bufs`.
            unsafe { ring.io.submitter().register_buffers(&iovecs)? };
        }
        if file_slots > 0 {
            ring.io.submitter().register_files_sparse(file_slots)?;
        }
        Ok(())
    }

    pub(crate) fn report(&self) -> &ProbeReport {
        &self.report
    }

    /// Puts `fd` (a duplicate the caller owns, and removes with
    /// [`unregister_file`](Self::unregister_file) before closing) in a free
    /// registered-file slot. The rings take the new table at their next
    /// check-out.
    pub(crate) fn register_file(&self, fd: RawFd) -> io::Result<FixedSlot> {
        let Some(files) = &self.files else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "register_file: the engine was built without registered file slots (EngineBuilder::registered_files)",
            ));
        };
        let mut cur = files.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = cur.slots.iter().position(|&f| f == -1) else {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "register_file: all {} registered file slots are in use",
                    cur.slots.len()
                ),
            ));
        };
        let t = Arc::make_mut(&mut cur);
        t.slots[slot] = fd;
        t.version += 1;
        Ok(FixedSlot {
            owner: t.owner,
            slot: slot as u32,
        })
    }

    /// Empties `slot`, and brings every idle ring to the new table at
    /// once so that they drop their reference to the file. The table's lock
    /// is held throughout, so every number handed to the kernel is open and
    /// names its registered file; the calls are `io_uring_register` on idle
    /// rings, which wait for no other thread.
    pub(crate) fn unregister_file(&self, slot: u32) -> io::Result<()> {
        let Some(files) = &self.files else {
            return Ok(());
        };
        let mut cur = files.lock().unwrap_or_else(|e| e.into_inner());
        let t = Arc::make_mut(&mut cur);
        let Some(fd) = t.slots.get_mut(slot as usize) else {
            return Ok(());
        };
        *fd = -1;
        t.version += 1;
        let mut result = Ok(());
        for pool in std::iter::once(&self.plain).chain(self.polled.as_ref()) {
            let mut st = pool.state.lock().unwrap_or_else(|e| e.into_inner());
            for ring in st.idle.iter_mut().filter(|r| r.files_version < cur.version) {
                match ring.io.submitter().register_files_update(0, &cur.slots) {
                    Ok(_) => ring.files_version = cur.version,
                    // Brought up to date at its next check-out.
                    Err(e) => result = Err(e),
                }
            }
        }
        result
    }

    /// Runs a batch to completion. `results` has one entry per op; entries
    /// already `Err` were refused before submission and are skipped.
    pub(crate) fn run(&self, ops: &[Op<'_>], results: &mut [io::Result<usize>]) -> io::Result<()> {
        let use_polled =
            self.polled.is_some() && ops.iter().all(|op| op.direct.is_some() && op.polling);
        let pool = match (&self.polled, use_polled) {
            (Some(p), true) => p,
            _ => &self.plain,
        };
        // Permits first, ring second: a thread waiting for the device to
        // free capacity holds no ring, so rings go only to threads that can
        // submit, and a finished batch wakes one waiter instead of a chain
        // of ring and permit handoffs. A batch that runs out of permits with
        // nothing in flight hands its ring back before it waits again, so
        // no thread ever waits for permits while holding a ring (or the
        // reverse with permits it cannot use): no deadlock.
        let bufs = self.bufs.as_ref().map(|b| &**b.buffers());
        let mut next = 0;
        loop {
            let pending = ops[next..].iter().filter(|op| !op.settled).count();
            if pending == 0 {
                return Ok(());
            }
            let permits = self.bound.take(pending.min(pool.entries as usize));
            let mut ring = match pool.checkout() {
                Ok(ring) => ring,
                Err(e) => {
                    self.bound.give(permits);
                    return Err(e);
                }
            };
            // The table as of this check-out: the ring is brought to it
            // under the table's lock (so that no number in it can be closed
            // meanwhile), and the entries are built from it.
            let files = match &self.files {
                None => None,
                Some(f) => {
                    let t = f.lock().unwrap_or_else(|e| e.into_inner());
                    if ring.files_version != t.version {
                        if let Err(e) = ring.io.submitter().register_files_update(0, &t.slots) {
                            drop(t);
                            pool.give_back(ring);
                            self.bound.give(permits);
                            return Err(e);
                        }
                        ring.files_version = t.version;
                    }
                    Some(Arc::clone(&t))
                }
            };
            let mut batch = RingBatch {
                ring: &mut ring.io,
                bound: &self.bound,
                in_flight: 0,
                permits,
                submit_all: pool.flags.submit_all,
                chunk: self.submit_chunk,
            };
            let outcome = batch.run(ops, results, &mut next, bufs, files.as_deref());
            drop(batch);
            pool.give_back(ring);
            if outcome? {
                return Ok(());
            }
        }
    }
}

/// One batch being driven on one checked-out ring.
struct RingBatch<'r> {
    ring: &'r mut IoUring,
    bound: &'r InFlightBound,
    in_flight: usize,
    /// Permits held (always >= in_flight).
    permits: usize,
    submit_all: bool,
    /// Submit after every `chunk` pushed entries (0: only at the end;
    /// None: the ramp, see `EngineBuilder::submit_chunk`).
    chunk: Option<usize>,
}

impl RingBatch<'_> {
    /// Drives `ops[*next..]` until all are done (`Ok(true)`) or until the
    /// engine-wide bound leaves this batch nothing in flight and no permit
    /// (`Ok(false)`: the caller returns the ring, waits, and resumes).
    fn run(
        &mut self,
        ops: &[Op<'_>],
        results: &mut [io::Result<usize>],
        next: &mut usize,
        bufs: Option<&PoolBuffers>,
        files: Option<&FileTable>,
    ) -> io::Result<bool> {
        let cap = self.ring.params().sq_entries() as usize;
        loop {
            // Fill: as many ops as the ring and our permits allow. Each entry
            // counts as in flight the moment it is queued, so that an error
            // part way still leaves `Drop` waiting for everything the kernel
            // may have been handed.
            {
                let (submitter, mut sq, _) = self.ring.split();
                let mut pushed = 0;
                let mut plan = SubmitPlan::new(self.chunk, self.in_flight == 0);
                while *next < ops.len() && self.in_flight < cap {
                    if ops[*next].settled {
                        *next += 1;
                        continue;
                    }
                    if self.permits == self.in_flight {
                        let want = (ops.len() - *next).min(cap - self.in_flight);
                        let got = self.bound.try_take(want);
                        if got == 0 {
                            break;
                        }
                        self.permits += got;
                    }
                    let op = &ops[*next];
                    let slot = files.and_then(|t| t.slot_for(op));
                    let entry = build_entry(op, *next as u64, bufs, slot);
                    // SAFETY: the entry points into buffers (and iovec arrays)
                    // borrowed by `ops` for longer than this call, and this
                    // call does not return until every queued entry's
                    // completion has been reaped (see `Drop for RingBatch`).
                    unsafe { sq.push(&entry) }
                        .expect("in-flight count is bounded by the ring size");
                    self.in_flight += 1;
                    pushed += 1;
                    *next += 1;
                    if plan.advance_if_due(pushed) && *next < ops.len() {
                        sq.sync();
                        submit_now(&submitter)?;
                    }
                }
            }
            if self.in_flight == 0 {
                return Ok(*next >= ops.len());
            }
            // One kernel call: submit what was pushed and wait. Wait for all
            // in flight when the batch is fully pushed, else for one so that
            // the freed slot can be refilled.
            let want = if *next >= ops.len() && self.submit_all {
                self.in_flight
            } else {
                1
            };
            self.enter(want)?;
            self.reap(|idx, res| {
                results[idx] = if res == -libc::ECANCELED {
                    // Nothing here cancels a batch's operations: the kernel
                    // could not start an io-wq worker for one it cannot do
                    // inline (the process is at its limit on processes,
                    // `ulimit -u`) and cancelled it unperformed. It is done
                    // by its system call on this thread instead.
                    ops[idx].run_checked()
                } else {
                    ops[idx].result(res)
                };
            });
        }
    }

    fn enter(&mut self, want: usize) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // The completion queue is backed up (overflow) or the kernel
                // is short of memory: reap what is there, then retry.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) => {
                    if self.ring.completion().is_empty() {
                        std::thread::yield_now();
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn reap(&mut self, mut complete: impl FnMut(usize, i32)) {
        let mut done = 0;
        for cqe in self.ring.completion() {
            complete(cqe.user_data() as usize, cqe.result());
            done += 1;
        }
        self.in_flight -= done;
        // Give back permits beyond what is still in flight.
        let spare = self.permits - self.in_flight;
        self.bound.give(spare);
        self.permits = self.in_flight;
    }
}

/// When a fill submits part of what it has pushed before the final call.
struct SubmitPlan {
    /// Submit when this many entries have been pushed (0: never early).
    at: usize,
    /// Entries until the next early submit after that (0: none).
    step: usize,
    /// Double `step` after each early submit.
    ramp: bool,
}

impl SubmitPlan {
    /// The ramp (`chunk` None) only runs when the ring is `idle`: with
    /// operations already in flight the device has work while we prepare.
    fn new(chunk: Option<usize>, idle: bool) -> Self {
        match chunk {
            None if idle => SubmitPlan {
                at: 2,
                step: 2,
                ramp: true,
            },
            None | Some(0) => SubmitPlan {
                at: 0,
                step: 0,
                ramp: false,
            },
            Some(n) => SubmitPlan {
                at: n,
                step: n,
                ramp: false,
            },
        }
    }

    /// Whether a submit is due after `pushed` entries; when it is, moves
    /// the next submit point on (doubling the step on a ramp).
    fn advance_if_due(&mut self, pushed: usize) -> bool {
        if self.at == 0 || pushed != self.at {
            return false;
        }
        if self.ramp {
            self.step *= 2;
        }
        self.at += self.step;
        true
    }
}

/// Submits what is queued without waiting. Entries the kernel could not take
/// yet (EBUSY/EAGAIN) stay queued and go with the batch's final call.
fn submit_now(submitter: &io_uring::Submitter<'_>) -> io::Result<()> {
    loop {
        match submitter.submit() {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN)) => {
                return Ok(())
            }
            Err(e) => return Err(e),
        }
    }
}

impl Drop for RingBatch<'_> {
    /// Only reached with operations in flight if `run` failed or panicked:
    /// their buffers must not be released before the kernel is done, so wait.
    fn drop(&mut self) {
        while self.in_flight > 0 {
            submit_and_wait_or_abort(self.ring, 1);
            self.reap(|_, _| {});
        }
        self.bound.give(self.permits);
        self.permits = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::SubmitPlan;

    /// The pushed counts at which a fill of `n` entries submits early.
    fn early_submits(chunk: Option<usize>, idle: bool, n: usize) -> Vec<usize> {
        let mut plan = SubmitPlan::new(chunk, idle);
        (1..=n)
            .filter(|&pushed| plan.advance_if_due(pushed))
            .collect()
    }

    #[test]
    fn ramp_doubles_from_two_when_the_ring_is_idle() {
        assert_eq!(early_submits(None, true, 64), [2, 6, 14, 30, 62]);
        assert_eq!(early_submits(None, false, 64), [] as [usize; 0]);
    }

    #[test]
    fn fixed_chunks_and_one_call() {
        assert_eq!(early_submits(Some(3), true, 10), [3, 6, 9]);
        assert_eq!(early_submits(Some(3), false, 7), [3, 6]);
        assert_eq!(early_submits(Some(0), true, 64), [] as [usize; 0]);
    }
}
