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
    // SAFETY: `NAME` always points at a `&'static str` that lives for
    // ever (`DEFAULT_NAME`, or one `set_program` leaked), published with
    // `Release`.
    let name: &str = unsafe { *NAME.load(Ordering::Acquire) };
    let name = &name.as_bytes()[..name.len().min(msg.len() - TAIL.len())];
    msg[..name.len()].copy_from_slice(name);
    msg[name.len()..name.len() + TAIL.len()].copy_from_slice(TAIL);
    let n = name.len() + TAIL.len();
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
