//! How much of a file's range is in the page cache, without reading it:
//! `cachestat(2)` (Linux 6.5). The event loop's `loop.sendfile` asks it
//! before each step: a range wholly cached goes out with `sendfile(2)`,
//! which then copies from the cache and cannot wait for the disk; any
//! other is read on the loop's ring and its bytes sent, so that the loop's
//! thread never waits for the disk.

use std::os::fd::{BorrowedFd, RawFd};

use pyo3::prelude::*;

/// The pages of `len` bytes of `file` at `off` in the page cache, by
/// `cachestat`; `None` where the kernel refuses the call (before Linux
/// 6.5, `ENOSYS`; a descriptor that is not a file's, `EBADF`; ...).
pub(crate) fn cached_pages(file: BorrowedFd<'_>, off: u64, len: u64) -> Option<u64> {
    use linux_raw_sys::general::{__NR_cachestat, cachestat, cachestat_range};
    use std::os::fd::AsRawFd;
    let range = cachestat_range { off, len };
    let mut stat = cachestat {
        nr_cache: 0,
        nr_dirty: 0,
        nr_writeback: 0,
        nr_evicted: 0,
        nr_recently_evicted: 0,
    };
    // (rustix has no `cachestat`: the raw call, its number and structures
    // linux-raw-sys's)
    // SAFETY: cachestat reads one `cachestat_range` from `range` and
    // writes one `struct cachestat` into `stat`, both the kernel's
    // layout (linux-raw-sys's bindings of `<linux/mman.h>`) and alive
    // for the call; flags 0.
    let r = unsafe {
        libc::syscall(
            libc::c_long::from(__NR_cachestat),
            file.as_raw_fd(),
            &range as *const cachestat_range,
            &mut stat as *mut cachestat,
            0u32,
        )
    };
    (r == 0).then_some(stat.nr_cache)
}

/// Whether all `length` bytes of the file `fd` at `offset` (`length` > 0)
/// are in the page cache, by `cachestat`: False when a page is not, and
/// when the kernel cannot tell (no `cachestat`, before Linux 6.5; a
/// descriptor it refuses), as a read of such a range may wait for the
/// disk.
#[pyfunction]
pub(crate) fn range_cached(fd: RawFd, offset: u64, length: u64) -> bool {
    if fd < 0 || length == 0 {
        return false;
    }
    let page = rustix::param::page_size() as u64;
    let Some(end) = offset.checked_add(length) else {
        return false;
    };
    let pages = end.div_ceil(page) - offset / page;
    // SAFETY: the caller's descriptor (not -1), borrowed for this call and
    // never closed here; a number no longer open gets `EBADF`.
    let file = unsafe { BorrowedFd::borrow_raw(fd) };
    cached_pages(file, offset, length).is_some_and(|n| n >= pages)
}
