//! Files this copy created and has not finished, removed when an
//! interrupting signal ends the copy, so that nothing incomplete is left
//! looking complete.
//!
//! A copy creates the destinations of a group of files at once and fills
//! them afterwards (see `files::open`), so at any moment dozens of them can
//! exist with their final names and nothing or part of their data in
//! them. A failed copy removes its own (`files::finish`); a signal would
//! leave them all. So [`remove_unfinished_on_signals`] (called by the `cp`
//! program before it starts any thread) blocks SIGINT, SIGTERM and SIGHUP
//! in every thread and waits for them in a thread of its own, which then:
//!
//! 1. closes the creation gate (`creation_gate`): every creation passes
//!    it from before its `openat` until the file is listed, so once it is
//!    closed no creation is under way and none can start, and every file
//!    this copy created and has not finished is in [`LISTED`] (an open of
//!    an existing destination, which for a FIFO waits for a reader, runs
//!    outside the gate: it creates nothing);
//! 2. removes each of them (and the second names hard-linked to them),
//!    putting back the file a `-b` copy had kept aside under its name;
//! 3. ends the process by the same signal, its default action, so the
//!    caller sees what it would have seen without this (exit status 130
//!    in a shell for Ctrl-C).
//!
//! A `-b` copy moves the file in its way aside first ([`kept_aside`]),
//! through the gate too, and lists the name at once: a signal between
//! that rename and the copy's creation puts the file back, where the name
//! would otherwise be left empty with only the backup beside it.
//!
//! Only files this copy created are listed: an existing file written into
//! (a FIFO, a device, a file opened for overwriting) is never removed.
//! A listing ends when the copy of the file ends ([`Unfinished`] is
//! dropped), complete or not. SIGKILL cannot be caught: after one, the
//! files being filled remain, as a killed GNU `cp` leaves the one it was
//! writing.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use super::creation_gate::{self, Creation};

/// A destination directory a copy makes names in, as a listing keeps it:
/// an interrupting signal removes the name from it (and puts back the
/// file kept aside there).
pub(crate) trait MadeIn: Send + Sync + 'static {
    /// `name` in the destination directory, to remove or rename: the
    /// directory held open, or (under the lowest limits on descriptors)
    /// the working directory and the name's whole path.
    fn made_at<'a>(&'a self, name: &'a CStr) -> (BorrowedFd<'a>, Cow<'a, CStr>);
}

/// Files are listed only once [`remove_unfinished_on_signals`] has a
/// thread taking the signals: otherwise nobody would remove them.
static ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The files created and not finished, by their listing number.
static LISTED: Mutex<Listed> = Mutex::new(Listed {
    next: 0,
    files: BTreeMap::new(),
});

struct Listed {
    next: u64,
    files: BTreeMap<u64, Made>,
}

impl Listed {
    /// Lists `made`; its listing number.
    fn list(&mut self, made: Made) -> u64 {
        let n = self.next;
        self.next += 1;
        self.files.insert(n, made);
        n
    }
}

/// A name this copy made.
struct Made {
    /// The destination directory `name` is in.
    dir: Arc<dyn MadeIn>,
    name: CString,
    /// The file this one replaced, kept aside under this name (`-b`).
    backup: Option<CString>,
    /// The source file (device, inode), whose second names are hard links
    /// to this copy.
    id: (u64, u64),
    /// A second name, hard-linked to the copy of `id` (which owns it).
    link: bool,
    /// Only the file `-b` moved aside from this name ([`kept_aside`]):
    /// nothing made under the name is listed yet.
    aside: bool,
}

fn listed() -> MutexGuard<'static, Listed> {
    // A panic elsewhere while the lock was held leaves the list as it was
    // between two whole updates: still usable.
    LISTED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The listing of a file this copy created: the file is removed if an
/// interrupting signal comes before this is dropped, with the second names
/// linked to it since.
pub(crate) struct Unfinished(u64);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let mut l = listed();
        if let Some(made) = l.files.remove(&self.0) {
            // A copy's listing ends: its second names are whole with it.
            if !made.link && !made.aside {
                let id = made.id;
                l.files.retain(|_, m| !(m.link && m.id == id));
            }
        }
    }
}

/// Runs `set_aside`, which moves the file `name` in `dir`'s destination
/// aside under a backup name (`-b`) and returns that name's path (`None`:
/// nothing was there to keep), so that an interrupting signal either comes
/// before it or finds the name listed, and puts the file back. The listing
/// comes back with the path: hand it to [`created`] for the copy made
/// under `name`, which it then lists (the signal removes the copy, then
/// puts the file back), or drop it once the name is filled otherwise.
pub(crate) fn kept_aside(
    dir: &Arc<impl MadeIn>,
    name: &CString,
    id: (u64, u64),
    set_aside: impl FnOnce() -> io::Result<Option<PathBuf>>,
) -> io::Result<(Option<PathBuf>, Option<Unfinished>)> {
    if !ON.load(std::sync::atomic::Ordering::Acquire) {
        return set_aside().map(|kept| (kept, None));
    }
    let _creating = creating();
    let kept = set_aside()?;
    let listing = kept.as_ref().and_then(|path| {
        let backup = CString::new(path.file_name()?.as_bytes()).ok()?;
        let made = Made {
            dir: Arc::clone(dir) as Arc<dyn MadeIn>,
            name: name.clone(),
            backup: Some(backup),
            id,
            link: false,
            aside: true,
        };
        Some(Unfinished(listed().list(made)))
    });
    Ok((kept, listing))
}

/// Runs `create`, which makes the file `name` in `dir`'s destination or
/// opens the one there (`Ok((value, true))` when it made it), so that an
/// interrupting signal either comes before it or finds the file listed.
/// The listing, for a file it made, comes back with the value: `aside`,
/// if given (the listing of the file [`kept_aside`] moved from `name`,
/// which already names the backup), or a new one naming `backup`.
pub(crate) fn created<T>(
    dir: &Arc<impl MadeIn>,
    name: &CString,
    backup: Option<&CString>,
    id: (u64, u64),
    aside: Option<Unfinished>,
    create: impl FnOnce() -> io::Result<(T, bool)>,
) -> io::Result<(T, Option<Unfinished>)> {
    if !ON.load(std::sync::atomic::Ordering::Acquire) {
        return create().map(|(value, _)| (value, None));
    }
    let _creating = creating();
    let (value, made) = create()?;
    if !made {
        return Ok((value, None));
    }
    if let Some(listing) = aside {
        if let Some(m) = listed().files.get_mut(&listing.0) {
            m.aside = false; // (the copy's listing now)
        }
        return Ok((value, Some(listing)));
    }
    let made = Made {
        dir: Arc::clone(dir) as Arc<dyn MadeIn>,
        name: name.clone(),
        backup: backup.cloned(),
        id,
        link: false,
        aside: false,
    };
    Ok((value, Some(Unfinished(listed().list(made)))))
}

/// Runs `link`, which makes `name` in `dir`'s destination a second name of
/// the copy of the file `id`, so that the name is removed with that copy
/// if an interrupting signal comes before the copy is finished (and the
/// file `-b` moved aside from it, whose listing `aside` is, put back).
pub(crate) fn linked(
    dir: &Arc<impl MadeIn>,
    name: &CString,
    id: (u64, u64),
    aside: Option<Unfinished>,
    link: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    if !ON.load(std::sync::atomic::Ordering::Acquire) {
        return link();
    }
    let _creating = creating();
    link()?;
    let mut l = listed();
    let copy_unfinished = l.files.values().any(|m| !m.link && !m.aside && m.id == id);
    match aside {
        // The name's listing becomes the second name's, ended with the
        // copy's (which removes it), the backup still named.
        Some(listing) if copy_unfinished => {
            if let Some(m) = l.files.get_mut(&listing.0) {
                m.link = true;
                m.aside = false;
            }
            std::mem::forget(listing);
        }
        Some(listing) => {
            l.files.remove(&listing.0); // (the copy is whole: so is the link)
            std::mem::forget(listing);
        }
        None if copy_unfinished => {
            l.list(Made {
                dir: Arc::clone(dir) as Arc<dyn MadeIn>,
                name: name.clone(),
                backup: None,
                id,
                link: true,
                aside: false,
            });
        }
        None => {}
    }
    Ok(())
}

/// Runs `undo`, a failed copy removing itself (and putting back the file
/// `-b` moved aside), and ends the copy's `listing`, with no interrupting
/// signal acting between the two: a signal after `undo` and before the
/// listing ended would unlink the name again, now the file put back.
pub(crate) fn undone<T>(listing: Option<Unfinished>, undo: impl FnOnce() -> T) -> T {
    if !ON.load(std::sync::atomic::Ordering::Acquire) {
        let out = undo();
        drop(listing);
        return out;
    }
    let _creating = creating();
    let out = undo();
    drop(listing);
    out
}

fn creating() -> Creation {
    creation_gate::enter()
}

// The signal calls here (sigaction, pthread_sigmask, sigwait, raise) are
// raw libc: rustix offers signal masks and dispositions only in its hidden,
// experimental runtime module, and no sigwait.

/// The signals that end a copy and its unfinished files.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully
    // before any other use, and sigaddset takes valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// From now on SIGINT, SIGTERM and SIGHUP remove the files this copy
/// created and has not finished before they end the process (see the
/// module's documentation). Call it before any thread starts: the signals
/// are blocked in the calling thread, and threads started after inherit
/// that, so only the waiting thread receives them. A signal ignored or
/// blocked when this is called (`nohup` ignores SIGHUP) stays so, as it
/// would for GNU's `cp`.
pub fn remove_unfinished_on_signals() -> io::Result<()> {
    // SAFETY: a zeroed sigset_t is valid plain data; with a null new set,
    // pthread_sigmask only reads the calling thread's mask into it.
    let blocked = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set);
        set
    };
    let wanted: Vec<libc::c_int> = SIGNALS
        .into_iter()
        .filter(|&s| {
            // SAFETY: a zeroed sigaction is valid plain data; sigaction
            // with a null new action only reads the current disposition
            // of `s` into it; sigismember reads the initialised `blocked`.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                libc::sigaction(s, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction != libc::SIG_IGN
                    && libc::sigismember(&blocked, s) == 0
            }
        })
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let set = signal_set(&wanted);
    // SAFETY: `set` is an initialised signal set; blocking signals in the
    // calling thread has no other effect.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    let spawned = std::thread::Builder::new()
        .name("cp-signals".into())
        .stack_size(64 << 10)
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is an initialised signal set, blocked in every
            // thread; sigwait writes the signal taken into `sig`.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                remove_and_die(sig);
            }
        });
    if let Err(e) = spawned {
        // Without the thread nobody would take the signals: unblock them.
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        return Err(e);
    }
    ON.store(true, std::sync::atomic::Ordering::Release);
    Ok(())
}

/// Removes every listed file and ends the process by `sig`.
fn remove_and_die(sig: libc::c_int) -> ! {
    // Never reopened: no creation starts after this.
    creation_gate::close();
    let l = listed();
    // Second names first, while their copies still have theirs.
    let (links, copies): (Vec<&Made>, Vec<&Made>) = l.files.values().partition(|m| m.link);
    for m in links.into_iter().chain(copies) {
        let (dir, name) = m.dir.made_at(&m.name);
        let _ = rustix::fs::unlinkat(dir, &*name, rustix::fs::AtFlags::empty());
        if let Some(kept) = &m.backup {
            let (kept_dir, kept) = m.dir.made_at(kept);
            let _ = rustix::fs::renameat(kept_dir, &*kept, dir, &*name);
        }
    }
    let one = signal_set(&[sig]);
    // SAFETY: restoring the default action of a catchable signal, then
    // unblocking it in this thread and raising it here (every other thread
    // still blocks it), ends the process as the signal would have without
    // this module.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
    }
    // (Not reached: the signal's default action ends the process.)
    std::process::exit(128 + sig)
}
