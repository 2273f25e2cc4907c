//! Running out of memory ends the `blockio` binary as GNU's tools end:
//! `PROGRAM: memory exhausted` on standard error and exit status 1 (their
//! `xalloc_die`), never Rust's default, which prints "memory allocation of
//! N bytes failed" and aborts (SIGABRT, status 134, and a core dump where
//! those are on), a failure a script cannot tell from a crash.
//!
//! The standard library calls its allocation-error handler when the global
//! allocator returns null, and a handler of one's own is not available on
//! stable Rust; so the binary's global allocator is [`ExitOnExhaustion`],
//! the system allocator that, instead of returning null, writes the
//! message with one `write(2)` (allocating nothing) and ends the process
//! with `_exit(1)`. It applies to this binary only: the library crates
//! keep whatever allocator their user chooses.
//!
//! A copy ended this way leaves what it made so far, as GNU's `cp` does
//! when it runs out of memory; the message says the copy did not finish.
//! `try_reserve` and the like also end the process instead of returning an
//! error (none of the tools relies on those to recover).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The system allocator, ending the process with GNU's "memory exhausted"
/// and exit status 1 when an allocation fails (see the module).
pub struct ExitOnExhaustion;

#[global_allocator]
static ALLOCATOR: ExitOnExhaustion = ExitOnExhaustion;

/// The program name the message starts with (`blockio` until a tool sets
/// its own): one pointer to a `&'static str`, read without allocating,
/// from any thread.
static NAME: AtomicPtr<&'static str> = AtomicPtr::new(&DEFAULT_NAME as *const &str as *mut &str);
static DEFAULT_NAME: &str = "blockio";

/// Names the running tool (`blockio cp`, or `cp` run through a link) in
/// the "memory exhausted" message.
pub fn set_program(name: &'static str) {
    NAME.store(Box::leak(Box::new(name)), Ordering::Release);
}

/// Writes `NAME: memory exhausted` to standard error and ends the process
/// with status 1, allocating nothing.
#[cold]
fn exhausted() -> ! {
    const TAIL: &[u8] = b": memory exhausted\n";
    let mut msg = [0u8; 512];
    let room = msg.len() - TAIL.len();
    let named = NAME.load(Ordering::Acquire);
    let len = if std::ptr::eq(named, &DEFAULT_NAME) {
        // No tool has named itself yet (the allocation failing is one of
        // the first): the name its arguments give.
        name_from_arguments(&mut msg[..room])
    } else {
        // SAFETY: `NAME` points at a `&'static str` that lives for ever
        // (one `set_program` leaked), published with `Release`.
        let name: &str = unsafe { *named };
        let name = &name.as_bytes()[..name.len().min(room)];
        msg[..name.len()].copy_from_slice(name);
        name.len()
    };
    msg[len..len + TAIL.len()].copy_from_slice(TAIL);
    let n = len + TAIL.len();
    // SAFETY: `msg[..n]` is initialised memory on this stack frame, valid
    // for the call; `write` only reads it. Its result is not looked at:
    // nothing more can be done if standard error is closed. `_exit` ends
    // the process at once, without running destructors or `atexit`
    // handlers that could allocate.
    unsafe {
        libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), n);
        libc::_exit(1)
    }
}

/// Writes into `out` the name the process's arguments give it, as `cp`
/// names itself (`blockio cp` for `blockio cp ...`; the name it was run by
/// through a link, such as `cp`; else `blockio`), read from
/// `/proc/self/cmdline` into a buffer on the stack; its length. Until a
/// tool has set its name (before and while its arguments are parsed) this
/// is the name in the message.
fn name_from_arguments(out: &mut [u8]) -> usize {
    let mut buf = [0u8; 1024];
    // SAFETY: a NUL-terminated path; the descriptor is read into `buf`,
    // valid for `buf.len()` bytes, and closed; nothing is allocated.
    let got = unsafe {
        let fd = libc::open(
            c"/proc/self/cmdline".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        let got = if fd < 0 {
            -1
        } else {
            libc::read(fd, buf.as_mut_ptr().cast(), buf.len())
        };
        if fd >= 0 {
            libc::close(fd);
        }
        got
    };
    let text = &buf[..usize::try_from(got).unwrap_or(0)];
    let mut args = text.split(|&b| b == 0);
    let argv0 = args.next().unwrap_or_default();
    let base = argv0.rsplit(|&b| b == b'/').next().unwrap_or_default();
    let name: &[u8] = if base.is_empty() || base.starts_with(b"blockio") {
        if args.next() == Some(b"cp".as_slice()) {
            b"blockio cp"
        } else {
            DEFAULT_NAME.as_bytes()
        }
    } else {
        argv0
    };
    let n = name.len().min(out.len());
    out[..n].copy_from_slice(&name[..n]);
    n
}

// SAFETY: every method passes its arguments on to `System` unchanged and
// returns what it returns, except that a null (failed) allocation never
// returns at all; so `System`'s guarantees hold for this allocator.
unsafe impl GlobalAlloc for ExitOnExhaustion {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's obligations for `alloc` are `System`'s.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            exhausted()
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            exhausted()
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` (every allocation here
        // is), with `layout`; the caller's obligations are `System`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            exhausted()
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}
