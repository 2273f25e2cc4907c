//! The line of progress `cp` shows while it copies, when standard error is
//! a terminal: redrawn in place, cleared before each message so that
//! messages never mix with it, and cleared at the end. Plain `\r` and the
//! terminal's erase-to-end-of-line (`ESC [ K`) are all it needs, so it
//! takes no library (a progress-bar crate pulled in the maths library,
//! close to 1 MiB of address space mapped in every run, which a copy under
//! `ulimit -v` needs for its files).

use std::io::Write;
use std::sync::{Mutex, MutexGuard};

/// Erases the line the cursor is on, from its start.
const ERASE: &[u8] = b"\r\x1b[K";

/// A line of progress on standard error, or nothing when it is not shown.
pub(crate) struct ProgressLine {
    shown: bool,
    /// Whether the line holds text now. Held while standard error is
    /// written, so that a redraw and a message never interleave.
    drawn: Mutex<bool>,
}

impl ProgressLine {
    /// A line drawn only if `shown`.
    pub(crate) fn new(shown: bool) -> Self {
        Self {
            shown,
            drawn: Mutex::new(false),
        }
    }

    /// Whether the line is shown at all.
    pub(crate) fn is_shown(&self) -> bool {
        self.shown
    }

    fn lock(&self) -> MutexGuard<'_, bool> {
        // A panic while it was held leaves nothing inconsistent: a flag.
        self.drawn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Draws `text` in place of what the line held.
    pub(crate) fn draw(&self, text: &str) {
        if !self.shown {
            return;
        }
        let mut drawn = self.lock();
        let line = [ERASE, text.as_bytes()].concat();
        // Progress is advisory: a failed write loses nothing.
        *drawn = std::io::stderr().write_all(&line).is_ok();
    }

    /// Runs `f`, which writes a message, with the line cleared first; the
    /// next [`draw`](Self::draw) shows it again below the message.
    pub(crate) fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut drawn = self.lock();
        if *drawn {
            let _ = std::io::stderr().write_all(ERASE);
            *drawn = false;
        }
        f()
    }

    /// Clears the line for good (the copy has ended).
    pub(crate) fn clear(&self) {
        self.suspend(|| ());
    }
}
