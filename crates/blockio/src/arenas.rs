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
//! Every thread blockio starts is started through [`spawn`] (or
//! [`spawn_scoped`]), which first calls [`cap_under_address_limit`]: it
//! bounds the process's arenas at [`ARENAS`] (`mallopt(M_ARENA_MAX)`)
//! when the process's soft `RLIMIT_AS` is below what glibc's own arenas
//! may reserve on top of what the process already maps:
//!
//! ```text
//! RLIMIT_AS < 8 × CPUs × 64 MiB + VmSize
//! ```
//!
//! (CPUs as [`std::thread::available_parallelism`] counts them, VmSize
//! from `/proc/self/status` when the thread is started). glibc counts the
//! online CPUs, which a process held to fewer CPUs by its affinity or
//! cgroup exceeds: there the rule may leave a limit unbounded that
//! glibc's arenas could still fill. Under a limit at
//! or above that the arenas cannot take the room, and nothing is changed;
//! the rule is checked again at each thread start until the bound is set.
//!
//! The setting is process-wide: it also bounds the arenas of the
//! program's own threads, which then share arenas and may wait on each
//! other's allocation locks. That is the trade a limited address space
//! asks for (one 64 MiB reservation per thread is the largest cost of a
//! thread under it), and it is made only then. It is not made when the
//! user chose the bound at start-up, the only time glibc reads it:
//! `MALLOC_ARENA_MAX` set to a positive integer, or
//! `glibc.malloc.arena_max` set to one in `GLIBC_TUNABLES` (an empty,
//! zero or unparsable value, which glibc ignores, is no choice), nor
//! after a program set its own with [`bound`]. blockio cannot see a
//! program's own `mallopt(M_ARENA_MAX, n)` and overrides it when it next
//! starts a thread; such a program should call [`bound`] instead (or set
//! `MALLOC_ARENA_MAX`). Once set, the bound stays for the life of the
//! process, even if the limit is raised later.
//!
//! The other ways were weighed and not taken: threads that never
//! allocate nor free are not to be had from Rust's standard library (its
//! thread start frees the closure's box, and glibc makes the arena at a
//! thread's first `free` too); fewer threads would each still make an
//! arena, at a cost in concurrency on every engine; the threads' stacks
//! (256 KiB each) are not what the room goes to.
//!
//! glibc fixes its bound on arenas the first time the count reaches it
//! when no bound was set, so a process that already made 8 × CPUs
//! arenas keeps its own; a limit set after blockio started its threads is
//! seen when it starts the next.

use std::io;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle, Scope, ScopedJoinHandle};

/// The most arenas a process under a limit the arenas could fill is left
/// with: the main one, which grows as the memory is used, shared by every
/// thread. Not 2: the second arena's 64 MiB, reserved whenever there is
/// room for it, took the room the engine's ring needed at 100 MiB, where
/// 60 and 80 MiB, with no room for it, passed (`docs/benchmarks.md`,
/// "malloc's arenas under `ulimit -v`").
pub const ARENAS: NonZeroU32 = NonZeroU32::MIN;

/// The address space glibc reserves for each arena but the main one
/// (`HEAP_MAX_SIZE` on a 64-bit target).
const ARENA_RESERVE: u64 = 64 << 20;

/// glibc's default bound on arenas per CPU on a 64-bit target.
const ARENAS_PER_CPU: u64 = 8;

/// Whether the bound was set (or the user's own found), so the next
/// thread started need not look again.
static SETTLED: AtomicBool = AtomicBool::new(false);

/// Starts a thread named `name` (with a stack of `stack_size` bytes, or
/// the standard library's default), after [`cap_under_address_limit`]:
/// the one way blockio and its Python package start their threads.
pub fn spawn<F, T>(name: &str, stack_size: Option<usize>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    cap_under_address_limit();
    builder(name, stack_size).spawn(f)
}

/// [`spawn`] for a thread of `scope`, which may borrow from outside it.
pub fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope Scope<'scope, 'env>,
    name: &str,
    stack_size: Option<usize>,
    f: F,
) -> io::Result<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    cap_under_address_limit();
    builder(name, stack_size).spawn_scoped(scope, f)
}

/// A builder for a thread named `name`, with `stack_size` if given.
fn builder(name: &str, stack_size: Option<usize>) -> thread::Builder {
    let b = thread::Builder::new().name(name.to_owned());
    match stack_size {
        Some(size) => b.stack_size(size),
        None => b,
    }
}

/// Bounds glibc's malloc arenas at [`ARENAS`] if the process's soft
/// `RLIMIT_AS` is below what glibc's own arenas may reserve on top of
/// what the process maps (the module's rule) and its user did not choose
/// a bound; does nothing otherwise, or on a libc other than glibc. Called
/// by [`spawn`] before it starts a thread; cheap once the bound is set
/// (one atomic load), else one `getrlimit` and, under a finite limit, a
/// read of `/proc/self/status`.
pub fn cap_under_address_limit() {
    // (Miri has no `getrlimit`, and no glibc arenas to bound.)
    if cfg!(miri) || SETTLED.load(Ordering::Acquire) {
        return;
    }
    if user_chose_bound() {
        SETTLED.store(true, Ordering::Release);
        return;
    }
    let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::As).current else {
        return;
    };
    if limit >= room_for_default_arenas() {
        return;
    }
    set_bound(ARENAS);
    SETTLED.store(true, Ordering::Release);
}

/// Bounds glibc's malloc arenas at `arenas` (`mallopt(M_ARENA_MAX)`), and
/// keeps blockio from setting its own bound when it next starts a thread:
/// for a program that fits its own threads to a limit (blockio's tools
/// keep to one arena), or that would otherwise call `mallopt` itself
/// (blockio would override that). Does nothing on a libc other than
/// glibc.
pub fn bound(arenas: NonZeroU32) {
    set_bound(arenas);
    SETTLED.store(true, Ordering::Release);
}

/// What glibc's default arenas may reserve, plus what the process maps
/// now (`VmSize`; 0 if `/proc` cannot be read).
fn room_for_default_arenas() -> u64 {
    let cpus = thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mapped = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| vm_size(&s))
        .unwrap_or(0);
    ARENAS_PER_CPU
        .saturating_mul(cpus)
        .saturating_mul(ARENA_RESERVE)
        .saturating_add(mapped)
}

/// `VmSize` in bytes from the text of `/proc/<pid>/status`.
fn vm_size(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("VmSize:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Whether the environment the process started with (glibc reads it
/// then, and only then) sets glibc's arena bound to a value glibc
/// honours.
fn user_chose_bound() -> bool {
    std::fs::read("/proc/self/environ").is_ok_and(|env| chooses_bound(&env))
}

/// Whether `environ` (`NAME=value` entries, each ended by a NUL, as in
/// `/proc/self/environ`) sets a positive `MALLOC_ARENA_MAX` or a positive
/// `glibc.malloc.arena_max` in `GLIBC_TUNABLES`.
fn chooses_bound(environ: &[u8]) -> bool {
    let mut chosen = false;
    for entry in environ.split(|&b| b == 0) {
        let Ok(entry) = std::str::from_utf8(entry) else {
            continue;
        };
        if let Some(v) = entry.strip_prefix("MALLOC_ARENA_MAX=") {
            chosen |= positive(v);
        } else if let Some(t) = entry.strip_prefix("GLIBC_TUNABLES=") {
            // `name=value` pairs split by `:`; the last of a name counts.
            let last = t
                .split(':')
                .filter_map(|kv| kv.strip_prefix("glibc.malloc.arena_max="))
                .next_back();
            chosen |= last.is_some_and(positive);
        }
    }
    chosen
}

/// Whether `v` is a positive integer as glibc's tunables read it
/// (decimal, or hexadecimal after `0x`).
fn positive(v: &str) -> bool {
    let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    n.is_ok_and(|n| n > 0)
}

/// `mallopt(M_ARENA_MAX, arenas)`: through `libc`, as rustix has no
/// `mallopt`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_bound(arenas: NonZeroU32) {
    let arenas = i32::try_from(arenas.get()).unwrap_or(i32::MAX);
    // SAFETY: mallopt takes two integers, no pointer: no memory of ours
    // is read or handed over. glibc's manual marks it MT-Unsafe: it
    // stores `mp_.arena_max` (an aligned int, one machine word) holding
    // the main arena's lock, but the threads that make arenas read that
    // field in `arena_get2` without a lock, and cache the bound once they
    // first reach it. A thread that races the store therefore reads the
    // old bound or the new one, never a torn value, and the worst outcome
    // is that a thread makes one more arena, or that a bound cached
    // before this call stays (documented in the module). Neither touches
    // memory safety: the arena count only chooses how much address space
    // malloc reserves. blockio calls it before it starts a thread, and
    // only until the bound is set.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// Nothing to bound on a libc other than glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_bound(_arenas: NonZeroU32) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_positive_bound_is_the_users_choice() {
        for (env, chosen) in [
            (&b"MALLOC_ARENA_MAX=2\0"[..], true),
            (b"A=1\0MALLOC_ARENA_MAX=0x4\0", true),
            (b"MALLOC_ARENA_MAX=\0", false),
            (b"MALLOC_ARENA_MAX=0\0", false),
            (b"MALLOC_ARENA_MAX=lots\0", false),
            (b"MALLOC_ARENA_MAX=-1\0", false),
            (b"GLIBC_TUNABLES=glibc.malloc.arena_max=3\0", true),
            (
                b"GLIBC_TUNABLES=glibc.malloc.check=0:glibc.malloc.arena_max=1\0",
                true,
            ),
            (b"GLIBC_TUNABLES=glibc.malloc.arena_max=0\0", false),
            (b"GLIBC_TUNABLES=glibc.malloc.arena_max=\0", false),
            (b"GLIBC_TUNABLES=glibc.malloc.arena_test=4\0", false),
            (
                b"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.arena_max=0\0",
                false,
            ),
            (b"XMALLOC_ARENA_MAX=2\0", false),
            (b"", false),
        ] {
            assert_eq!(
                chooses_bound(env),
                chosen,
                "{}",
                String::from_utf8_lossy(env)
            );
        }
    }

    #[test]
    fn vm_size_is_read_in_bytes() {
        let status = "Name:\tpython\nVmPeak:\t  9000 kB\nVmSize:\t  4096 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(vm_size(status), Some(4096 * 1024));
        assert_eq!(vm_size("Name:\tx\n"), None);
    }

    #[test]
    fn the_arenas_room_covers_what_the_process_maps() {
        let cpus = thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let room = room_for_default_arenas();
        assert!(room > ARENAS_PER_CPU * cpus * ARENA_RESERVE, "{room}");
    }
}
