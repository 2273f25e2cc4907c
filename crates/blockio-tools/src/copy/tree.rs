//! The walker: command-line operands, breadth-first directories, links,
//! special files, and the groups of regular files handed to the workers.

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use blockio::{Engine, PathAt};

use super::files;
use super::{cname, quote, CopyOptions, CopyReport, Errors, Progress};

/// A source directory and its copy, both open, with their paths for
/// messages. Shared by every group of files from that directory.
pub(crate) struct DirPair {
    pub src: File,
    pub dst: File,
    pub src_path: PathBuf,
    pub dst_path: PathBuf,
}

impl DirPair {
    pub fn src_of(&self, name: &CStr) -> PathBuf {
        self.src_path.join(OsStr::from_bytes(name.to_bytes()))
    }
    pub fn dst_of(&self, name: &CStr) -> PathBuf {
        self.dst_path.join(OsStr::from_bytes(name.to_bytes()))
    }
}

/// One thing to copy: its name in the source directory, its name in the
/// destination directory (they differ only for `cp a b`), and its `statx`.
#[derive(Clone)]
pub(crate) struct Entry {
    pub src_name: CString,
    pub dst_name: CString,
    /// For a regular file listed in a directory, only its type until the
    /// worker copying it fills the rest in from the open source
    /// ([`Entry::stated`] says which).
    pub st: libc::statx,
}

impl Entry {
    /// The `statx` of a regular file known from its directory entry only.
    fn unstated() -> libc::statx {
        // SAFETY: `statx` is plain old data; all zeroes is a valid value.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        st.stx_mode = libc::S_IFREG as u16;
        st
    }
    /// Whether `st` holds the file's attributes (`statx` sets the mask),
    /// not only its type.
    pub fn stated(&self) -> bool {
        self.st.stx_mask != 0
    }
    pub fn mode(&self) -> u32 {
        u32::from(self.st.stx_mode)
    }
    fn kind(&self) -> u32 {
        self.mode() & libc::S_IFMT
    }
}

/// Regular files from one directory, for one worker.
pub(crate) struct Group {
    pub dirs: Arc<DirPair>,
    pub files: Vec<Entry>,
}

/// Counts kept by the walker and the workers beyond [`Progress`].
#[derive(Default)]
pub(crate) struct Counts {
    pub symlinks: AtomicU64,
    pub specials: AtomicU64,
    pub skipped: AtomicU64,
}

/// A directory made by the copy whose final mode or times are set at the
/// end, once nothing more is written into it.
struct Fixup {
    path: PathBuf,
    st: libc::statx,
    /// The mode to set.
    chmod: u32,
}

pub(crate) fn run(
    engine: &Engine,
    sources: &[PathBuf],
    dest: &Path,
    dest_is_dir: bool,
    opts: &CopyOptions,
    progress: &Progress,
    on_error: &(dyn Fn(&super::CopyError) + Sync),
) -> CopyReport {
    let errors = Errors {
        progress,
        sink: on_error,
    };
    let counts = Counts::default();
    let walker = Walker {
        engine,
        opts,
        progress,
        errors: &errors,
        counts: &counts,
        work: Work::default(),
        fixups: Mutex::new(Vec::new()),
        filesystems: Mutex::new(Vec::new()),
        umask: current_umask(),
    };
    for src in sources {
        walker.operand(src, dest, dest_is_dir);
    }
    // Every thread walks directories and copies files alike, so that no
    // core waits on a single walker (the first levels of a tree hold only
    // directories) and the walk itself runs in parallel.
    std::thread::scope(|s| {
        for _ in 1..opts.threads {
            s.spawn(|| walker.work_loop());
        }
        walker.work_loop();
    });
    walker.finish_dirs();
    CopyReport {
        files: progress.files.load(Ordering::Relaxed),
        dirs: progress.dirs.load(Ordering::Relaxed),
        symlinks: counts.symlinks.load(Ordering::Relaxed),
        specials: counts.specials.load(Ordering::Relaxed),
        skipped: counts.skipped.load(Ordering::Relaxed),
        bytes: progress.bytes.load(Ordering::Relaxed),
        errors: 0,
        seconds: 0.0,
    }
}

/// What is left to do: directories to walk and groups of files to copy,
/// with the count of tasks queued or running (0 and empty queues: done).
#[derive(Default)]
struct Work {
    queues: Mutex<Queues>,
    ready: Condvar,
}

#[derive(Default)]
struct Queues {
    dirs: VecDeque<(PathBuf, PathBuf)>,
    groups: VecDeque<Group>,
    /// Tasks queued or being worked on.
    open: usize,
    /// A worker panicked: the others stop taking tasks, so that the scope
    /// ends and passes the panic on instead of waiting for ever.
    aborted: bool,
}

enum Task {
    Dir(PathBuf, PathBuf),
    Files(Group),
}

impl Work {
    fn push(&self, task: Task) {
        let mut q = self.queues.lock().expect("work queue lock");
        q.open += 1;
        match task {
            Task::Dir(s, d) => q.dirs.push_back((s, d)),
            Task::Files(g) => q.groups.push_back(g),
        }
        drop(q);
        self.ready.notify_one();
    }

    /// The next task; file groups first, which bounds the files (and the
    /// descriptors of their directories) waiting in the queue: a directory
    /// is only listed when no files are waiting. `None` when all is done.
    fn next(&self) -> Option<Task> {
        let mut q = self.queues.lock().expect("work queue lock");
        loop {
            if q.aborted {
                return None;
            }
            if let Some(g) = q.groups.pop_front() {
                return Some(Task::Files(g));
            }
            if let Some((s, d)) = q.dirs.pop_front() {
                return Some(Task::Dir(s, d));
            }
            if q.open == 0 {
                return None;
            }
            q = self.ready.wait(q).expect("work queue lock");
        }
    }

    fn done(&self) {
        let mut q = self.queues.lock().expect("work queue lock");
        q.open -= 1;
        if q.open == 0 {
            self.ready.notify_all();
        }
    }

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
struct Running<'w>(&'w Work);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        } else {
            self.0.done();
        }
    }
}

fn current_umask() -> u32 {
    // SAFETY: umask cannot fail; it is set back at once (before any worker
    // creates a file).
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    }
}

struct Walker<'a> {
    engine: &'a Engine,
    opts: &'a CopyOptions,
    progress: &'a Progress,
    errors: &'a Errors<'a>,
    counts: &'a Counts,
    work: Work,
    fixups: Mutex<Vec<Fixup>>,
    /// With `--fsync`, the destination file systems written to: device
    /// number, a directory there (for messages), and that directory opened
    /// before anything was written there (`syncfs` reports the write-back
    /// errors that happened since its file was opened).
    filesystems: Mutex<Vec<(u64, PathBuf, File)>>,
    umask: u32,
}

fn open_dir(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
}

fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The final name of a path, `.` and `..` resolved to a real name (`cp`
/// copies `a/..` under the name of the directory it is).
fn final_name(p: &Path) -> Option<CString> {
    match p.file_name() {
        Some(n) => Some(cname(n)),
        None => std::fs::canonicalize(p).ok()?.file_name().map(cname),
    }
}

impl Walker<'_> {
    fn work_loop(&self) {
        let mut arena = blockio::AlignedBuf::new(0, files::SLOT_ALIGN);
        while let Some(task) = self.work.next() {
            let _running = Running(&self.work);
            match task {
                Task::Dir(src, dst) => self.directory(src, dst),
                Task::Files(g) => files::copy_group(
                    self.engine,
                    g,
                    self.opts,
                    self.progress,
                    self.counts,
                    self.errors,
                    &mut arena,
                    &|rest| self.work.push(Task::Files(rest)),
                ),
            }
        }
    }

    fn stat_one(&self, at: PathAt<'_>) -> io::Result<libc::statx> {
        self.engine
            .stat_batch(&[at], libc::AT_SYMLINK_NOFOLLOW)?
            .remove(0)
    }

    /// One command-line source.
    fn operand(&self, src: &Path, dest: &Path, dest_is_dir: bool) {
        let csrc = cname(src.as_os_str());
        let st = match self.stat_one(PathAt::cwd(&csrc)) {
            Ok(st) => st,
            Err(e) => {
                return self
                    .errors
                    .report(format!("cannot stat {}", quote(src)), Some(e))
            }
        };
        let Some(src_name) = final_name(src) else {
            return self
                .errors
                .report(format!("cannot copy {}: it has no name", quote(src)), None);
        };
        let target = if dest_is_dir {
            dest.join(OsStr::from_bytes(src_name.to_bytes()))
        } else {
            dest.to_path_buf()
        };
        let Some(dst_name) = final_name(&target) else {
            return self.errors.report(
                format!("cannot create {}: it has no name", quote(&target)),
                None,
            );
        };
        let existing = std::fs::symlink_metadata(&target).ok();
        let is_dir = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
        if is_dir {
            if let (Ok(s), Ok(p)) = (
                std::fs::canonicalize(src),
                std::fs::canonicalize(parent(&target)),
            ) {
                let t = p.join(OsStr::from_bytes(dst_name.to_bytes()));
                if t.starts_with(&s) {
                    return self.errors.report(
                        format!(
                            "cannot copy a directory, {}, into itself, {}",
                            quote(src),
                            quote(&target)
                        ),
                        None,
                    );
                }
            }
        } else if let Some(m) = &existing {
            if m.dev() == libc::makedev(st.stx_dev_major, st.stx_dev_minor) && m.ino() == st.stx_ino
            {
                return self.errors.report(
                    format!("{} and {} are the same file", quote(src), quote(&target)),
                    None,
                );
            }
        }
        let Some((s, d)) = self.open_both(parent(src), parent(&target)) else {
            return;
        };
        // Paths in messages as the user wrote them: `x`, not `./x`.
        let pair = DirPair {
            src: s,
            dst: d,
            src_path: src.parent().unwrap_or(Path::new("")).to_path_buf(),
            dst_path: target.parent().unwrap_or(Path::new("")).to_path_buf(),
        };
        let entry = Entry {
            src_name,
            dst_name,
            st,
        };
        self.entries(&Arc::new(pair), vec![entry]);
    }

    /// Opens a source directory and its destination; `None` after reporting
    /// the one that could not be opened.
    fn open_both(&self, src: &Path, dst: &Path) -> Option<(File, File)> {
        let open = |p: &Path| {
            open_dir(p)
                .map_err(|e| {
                    self.errors
                        .report(format!("cannot access {}", quote(p)), Some(e))
                })
                .ok()
        };
        let s = open(src)?;
        let d = open(dst)?;
        if self.opts.fsync {
            self.note_filesystem(&d, dst);
        }
        Some((s, d))
    }

    /// Remembers the file system of a destination directory, to `syncfs`
    /// it at the end.
    fn note_filesystem(&self, dir: &File, path: &Path) {
        let dev = match dir.metadata() {
            Ok(m) => m.dev(),
            Err(e) => {
                return self
                    .errors
                    .report(format!("cannot stat {}", quote(path)), Some(e))
            }
        };
        let mut known = self.filesystems.lock().expect("lock");
        if known.iter().any(|(d, _, _)| *d == dev) {
            return;
        }
        match dir.try_clone() {
            Ok(f) => known.push((dev, path.to_path_buf(), f)),
            Err(e) => self
                .errors
                .report(format!("cannot access {}", quote(path)), Some(e)),
        }
    }

    /// One directory of the tree, already made at `dst`.
    fn directory(&self, src: PathBuf, dst: PathBuf) {
        let Some((s, d)) = self.open_both(&src, &dst) else {
            return;
        };
        let mut names = Vec::new();
        match std::fs::read_dir(&src) {
            Ok(rd) => {
                for e in rd {
                    match e {
                        // The type from the directory itself (`d_type`),
                        // where the file system gives it.
                        Ok(e) => {
                            let regular = e.file_type().is_ok_and(|t| t.is_file());
                            names.push((cname(&e.file_name()), regular));
                        }
                        Err(e) => {
                            self.errors
                                .report(format!("cannot read directory {}", quote(&src)), Some(e));
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                return self
                    .errors
                    .report(format!("cannot read directory {}", quote(&src)), Some(e))
            }
        }
        // Sorted: the walk (and its messages) do not depend on the order the
        // file system lists names in.
        names.sort();
        let pair = Arc::new(DirPair {
            src: s,
            dst: d,
            src_path: src,
            dst_path: dst,
        });
        // Regular files are not `statx`ed here: the worker that copies one
        // opens it anyway and reads its attributes from the descriptor
        // (`Entry::unstated`), which saves a path lookup per file and, on
        // ext4, a trip through io_uring's worker threads (where `statx`
        // always goes). Everything else is `statx`ed in batches.
        let mut stats: Vec<Option<libc::statx>> = names
            .iter()
            .map(|(_, regular)| regular.then(Entry::unstated))
            .collect();
        let unknown: Vec<usize> = (0..names.len()).filter(|&i| !names[i].1).collect();
        for chunk in unknown.chunks(256) {
            let at: Vec<PathAt<'_>> = chunk
                .iter()
                .map(|&i| PathAt::in_dir(&pair.src, &names[i].0))
                .collect();
            let got = match self.engine.stat_batch(&at, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(s) => s,
                Err(e) => {
                    return self
                        .errors
                        .report(format!("cannot stat in {}", quote(&pair.src_path)), Some(e))
                }
            };
            for (&i, st) in chunk.iter().zip(got) {
                match st {
                    Ok(st) => stats[i] = Some(st),
                    Err(e) => self.errors.report(
                        format!("cannot stat {}", quote(&pair.src_of(&names[i].0))),
                        Some(e),
                    ),
                }
            }
        }
        let entries = names
            .into_iter()
            .zip(stats)
            .filter_map(|((name, _), st)| {
                Some(Entry {
                    src_name: name.clone(),
                    dst_name: name,
                    st: st?,
                })
            })
            .collect();
        self.entries(&pair, entries);
    }

    /// Copies the entries of one directory pair, by kind. Regular files go
    /// out in groups of `group` files; a group's worker splits off what
    /// exceeds a wave of bytes once the sizes are known (`files::copy_group`).
    fn entries(&self, pair: &Arc<DirPair>, entries: Vec<Entry>) {
        let mut dirs = Vec::new();
        let mut links = Vec::new();
        let mut group: Vec<Entry> = Vec::new();
        for e in entries {
            match e.kind() {
                libc::S_IFDIR => dirs.push(e),
                libc::S_IFLNK => links.push(e),
                libc::S_IFREG => {
                    if group.len() >= self.opts.group.max(1) {
                        self.send(pair, std::mem::take(&mut group));
                    }
                    group.push(e);
                }
                _ => self.special(pair, &e),
            }
        }
        if !group.is_empty() {
            self.send(pair, group);
        }
        self.make_dirs(pair, dirs);
        self.make_links(pair, links);
    }

    fn send(&self, pair: &Arc<DirPair>, files: Vec<Entry>) {
        self.work.push(Task::Files(Group {
            dirs: Arc::clone(pair),
            files,
        }));
    }

    fn make_dirs(&self, pair: &Arc<DirPair>, dirs: Vec<Entry>) {
        if dirs.is_empty() {
            return;
        }
        // Writable by us while the copy fills it; the real mode at the end.
        let reqs: Vec<(PathAt<'_>, u32)> = dirs
            .iter()
            .map(|e| {
                (
                    PathAt::in_dir(&pair.dst, &e.dst_name),
                    (e.mode() & 0o7777) | 0o700,
                )
            })
            .collect();
        let made = match self.engine.mkdir_batch(&reqs) {
            Ok(m) => m,
            Err(e) => {
                return self.errors.report(
                    format!("cannot create directories in {}", quote(&pair.dst_path)),
                    Some(e),
                )
            }
        };
        for (e, r) in dirs.into_iter().zip(made) {
            let (src, dst) = (pair.src_of(&e.src_name), pair.dst_of(&e.dst_name));
            match r {
                Ok(()) => {
                    let want = if self.opts.preserve {
                        e.mode() & 0o7777
                    } else {
                        e.mode() & 0o777 & !self.umask
                    };
                    let made = ((e.mode() & 0o7777) | 0o700) & !self.umask;
                    // Nothing to set at the end when mkdir made it right,
                    // the usual case (opening every directory again for
                    // nothing made a serial tail after the copy).
                    if want != made || self.opts.preserve {
                        self.fixups.lock().expect("lock").push(Fixup {
                            path: dst.clone(),
                            st: e.st,
                            chmod: want,
                        });
                    }
                }
                Err(err) if blockio::errno(&err) == Some(libc::EEXIST) => {
                    if !std::fs::metadata(&dst).is_ok_and(|m| m.is_dir()) {
                        self.errors.report(
                            format!(
                                "cannot overwrite non-directory {} with directory {}",
                                quote(&dst),
                                quote(&src)
                            ),
                            None,
                        );
                        continue;
                    }
                    // Merging into an existing directory: with -p its
                    // attributes become the source's, as with cp.
                    if self.opts.preserve {
                        self.fixups.lock().expect("lock").push(Fixup {
                            path: dst.clone(),
                            st: e.st,
                            chmod: e.mode() & 0o7777,
                        });
                    }
                }
                Err(err) => {
                    self.errors.report(
                        format!("cannot create directory {}", quote(&dst)),
                        Some(err),
                    );
                    continue;
                }
            }
            self.progress.dirs.fetch_add(1, Ordering::Relaxed);
            self.work.push(Task::Dir(src, dst));
        }
    }

    fn make_links(&self, pair: &Arc<DirPair>, links: Vec<Entry>) {
        let mut targets = Vec::with_capacity(links.len());
        let mut ok = Vec::with_capacity(links.len());
        for e in links {
            match read_link_at(&pair.src, &e.src_name) {
                Ok(t) => {
                    targets.push(t);
                    ok.push(e);
                }
                Err(err) => self.errors.report(
                    format!(
                        "cannot read symbolic link {}",
                        quote(&pair.src_of(&e.src_name))
                    ),
                    Some(err),
                ),
            }
        }
        if ok.is_empty() {
            return;
        }
        let reqs: Vec<(PathAt<'_>, &CStr)> = ok
            .iter()
            .zip(&targets)
            .map(|(e, t)| (PathAt::in_dir(&pair.dst, &e.dst_name), t.as_c_str()))
            .collect();
        let made = match self.engine.symlink_batch(&reqs) {
            Ok(m) => m,
            Err(e) => {
                return self.errors.report(
                    format!("cannot create symbolic links in {}", quote(&pair.dst_path)),
                    Some(e),
                )
            }
        };
        for ((e, t), r) in ok.iter().zip(&targets).zip(made) {
            let dst = pair.dst_of(&e.dst_name);
            let r = match r {
                Err(err) if blockio::errno(&err) == Some(libc::EEXIST) => {
                    match self.replace(pair, &e.dst_name) {
                        Replace::Skip => continue,
                        Replace::Removed => symlink_at(t, &pair.dst, &e.dst_name),
                        Replace::Failed => continue,
                    }
                }
                r => r,
            };
            match r {
                Ok(()) => {
                    self.counts.symlinks.fetch_add(1, Ordering::Relaxed);
                    if self.opts.preserve {
                        if let Err(err) = set_attrs_at(&pair.dst, &e.dst_name, &e.st, None) {
                            self.errors
                                .report(format!("preserving times for {}", quote(&dst)), Some(err));
                        }
                    }
                }
                Err(err) => self.errors.report(
                    format!("cannot create symbolic link {}", quote(&dst)),
                    Some(err),
                ),
            }
        }
    }

    /// FIFOs, sockets and device nodes are made anew, as `cp -r` does.
    fn special(&self, pair: &Arc<DirPair>, e: &Entry) {
        let dst = pair.dst_of(&e.dst_name);
        let rdev = libc::makedev(e.st.stx_rdev_major, e.st.stx_rdev_minor);
        let make = || {
            // SAFETY: a valid directory fd and a NUL-terminated name.
            let rc = unsafe {
                libc::mknodat(
                    pair.dst.as_raw_fd(),
                    e.dst_name.as_ptr(),
                    e.mode() & (libc::S_IFMT | 0o7777),
                    rdev,
                )
            };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        let mut r = make();
        if r.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EEXIST) {
            match self.replace(pair, &e.dst_name) {
                Replace::Removed => r = make(),
                Replace::Skip | Replace::Failed => return,
            }
        }
        match r {
            Ok(()) => {
                self.counts.specials.fetch_add(1, Ordering::Relaxed);
                if self.opts.preserve {
                    if let Err(err) = set_attrs_at(&pair.dst, &e.dst_name, &e.st, Some(e.mode())) {
                        self.errors
                            .report(format!("preserving times for {}", quote(&dst)), Some(err));
                    }
                }
            }
            Err(err) => self.errors.report(
                format!("cannot create special file {}", quote(&dst)),
                Some(err),
            ),
        }
    }

    /// An existing destination in the way of a link or special file: kept
    /// with `-n`, an error if it is a directory, else removed.
    fn replace(&self, pair: &DirPair, name: &CStr) -> Replace {
        if self.opts.no_clobber {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Replace::Skip;
        }
        let dst = pair.dst_of(name);
        if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_dir()) {
            self.errors.report(
                format!(
                    "cannot overwrite directory {} with non-directory",
                    quote(&dst)
                ),
                None,
            );
            return Replace::Failed;
        }
        if let Err(e) = files::unlink_at(&pair.dst, name) {
            self.errors
                .report(format!("cannot remove {}", quote(&dst)), Some(e));
            return Replace::Failed;
        }
        Replace::Removed
    }

    /// Final modes and times of the directories made (deepest first, after
    /// all their contents), then with `--fsync` a `syncfs` of every
    /// destination file system.
    fn finish_dirs(&self) {
        let fixups = std::mem::take(&mut *self.fixups.lock().expect("lock"));
        for f in &fixups {
            let dir = match open_dir(&f.path) {
                Ok(d) => d,
                Err(e) => {
                    self.errors
                        .report(format!("cannot access {}", quote(&f.path)), Some(e));
                    continue;
                }
            };
            let r = if self.opts.preserve {
                set_attrs_at(&dir, c"", &f.st, Some(f.chmod))
            } else {
                fchmod(&dir, f.chmod)
            };
            if let Err(e) = r {
                self.errors.report(
                    format!("cannot set attributes of {}", quote(&f.path)),
                    Some(e),
                );
            }
        }
        if !self.opts.fsync {
            return;
        }
        // One syncfs per destination file system makes durable what no
        // fsync of its own did: the small files (see
        // `files::FSYNC_EACH_MIN`), the directories, links and attributes.
        let filesystems = std::mem::take(&mut *self.filesystems.lock().expect("lock"));
        for (_, path, dir) in filesystems {
            // SAFETY: a valid descriptor; no memory is passed.
            if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
                self.errors.report(
                    format!(
                        "cannot make the copy durable: syncfs on the file system of {} failed, so files written there may be incomplete",
                        quote(&path)
                    ),
                    Some(io::Error::last_os_error()),
                );
            }
        }
    }
}

enum Replace {
    Skip,
    Removed,
    Failed,
}

fn read_link_at(dir: &File, name: &CStr) -> io::Result<CString> {
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes; readlinkat writes at
        // most that many and does not NUL-terminate.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n < buf.len() {
            buf.truncate(n);
            return CString::new(buf)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "NUL in link target"));
        }
        let len = buf.len() * 2;
        buf.resize(len, 0);
    }
}

fn symlink_at(target: &CStr, dir: &File, name: &CStr) -> io::Result<()> {
    // SAFETY: NUL-terminated strings and a valid directory fd.
    if unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn fchmod(f: &File, mode: u32) -> io::Result<()> {
    // SAFETY: a valid fd.
    if unsafe { libc::fchmod(f.as_raw_fd(), mode) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `-p` on a path relative to `dir` (the empty name: `dir` itself), never
/// following a link: ownership (only root may give files away; `EPERM` is
/// ignored as cp does), then `chmod` (not for links), then times.
pub(crate) fn set_attrs_at(
    dir: &impl AsRawFd,
    name: &CStr,
    st: &libc::statx,
    chmod: Option<u32>,
) -> io::Result<()> {
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    let fd = dir.as_raw_fd();
    // SAFETY: a valid fd and NUL-terminated name for each call; `times`
    // lives on the stack across the call.
    unsafe {
        if libc::fchownat(fd, name.as_ptr(), st.stx_uid, st.stx_gid, flags) != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(e);
            }
        }
        let is_link = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFLNK;
        if let Some(mode) = chmod.filter(|_| !is_link) {
            let rc = if name.is_empty() {
                libc::fchmod(fd, mode & 0o7777)
            } else {
                libc::fchmodat(fd, name.as_ptr(), mode & 0o7777, 0)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let times = [ts(&st.stx_atime), ts(&st.stx_mtime)];
        let rc = if name.is_empty() {
            libc::futimens(fd, times.as_ptr())
        } else {
            libc::utimensat(fd, name.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(crate) fn ts(t: &libc::statx_timestamp) -> libc::timespec {
    libc::timespec {
        tv_sec: t.tv_sec,
        tv_nsec: i64::from(t.tv_nsec),
    }
}
