//! glibc malloc's arenas under a limit on address space (`ulimit -v`,
//! `RLIMIT_AS`).
//!
//! glibc gives each thread that first allocates or frees while the
//! process has fewer arenas than its bound (8 per CPU) an arena of its
//! own, and each arena reserves 64 MiB of address space, used or not.
//! blockio's threads all allocate a little (a job's queue entry, a
//! thread's own bookkeeping), so a program whose engine has started 9
//! threads reserves up to 9 such arenas, 576 MiB: under a limit on
//! address space that reservation, not the memory used, is what a later
//! allocation of the program finds missing (a `MemoryError` in Python).
//! Whether it does depends on which threads happened to allocate first
//! while there was room for an arena, so the lowest limit a program runs
//! under was not even monotonic (it passed at 500 MiB, failed at 550 and
//! passed at 600).
//!
//! [`cap_under_address_limit`], called before blockio starts a thread,
//! bounds the process's arenas at [`ARENAS`] (`mallopt(M_ARENA_MAX)`) when
//! the process's `RLIMIT_AS` is finite. The setting is process-wide: it
//! also bounds the arenas of the program's own threads, which then share
//! arenas and may wait on each other's allocation locks. That is the
//! trade a limited address space asks for (one 64 MiB reservation per
//! thread is the largest cost of a thread under it), and it is made only
//! then: a process without the limit is left as it is, and so is one
//! whose user chose the bound (`MALLOC_ARENA_MAX`, or `arena_max` in
//! `GLIBC_TUNABLES`), or a program that set its own with [`bound`].
//!
//! The other ways were weighed and not taken: threads that never
//! allocate nor free are not to be had from Rust's standard library (its
//! thread start frees the closure's box, and glibc makes the arena at a
//! thread's first `free` too); fewer threads would each still make an
//! arena, at a cost in concurrency on every engine; the threads' stacks
//! (256 KiB each) are not what the room goes to.
//!
//! glibc fixes the bound the first time it is reached when no bound was
//! set, so a process that already made 9 arenas keeps its own; a limit
//! set after blockio started its threads is seen when it starts the next.

use std::sync::atomic::{AtomicBool, Ordering};

/// The most arenas a process with a finite `RLIMIT_AS` is left with: the
/// main one, which grows as the memory is used, shared by every thread.
/// Not 2: the second arena's 64 MiB, reserved whenever there is room for
/// it, took the room the engine's ring needed at 100 MiB, where 60 and
/// 80 MiB, with no room for it, passed (`docs/benchmarks.md`, "malloc's
/// arenas under `ulimit -v`").
pub const ARENAS: i32 = 1;

/// Whether the bound was set (or the user's own found), so the next
/// thread started need not look again.
static SETTLED: AtomicBool = AtomicBool::new(false);

/// Bounds glibc's malloc arenas at [`ARENAS`] if the process's soft
/// `RLIMIT_AS` is finite and its user did not choose a bound; does
/// nothing otherwise, or on a libc other than glibc. Called by blockio
/// before it starts a thread; cheap once the bound is set (one atomic
/// load), else one `getrlimit`.
pub fn cap_under_address_limit() {
    // (Miri has no `getrlimit`, and no glibc arenas to bound.)
    if cfg!(miri) || SETTLED.load(Ordering::Acquire) {
        return;
    }
    if user_chose_bound() {
        SETTLED.store(true, Ordering::Release);
        return;
    }
    if rustix::process::getrlimit(rustix::process::Resource::As)
        .current
        .is_none()
    {
        return;
    }
    set_bound(ARENAS);
    SETTLED.store(true, Ordering::Release);
}

/// Bounds glibc's malloc arenas at `arenas` (`mallopt(M_ARENA_MAX)`), and
/// keeps blockio from setting its own bound when it next starts a thread:
/// for a program that fits its own threads to a limit (blockio's tools
/// keep to one arena). Does nothing on a libc other than glibc.
pub fn bound(arenas: i32) {
    set_bound(arenas);
    SETTLED.store(true, Ordering::Release);
}

/// Whether the environment sets glibc's arena bound.
fn user_chose_bound() -> bool {
    std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var_os("GLIBC_TUNABLES")
            .is_some_and(|t| t.to_string_lossy().contains("glibc.malloc.arena_max"))
}

/// `mallopt(M_ARENA_MAX, arenas)`: through `libc`, as rustix has no
/// `mallopt`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_bound(arenas: i32) {
    // SAFETY: mallopt takes two integers and changes a malloc parameter;
    // M_ARENA_MAX is one glibc reads under its own lock when it next
    // makes an arena, and no memory is handed over.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// Nothing to bound on a libc other than glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_bound(_arenas: i32) {}
