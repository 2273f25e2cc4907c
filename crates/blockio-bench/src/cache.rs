//! The page cache: evict a file (no root needed), warm it, and measure how
//! much of it is resident (`mincore`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// Drops the file's clean pages from the page cache
/// (`posix_fadvise(POSIX_FADV_DONTNEED)`). Dirty pages are written first.
pub fn evict(file: &File) -> io::Result<()> {
    file.sync_data()?;
    // SAFETY: fadvise on an open descriptor has no memory effects.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Reads the whole file once so that it is in the page cache.
pub fn warm(file: &File) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    loop {
        let n = file.read_at(&mut buf, off)?;
        if n == 0 {
            return Ok(());
        }
        off += n as u64;
    }
}

/// The fraction (0.0 to 1.0) of the file's pages in the page cache, from
/// `mincore` over a read-only mapping. An empty file counts as resident.
pub fn resident_fraction(file: &File) -> io::Result<f64> {
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(1.0);
    }
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh shared read-only mapping of an open file; checked below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live mapping of `len` bytes and `vec` has one byte
    // per page of it, as mincore requires. Mincore never touches the pages.
    let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping the mapping made above, used by nothing else.
    unsafe { libc::munmap(map, len) };
    if rc != 0 {
        return Err(err);
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count();
    Ok(resident as f64 / pages as f64)
}
