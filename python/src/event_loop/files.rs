//! The loop ring's registered-file table: where a read the kernel's
//! worker threads copy (any file read on the ring while a slot is free:
//! see [`INLINE_PREAD_MAX`](super::ops::INLINE_PREAD_MAX)) finds its file.
//!
//! Such a read is marked `IOSQE_ASYNC`, and a worker looks a plain
//! descriptor number up only when it starts the read, by which time the
//! caller may have closed the number and opened another file under it.
//! So the file must be taken when the read is submitted. A duplicate of
//! the descriptor would do that, but closing it (at the completion) is a
//! `close` of a descriptor of the file, and Linux then releases every
//! POSIX record lock (`fcntl(F_SETLK)`, `lockf`) the process holds on the
//! file (`filp_close` calls `locks_remove_posix` with the process's table
//! of descriptors as the owner). A slot of the ring's registered-file
//! table holds a reference to the open file description and no descriptor:
//! `IORING_REGISTER_FILES_UPDATE` with the caller's number takes the file
//! the number names now, and emptying the slot drops that reference
//! (`fput`) without any `close`, so no lock is released. The read is then
//! issued on the slot (`IOSQE_FIXED_FILE`), which names that file whatever
//! the number comes to name.
//!
//! The table is sparse, made with the ring ([`FILE_SLOTS`] slots unless
//! the caller asks for another number, more than [`FILE_SLOTS`] too: each
//! slot, up to the table's own size, is given back when its read is
//! done), of no more slots than the
//! process's soft `RLIMIT_NOFILE` allows: the kernel refuses a table
//! larger than that limit (`EMFILE`), so under `ulimit -n 1000` a table
//! of 1,024 would be refused and every large read would take a duplicate,
//! losing the record locks this table is there to keep. A
//! slot is filled at the read's submission by `io_uring_register` (on the
//! loop's thread, before the call returns, so the number the caller gives
//! is looked up then, however long the submission itself waits), and
//! emptied by an `IORING_OP_FILES_UPDATE` entry linked after the read,
//! which the kernel runs as the read completes (after a cancel too): one
//! system call in all, where the duplicate took two. The slot is free for
//! another read once both the read's completion and that entry's are
//! reaped. Where the kernel
//! refuses the table, or every slot is in use, a read of more than
//! 256 KiB falls back to a duplicate, and a shorter one is tried at its
//! submission on the caller's number (see `ring::submit_pread`).

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, IoUring};

/// How many files a loop's table holds at once: reads in flight on one
/// loop at a time that the kernel's workers copy with their file held here
/// (a read of more than 256 KiB beyond them takes a duplicate, a shorter
/// one is tried at its submission).
pub(crate) const FILE_SLOTS: u32 = 1024;

/// The free slots of a ring's registered-file table, and what each slot
/// in use still waits for.
pub(crate) struct FileTable {
    /// Slots not in use, the last taken first; empty when the kernel
    /// refused the table.
    free: Vec<u32>,
    /// By slot: the completions it waits for before it is free again
    /// ([`READ`], [`EMPTIED`]), and [`NOT_EMPTIED`] when the entry that
    /// should have emptied it failed.
    awaited: Vec<u8>,
}

/// [`FileTable::awaited`]: the read issued on the slot has not completed.
const READ: u8 = 1;
/// [`FileTable::awaited`]: the entry that empties the slot has not
/// completed.
const EMPTIED: u8 = 2;
/// [`FileTable::awaited`]: the entry completed without emptying the slot.
const NOT_EMPTIED: u8 = 4;

impl FileTable {
    /// Registers a sparse table of `slots` slots with `ring`, or of fewer
    /// when the process's soft `RLIMIT_NOFILE` is lower (or `slots` is
    /// beyond the kernel's [`MAX_SLOTS`]), as the kernel refuses a larger
    /// table with `EMFILE`; a table with no slot when that comes to 0 or
    /// the kernel refuses it (before Linux 5.19, or under a memory
    /// limit): every read then takes a duplicate.
    pub(crate) fn new(ring: &IoUring, slots: u32) -> FileTable {
        let free: Vec<u32> = match slots.min(MAX_SLOTS).min(soft_nofile_limit()) {
            0 => Vec::new(),
            n => match ring.submitter().register_files_sparse(n) {
                Ok(()) => (0..n).rev().collect(),
                Err(_) => Vec::new(),
            },
        };
        let awaited = vec![0; free.len()];
        FileTable { free, awaited }
    }

    /// A slot of `ring`'s table that now holds the file `fd` names, or
    /// None when no slot is free or the kernel refused to register the
    /// file for a reason other than the descriptor itself. `EBADF` for a
    /// number that names no file (or names an io_uring, which the kernel
    /// never registers). The slot waits for the read's completion and the
    /// emptying entry's ([`FileTable::empty_entry`]) before it is free.
    pub(crate) fn take(&mut self, ring: &IoUring, fd: RawFd) -> io::Result<Option<u32>> {
        let Some(slot) = self.free.pop() else {
            return Ok(None);
        };
        match ring.submitter().register_files_update(slot, &[fd]) {
            Ok(1) => {
                self.awaited[slot as usize] = READ | EMPTIED;
                Ok(Some(slot))
            }
            Ok(_) => {
                self.free.push(slot);
                Ok(None)
            }
            Err(e) => {
                self.free.push(slot);
                if e.raw_os_error() == Some(libc::EBADF) {
                    Err(e)
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Empties `slot` of `ring`'s table now, with a system call, and makes
    /// it free again: for a read that never reached the kernel (its
    /// submission failed, so neither it nor its emptying entry will
    /// complete). The reference to the file is dropped without closing any
    /// descriptor. Were the kernel to refuse (it does not for a slot in
    /// range), the file stays referenced until the slot's next
    /// registration replaces it.
    pub(crate) fn give_back(&mut self, ring: &IoUring, slot: u32) {
        let _ = ring.submitter().register_files_update(slot, &[-1]);
        self.awaited[slot as usize] = 0;
        self.free.push(slot);
    }

    /// The entry that empties `slot` once the read issued on it is done,
    /// linked after the read (`IOSQE_IO_HARDLINK` on the read, so that it
    /// runs whatever the read's result), tagged with [`empty_token`]: no
    /// system call of its own, the kernel runs it as the read completes.
    pub(crate) fn empty_entry(slot: u32) -> squeue::Entry {
        opcode::FilesUpdate::new(&EMPTY, 1)
            .offset(slot as i32)
            .build()
            .user_data(empty_token(slot))
    }

    /// How many slots are free.
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }

    /// The read issued on `slot` completed (its completion was reaped).
    pub(crate) fn read_done(&mut self, ring: &IoUring, slot: u32) {
        self.settle(ring, slot, READ);
    }

    /// The entry [`FileTable::empty_entry`] made for `slot` completed with
    /// `res` (1: the slot emptied).
    /// A slot beyond the table (which no entry of this table names) is
    /// ignored.
    pub(crate) fn emptied(&mut self, ring: &IoUring, slot: u32, res: i32) {
        if res != 1 {
            if let Some(awaited) = self.awaited.get_mut(slot as usize) {
                *awaited |= NOT_EMPTIED;
            }
        }
        self.settle(ring, slot, EMPTIED);
    }

    /// `slot` no longer waits for `done`; once it waits for nothing it is
    /// free again, emptied now with a system call if its entry did not
    /// (as after a cancel that reached the entry). Both completions are
    /// waited for, whichever comes first: were the kernel to run the entry
    /// before the read (a link cut short where it cannot allocate a
    /// request), the read, which looks the slot up when a worker starts
    /// it, finds it empty and fails with `EBADF`, and the slot is not
    /// filled with another file until the read is done.
    fn settle(&mut self, ring: &IoUring, slot: u32, done: u8) {
        let Some(awaited) = self.awaited.get_mut(slot as usize) else {
            return;
        };
        *awaited &= !done;
        if *awaited & (READ | EMPTIED) != 0 {
            return;
        }
        if *awaited & NOT_EMPTIED != 0 {
            let _ = ring.submitter().register_files_update(slot, &[-1]);
        }
        *awaited = 0;
        self.free.push(slot);
    }
}

/// What an entry made by [`FileTable::empty_entry`] hands the kernel: the
/// one descriptor -1, an empty slot. A static, so that it is there
/// whenever the kernel runs the entry.
static EMPTY: RawFd = -1;

/// The tag of the completion of [`FileTable::empty_entry`]'s entry for
/// `slot`: the top bit set, which no operation's token has (see
/// `slots::MAX_IN_FLIGHT`), and the slot below it; never the cancels'
/// `u64::MAX`, as a slot is a `u32`, so bits 32 to 62 stay clear.
pub(crate) fn empty_token(slot: u32) -> u64 {
    EMPTY_TAG | u64::from(slot)
}

/// The slot an entry's completion tag `token` empties, if it is one made
/// by [`empty_token`]: any slot of a table (whose size the caller chose,
/// so not bounded by [`FILE_SLOTS`] here; [`FileTable`] ignores a slot
/// beyond its own table).
pub(crate) fn emptied_slot(token: u64) -> Option<u32> {
    (token & EMPTY_TAG != 0)
        .then(|| u32::try_from(token & !EMPTY_TAG).ok())
        .flatten()
}

/// The most slots the kernel registers in one table
/// (`IORING_MAX_FIXED_FILES`); it refuses more with `EMFILE`.
const MAX_SLOTS: u32 = 1 << 20;

/// The process's soft limit on descriptors (`RLIMIT_NOFILE`), which the
/// kernel also holds a registered-file table to; `u32::MAX` when it is
/// unlimited or beyond.
fn soft_nofile_limit() -> u32 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// The top bit of a completion's tag: set only on the entries that empty a
/// slot.
const EMPTY_TAG: u64 = 1 << 63;
