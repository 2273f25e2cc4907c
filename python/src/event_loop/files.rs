//! The loop ring's registered-file table: where a read the kernel's
//! worker threads copy (longer than
//! [`INLINE_PREAD_MAX`](super::ops::INLINE_PREAD_MAX)) finds its file.
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
//! the number comes to name. One system call each way, as the duplicate's
//! `fcntl(F_DUPFD_CLOEXEC)` and `close` were.
//!
//! The table is sparse, made with the ring (`FILES`
//! slots); a slot is taken at the read's submission and given back when
//! its completion is reaped (after a cancel too: the kernel answers every
//! read once). Where the kernel refuses the table, or every slot is in
//! use, the read falls back to a duplicate (see `ring::submit_pread`).

use std::io;
use std::os::fd::RawFd;

use io_uring::IoUring;

/// How many files the table holds at once: reads of more than 256 KiB in
/// flight on one loop at a time (a read beyond them takes a duplicate).
const FILES: u32 = 1024;

/// The free slots of a ring's registered-file table.
pub(crate) struct FileTable {
    /// Slots not in use, the last taken first; empty when the kernel
    /// refused the table.
    free: Vec<u32>,
}

impl FileTable {
    /// Registers a sparse table of [`FILES`] slots with `ring`; a table
    /// with no slot when the kernel refuses it (before Linux 5.19, or
    /// under a memory limit): every read then takes a duplicate.
    pub(crate) fn new(ring: &IoUring) -> FileTable {
        let free = match ring.submitter().register_files_sparse(FILES) {
            Ok(()) => (0..FILES).rev().collect(),
            Err(_) => Vec::new(),
        };
        FileTable { free }
    }

    /// A slot of `ring`'s table that now holds the file `fd` names, or
    /// None when no slot is free or the kernel refused to register the
    /// file for a reason other than the descriptor itself. `EBADF` for a
    /// number that names no file (or names an io_uring, which the kernel
    /// never registers).
    pub(crate) fn take(&mut self, ring: &IoUring, fd: RawFd) -> io::Result<Option<u32>> {
        let Some(slot) = self.free.pop() else {
            return Ok(None);
        };
        match ring.submitter().register_files_update(slot, &[fd]) {
            Ok(1) => Ok(Some(slot)),
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

    /// Empties `slot` of `ring`'s table (the kernel is done with the read
    /// that used it: its completion was reaped), dropping the reference to
    /// the file without closing any descriptor, and makes it free again.
    /// Were the kernel to refuse (it does not for a slot in range), the
    /// file stays referenced until the slot's next registration replaces
    /// it.
    pub(crate) fn give_back(&mut self, ring: &IoUring, slot: u32) {
        let _ = ring.submitter().register_files_update(slot, &[-1]);
        self.free.push(slot);
    }
}
