//! The queue the workers share: directories to list and groups of files
//! to copy, with the count of tasks open, so that every worker knows when
//! the walk is done. File groups are taken before directories, which
//! bounds the files (and open directory descriptors) waiting. A worker
//! that panics stops the others, so the panic is passed on rather than
//! waited for.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;

use super::super::entry::{joined, Chain, DirAt, Group, Root};

/// What is left to do: directories to walk and groups of files to copy,
/// with the count of tasks queued or running (0 and empty queues: done).
#[derive(Default)]
pub(super) struct Work {
    queues: Mutex<Queues>,
    ready: Condvar,
}

/// The queues behind [`Work`]'s lock.
#[derive(Default)]
struct Queues {
    dirs: VecDeque<Queued>,
    groups: VecDeque<Group>,
    /// Tasks queued or being worked on.
    open: usize,
    /// A worker panicked: the others stop taking tasks, so that the scope
    /// ends and passes the panic on instead of waiting for ever.
    aborted: bool,
}

/// One unit of work for a worker.
pub(super) enum Task {
    /// A directory to list.
    Dir(Queued),
    /// Regular files of one directory to copy.
    Files(Group),
}

/// A directory to list, already made at its destination.
pub(super) struct DirTask {
    /// The source directory's path, for messages.
    pub(super) src: PathBuf,
    /// Its copy's path, for messages.
    pub(super) dst: PathBuf,
    /// Where both are opened from.
    pub(super) at: DirAt,
    /// With `-L`: the source directories above this one.
    pub(super) chain: Option<Arc<Chain>>,
    /// The operand and its copy (see `DirPair::top`).
    pub(super) top: Arc<(PathBuf, PathBuf)>,
}

/// A directory waiting to be listed, as small as it can be kept: a
/// directory of many subdirectories queues them all at once.
pub(super) struct Queued {
    /// Where it is.
    pub(super) dir: Pending,
    /// Its final attributes are to be set (`Some`, with whether the copy
    /// made it): after its contents, or at once if it has none.
    pub(super) fix: Option<bool>,
}

/// Where a queued directory is.
pub(super) enum Pending {
    /// Given in full (an operand, or made for one).
    Full(Box<DirTask>),
    /// `name` in the directory `parent` describes, under the same name
    /// on both sides.
    Below {
        /// What it shares with its siblings.
        parent: Arc<Parent>,
        /// Its name.
        name: CString,
    },
}

/// What the subdirectories of one listed directory share: the paths
/// [`DirTask`] holds, of their parent.
pub(super) struct Parent {
    /// The source directory's path.
    pub(super) src: PathBuf,
    /// Its copy's path.
    pub(super) dst: PathBuf,
    /// The root both are opened below.
    pub(super) root: Arc<Root>,
    /// Their path below `root`.
    pub(super) rel: PathBuf,
    /// With `-L`: the source directories down to this one.
    pub(super) chain: Option<Arc<Chain>>,
    /// The operand and its copy.
    pub(super) top: Arc<(PathBuf, PathBuf)>,
}

impl Pending {
    /// The directory in full.
    pub(super) fn resolve(self) -> DirTask {
        match self {
            Pending::Full(t) => *t,
            Pending::Below { parent, name } => {
                let name = OsStr::from_bytes(name.to_bytes());
                DirTask {
                    // As GNU names them: `s//` and `sub` are `s/sub`.
                    src: joined(&parent.src, name),
                    dst: joined(&parent.dst, name),
                    at: DirAt::Beneath {
                        root: Arc::clone(&parent.root),
                        rel: parent.rel.join(name),
                    },
                    chain: parent.chain.clone(),
                    top: Arc::clone(&parent.top),
                }
            }
        }
    }
}

impl Work {
    /// Queues `task` and wakes a worker for it.
    pub(super) fn push(&self, task: Task) {
        let mut q = self.queues.lock().expect("work queue lock");
        q.open += 1;
        match task {
            Task::Dir(d) => q.dirs.push_back(d),
            Task::Files(g) => q.groups.push_back(g),
        }
        drop(q);
        self.ready.notify_one();
    }

    /// The next task; file groups first, which bounds the files (and the
    /// descriptors of their directories) waiting in the queue: a directory
    /// is only listed when no files are waiting. `None` when all is done.
    pub(super) fn next(&self) -> Option<Task> {
        let mut q = self.queues.lock().expect("work queue lock");
        loop {
            if q.aborted {
                return None;
            }
            if let Some(g) = q.groups.pop_front() {
                return Some(Task::Files(g));
            }
            if let Some(d) = q.dirs.pop_front() {
                return Some(Task::Dir(d));
            }
            if q.open == 0 {
                return None;
            }
            q = self.ready.wait(q).expect("work queue lock");
        }
    }

    /// The oldest waiting group of files when more than `most` wait (the
    /// caller runs it as a task, marking it done with [`Running`]).
    pub(super) fn group_beyond(&self, most: usize) -> Option<Group> {
        let mut q = self.queues.lock().expect("work queue lock");
        if q.aborted || q.groups.len() <= most {
            return None;
        }
        q.groups.pop_front()
    }

    /// Counts the caller as a task until the guard is dropped: workers
    /// started before it has queued its tasks wait for them instead of
    /// finding the walk done.
    pub(super) fn hold(&self) -> Running<'_> {
        self.queues.lock().expect("work queue lock").open += 1;
        Running(self)
    }

    /// A task is finished; the last one wakes every worker to end.
    fn done(&self) {
        let mut q = self.queues.lock().expect("work queue lock");
        q.open -= 1;
        if q.open == 0 {
            self.ready.notify_all();
        }
    }

    /// A worker panicked: every worker stops taking tasks.
    fn abort(&self) {
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .aborted = true;
        self.ready.notify_all();
    }
}

/// A task being worked on: marks it done when dropped, and stops all
/// workers if it is dropped by a panic.
pub(super) struct Running<'w>(pub(super) &'w Work);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        } else {
            self.0.done();
        }
    }
}
