//! Moving the bytes of a group's files through the worker's arena: the
//! chunks are read in waves, one engine batch per wave so that many
//! files' blocks are in flight at once, and written out (buffered by
//! plain `pwrite`s, or `O_DIRECT` through the ring). The arena's layout
//! (slots aligned to [`SLOT_ALIGN`]) is this module's alone.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use blockio::{AlignedBuf, Engine, Op};

use super::super::entry::{Ctx, DirPair};
use super::super::options::Sparse;
use super::job::{empty_old, fail, first_wave, fsync_each, run_batch, Chunk, FileCopy, Side};
use super::plain::{read_full, start_writeback, write_full, write_skipping_zeros};

/// Copies `chunks` in waves of reads then writes, of at most `--wave`
/// bytes each, the chunks packed one after another in the arena (a 4 KiB
/// file takes 4 KiB of it, not a block). The arena grows to the largest
/// wave a worker has needed: a group copied entirely with
/// `copy_file_range` needs none (zeroing and faulting in an unused 16 MiB
/// arena per worker was a fifth of the CPU time of copying 500 files of
/// 1 MiB). The arena and its slots start on multiples of `SLOT_ALIGN`, as
/// `O_DIRECT` needs.
pub(super) fn copy_chunks(
    ctx: &Ctx<'_>,
    dirs: &DirPair,
    jobs: &mut [FileCopy<'_>],
    chunks: &[Chunk],
    arena: &mut AlignedBuf,
) {
    let mut start = 0;
    while start < chunks.len() {
        let lens = chunks[start..].iter().map(|c| slot_len(c.len) as u64);
        let end = start + first_wave(lens, ctx.opts.wave as u64);
        let bytes: usize = chunks[start..end].iter().map(|c| slot_len(c.len)).sum();
        if arena.len() < bytes {
            *arena = AlignedBuf::new(bytes, SLOT_ALIGN);
        }
        let wave = Wave {
            chunks: &chunks[start..end],
            got: vec![0; end - start],
        };
        wave.copy(ctx, dirs, jobs, &mut arena[..bytes]);
        start = end;
    }
}

/// One wave of chunks on its way through the arena: how many bytes each
/// chunk's read brought in.
struct Wave<'w> {
    chunks: &'w [Chunk],
    got: Vec<usize>,
}

impl Wave<'_> {
    /// Reads every chunk of the wave into its slot of `arena`, then writes
    /// them out.
    fn copy(mut self, ctx: &Ctx<'_>, dirs: &DirPair, jobs: &mut [FileCopy<'_>], arena: &mut [u8]) {
        let mut slots = slots(arena, self.chunks);
        self.read(ctx.engine, dirs, jobs, &mut slots);
        self.finish_short_reads(dirs, jobs, &mut slots);
        if self.chunks.iter().any(|c| jobs[c.job].direct) {
            self.write_direct(ctx, dirs, jobs, &mut slots);
        }
        self.write_buffered(ctx, dirs, jobs, &slots);
    }

    /// The reads, in one engine batch.
    fn read(
        &mut self,
        engine: &Engine,
        dirs: &DirPair,
        jobs: &mut [FileCopy<'_>],
        slots: &mut [&mut [u8]],
    ) {
        let mut ops: Vec<Op<'_>> = Vec::with_capacity(self.chunks.len());
        let mut index = Vec::with_capacity(self.chunks.len());
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter_mut()) {
            if jobs[c.job].failed.is_none() {
                ops.push(Op::read(&jobs[c.job].src, c.offset, &mut slot[..c.len]));
                index.push(k);
            }
        }
        for (k, r) in run_batch(engine, ops, index) {
            let c = self.chunks[k];
            match r {
                Ok(n) => self.got[k] = n,
                Err(e) => fail(jobs, dirs, c.job, Side::Read, e),
            }
        }
    }

    /// Short reads (a file that shrank, a signal) are finished one by one;
    /// one that meets the end of the file marks where the copy ends.
    fn finish_short_reads(
        &mut self,
        dirs: &DirPair,
        jobs: &mut [FileCopy<'_>],
        slots: &mut [&mut [u8]],
    ) {
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter_mut()) {
            if jobs[c.job].failed.is_none() && self.got[k] < c.len {
                match read_full(&jobs[c.job].src, c.offset, &mut slot[..c.len], self.got[k]) {
                    Ok(n) => self.got[k] = n,
                    Err(e) => fail(jobs, dirs, c.job, Side::Read, e),
                }
                if self.got[k] < c.len {
                    let j = &mut jobs[c.job];
                    let at = c.offset + self.got[k] as u64;
                    j.eof = Some(j.eof.map_or(at, |e| e.min(at)));
                }
            }
        }
    }

    /// Writes to `O_DIRECT` copies go to the device: all of them in one
    /// batch, each slot written whole (zeroed past the data; the copy is
    /// cut back at the end).
    fn write_direct(
        &self,
        ctx: &Ctx<'_>,
        dirs: &DirPair,
        jobs: &mut [FileCopy<'_>],
        slots: &mut [&mut [u8]],
    ) {
        let got = &self.got;
        let mut ops: Vec<Op<'_>> = Vec::new();
        let mut index = Vec::new();
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter_mut()) {
            let j = &jobs[c.job];
            if j.direct && j.failed.is_none() && got[k] > 0 {
                let whole = slot_len(got[k]);
                slot[got[k]..whole].fill(0);
                ops.push(Op::write(&j.dst, c.offset, &slot[..whole]));
                index.push(k);
            }
        }
        for (k, r) in run_batch(ctx.engine, ops, index) {
            let c = self.chunks[k];
            let whole = slot_len(got[k]);
            let done = match r {
                // A short direct write is finished by pwrite (it fails
                // with EINVAL if what is left is not aligned).
                Ok(n) if n < whole => write_full(&jobs[c.job].dst, c.offset, &slots[k][..whole], n),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            match done {
                Ok(()) => {
                    ctx.progress
                        .bytes
                        .fetch_add(got[k] as u64, Ordering::Relaxed);
                    let j = &mut jobs[c.job];
                    j.end = j.end.max(c.offset + got[k] as u64);
                }
                Err(e) => fail(jobs, dirs, c.job, Side::Write, e),
            }
        }
    }

    /// Buffered writes on ext4 are not done inline by io_uring either (they
    /// go to its worker threads), so the writes are plain pwrites from this
    /// thread: the page cache absorbs them at memory speed. A file's chunks
    /// are consecutive, so a destination that held old bytes is emptied
    /// just before its first chunk and complete after its last, before the
    /// next file's.
    fn write_buffered(
        &self,
        ctx: &Ctx<'_>,
        dirs: &DirPair,
        jobs: &mut [FileCopy<'_>],
        slots: &[&mut [u8]],
    ) {
        let got = &self.got;
        let holes = ctx.opts.sparse == Sparse::Always;
        for ((k, c), slot) in self.chunks.iter().enumerate().zip(slots.iter()) {
            let j = &mut jobs[c.job];
            if !j.direct && got[k] > 0 && empty_old(j, ctx.opts, dirs) {
                let data = &slot[..got[k]];
                let written = if holes {
                    write_skipping_zeros(&jobs[c.job].dst, c.offset, data)
                } else {
                    write_full(&jobs[c.job].dst, c.offset, data, 0)
                };
                match written {
                    Ok(()) => {
                        ctx.progress
                            .bytes
                            .fetch_add(got[k] as u64, Ordering::Relaxed);
                        if fsync_each(ctx.opts, jobs[c.job].e) {
                            start_writeback(&jobs[c.job].dst, c.offset, got[k]);
                        }
                    }
                    Err(e) => fail(jobs, dirs, c.job, Side::Write, e),
                }
            }
        }
    }
}

/// The wave's chunks' buffers: consecutive pieces of `arena`, one per
/// chunk, each as long as its chunk rounded up to `SLOT_ALIGN`.
fn slots<'a>(arena: &'a mut [u8], wave: &[Chunk]) -> Vec<&'a mut [u8]> {
    let mut rest = arena;
    let mut out = Vec::with_capacity(wave.len());
    for c in wave {
        let (slot, tail) = std::mem::take(&mut rest).split_at_mut(slot_len(c.len));
        out.push(slot);
        rest = tail;
    }
    out
}

/// Where slots start in the arena, and how `O_DIRECT` copies are written:
/// whole multiples of this (4 KiB, a multiple of the logical block size of
/// every common device, and the page size).
pub(crate) const SLOT_ALIGN: usize = 4096;

/// The arena bytes a chunk of `len` bytes takes: `len` rounded up to
/// `SLOT_ALIGN`.
fn slot_len(len: usize) -> usize {
    len.next_multiple_of(SLOT_ALIGN)
}

/// Switches a durable copy of a large file (`CopyOptions::direct_write_min`)
/// to `O_DIRECT`: its data goes straight from the worker's buffers to the
/// device, a wave of writes in flight, instead of filling the page cache
/// and waiting for its write-back. A write error then names the file at
/// once. Returns false (the copy stays buffered) where the file system
/// refuses `O_DIRECT` or needs a coarser alignment than `SLOT_ALIGN`.
pub(super) fn go_direct(fd: &OwnedFd) -> bool {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let Ok(flags) = fcntl_getfl(fd) else {
        return false;
    };
    if fcntl_setfl(fd, flags | OFlags::DIRECT).is_err() {
        return false;
    }
    match blockio::Alignment::of(fd) {
        Ok((a, _)) if a.max() <= SLOT_ALIGN && SLOT_ALIGN % a.max() == 0 => true,
        _ => {
            // Back to buffered writes; if even that fails, the writes
            // report it.
            let _ = fcntl_setfl(fd, flags);
            false
        }
    }
}
