//! The engines of the tokio runtimes that have one
//! ([`AsyncEngine::current`](super::AsyncEngine::current) on a runtime
//! with I/O), by runtime, process-wide.
//!
//! An entry lives until its runtime's `drive_on_tokio` task is gone (the
//! runtime shut down, or the task aborted): the task's drop calls
//! [`runtime_gone`], and, should the list be busy then, the next look-up
//! drops it. The list neither builds engines nor drives them: the default
//! engine's look-up (`current.rs`) builds one for a runtime that has none
//! and the driving task (`tokio_drive.rs`) reports its end, so neither of
//! those needs the other's module.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::AsyncEngine;

/// The engines of the tokio runtimes that have one, by runtime.
static ENGINES: Mutex<Vec<(tokio::runtime::Id, AsyncEngine)>> = Mutex::new(Vec::new());

/// Drops the entries of runtimes whose driving task is gone.
fn forget_gone(engines: &mut Vec<(tokio::runtime::Id, AsyncEngine)>) {
    engines.retain(|(_, e)| e.tokio_drivers().running.load(Ordering::Acquire) > 0);
}

/// Called when an engine's last `drive_on_tokio` task is gone (its
/// runtime shut down): drops the entries of such runtimes now, rather
/// than at the next look-up, so that a program whose last runtime is
/// gone keeps no ring (streams still open keep theirs). Skipped when
/// the list is busy (a look-up, which drops them itself, is under way
/// on this thread or another).
pub(super) fn runtime_gone() {
    if let Ok(mut engines) = ENGINES.try_lock() {
        forget_gone(&mut engines);
    }
}

/// The engine of runtime `id`, or the one `build` makes for it, kept
/// (`None` from `build`: the runtime gets none, and nothing is kept).
/// `build` runs with the list held, so that tasks of one runtime racing
/// here build one engine between them. Entries of runtimes that are gone
/// go first, the caller's too (its runtime then gets a new engine), since
/// tokio may give a new runtime the id of one that is gone.
pub(super) fn get_or_build(
    id: tokio::runtime::Id,
    build: impl FnOnce() -> io::Result<Option<AsyncEngine>>,
) -> io::Result<Option<AsyncEngine>> {
    let mut engines = ENGINES.lock().unwrap_or_else(|e| e.into_inner());
    forget_gone(&mut engines);
    if let Some((_, engine)) = engines.iter().find(|(rt, _)| *rt == id) {
        return Ok(Some(engine.clone()));
    }
    let Some(engine) = build()? else {
        return Ok(None);
    };
    engines.push((id, engine.clone()));
    Ok(Some(engine))
}
