//! The walker: command-line operands, breadth-first directories, links,
//! special files, and the groups of regular files handed to the workers.
//!
//! Directories are opened from their operand's root by relative path (see
//! [`at`]); when that path grows past [`REROOT`] bytes the directory becomes
//! a root of its own, so a tree of any depth is copied (GNU `cp` stops at
//! `PATH_MAX`), while the walk keeps only a few descriptors per level open.

use std::collections::VecDeque;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use blockio::{Engine, PathAt};

use super::at;
use super::attrs::{set_attrs_at, Node};
use super::entry::{
    parent_as_written, statx_id, Chain, Counts, Ctx, DirAt, DirPair, Entry, Group, Root,
};
use super::files;
use super::Dereference;
use super::{cname, quote, CopyOptions, CopyReport, Errors, Preserve, Progress};

/// A directory whose path below its root reaches this many bytes is opened
/// as a root of its own: `openat2` takes at most `PATH_MAX` (4096) bytes,
/// and a name takes at most 255 more.
const REROOT: usize = 2048;

/// The names of a directory taken at a time: their `statx`es and entries
/// (about 300 bytes each) are kept only while these are dispatched, so
/// memory stays bounded however many entries a directory holds.
const LIST_CHUNK: usize = 512;

/// A directory made by the copy whose final mode or times are set at the
/// end, once nothing more is written into it.
struct Fixup {
    at: DirAt,
    /// The copy's path, for messages.
    path: PathBuf,
    st: libc::statx,
    /// The mode to set (`None`: a directory merged into keeps its own,
    /// unless the mode is preserved).
    chmod: Option<u32>,
    /// Made by the copy (not merged into).
    fresh: bool,
}

/// One copy to run: what goes where, how, and where progress and errors
/// go.
pub(crate) struct Request<'a> {
    /// The source operands, in order.
    pub sources: &'a [PathBuf],
    /// The destination operand.
    pub dest: &'a Path,
    /// Whether `dest` is a directory the sources are copied into (else the
    /// one source is copied to `dest` itself).
    pub dest_is_dir: bool,
    /// How to copy.
    pub opts: &'a CopyOptions,
    /// The counters the copy advances as it goes.
    pub progress: &'a Progress,
    /// Called for each path that fails, from any thread.
    pub on_error: &'a (dyn Fn(&super::CopyError) + Sync),
}

pub(crate) fn run(engine: &Engine, req: &Request<'_>) -> CopyReport {
    let &Request {
        sources,
        dest,
        dest_is_dir,
        opts,
        progress,
        on_error,
    } = req;
    let errors = Errors {
        progress,
        sink: on_error,
    };
    let walker = Walker {
        ctx: Ctx {
            engine,
            opts,
            progress,
            errors: &errors,
            counts: Counts::default(),
            links: Default::default(),
            made_links: (sources.len() > 1).then(Default::default),
            creators: super::creators::Creators::new(opts.threads),
            umask: current_umask(),
        },
        work: Work::default(),
        fixups: Mutex::new(Vec::new()),
        filesystems: Mutex::new(Vec::new()),
        operands_seen: Mutex::default(),
        operand_targets: Mutex::default(),
        dest_dirs: Mutex::default(),
        src_dirs: Mutex::default(),
        watch: opts.dereference == Dereference::Always
            || sources.len() > 1
            || mounts_below(sources, dest),
    };
    // The operands are copied in phases, in command-line order: each
    // directory in a phase of its own, the files between them together.
    // Copies that land on the same names then end as GNU's do, the later
    // operand's last (`cp -r a/. b/. d/` leaves `b`'s files), never
    // depending on which thread came first.
    let mut rest = sources;
    while !rest.is_empty() {
        let is_dir = |p: &PathBuf| opts.recursive && std::fs::metadata(p).is_ok_and(|m| m.is_dir());
        let n = if is_dir(&rest[0]) {
            1
        } else {
            rest.iter().position(is_dir).unwrap_or(rest.len())
        };
        let (phase, later) = rest.split_at(n);
        rest = later;
        for src in phase {
            walker.operand(src, dest, dest_is_dir);
        }
        // Every thread walks directories and copies files alike, so that no
        // core waits on a single walker (the first levels of a tree hold only
        // directories) and the walk itself runs in parallel.
        // A thread that cannot be had (under a limit on threads or on
        // address space) leaves the work to fewer: this one alone if need be.
        std::thread::scope(|s| {
            for _ in 1..opts.threads {
                if std::thread::Builder::new()
                    .spawn_scoped(s, || walker.work_loop())
                    .is_err()
                {
                    break;
                }
            }
            walker.work_loop();
        });
    }
    walker.finish_dirs();
    let counts = &walker.ctx.counts;
    CopyReport {
        files: progress.files.load(Ordering::Relaxed),
        dirs: progress.dirs.load(Ordering::Relaxed),
        symlinks: counts.symlinks.load(Ordering::Relaxed),
        specials: counts.specials.load(Ordering::Relaxed),
        skipped: counts.skipped.load(Ordering::Relaxed),
        bytes: progress.bytes.load(Ordering::Relaxed),
        errors: 0,
        seconds: 0.0,
        backend: String::new(),
        fallback_reason: None,
        output_error: None,
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
    dirs: VecDeque<Queued>,
    groups: VecDeque<Group>,
    /// Tasks queued or being worked on.
    open: usize,
    /// A worker panicked: the others stop taking tasks, so that the scope
    /// ends and passes the panic on instead of waiting for ever.
    aborted: bool,
}

enum Task {
    Dir(Queued),
    Files(Group),
}

/// A directory waiting to be listed, as small as it can be kept: a
/// directory of many subdirectories queues them all at once.
struct Queued {
    dir: Pending,
    /// Its final attributes are to be set (`Some`, with whether the copy
    /// made it): after its contents, or at once if it has none.
    fix: Option<bool>,
}

/// Where a queued directory is.
enum Pending {
    /// Given in full (an operand, or made for one).
    Full(Box<DirTask>),
    /// `name` in the directory `parent` describes, under the same name
    /// on both sides.
    Below { parent: Arc<Parent>, name: CString },
}

/// What the subdirectories of one listed directory share: the paths
/// [`DirTask`] holds, of their parent.
struct Parent {
    src: PathBuf,
    dst: PathBuf,
    root: Arc<Root>,
    rel: PathBuf,
    chain: Option<Arc<Chain>>,
    top: Arc<(PathBuf, PathBuf)>,
}

impl Pending {
    fn resolve(self) -> DirTask {
        match self {
            Pending::Full(t) => *t,
            Pending::Below { parent, name } => {
                let name = OsStr::from_bytes(name.to_bytes());
                DirTask {
                    src: parent.src.join(name),
                    dst: parent.dst.join(name),
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

/// A directory to list, already made at its destination.
struct DirTask {
    src: PathBuf,
    dst: PathBuf,
    at: DirAt,
    /// With `-L`: the source directories above this one.
    chain: Option<Arc<Chain>>,
    /// The operand and its copy (see `DirPair::top`).
    top: Arc<(PathBuf, PathBuf)>,
}

impl Work {
    fn push(&self, task: Task) {
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
    fn next(&self) -> Option<Task> {
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
    use rustix::fs::Mode;
    // Set back at once, before any worker creates a file.
    let m = rustix::process::umask(Mode::from_raw_mode(0o022));
    rustix::process::umask(m);
    m.bits()
}

struct Walker<'a> {
    ctx: Ctx<'a>,
    work: Work,
    fixups: Mutex<Vec<Fixup>>,
    /// With `--fsync`, the destination file systems written to: device
    /// number, a directory there (for messages), and that directory opened
    /// before anything was written there (`syncfs` reports the write-back
    /// errors that happened since its file was opened).
    filesystems: Mutex<Vec<(u64, PathBuf, File)>>,
    /// The operands copied so far, as directory entries: the (device,
    /// inode) of the file, of its directory, and its name there (`f` and
    /// `./f` are one entry, a hard link `h` of `f` another).
    operands_seen: Mutex<std::collections::HashSet<OperandKey>>,
    /// The copies of the non-directory operands (`d/f` for `cp a/f d/`),
    /// each made by the first operand that names it.
    /// With whether that copy is a symbolic link.
    operand_targets: Mutex<std::collections::HashMap<PathBuf, bool>>,
    /// The (device, inode) of every destination directory walked so far
    /// (made by the copy or merged into). A source directory among them
    /// is the copy itself, reached through a bind mount or, with `-L`, a
    /// link: entering it would copy the copy for ever.
    dest_dirs: Mutex<std::collections::HashSet<(u64, u64)>>,
    /// The source directories entered so far, by (device, inode), with
    /// the path of their copy: met again without `-L` (a bind mount of a
    /// directory inside itself), one is not copied twice.
    src_dirs: Mutex<std::collections::HashMap<(u64, u64), PathBuf>>,
    /// Whether the walk can meet a directory twice, or one of the copy's
    /// own, so that `dest_dirs` and `src_dirs` must note every directory
    /// walked: with `-L` (links to directories), with several operands
    /// (one may hold another, or the other's copy), or with a mount below
    /// the operand or one that the destination is reached through
    /// ([`mounts_below`]: a bind mount of a directory inside itself, or of
    /// the source at the destination). Otherwise each source directory is met once, and
    /// only the operands are noted: a directory of many subdirectories
    /// then costs no more than their names while they wait to be walked.
    watch: bool,
}

/// Whether a mount can make the walk meet a directory twice or meet its
/// own copy (`/proc/self/mountinfo`; `true` when that cannot be told): a
/// file system mounted strictly below one of `sources`, or `dest` reached
/// through a mount (a bind mount) of a directory inside one of them.
fn mounts_below(sources: &[PathBuf], dest: &Path) -> bool {
    let Ok(table) = std::fs::read("/proc/self/mountinfo") else {
        return true;
    };
    let mut roots = Vec::with_capacity(sources.len());
    for s in sources {
        match std::fs::canonicalize(s) {
            Ok(r) => roots.push(r),
            Err(_) => return true,
        }
    }
    let Ok(dest) = canonical_target(dest) else {
        return true;
    };
    // (device, root of the mount in its file system, mount point)
    let mounts: Vec<(&[u8], PathBuf, PathBuf)> = table
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').take(5).collect();
            (f.len() == 5).then(|| (f[2], unescape_mount_field(f[3]), unescape_mount_field(f[4])))
        })
        .collect();
    if mounts
        .iter()
        .any(|(_, _, point)| roots.iter().any(|r| point != r && point.starts_with(r)))
    {
        return true;
    }
    // The mount a path is in (the last of the longest mount points above
    // it: a later mount hides an earlier one at the same point), and the
    // path's place in that mount's file system.
    let real = |p: &Path| {
        let m = mounts
            .iter()
            .filter(|(_, _, point)| p.starts_with(point))
            .max_by_key(|(_, _, point)| point.as_os_str().len())?;
        let rest = p.strip_prefix(&m.2).ok()?;
        Some((m.0, m.1.join(rest)))
    };
    let Some((dev, at)) = real(&dest) else {
        return true;
    };
    roots.iter().any(|r| match real(r) {
        Some((d, src)) => d == dev && at.starts_with(src),
        None => true,
    })
}

/// A path field of `/proc/self/mountinfo`, where space, tab, newline and
/// backslash are written in octal (`\040`).
fn unescape_mount_field(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).and_then(|d| {
            d.iter()
                .all(|c| (b'0'..=b'7').contains(c))
                .then(|| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')))
        });
        match octal {
            Some(n) if field[i] == b'\\' && n <= 0xff => {
                out.push(n as u8);
                i += 4;
            }
            _ => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

/// An operand as a directory entry: see `Walker::operands_seen`.
type OperandKey = ((u64, u64), (u64, u64), std::ffi::OsString);

fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The name a source is copied under: its last component, with `.` and
/// `..` resolved to the name of the directory they are (`cp -r a/.. t`
/// copies under that name). `None` for `/`.
fn final_name(p: &Path) -> Option<std::ffi::CString> {
    match at::last_component(p).as_bytes() {
        b"" | b"." | b".." => std::fs::canonicalize(p).ok()?.file_name().map(cname),
        n => Some(cname(OsStr::from_bytes(n))),
    }
}

impl Walker<'_> {
    fn report(&self, what: String, e: Option<io::Error>) {
        self.ctx.errors.report(what, e)
    }

    /// `--parents`: makes the directories of `rel` (a source's path, from
    /// `/` when `absolute`) below `dest`, as GNU does: each with its
    /// source's mode (and with `-p` its owner and times, set at the end),
    /// an existing one left as it is. False after reporting a failure.
    fn make_parents(&self, rel: &Path, absolute: bool, dest: &Path) -> bool {
        let mut src = PathBuf::from(if absolute { "/" } else { "" });
        let mut dst = dest.to_path_buf();
        let comps: Vec<_> = rel.components().collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            src.push(c);
            dst.push(c);
            if matches!(c, std::path::Component::CurDir) {
                continue;
            }
            let csrc = cname(src.as_os_str());
            let st = match self.stat_one(PathAt::cwd(&csrc), true) {
                // `--no-preserve=mode`: GNU gives these the default mode,
                // without even the sticky bit other directories keep.
                Ok(mut st) if self.ctx.opts.default_mode => {
                    st.stx_mode &= !0o7000;
                    st
                }
                Ok(st) => st,
                Err(e) => {
                    self.report(format!("cannot stat {}", quote(&src)), Some(e));
                    return false;
                }
            };
            match std::fs::DirBuilder::new()
                .mode(self.dir_create_mode(&st))
                .create(&dst)
            {
                Ok(()) => {
                    super::say(
                        self.ctx.opts,
                        format_args!("{} -> {}", src.display(), dst.display()),
                    );
                    let task = DirTask {
                        src: src.clone(),
                        dst: dst.clone(),
                        at: DirAt::Operand {
                            src: src.clone(),
                            dst: dst.clone(),
                            follow_dst: true,
                        },
                        chain: None,
                        top: Arc::new((src.clone(), dst.clone())),
                    };
                    self.dir_made(Pending::Full(Box::new(task)), &st, true, false);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dst.is_dir() => {
                    // As GNU's: with -p a parent that is already there
                    // gets its source's attributes too, at the end.
                    if self.ctx.opts.preserve.attrs() {
                        self.fixups.lock().expect("lock").push(Fixup {
                            at: DirAt::Operand {
                                src: src.clone(),
                                dst: dst.clone(),
                                follow_dst: true,
                            },
                            path: dst.clone(),
                            st,
                            chmod: self.ctx.opts.preserve.mode.then(|| self.dir_mode(&st)),
                            fresh: false,
                        });
                    }
                }
                Err(e) => {
                    self.report(format!("cannot make directory {}", quote(&dst)), Some(e));
                    return false;
                }
            }
        }
        true
    }

    /// Whether FIFOs and devices are read like files (see
    /// `CopyOptions::copy_contents`).
    fn as_regular(&self) -> bool {
        !self.ctx.opts.recursive || self.ctx.opts.copy_contents
    }

    /// A message that is not an error (the exit status stays 0).
    fn warn(&self, what: String) {
        (self.ctx.errors.sink)(&super::CopyError { what, error: None })
    }

    fn work_loop(&self) {
        let mut arena = blockio::AlignedBuf::new(0, files::SLOT_ALIGN);
        while let Some(task) = self.work.next() {
            let _running = Running(&self.work);
            match task {
                Task::Dir(d) => self.directory(d),
                Task::Files(g) => files::copy_group(&self.ctx, g, &mut arena, &|rest| {
                    self.work.push(Task::Files(rest))
                }),
            }
        }
    }

    fn stat_one(&self, at: PathAt<'_>, follow: bool) -> io::Result<libc::statx> {
        let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
        self.ctx.engine.stat_batch(&[at], flags)?.remove(0)
    }

    /// One command-line source, by GNU `cp`'s rules for arguments: links
    /// on the way to it (and to the destination) are followed; the source
    /// itself is followed when written with a trailing `/` (or `/.`) or
    /// by `dereference` (the default without `-r`), else copied as a link;
    /// a source ending in `/.` has its contents merged into an existing
    /// destination directory.
    fn operand(&self, src: &Path, dest: &Path, dest_is_dir: bool) {
        let opts = self.ctx.opts;
        let csrc = cname(src.as_os_str());
        let follow_src = opts.dereference != super::Dereference::Never
            || src.as_os_str().as_bytes().ends_with(b"/");
        let st = match self.stat_one(PathAt::cwd(&csrc), follow_src) {
            Ok(st) => st,
            Err(e) => return self.report(format!("cannot stat {}", quote(src)), Some(e)),
        };
        let kind = u32::from(st.stx_mode) & libc::S_IFMT;
        if kind == libc::S_IFDIR && !opts.recursive {
            return self.report(
                format!("-r not specified; omitting directory {}", quote(src)),
                None,
            );
        }
        let Some(src_name) = final_name(src) else {
            return self.report(format!("cannot copy {}: it has no name", quote(src)), None);
        };
        let target = match (dest_is_dir, at::last_component(src).as_bytes()) {
            // `--parents`: the whole path as given, below the destination.
            (true, _) if opts.parents => {
                let rel = src.strip_prefix("/").unwrap_or(src);
                if !self.make_parents(rel, src.has_root(), dest) {
                    return;
                }
                dest.join(rel)
            }
            // `cp -r s/. d` names what it copies `d/./...`, as GNU does.
            (true, b".") => dest.join("."),
            (true, _) => dest.join(OsStr::from_bytes(src_name.to_bytes())),
            (false, _) => dest.to_path_buf(),
        };
        let Some(dst_name) = final_name(&target) else {
            return self.report(
                format!("cannot create {}: it has no name", quote(&target)),
                None,
            );
        };
        let is_dir = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
        // One source named twice (`cp a a t/`) is copied once, with a
        // warning, as cp does.
        let id = statx_id(&st);
        let dir = std::fs::metadata(parent(src)).map_or((0, 0), |m| id_of(&m));
        let key = (id, dir, at::last_component(src).to_owned());
        let first = self.operands_seen.lock().expect("lock").insert(key);
        if !first {
            let kind = if is_dir { "directory" } else { "file" };
            return self.warn(format!(
                "warning: source {kind} {} specified more than once",
                quote(src)
            ));
        }
        // `cp a/f b/f d/`: the second would overwrite the copy the first
        // makes, silently losing one of the copies asked for. Refused, as
        // GNU refuses it; decided here, in the order of the command line.
        // A link made first is GNU's other refusal, "will not copy through
        // just-created symlink", made where the copy meets it.
        let made_link = kind == libc::S_IFLNK || opts.link == super::LinkMode::Symbolic;
        let refused = !is_dir
            && dest_is_dir
            && match self
                .operand_targets
                .lock()
                .expect("lock")
                .entry(target.clone())
            {
                std::collections::hash_map::Entry::Occupied(first) => !*first.get(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(made_link);
                    false
                }
            };
        if refused {
            return self.report(
                format!(
                    "will not overwrite just-created {} with {}",
                    quote(&target),
                    quote(src)
                ),
                None,
            );
        }
        if is_dir {
            // `cp -r s t` with `t` a directory copies to `t/s`, a name the
            // user did not write: a link there is not followed. Nor is a
            // link named as the destination itself (`-T`, or a name that
            // is no directory): it is not a directory, as GNU says, and
            // merging into what it leads to would write outside the
            // destination named. A trailing slash asks for the directory.
            let follow = if dest_is_dir {
                at::last_component(src) == "."
            } else {
                dest.as_os_str().as_bytes().ends_with(b"/")
            };
            return self.operand_dir(src, &target, &st, follow);
        }
        if !dest_is_dir
            && dest.as_os_str().as_bytes().ends_with(b"/")
            && !std::fs::metadata(dest).is_ok_and(|m| m.is_dir())
        {
            // `cp f nodir/`: the slash says a directory is meant.
            let what = match kind {
                libc::S_IFLNK => "symbolic link",
                libc::S_IFREG => "regular file",
                _ if self.as_regular() => "regular file",
                _ => "special file",
            };
            return self.report(
                format!("cannot create {what} {}", quote(dest)),
                Some(io::Error::from_raw_os_error(libc::ENOTDIR)),
            );
        }
        match same_file_ok(src, &st, follow_src, &target, opts, self.as_regular()) {
            Same::Go => {}
            Same::Done => return,
            Same::Refuse => {
                return self.report(
                    format!("{} and {} are the same file", quote(src), quote(&target)),
                    None,
                )
            }
        }
        let Some(pair) = self.operand_parents(src, &target) else {
            return;
        };
        let entry = Entry {
            src_name,
            dst_name,
            st,
            // Only a destination the user named is followed: `cp f link`.
            follow_dst: !dest_is_dir,
            follow_src,
            operand: true,
        };
        self.entries(&Arc::new(pair), vec![entry]);
    }

    /// A directory named on the command line, copied to `target` (made, or
    /// merged into when it is a directory, or a link to one that the user
    /// named: `follow`).
    fn operand_dir(&self, src: &Path, target: &Path, st: &libc::statx, follow: bool) {
        if let (Ok(s), Ok(t)) = (std::fs::canonicalize(src), canonical_target(target)) {
            if t.starts_with(&s) {
                return self.report(
                    format!(
                        "cannot copy a directory, {}, into itself, {}",
                        quote(src),
                        quote(target)
                    ),
                    None,
                );
            }
        }
        let fresh = match std::fs::DirBuilder::new()
            .mode(self.dir_create_mode(st))
            .create(target)
        {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let existing = if follow {
                    std::fs::metadata(target)
                } else {
                    std::fs::symlink_metadata(target)
                };
                if !existing.is_ok_and(|m| m.is_dir()) {
                    return self.report(
                        format!(
                            "cannot overwrite non-directory {} with directory {}",
                            quote(target),
                            quote(src)
                        ),
                        None,
                    );
                }
                false
            }
            Err(e) => {
                return self.report(
                    format!("cannot create directory {}", quote(target)),
                    Some(e),
                )
            }
        };
        if fresh {
            super::say_copied(self.ctx.opts, src, target, None);
        }
        let id = statx_id(st);
        self.src_dirs
            .lock()
            .expect("lock")
            .entry(id)
            .or_insert_with(|| target.to_path_buf());
        let task = DirTask {
            src: src.to_path_buf(),
            dst: target.to_path_buf(),
            at: DirAt::Operand {
                src: src.to_path_buf(),
                dst: target.to_path_buf(),
                follow_dst: follow,
            },
            chain: None,
            top: Arc::new((src.to_path_buf(), target.to_path_buf())),
        };
        self.dir_made(Pending::Full(Box::new(task)), st, fresh, true);
    }

    /// The directories that hold a non-directory operand and its copy,
    /// opened following links; `None` after reporting one that could not
    /// be opened.
    fn operand_parents(&self, src: &Path, dst: &Path) -> Option<DirPair> {
        let open = |p: &Path| {
            at::open_operand_dir(parent(p))
                .map_err(|e| self.report(format!("cannot access {}", quote(parent(p))), Some(e)))
                .ok()
        };
        let s = open(src)?;
        let d = open(dst)?;
        if self.ctx.opts.fsync {
            self.note_filesystem(&d, parent(dst));
        }
        let keep = &self.ctx.opts.preserve;
        let dst_default_acl = (keep.mode || keep.xattr) && super::attrs::has_default_acl(d.as_fd());
        Some(DirPair {
            src: s,
            dst: d,
            src_path: parent_as_written(src),
            dst_path: parent_as_written(dst),
            // Never used: an operand's parent gets no subdirectories.
            below: None,
            dst_default_acl,
            chain: None,
            top: Arc::new((src.to_path_buf(), dst.to_path_buf())),
        })
    }

    /// Remembers the file system of a destination directory, to `syncfs`
    /// it at the end.
    fn note_filesystem(&self, dir: &File, path: &Path) {
        let dev = match dir.metadata() {
            Ok(m) => m.dev(),
            Err(e) => return self.report(format!("cannot stat {}", quote(path)), Some(e)),
        };
        let mut known = self.filesystems.lock().expect("lock");
        if known.iter().any(|(d, _, _)| *d == dev) {
            return;
        }
        match dir.try_clone() {
            Ok(f) => known.push((dev, path.to_path_buf(), f)),
            Err(e) => self.report(format!("cannot access {}", quote(path)), Some(e)),
        }
    }

    /// Opens a directory of the tree and its copy; with the root and path
    /// its subdirectories are opened from.
    fn open_task(&self, t: &DirTask) -> Option<(File, File, Arc<Root>, PathBuf)> {
        let (opened, root, rel) = match &t.at {
            DirAt::Operand {
                src,
                dst,
                follow_dst,
            } => (
                at::open_operand_dir(src)
                    .map_err(|e| (src, e))
                    .and_then(|s| {
                        Ok((s, open_operand_dst(dst, *follow_dst).map_err(|e| (dst, e))?))
                    }),
                None,
                PathBuf::new(),
            ),
            DirAt::Beneath { root, rel } => (
                if self.ctx.opts.dereference == Dereference::Always {
                    at::open_dir_following(&root.src, rel)
                } else {
                    at::open_dir_beneath(&root.src, rel)
                }
                .map_err(|e| (&t.src, e))
                .and_then(|s| {
                    Ok((
                        s,
                        at::open_dir_beneath(&root.dst, rel).map_err(|e| (&t.dst, e))?,
                    ))
                }),
                // Deep enough: this directory becomes a root of its own.
                (rel.as_os_str().len() < REROOT).then(|| Arc::clone(root)),
                if rel.as_os_str().len() < REROOT {
                    rel.clone()
                } else {
                    PathBuf::new()
                },
            ),
        };
        let (s, d) = match opened {
            Ok(sd) => sd,
            Err((path, e)) => {
                self.report(format!("cannot access {}", quote(path)), Some(e));
                return None;
            }
        };
        let root = match root {
            Some(r) => r,
            None => match (s.try_clone(), d.try_clone()) {
                (Ok(src), Ok(dst)) => Arc::new(Root { src, dst }),
                (Err(e), _) | (_, Err(e)) => {
                    self.report(format!("cannot access {}", quote(&t.src)), Some(e));
                    return None;
                }
            },
        };
        if self.ctx.opts.fsync && matches!(t.at, DirAt::Operand { .. }) {
            self.note_filesystem(&d, &t.dst);
        }
        Some((s, d, root, rel))
    }

    /// One directory of the tree, already made at `dst`.
    fn directory(&self, q: Queued) {
        let t = q.dir.resolve();
        let Some((s, d, root, rel)) = self.open_task(&t) else {
            return self.fix_dir(&t, q.fix, None, None);
        };
        // Its attributes before it is listed, which sets its access time.
        let mut st = q.fix.map(|_| files::fstat(&s));
        // Before its source is listed: the copy's own directories are
        // known when the walk meets them (see `dest_dirs`).
        if self.watch {
            match d.metadata() {
                Ok(m) => {
                    self.dest_dirs.lock().expect("lock").insert(id_of(&m));
                }
                Err(e) => {
                    self.report(format!("cannot stat {}", quote(&t.dst)), Some(e));
                    return self.fix_dir(&t, q.fix, st.take(), None);
                }
            }
        }
        let keep = self.ctx.opts.preserve;
        let preserve = keep.mode || keep.xattr;
        if preserve {
            // Before anything is made in it: its default ACL is the
            // source's, so what the copy creates inherits what the
            // source's files did. (A directory may have inherited ACLs
            // from its parent: always looked for.)
            let (from, to) = (Node::Fd(s.as_fd()), Node::Fd(d.as_fd()));
            if let Err(e) = super::attrs::copy_xattrs(&from, &to, true, &keep) {
                self.report(
                    format!("preserving extended attributes of {}", quote(&t.dst)),
                    Some(e),
                );
            }
        }
        let mut names = match at::list(&s) {
            Ok(n) => n,
            Err(e) => {
                self.report(format!("cannot read directory {}", quote(&t.src)), Some(e));
                return self.fix_dir(&t, q.fix, st.take(), None);
            }
        };
        // Sorted: the walk (and its messages) do not depend on the order the
        // file system lists names in.
        names.sort();
        // Before its subdirectories are queued, which note theirs after it
        // (`finish_dirs` sets them deepest first).
        self.fix_dir(&t, q.fix, st.take(), (names.len() == 0).then_some(&d));
        let dst_default_acl = preserve && super::attrs::has_default_acl(d.as_fd());
        let follow = self.ctx.opts.dereference == Dereference::Always;
        let chain = if follow {
            match s.metadata() {
                Ok(m) => Some(Arc::new(Chain {
                    id: (m.dev(), m.ino()),
                    up: t.chain.clone(),
                })),
                Err(e) => {
                    return self.report(format!("cannot stat {}", quote(&t.src)), Some(e));
                }
            }
        } else {
            None
        };
        let pair = Arc::new(DirPair {
            src: s,
            dst: d,
            src_path: t.src,
            dst_path: t.dst,
            below: Some((root, rel)),
            dst_default_acl,
            chain,
            top: t.top,
        });
        // A few hundred names at a time: their attributes and entries
        // (a `statx` each) are kept only while those are dispatched, so a
        // directory of many entries costs little more than its names.
        let mut group = Vec::new();
        for start in (0..names.len()).step_by(LIST_CHUNK) {
            let chunk: Vec<(&CStr, bool)> = (start..names.len().min(start + LIST_CHUNK))
                .map(|i| names.get(i))
                .collect();
            let stats = self.stat_all(&pair, &chunk);
            let entries = chunk
                .iter()
                .zip(stats)
                .filter_map(|(&(name, _), st)| {
                    let mut e = Entry::listed(name.to_owned(), st?);
                    e.follow_src = follow;
                    Some(e)
                })
                .collect();
            self.dispatch(&pair, entries, &mut group);
        }
        if !group.is_empty() {
            self.send(&pair, group);
        }
    }

    /// The attributes of a directory's entries; `None` for those that
    /// failed (each reported).
    ///
    /// Regular files are not `statx`ed here: the worker that copies one
    /// opens it anyway and reads its attributes from the descriptor
    /// (`Entry::unstated`), which saves a path lookup per file and, on
    /// ext4, a trip through io_uring's worker threads (where `statx`
    /// always goes). Everything else is `statx`ed in batches.
    fn stat_all(&self, pair: &DirPair, names: &[(&CStr, bool)]) -> Vec<Option<libc::statx>> {
        let mut stats: Vec<Option<libc::statx>> = names
            .iter()
            .map(|(_, regular)| regular.then(Entry::unstated))
            .collect();
        let unknown: Vec<usize> = (0..names.len()).filter(|&i| !names[i].1).collect();
        for chunk in unknown.chunks(256) {
            let at: Vec<PathAt<'_>> = chunk
                .iter()
                .map(|&i| PathAt::in_dir(&pair.src, names[i].0))
                .collect();
            // `-L`: a link is what it leads to.
            let flags = if self.ctx.opts.dereference == Dereference::Always {
                0
            } else {
                libc::AT_SYMLINK_NOFOLLOW
            };
            let got = match self.ctx.engine.stat_batch(&at, flags) {
                Ok(s) => s,
                Err(e) => {
                    self.report(format!("cannot stat in {}", quote(&pair.src_path)), Some(e));
                    continue;
                }
            };
            for (&i, st) in chunk.iter().zip(got) {
                match st {
                    Ok(st) => stats[i] = Some(st),
                    Err(e) => self.report(
                        format!("cannot stat {}", quote(&pair.src_of(names[i].0))),
                        Some(e),
                    ),
                }
            }
        }
        stats
    }

    /// Copies the entries of one directory pair, by kind. Regular files go
    /// out in groups of `group` files; a group's worker splits off what
    /// exceeds a wave of bytes once the sizes are known (`files::copy_group`).
    fn entries(&self, pair: &Arc<DirPair>, entries: Vec<Entry>) {
        let mut group = Vec::new();
        self.dispatch(pair, entries, &mut group);
        if !group.is_empty() {
            self.send(pair, group);
        }
    }

    /// [`Walker::entries`] for a part of a directory: the regular files
    /// are added to `group`, sent each time it is full; the caller sends
    /// what is left in it after the last part.
    fn dispatch(&self, pair: &Arc<DirPair>, entries: Vec<Entry>, group: &mut Vec<Entry>) {
        let mut dirs = Vec::new();
        let mut links = Vec::new();
        for e in entries {
            if self.ctx.opts.link != super::LinkMode::Copy && e.kind() != libc::S_IFDIR {
                self.link_entry(pair, &e);
                continue;
            }
            match e.kind() {
                libc::S_IFDIR => dirs.push(e),
                libc::S_IFLNK => links.push(e),
                libc::S_IFREG | libc::S_IFIFO | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFSOCK
                    if e.kind() == libc::S_IFREG || self.as_regular() =>
                {
                    if group.len() >= self.ctx.opts.group.max(1) {
                        self.send(pair, std::mem::take(group));
                    }
                    group.push(e);
                }
                _ => self.special(pair, &e),
            }
        }
        self.make_dirs(pair, dirs);
        self.make_links(pair, links);
    }

    /// `-l`, `-s`: a hard or symbolic link to the source instead of a
    /// copy. An existing destination is an error unless `-f`,
    /// `--remove-destination` or `-b` lets it be replaced (`-n`: kept).
    fn link_entry(&self, pair: &DirPair, e: &Entry) {
        let opts = self.ctx.opts;

        let src = pair.src_of(&e.src_name);
        let dst = pair.dst_of(&e.dst_name);
        let hard = opts.link == super::LinkMode::Hard;
        let target = cname(src.as_os_str());
        // A relative link made elsewhere would not lead to its source:
        // refused, as GNU does, once what is in the way has been judged
        // (`-n` and `-u` keep it without a word).
        let relative = !hard && !src.is_absolute() && !in_cwd(pair);
        let refuse_relative = || {
            self.report(
                format!(
                    "{}: can make relative symbolic links only in current directory",
                    crate::quote::quote_if_needed(&dst)
                ),
                None,
            )
        };
        let make = || {
            if relative {
                // Only whether something is in the way: `EEXIST` if so.
                return match rustix::fs::statat(
                    &pair.dst,
                    e.dst_name.as_c_str(),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                ) {
                    Ok(_) => Err(rustix::io::Errno::EXIST),
                    Err(_) => Err(rustix::io::Errno::NOENT),
                };
            }
            if hard {
                let flags = if e.follow_src {
                    rustix::fs::AtFlags::SYMLINK_FOLLOW
                } else {
                    rustix::fs::AtFlags::empty()
                };
                rustix::fs::linkat(&pair.src, &e.src_name, &pair.dst, &e.dst_name, flags)
            } else {
                rustix::fs::symlinkat(&target, &pair.dst, &e.dst_name)
            }
        };
        let mut r = make();
        if relative && r != Err(rustix::io::Errno::EXIST) {
            return refuse_relative();
        }
        // Something is in the way: `-u` and the same-file rule need the
        // source's attributes, which a file known from its directory entry
        // alone does not carry yet.
        let mut stated;
        let e = if !e.stated() && r == Err(rustix::io::Errno::EXIST) {
            let flags = if e.follow_src {
                0
            } else {
                libc::AT_SYMLINK_NOFOLLOW
            };
            match self
                .ctx
                .engine
                .stat_batch(&[PathAt::in_dir(&pair.src, &e.src_name)], flags)
            {
                Ok(mut v) => match v.remove(0) {
                    Ok(st) => {
                        stated = e.clone();
                        stated.st = st;
                        &stated
                    }
                    Err(err) => {
                        let src = pair.src_of(&e.src_name);
                        return self.report(format!("cannot stat {}", quote(&src)), Some(err));
                    }
                },
                Err(err) => {
                    let src = pair.src_of(&e.src_name);
                    return self.report(format!("cannot stat {}", quote(&src)), Some(err));
                }
            }
        } else {
            e
        };
        let mut backup = None;
        if r == Err(rustix::io::Errno::EXIST) && hard {
            // Already a hard link of the source: nothing to do, as GNU.
            let follow = |yes: bool| {
                if yes {
                    rustix::fs::AtFlags::empty()
                } else {
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW
                }
            };
            let id = |dir: &File, name: &CStr, f| {
                rustix::fs::statat(dir, name, follow(f))
                    .ok()
                    .map(|st| (st.st_dev, st.st_ino))
            };
            let src_id = id(&pair.src, &e.src_name, e.follow_src);
            if src_id.is_some() && src_id == id(&pair.dst, &e.dst_name, false) {
                return;
            }
        }
        if r == Err(rustix::io::Errno::EXIST) {
            // GNU's order: -n, -u, then a directory in the way.
            let there = rustix::fs::statat(
                &pair.dst,
                e.dst_name.as_c_str(),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            );
            let kept = there.as_ref().is_ok_and(|st| {
                let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
                super::keep_existing(opts, super::mtime(&e.st), mtime, &dst)
            });
            if opts.no_clobber || kept {
                self.ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let kind = there.map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode));
            if kind == Ok(rustix::fs::FileType::Directory) {
                return self.report(
                    format!(
                        "cannot overwrite directory {} with non-directory",
                        quote(&dst)
                    ),
                    None,
                );
            }
            // As GNU 9.1: with -s, a hard link of the source in the way is
            // the same file; a link in the way fails to be made ("File
            // exists"), or with -f is made anew, even one that leads to
            // the source.
            let dst_is_link = kind == Ok(rustix::fs::FileType::Symlink);
            if !hard && !dst_is_link && self.leads_to_source(pair, e) {
                return self.report(
                    format!("{} and {} are the same file", quote(&src), quote(&dst)),
                    None,
                );
            }
            // As GNU 9.1: links not followed, what is in the way of a
            // symbolic link to anything but a regular file is removed
            // first (as with `--remove-destination`), unless it is that
            // very file (a hard link of a source link): then it stays.
            let unlink_first = !hard
                && e.kind() != libc::S_IFREG
                && e.never_follows(opts.dereference)
                && opts.backup == super::Backup::None;
            if unlink_first {
                let id = |dir: &File, name: &CStr| {
                    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                        .ok()
                        .map(|st| (st.st_dev, st.st_ino))
                };
                let there = id(&pair.dst, &e.dst_name);
                if there.is_some() && there == id(&pair.src, &e.src_name) {
                    return;
                }
            }
            if relative {
                // GNU removes what is in the way first with
                // `--remove-destination` (a backup it would make is put
                // back), then refuses.
                if (opts.remove_destination || unlink_first) && opts.backup == super::Backup::None {
                    let _ = rustix::fs::unlinkat(
                        &pair.dst,
                        e.dst_name.as_c_str(),
                        rustix::fs::AtFlags::empty(),
                    );
                }
                return refuse_relative();
            }
            // `-il`: a "yes" replaces the file with the link, as GNU's.
            let asked = hard && opts.ask.is_some();
            if opts.force
                || opts.remove_destination
                || opts.backup != super::Backup::None
                || asked
                || unlink_first
            {
                // `-u` and `-i` were asked above: not again.
                match self.replace(pair, e, true, true) {
                    Replace::Removed(b) => {
                        backup = b;
                        r = make();
                    }
                    Replace::Skip | Replace::Failed => return,
                }
            }
        }
        match r {
            Ok(()) => {
                super::say_copied(opts, &src, &dst, backup.as_deref());
                self.ctx.progress.files.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => {
                // GNU says what it is about to do before it fails.
                super::say_copied(opts, &src, &dst, backup.as_deref());
                let kind = if hard { "hard" } else { "symbolic" };
                self.report(
                    format!(
                        "cannot create {kind} link {} to {}",
                        quote(&dst),
                        quote(&src)
                    ),
                    Some(err.into()),
                )
            }
        }
    }

    fn send(&self, pair: &Arc<DirPair>, files: Vec<Entry>) {
        self.work.push(Task::Files(Group {
            dirs: Arc::clone(pair),
            files,
        }));
    }

    /// The mode a directory is made with: writable by us while the copy
    /// fills it; with `-p` by us alone (its own mode, which may let others
    /// in, is set at the end, after its ACL). When the owner is kept, the
    /// group and others get no access until then, as with GNU's: until
    /// the chown the directory belongs to the copier and its group, whom
    /// the source's mode was never meant for.
    fn dir_create_mode(&self, st: &libc::statx) -> u32 {
        let mode = if self.ctx.opts.default_mode {
            0o777
        } else if self.ctx.opts.preserve.mode {
            0o700
        } else {
            (u32::from(st.stx_mode) & 0o7777) | 0o700
        };
        if self.ctx.opts.preserve.ownership {
            mode & !0o077
        } else {
            mode
        }
    }

    /// A directory was made (`fresh`) or is merged into: its final mode
    /// and times are noted for the end, and (`walk`) it is queued to be listed.
    /// The mode a copy of a directory whose `statx` is `st` ends with.
    fn dir_mode(&self, st: &libc::statx) -> u32 {
        let mode = u32::from(st.stx_mode);
        if self.ctx.opts.default_mode {
            (0o777 | (mode & 0o1000)) & !self.ctx.umask
        } else if self.ctx.opts.preserve.mode {
            mode & 0o7777
        } else {
            // As GNU's: a directory keeps its sticky bit, not its
            // set-user-ID and set-group-ID bits.
            mode & 0o1777 & !self.ctx.umask
        }
    }

    fn dir_made(&self, task: Pending, st: &libc::statx, fresh: bool, walk: bool) {
        self.ctx.progress.dirs.fetch_add(1, Ordering::Relaxed);
        if walk {
            // Noted when it is listed (`fix_dir`): a directory found empty
            // then is finished at once, and the queue holds no `statx`.
            let fix = self.needs_fixup(st, fresh).then_some(fresh);
            return self.work.push(Task::Dir(Queued { dir: task, fix }));
        }
        if let Some(f) = self.fixup(task.resolve(), st, fresh) {
            self.fixups.lock().expect("lock").push(f);
        }
    }

    /// Whether a directory whose source's `statx` is `st` needs its mode
    /// or times set after its contents. Not when mkdir made it right, the
    /// usual case (opening every directory again for nothing made a
    /// serial tail after the copy). Merging into an existing directory:
    /// with -p its attributes become the source's, as with cp.
    fn needs_fixup(&self, st: &libc::statx, fresh: bool) -> bool {
        let made = self.dir_create_mode(st) & !self.ctx.umask;
        self.ctx.opts.preserve.attrs() || (fresh && self.dir_mode(st) != made)
    }

    /// The final attributes of the directory `t`, if any are to be set.
    fn fixup(&self, t: DirTask, st: &libc::statx, fresh: bool) -> Option<Fixup> {
        self.needs_fixup(st, fresh).then(|| Fixup {
            at: t.at,
            path: t.dst,
            st: *st,
            chmod: (fresh || self.ctx.opts.preserve.mode).then(|| self.dir_mode(st)),
            fresh,
        })
    }

    /// A walked directory's final attributes (`fix`: see [`Queued`]), from
    /// its source's `st` taken before it was listed (`None`: not open, then
    /// by path): set at once on `now` when it is empty (nothing will be
    /// made in it), else noted for the end.
    fn fix_dir(
        &self,
        t: &DirTask,
        fix: Option<bool>,
        st: Option<io::Result<libc::statx>>,
        now: Option<&File>,
    ) {
        let Some(fresh) = fix else { return };
        let follow = self.ctx.opts.dereference == Dereference::Always
            || matches!(t.at, DirAt::Operand { .. });
        let st = match st {
            Some(st) => st,
            None => self.stat_one(PathAt::cwd(&cname(t.src.as_os_str())), follow),
        };
        let st = match st {
            Ok(st) => st,
            Err(e) => return self.report(format!("cannot stat {}", quote(&t.src)), Some(e)),
        };
        let task = DirTask {
            src: t.src.clone(),
            dst: t.dst.clone(),
            at: t.at.clone(),
            chain: None,
            top: Arc::clone(&t.top),
        };
        let Some(f) = self.fixup(task, &st, fresh) else {
            return;
        };
        match now {
            Some(dir) => self.apply_fixup(dir, &f),
            None => self.fixups.lock().expect("lock").push(f),
        }
    }

    fn make_dirs(&self, pair: &Arc<DirPair>, mut dirs: Vec<Entry>) {
        if let Some(chain) = &pair.chain {
            dirs.retain(|e| {
                let cyclic = chain.contains(e.id());
                if cyclic {
                    let src = pair.src_of(&e.src_name);
                    self.report(
                        format!("cannot copy cyclic symbolic link {}", quote(&src)),
                        None,
                    );
                }
                !cyclic
            });
        }
        self.not_into_itself(pair, &mut dirs);
        if dirs.is_empty() {
            return;
        }
        // `-x`: a directory on another file system (a mount point) is made
        // but not walked.
        let this_fs = if self.ctx.opts.one_file_system {
            pair.src.metadata().ok().map(|m| m.dev())
        } else {
            None
        };
        let (root, rel) = pair.below.as_ref().expect("a listed directory has a root");
        let reqs: Vec<(PathAt<'_>, u32)> = dirs
            .iter()
            .map(|e| {
                (
                    PathAt::in_dir(&pair.dst, &e.dst_name),
                    self.dir_create_mode(&e.st),
                )
            })
            .collect();
        let mut turn = self.ctx.creators.enter();
        let made = self.ctx.engine.mkdir_batch(&reqs);
        turn.created(reqs.len() as u64);
        drop(turn);
        let made = match made {
            Ok(m) => m,
            Err(e) => {
                return self.report(
                    format!("cannot create directories in {}", quote(&pair.dst_path)),
                    Some(e),
                )
            }
        };
        let mut parent = None;
        for (e, r) in dirs.iter().zip(made) {
            let (src, dst) = (pair.src_of(&e.src_name), pair.dst_of(&e.dst_name));
            let fresh = match r {
                Ok(()) => true,
                // Never merged into through a link: it is not a directory.
                Err(err) if blockio::errno(&err) == Some(libc::EEXIST) => {
                    if !at::is_dir(&pair.dst, &e.dst_name) {
                        // A link to the source directory itself: GNU's
                        // same-file message.
                        let opts = self.ctx.opts;
                        let to_source = e.never_follows(opts.dereference)
                            && !opts.remove_destination
                            && !opts.no_clobber
                            && opts.backup == super::Backup::None
                            && rustix::fs::statat(
                                &pair.dst,
                                e.dst_name.as_c_str(),
                                rustix::fs::AtFlags::empty(),
                            )
                            .is_ok_and(|st| (st.st_dev, st.st_ino) == e.id());
                        let what = if to_source {
                            format!("{} and {} are the same file", quote(&src), quote(&dst))
                        } else {
                            format!(
                                "cannot overwrite non-directory {} with directory {}",
                                quote(&dst),
                                quote(&src)
                            )
                        };
                        self.report(what, None);
                        continue;
                    }
                    false
                }
                Err(err) => {
                    self.report(
                        format!("cannot create directory {}", quote(&dst)),
                        Some(err),
                    );
                    continue;
                }
            };
            if fresh {
                super::say_copied(self.ctx.opts, &src, &dst, None);
            }
            let parent = parent.get_or_insert_with(|| {
                Arc::new(Parent {
                    src: pair.src_path.clone(),
                    dst: pair.dst_path.clone(),
                    root: Arc::clone(root),
                    rel: rel.clone(),
                    chain: pair.chain.clone(),
                    top: Arc::clone(&pair.top),
                })
            });
            let task = if e.src_name == e.dst_name {
                Pending::Below {
                    parent: Arc::clone(parent),
                    name: e.dst_name.clone(),
                }
            } else {
                Pending::Full(Box::new(DirTask {
                    src,
                    dst,
                    at: DirAt::Beneath {
                        root: Arc::clone(root),
                        rel: rel.join(OsStr::from_bytes(e.dst_name.to_bytes())),
                    },
                    chain: pair.chain.clone(),
                    top: Arc::clone(&pair.top),
                }))
            };
            let walk = this_fs.map_or(true, |dev| dev == e.id().0);
            self.dir_made(task, &e.st, fresh, walk);
        }
    }

    /// Drops (reporting each, as GNU does) the source directories that
    /// are the copy's own directories, or (without `-L`) were copied
    /// already. Compared by (device, inode), not by path: a bind mount of
    /// the source below the destination has another path.
    fn not_into_itself(&self, pair: &DirPair, dirs: &mut Vec<Entry>) {
        let follow = self.ctx.opts.dereference == Dereference::Always;
        let dest_dirs = self.dest_dirs.lock().expect("lock");
        let mut src_dirs = self.src_dirs.lock().expect("lock");
        dirs.retain(|e| {
            if dest_dirs.contains(&e.id()) {
                self.report(
                    format!(
                        "cannot copy a directory, {}, into itself, {}",
                        quote(&pair.top.0),
                        quote(&pair.top.1)
                    ),
                    None,
                );
                return false;
            }
            if follow {
                // Met again through another link: copied again, as GNU
                // does (the chain stops cycles).
                return true;
            }
            if !self.watch {
                // Met once only (see `watch`): an operand's id is there.
                return !src_dirs.contains_key(&e.id()) || {
                    self.report(
                        format!(
                            "will not create hard link {} to directory {}",
                            quote(&pair.dst_of(&e.dst_name)),
                            quote(&src_dirs[&e.id()])
                        ),
                        None,
                    );
                    false
                };
            }
            match src_dirs.entry(e.id()) {
                std::collections::hash_map::Entry::Occupied(earlier) => {
                    self.report(
                        format!(
                            "will not create hard link {} to directory {}",
                            quote(&pair.dst_of(&e.dst_name)),
                            quote(earlier.get())
                        ),
                        None,
                    );
                    false
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(pair.dst_of(&e.dst_name));
                    true
                }
            }
        });
    }

    fn make_links(&self, pair: &Arc<DirPair>, links: Vec<Entry>) {
        let mut targets = Vec::with_capacity(links.len());
        let mut ok = Vec::with_capacity(links.len());
        for e in links {
            match at::read_link(&pair.src, &e.src_name) {
                Ok(t) => {
                    targets.push(t);
                    ok.push(e);
                }
                Err(err) => self.report(
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
        let mut turn = self.ctx.creators.enter();
        let made = self.ctx.engine.symlink_batch(&reqs);
        turn.created(reqs.len() as u64);
        drop(turn);
        let made = match made {
            Ok(m) => m,
            Err(e) => {
                return self.report(
                    format!("cannot create symbolic links in {}", quote(&pair.dst_path)),
                    Some(e),
                )
            }
        };
        for ((e, t), r) in ok.iter().zip(&targets).zip(made) {
            self.finish_made(pair, e, Made::Link, r, || {
                at::symlink(t, &pair.dst, &e.dst_name)
            });
        }
    }

    /// FIFOs, sockets and device nodes are made anew, as `cp -r` does;
    /// with `-p` accessible to us alone until their owner and mode are set.
    fn special(&self, pair: &Arc<DirPair>, e: &Entry) {
        let rdev = libc::makedev(e.st.stx_rdev_major, e.st.stx_rdev_minor);
        let perms = if self.ctx.opts.default_mode {
            // As GNU's: the default bits, and the source's special ones.
            0o666 | (e.mode() & 0o7000)
        } else if self.ctx.opts.preserve.mode {
            e.mode() & 0o600
        } else {
            e.mode() & 0o7777
        };
        let make = || at::mknod(&pair.dst, &e.dst_name, e.kind() | perms, rdev);
        self.finish_made(pair, e, Made::Special, make(), make);
    }

    /// Finishes making the link or special file `e` whose first try gave
    /// `made`: where its name is taken, replaces what is there (see
    /// [`Walker::replace`]) and makes it `again`; then says so (`-v`),
    /// counts it and sets the attributes kept for its kind, or reports why
    /// it could not be made.
    fn finish_made(
        &self,
        pair: &DirPair,
        e: &Entry,
        kind: Made,
        mut made: io::Result<()>,
        again: impl FnOnce() -> io::Result<()>,
    ) {
        let dst = pair.dst_of(&e.dst_name);
        let mut backup = None;
        if made.as_ref().err().and_then(blockio::errno) == Some(libc::EEXIST) {
            match self.replace(pair, e, false, false) {
                Replace::Removed(b) => {
                    backup = b;
                    made = again();
                }
                Replace::Skip | Replace::Failed => return,
            }
        }
        super::say_copied(
            self.ctx.opts,
            &pair.src_of(&e.src_name),
            &dst,
            backup.as_deref(),
        );
        if let Err(err) = made {
            let what = match kind {
                Made::Link => "symbolic link",
                Made::Special if e.kind() == libc::S_IFIFO => "fifo",
                Made::Special => "special file",
            };
            return self.report(format!("cannot create {what} {}", quote(&dst)), Some(err));
        }
        let keep = &self.ctx.opts.preserve;
        let set = match kind {
            Made::Link => {
                self.ctx.counts.symlinks.fetch_add(1, Ordering::Relaxed);
                if let Some(made) = &self.ctx.made_links {
                    made.lock().expect("made links lock").insert(dst.clone());
                }
                (keep.ownership || keep.timestamps)
                    .then(|| set_attrs_at(&pair.dst, &e.dst_name, &e.st, None, None, keep))
            }
            Made::Special => {
                self.ctx.counts.specials.fetch_add(1, Ordering::Relaxed);
                keep.attrs().then(|| {
                    let from = Node::at(pair.src.as_fd(), &e.src_name);
                    let xattrs = Some((from, pair.dst_default_acl));
                    set_attrs_at(&pair.dst, &e.dst_name, &e.st, Some(e.mode()), xattrs, keep)
                })
            }
        };
        if let Some(Err(err)) = set {
            self.report(format!("preserving times for {}", quote(&dst)), Some(err));
        }
    }

    /// An existing destination in the way of a link or special file: kept
    /// with `-n`, an error if it is a directory, else removed.
    ///
    /// As GNU: a link or special file copied as such replaces what is in
    /// its way only when links are not followed (`-P`, `-r`, `-a`), or
    /// with `--remove-destination`, `-b`, or (`-a`) a file of several
    /// names; a link also with `-f`. Otherwise making it fails ("File
    /// exists"). `forced`: the caller (`-l`, `-s`) checked that already;
    /// `judged`: and asked `-u` and `-i` already.
    fn replace(&self, pair: &DirPair, e: &Entry, forced: bool, judged: bool) -> Replace {
        let opts = self.ctx.opts;
        let name = e.dst_name.as_c_str();
        let dst = pair.dst_of(name);
        if !forced && !opts.no_clobber && self.leads_to_source(pair, e) {
            self.report(
                format!(
                    "{} and {} are the same file",
                    quote(&pair.src_of(&e.src_name)),
                    quote(&dst)
                ),
                None,
            );
            return Replace::Failed;
        }
        let skip = opts.no_clobber
            || !judged
                && rustix::fs::statat(&pair.dst, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| {
                        let mtime = (st.st_mtime, st.st_mtime_nsec as u32);
                        super::keep_existing(opts, super::mtime(&e.st), mtime, &dst)
                    });
        if skip {
            self.ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Replace::Skip;
        }
        if at::is_dir(&pair.dst, name) {
            self.report(
                format!(
                    "cannot overwrite directory {} with non-directory",
                    quote(&dst)
                ),
                None,
            );
            return Replace::Failed;
        }
        let several_names = || {
            rustix::fs::statat(&pair.dst, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_nlink > 1)
        };
        // `--attributes-only` copies no data, so, as GNU's, it replaces
        // only what it is told to (`--remove-destination`, `-b`, `-f` for
        // a link).
        let data = !opts.attributes_only;
        let may_replace = forced
            || (data && e.never_follows(opts.dereference))
            || opts.remove_destination
            || opts.backup != super::Backup::None
            || (e.kind() == libc::S_IFLNK && opts.force)
            || (data && opts.preserve.links && several_names());
        if !may_replace {
            super::say_copied(opts, &pair.src_of(&e.src_name), &dst, None);
            let what = match e.kind() {
                libc::S_IFLNK => "symbolic link",
                libc::S_IFIFO => "fifo",
                _ => "special file",
            };
            self.report(
                format!("cannot create {what} {}", quote(&dst)),
                Some(io::Error::from_raw_os_error(libc::EEXIST)),
            );
            return Replace::Failed;
        }
        if opts.backup != super::Backup::None {
            // `cp -bl a~ a`: the backup of `a` would take the source's
            // name, and the link (or `-s` link) would then be made to the
            // old `a`, the source's data gone.
            if super::backup_is_source(opts, &e.src_name, e.id(), &pair.dst, name) {
                self.report(
                    format!(
                        "backing up {} might destroy source;  {} not copied",
                        quote(&dst),
                        quote(&pair.src_of(&e.src_name))
                    ),
                    None,
                );
                return Replace::Failed;
            }
            return match super::make_backup(opts, &pair.dst, &pair.dst_path, name) {
                Ok(b) => Replace::Removed(b),
                Err(e) => {
                    let what = format!("cannot backup {}", quote(&dst));
                    self.report(what, Some(e));
                    Replace::Failed
                }
            };
        }
        if let Err(e) = at::unlink(&pair.dst, name) {
            self.report(format!("cannot remove {}", quote(&dst)), Some(e));
            return Replace::Failed;
        }
        super::say(opts, format_args!("removed {}", quote(&dst)));
        Replace::Removed(None)
    }

    /// GNU's same-file rule for a link or special file whose copy would
    /// replace `e`'s destination: refused when the destination leads to
    /// the source (a link to it, or, for a link, the file the link names);
    /// two links are fine. Not asked when the destination goes first
    /// (`--remove-destination`, `-b`).
    fn leads_to_source(&self, pair: &DirPair, e: &Entry) -> bool {
        let opts = self.ctx.opts;
        // Following links (`-L`, `-H`), GNU compares the names themselves
        // here, which differ.
        if opts.remove_destination
            || opts.backup != super::Backup::None
            || !e.never_follows(opts.dereference)
        {
            return false;
        }
        let at = |dir: &File, name: &CStr, follow: bool| {
            let flags = if follow {
                rustix::fs::AtFlags::empty()
            } else {
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW
            };
            rustix::fs::statat(dir, name, flags).ok().map(|st| {
                let link = rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Symlink;
                ((st.st_dev, st.st_ino), link)
            })
        };
        let Some((_, dst_is_link)) = at(&pair.dst, &e.dst_name, false) else {
            return false;
        };
        if e.kind() == libc::S_IFLNK && dst_is_link {
            return false;
        }
        let src = if e.kind() == libc::S_IFLNK {
            at(&pair.src, &e.src_name, true).map(|(id, _)| id)
        } else {
            Some(e.id())
        };
        let dst = at(&pair.dst, &e.dst_name, true).map(|(id, _)| id);
        src.is_some() && src == dst
    }

    /// Sets a directory's final mode and times (`f`), on `dir` open.
    fn apply_fixup(&self, dir: &File, f: &Fixup) {
        // A directory made in a set-group-ID directory inherits that
        // bit (its files then take the group): kept, as GNU keeps it,
        // whatever the source's mode.
        let chmod = match f.chmod {
            Some(m)
                if f.fresh
                    && m & 0o2000 == 0
                    && dir.metadata().is_ok_and(|d| d.mode() & 0o2000 != 0) =>
            {
                Some(m | 0o2000)
            }
            c => c,
        };
        let keep = &self.ctx.opts.preserve;
        let r = if keep.attrs() {
            let keep = Preserve {
                mode: chmod.is_some(),
                ..*keep
            };
            set_attrs_at(dir, c"", &f.st, chmod, None, &keep)
        } else if let Some(mode) = chmod {
            at::chmod(dir, mode)
        } else {
            Ok(())
        };
        if let Err(e) = r {
            self.report(
                format!("cannot set attributes of {}", quote(&f.path)),
                Some(e),
            );
        }
    }

    /// Final modes and times of the directories made (deepest first, after
    /// all their contents), then with `--fsync` a `syncfs` of every
    /// destination file system.
    fn finish_dirs(&self) {
        let fixups = std::mem::take(&mut *self.fixups.lock().expect("lock"));
        for f in fixups.iter().rev() {
            let opened = match &f.at {
                DirAt::Operand {
                    dst, follow_dst, ..
                } => open_operand_dst(dst, *follow_dst),
                DirAt::Beneath { root, rel } => at::open_dir_beneath(&root.dst, rel),
            };
            match opened {
                Ok(dir) => self.apply_fixup(&dir, f),
                Err(e) => self.report(format!("cannot access {}", quote(&f.path)), Some(e)),
            }
        }
        if !self.ctx.opts.fsync {
            return;
        }
        // One syncfs per destination file system makes durable what no
        // fsync of its own did: the small files (see
        // `files::FSYNC_EACH_MIN`), the directories, links and attributes.
        let filesystems = std::mem::take(&mut *self.filesystems.lock().expect("lock"));
        for (_, path, dir) in filesystems {
            if let Err(e) = rustix::fs::syncfs(&dir) {
                self.report(
                    format!(
                        "cannot make the copy durable: syncfs on the file system of {} failed, so files written there may be incomplete",
                        quote(&path)
                    ),
                    Some(e.into()),
                );
            }
        }
    }
}

/// What [`Walker::finish_made`] made: a symbolic link, or a FIFO, socket
/// or device node.
#[derive(Clone, Copy)]
enum Made {
    Link,
    Special,
}

enum Replace {
    Skip,
    /// Removed, or kept aside under the backup name given (`-b`).
    Removed(Option<PathBuf>),
    Failed,
}

/// Whether the destination directory of `pair` is the current one (`-s`
/// makes relative links only there, where they lead to their source).
fn in_cwd(pair: &DirPair) -> bool {
    match (pair.dst.metadata(), std::fs::metadata(".")) {
        (Ok(a), Ok(b)) => id_of(&a) == id_of(&b),
        _ => false,
    }
}

/// A (device, inode) pair of a `stat`.
fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// What [`same_file_ok`] says of an operand and its destination.
#[derive(Debug, PartialEq, Eq)]
enum Same {
    /// Copy it.
    Go,
    /// Nothing to do (`-l` onto a hard link of the source): done.
    Done,
    /// The destination is the source: refused.
    Refuse,
}

/// Whether a non-directory operand `src` (`st`: its `statx`, following a
/// link when `followed`) may be copied to `dst`, by GNU `cp`'s rule
/// (`same_file_ok` in its copy.c): never onto the file itself, reached
/// through a link on either side or by another hard link, since opening
/// it to write would empty the source. Two distinct links are fine when
/// the destination link is replaced rather than written through. A
/// destination that does not exist is fine.
fn same_file_ok(
    src: &Path,
    st: &libc::statx,
    followed: bool,
    dst: &Path,
    opts: &CopyOptions,
    as_regular: bool,
) -> Same {
    let hard_link = opts.link == super::LinkMode::Hard;
    let symbolic_link = opts.link == super::LinkMode::Symbolic;
    let backup = opts.backup != super::Backup::None;
    let go = |ok: bool| if ok { Same::Go } else { Same::Refuse };
    let src_kind = u32::from(st.stx_mode) & libc::S_IFMT;
    let src_id = statx_id(st);
    let src_is_link = src_kind == libc::S_IFLNK;
    // A regular file is written through a link at the destination, so the
    // file it leads to is what counts; anything else, or a destination
    // removed first, replaces the link.
    let written_into =
        src_kind == libc::S_IFREG || (as_regular && src_kind != libc::S_IFDIR && !src_is_link);
    let lstat_dst =
        !written_into || opts.remove_destination || hard_link || symbolic_link || backup;
    let dst_st = if lstat_dst {
        std::fs::symlink_metadata(dst)
    } else {
        std::fs::metadata(dst)
    };
    let Ok(dst_st) = dst_st else {
        return Same::Go;
    };
    let same = src_id == id_of(&dst_st);
    if same && hard_link {
        return Same::Done;
    }
    // The two sides as names (links not followed).
    let (src_link_id, src_link_is_link, dst_link_id, dst_link) = if !followed {
        if src_is_link && dst_st.file_type().is_symlink() {
            // Two links: fine unless they are one name.
            let sn = same_name(src, dst);
            if !sn && backup {
                return Same::Go;
            }
            if !sn && same {
                return Same::Done;
            }
            return go(!sn);
        }
        (src_id, src_is_link, id_of(&dst_st), dst_st.clone())
    } else {
        if !same {
            return Same::Go;
        }
        let (Ok(d), Ok(s)) = (
            std::fs::symlink_metadata(dst),
            std::fs::symlink_metadata(src),
        ) else {
            return Same::Go;
        };
        if s.file_type().is_symlink() && d.file_type().is_symlink() && opts.remove_destination {
            return Same::Go;
        }
        (id_of(&s), s.file_type().is_symlink(), id_of(&d), d)
    };
    let same_link = src_link_id == dst_link_id;
    let dst_link_is_link = dst_link.file_type().is_symlink();
    if backup {
        if !same_link {
            // Backing up a file a followed link leads to would leave the
            // link dangling.
            return go(!(followed && src_link_is_link && !dst_link_is_link));
        }
        return go(!same_name(src, dst));
    }
    if opts.remove_destination {
        if dst_link_is_link {
            return Same::Go;
        }
        // Another hard link of the source: removing it loses nothing.
        if same_link && dst_link.nlink() > 1 && !same_name(src, dst) {
            return Same::Go;
        }
    }
    if !src_link_is_link && !dst_link_is_link {
        if src_link_id != dst_link_id {
            return Same::Go;
        }
        if hard_link {
            return Same::Done;
        }
    }
    if symbolic_link && dst_link_is_link {
        return Same::Go;
    }
    if !followed {
        // What the two lead to.
        let target = |p: &Path, is_link: bool, id| {
            if is_link {
                std::fs::metadata(p).ok().map(|m| id_of(&m))
            } else {
                Some(id)
            }
        };
        match (
            target(src, src_link_is_link, src_link_id),
            target(dst, dst_link_is_link, dst_link_id),
        ) {
            (Some(a), Some(b)) if a == b => {
                if hard_link {
                    return if dst_link_is_link {
                        Same::Go
                    } else {
                        Same::Done
                    };
                }
            }
            _ => return Same::Go,
        }
    }
    Same::Refuse
}

/// Whether two paths name the same directory entry: the same name in the
/// same directory (`a` and `./a`).
fn same_name(a: &Path, b: &Path) -> bool {
    at::last_component(a) == at::last_component(b)
        && match (std::fs::metadata(parent(a)), std::fs::metadata(parent(b))) {
            (Ok(x), Ok(y)) => id_of(&x) == id_of(&y),
            _ => false,
        }
}

/// The copy of a directory operand: following a link at its last
/// component only when the user named it.
fn open_operand_dst(dst: &Path, follow: bool) -> io::Result<File> {
    if follow {
        at::open_operand_dir(dst)
    } else {
        at::open_made_dir(dst)
    }
}

/// Where a directory operand's copy would be, resolved: the target's
/// parent resolved, then its last name (the target may not exist yet).
fn canonical_target(target: &Path) -> io::Result<PathBuf> {
    if let Ok(t) = std::fs::canonicalize(target) {
        return Ok(t);
    }
    let name = at::last_component(target);
    Ok(std::fs::canonicalize(parent(target))?.join(name))
}
