//! How much of a file's range is in the page cache, without reading it:
//! `cachestat(2)` (Linux 6.5). The event loop's `loop.sendfile` asks it
//! before each step of a regular file: a range wholly cached goes out with
//! `sendfile(2)`, which copies from the cache and does not wait for the
//! disk (but for a page whose read another reader's readahead has begun,
//! which `cachestat` counts as cached); any other is read on the loop's
//! ring and its bytes sent. A file whose read the ring refuses (`O_DIRECT`
//! into a buffer its device does not align to, `O_NONBLOCK`) and a device
//! go out with `sendfile(2)` whatever this says. Where the kernel refuses
//! `cachestat` (`ENOSYS` before Linux 6.5; `EPERM` for a file the caller
//! neither owns nor may write, the kernel's `can_do_cachestat`) every
//! range counts as not cached and is read on the ring.

use std::os::fd::RawFd;

use pyo3::prelude::*;

/// The pages of `len` bytes of the file `fd` at `off` in the page cache,
/// by `cachestat`; `None` where the kernel refuses the call (before Linux
/// 6.5, `ENOSYS`; a file the caller neither owns nor may write, `EPERM`;
/// a number that is not an open file's, `EBADF`; ...).
pub(crate) fn cached_pages(fd: RawFd, off: u64, len: u64) -> Option<u64> {
    use linux_raw_sys::general::{__NR_cachestat, cachestat, cachestat_range};
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
    // for the call; flags 0. `fd` is only a number to the kernel, which
    // looks it up itself (`EBADF` for one not open): no memory is reached
    // through it.
    let r = unsafe {
        libc::syscall(
            libc::c_long::from(__NR_cachestat),
            fd,
            &range as *const cachestat_range,
            &mut stat as *mut cachestat,
            0u32,
        )
    };
    (r == 0).then_some(stat.nr_cache)
}

/// Whether all `length` bytes of the file `fd` at `offset` (`length` > 0)
/// are in the page cache, by `cachestat`: False when a page is not, and
/// when the kernel cannot tell (no `cachestat`, before Linux 6.5; a file
/// the caller neither owns nor may write; a descriptor it refuses), as a
/// read of such a range may wait for the disk.
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
    cached_pages(fd, offset, length).is_some_and(|n| n >= pages)
}
