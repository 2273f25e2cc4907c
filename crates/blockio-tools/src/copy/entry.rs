//! What the walker hands the workers: directory pairs, entries, groups of
//! files, and the state every thread of one copy shares.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use blockio::Engine;
use rustix::fs::FileType;

use super::at;
use super::creators::Creators;
use super::options::{CopyOptions, Dereference};
use super::outcome::{Errors, Progress};
use super::unfinished::MadeIn;

/// The source and destination directories of one operand's tree: every
/// directory below is opened from these by its relative path, with no
/// symbolic link on the way (`at::open_dir_beneath`).
pub(crate) struct Root {
    pub src: RootDir,
    pub dst: RootDir,
}

/// One side of a [`Root`].
pub(crate) enum RootDir {
    /// Held open for the whole copy.
    Open(Arc<File>),
    /// Under a low limit on descriptors, where two held for the whole copy
    /// are two fewer for the files: opened again by its path, as the
    /// operand was, each time a directory is opened beneath it, and closed
    /// at once. A directory found there that is not the one first opened
    /// (`id`, its device and inode) is refused: the copy is not steered
    /// into another tree.
    Reopened {
        path: PathBuf,
        follow: bool,
        id: (u64, u64),
    },
}

impl RootDir {
    /// `dir`, opened at `path` (following a link there if `follow`), to
    /// be reopened by that path (see [`RootDir::Reopened`]).
    pub fn reopened(dir: &File, path: &Path, follow: bool) -> io::Result<RootDir> {
        use std::os::unix::fs::MetadataExt;
        let m = dir.metadata()?;
        Ok(RootDir::Reopened {
            path: path.to_path_buf(),
            follow,
            id: (m.dev(), m.ino()),
        })
    }

    /// The directory, open.
    pub fn open(&self) -> io::Result<Arc<File>> {
        match self {
            RootDir::Open(dir) => Ok(Arc::clone(dir)),
            RootDir::Reopened { path, follow, id } => {
                use std::os::unix::fs::MetadataExt;
                let dir = if *follow {
                    super::at::open_operand_dir(path)?
                } else {
                    super::at::open_made_dir(path)?
                };
                let m = dir.metadata()?;
                if (m.dev(), m.ino()) != *id {
                    return Err(io::Error::other(
                        "replaced by another directory while it was copied",
                    ));
                }
                Ok(Arc::new(dir))
            }
        }
    }
}

/// Where a directory of the tree is, for opening it (again).
#[derive(Clone)]
pub(crate) enum DirAt {
    /// A directory named on the command line (or made for one): opened by
    /// its path, following links as `cp` does for arguments; the last
    /// component of `dst` only when the user named it (`follow_dst`), not
    /// when the copy computed it (`cp -r s t` makes `t/s`).
    Operand {
        src: PathBuf,
        dst: PathBuf,
        follow_dst: bool,
    },
    /// `rel` below both sides of `root`.
    Beneath { root: Arc<Root>, rel: PathBuf },
}

/// The source directories from an operand down to one directory, by
/// (device, inode): with `-L` a link to one of them would be copied for
/// ever.
pub(crate) struct Chain {
    pub id: (u64, u64),
    pub up: Option<Arc<Chain>>,
}

impl Chain {
    pub fn contains(&self, id: (u64, u64)) -> bool {
        let mut c = Some(self);
        while let Some(x) = c {
            if x.id == id {
                return true;
            }
            c = x.up.as_deref();
        }
        false
    }
}

/// One directory of a [`DirPair`].
pub(crate) enum PairDir {
    /// Open: names in it are opened relative to it.
    Held(Arc<File>),
    /// Not held: under the lowest limits on descriptors, where a
    /// directory's descriptor is one that a file being copied needs, names
    /// in it are opened by their whole path from the working directory, as
    /// GNU's `cp` opens them (see [`DirPair::by_path`]).
    ByPath,
}

impl PairDir {
    /// The open directory; `None` for one named by path, which holds no
    /// descriptor.
    pub fn held(&self) -> Option<&Arc<File>> {
        match self {
            PairDir::Held(dir) => Some(dir),
            PairDir::ByPath => None,
        }
    }

    /// The directory `path`, open: held, or opened by its path for the
    /// moment.
    fn open(&self, path: &Path) -> io::Result<Arc<File>> {
        match self.held() {
            Some(dir) => Ok(Arc::clone(dir)),
            None => Ok(Arc::new(super::at::open_operand_dir(path)?)),
        }
    }
}

/// A source directory and its copy, both open (or, for a group of files
/// under the lowest limits on descriptors, both named by path), with their
/// paths for messages. Shared by every group of files from that directory.
pub(crate) struct DirPair {
    /// The directories, shared with the [`Root`] that an operand's
    /// directory is for its subdirectories: one descriptor each, however
    /// they are held (under `ulimit -n` every one counts).
    pub src: PairDir,
    pub dst: PairDir,
    pub src_path: PathBuf,
    pub dst_path: PathBuf,
    /// Where this pair's subdirectories are opened from (`None` for the
    /// parents of the operands, whose subdirectories are operands).
    pub below: Option<(Arc<Root>, Arc<Path>)>,
    /// With `-p`: `dst` has a default ACL, so what is made in it may
    /// inherit ACLs that must be removed when the source has none.
    pub dst_default_acl: bool,
    /// With `-L`: this source directory and those above it.
    pub chain: Option<Arc<Chain>>,
    /// The operand this pair is below and its copy, for messages that
    /// name them (as GNU's "into itself").
    pub top: Arc<(PathBuf, PathBuf)>,
}

/// Where a name of a [`DirPair`] is opened from: its directory and the
/// name, or the working directory and the name's whole path.
pub(crate) type NameAt<'a> = (BorrowedFd<'a>, Cow<'a, CStr>);

/// The longest directory path a pair is named by ([`DirPair::by_path`]):
/// a name of up to 255 bytes after it stays within `PATH_MAX` (4096).
const BY_PATH_MAX: usize = 4096 - 256 - 1;

impl DirPair {
    /// `name` in the source directory, to open or look at (see
    /// [`PairDir`]).
    pub fn src_at<'a>(&'a self, name: &'a CStr) -> NameAt<'a> {
        match &self.src {
            PairDir::Held(dir) => (dir.as_fd(), Cow::Borrowed(name)),
            PairDir::ByPath => (rustix::fs::CWD, Cow::Owned(path_name(self.src_of(name)))),
        }
    }

    /// `name` in the destination directory, to open, make or look at (see
    /// [`PairDir`]).
    pub fn dst_at<'a>(&'a self, name: &'a CStr) -> NameAt<'a> {
        match &self.dst {
            PairDir::Held(dir) => (dir.as_fd(), Cow::Borrowed(name)),
            PairDir::ByPath => (rustix::fs::CWD, Cow::Owned(path_name(self.dst_of(name)))),
        }
    }

    /// The source directory, open: held, or opened by its path for the
    /// moment (a pair by path), for what needs the directory itself.
    pub fn src_dir(&self) -> io::Result<Arc<File>> {
        self.src.open(&self.src_path)
    }

    /// The destination directory, open: held, or opened by its path for
    /// the moment (a pair by path), for what needs the directory itself
    /// (reading its names for a numbered backup).
    pub fn dst_dir(&self) -> io::Result<Arc<File>> {
        self.dst.open(&self.dst_path)
    }

    /// Whether the pair names its files by path (see [`PairDir::ByPath`]).
    pub fn is_by_path(&self) -> bool {
        matches!(self.dst, PairDir::ByPath)
    }

    /// The same pair holding no descriptor, its files named by their whole
    /// paths, for copying a group of its files under the lowest limits on
    /// descriptors: with a source and its copy open, the two directories
    /// are two descriptors more than GNU's `cp`, which opens files by path,
    /// needs. The pair itself when a path is too long to name a file by
    /// (the directories are then held, as deep trees need).
    pub fn by_path(self: &Arc<Self>) -> Arc<DirPair> {
        let long = |p: &Path| p.as_os_str().len() > BY_PATH_MAX;
        if self.is_by_path() || long(&self.src_path) || long(&self.dst_path) {
            return Arc::clone(self);
        }
        Arc::new(DirPair {
            src: PairDir::ByPath,
            dst: PairDir::ByPath,
            src_path: self.src_path.clone(),
            dst_path: self.dst_path.clone(),
            below: self.below.clone(),
            dst_default_acl: self.dst_default_acl,
            chain: self.chain.clone(),
            top: Arc::clone(&self.top),
        })
    }

    /// The path of `name` in the source directory, for messages.
    pub fn src_of(&self, name: &CStr) -> PathBuf {
        self.as_written(&self.top.0, name)
            .unwrap_or_else(|| joined(&self.src_path, OsStr::from_bytes(name.to_bytes())))
    }

    /// The path of `name` in the destination directory, for messages.
    pub fn dst_of(&self, name: &CStr) -> PathBuf {
        self.as_written(&self.top.1, name)
            .unwrap_or_else(|| joined(&self.dst_path, OsStr::from_bytes(name.to_bytes())))
    }

    /// `operand` itself, as the user wrote it (`./././f`, `d//g`), when
    /// this is an operand's parent and `name` is that operand's last
    /// component: GNU's `cp` names a file operand, and a destination that
    /// is no directory, exactly as given.
    fn as_written(&self, operand: &Path, name: &CStr) -> Option<PathBuf> {
        let own = self.below.is_none() && at::last_component(operand).as_bytes() == name.to_bytes();
        own.then(|| operand.to_path_buf())
    }
}

/// A path as a C string, to open.
fn path_name(p: PathBuf) -> CString {
    // Names from the file system or from argv never hold a NUL byte.
    CString::new(p.into_os_string().into_vec()).expect("path names hold no NUL byte")
}

impl MadeIn for DirPair {
    fn made_at<'a>(&'a self, name: &'a CStr) -> NameAt<'a> {
        self.dst_at(name)
    }
}

/// `name` in the directory `dir`, as GNU's `cp` writes it in messages and
/// `-v` lines: `dir`'s trailing slashes dropped before the one that joins
/// them (`s//` and `f` are `s/f`, `/` and `f` are `/f`).
pub(crate) fn joined(dir: &Path, name: &OsStr) -> PathBuf {
    let d = dir.as_os_str().as_bytes();
    if d.is_empty() {
        return PathBuf::from(name);
    }
    // All slashes: the root, whose one slash is the joining one.
    let base = d
        .iter()
        .rposition(|&b| b != b'/')
        .map_or(&d[..0], |i| &d[..=i]);
    let mut out = base.to_vec();
    out.push(b'/');
    out.extend_from_slice(name.as_bytes());
    PathBuf::from(OsStr::from_bytes(&out))
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
    /// The destination was named on the command line: a symbolic link
    /// there is followed (to an existing file only), as GNU `cp` does.
    /// Everywhere else a link in the way is refused.
    pub follow_dst: bool,
    /// The source was named on the command line and is to be followed if
    /// it is a link (`-L`, `-H`, or no `-r`): it is opened following it.
    pub follow_src: bool,
    /// Named on the command line (`-H` follows links there only).
    pub operand: bool,
}

impl Entry {
    /// An entry found in a directory listing.
    pub fn listed(name: CString, st: libc::statx) -> Entry {
        Entry {
            src_name: name.clone(),
            dst_name: name,
            st,
            follow_dst: false,
            follow_src: false,
            operand: false,
        }
    }
    /// The `statx` of a regular file known from its directory entry only.
    pub fn unstated() -> libc::statx {
        // SAFETY: `statx` is plain old data (integers only); all zeroes is
        // a valid value (mask 0: nothing known but the type set below).
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
    /// Whether links are copied as links for this entry: `-P`, or `-H`
    /// below the command line (GNU's `copy_dir` turns `-H` into `-P`).
    pub fn never_follows(&self, deref: Dereference) -> bool {
        deref == Dereference::Never || (deref == Dereference::CommandLine && !self.operand)
    }
    pub fn kind(&self) -> FileType {
        FileType::from_raw_mode(self.mode())
    }
    /// The source's (device, inode).
    pub fn id(&self) -> (u64, u64) {
        statx_id(&self.st)
    }
}

/// The (device, inode) pair that names the file `st` describes, as
/// `stat`'s `(st_dev, st_ino)` does.
pub(crate) fn statx_id(st: &libc::statx) -> (u64, u64) {
    (
        rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
    )
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

/// The first copy of each source file with more than one link (`-a`): a
/// later name of the same file becomes a hard link to it, as with
/// `cp -a`.
pub(crate) type Links = Mutex<HashMap<(u64, u64), FirstCopy>>;

/// Where the first copy of a file of several names is, for its later
/// names to link to. Below an operand, by its directory's path there,
/// opened again beneath the root for each link: the table holds no
/// descriptor of its own, where holding the pair kept two open per
/// directory with such a file until the copy ended, and a tree of many
/// of them failed with "Too many open files" under a low limit. An
/// operand's parent (a pair with no root) is held as it is.
#[derive(Clone)]
pub(crate) enum FirstCopy {
    /// `name` in the directory `rel` below `root`'s copy.
    Beneath {
        root: Arc<Root>,
        rel: Arc<Path>,
        name: CString,
    },
    /// `name` in `pair`'s copy.
    In { pair: Arc<DirPair>, name: CString },
}

impl FirstCopy {
    /// The copy named `name` in `pair`'s destination. A pair by path is
    /// held as it is (it holds no descriptor), so that linking to the copy
    /// takes none either.
    pub(crate) fn of(pair: &Arc<DirPair>, name: &CStr) -> FirstCopy {
        match &pair.below {
            Some((root, rel)) if !pair.is_by_path() => FirstCopy::Beneath {
                root: Arc::clone(root),
                rel: Arc::clone(rel),
                name: name.to_owned(),
            },
            _ => FirstCopy::In {
                pair: Arc::clone(pair),
                name: name.to_owned(),
            },
        }
    }

    /// Makes `to_name` in `to_dir` a hard link to it.
    pub(crate) fn link_as(&self, to_dir: impl AsFd, to_name: &CStr) -> io::Result<()> {
        match self {
            FirstCopy::Beneath { root, rel, name } => {
                let dir = super::at::open_dir_beneath(&*root.dst.open()?, rel)?;
                super::at::link(&dir, name, to_dir, to_name)
            }
            FirstCopy::In { pair, name } => {
                let (dir, name) = pair.dst_at(name);
                super::at::link(dir, &name, to_dir, to_name)
            }
        }
    }
}

/// What every thread of one copy shares.
pub(crate) struct Ctx<'a> {
    pub engine: &'a Engine,
    pub opts: &'a CopyOptions,
    pub progress: &'a Progress,
    pub errors: &'a Errors<'a>,
    pub counts: Counts,
    pub links: Links,
    /// The symbolic links this copy made, by their paths as written: a
    /// file later copied onto one of them is refused in GNU's words
    /// ("through just-created symlink"). Only another operand can copy
    /// onto a link one operand made (one tree never names a path twice),
    /// so they are recorded only when there are several (`None` for one).
    pub made_links: Option<std::sync::Mutex<std::collections::HashSet<PathBuf>>>,
    /// How many threads create files and directories at once.
    pub creators: Creators,
    /// The process umask (applied by hand where the copy sets a mode
    /// itself).
    pub umask: u32,
}

/// A path as written, for messages: `x`, not `./x`.
pub(crate) fn parent_as_written(p: &Path) -> PathBuf {
    p.parent().unwrap_or(Path::new("")).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::{DirPair, PairDir, RootDir};
    use std::fs::{self, File};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    /// A pair of `src` and `dst` in `d`, held open.
    fn held_pair(d: &Path, src: &Path, dst: &Path) -> Arc<DirPair> {
        let open = |p: &Path| Arc::new(File::open(d.join(p)).unwrap());
        Arc::new(DirPair {
            src: PairDir::Held(open(src)),
            dst: PairDir::Held(open(dst)),
            src_path: d.join(src),
            dst_path: d.join(dst),
            below: None,
            dst_default_acl: false,
            chain: None,
            top: Arc::new((PathBuf::from("x"), PathBuf::from("y"))),
        })
    }

    /// A pair by path names a file by its whole path from the working
    /// directory, and the same file as the held pair does, and holds no
    /// descriptor; one whose path is too long to name a file by stays held.
    #[test]
    fn a_pair_by_path_names_the_files_the_held_pair_names() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fs::create_dir_all(d.join("s")).unwrap();
        fs::create_dir_all(d.join("t")).unwrap();
        fs::write(d.join("s/f"), b"src").unwrap();
        fs::write(d.join("t/f"), b"dst").unwrap();
        let held = held_pair(d, Path::new("s"), Path::new("t"));
        let by_path = held.by_path();
        assert!(by_path.is_by_path() && !held.is_by_path());
        let id = |pair: &DirPair, src: bool| {
            let (dir, name) = if src {
                pair.src_at(c"f")
            } else {
                pair.dst_at(c"f")
            };
            let st = rustix::fs::statat(dir, &*name, rustix::fs::AtFlags::empty()).unwrap();
            (st.st_dev, st.st_ino)
        };
        for src in [true, false] {
            assert_eq!(id(&held, src), id(&by_path, src));
        }
        let (dir, name) = by_path.dst_at(c"f");
        assert_eq!(dir.as_raw_fd(), rustix::fs::CWD.as_raw_fd());
        assert_eq!(
            name.to_bytes(),
            d.join("t/f").as_os_str().as_encoded_bytes()
        );
        // No descriptor held by path; each directory opened for the moment.
        assert!(by_path.src.held().is_none() && by_path.dst.held().is_none());
        assert!(held.src.held().is_some() && held.dst.held().is_some());
        for (dir, p) in [(by_path.src_dir(), "s"), (by_path.dst_dir(), "t")] {
            let m = fs::metadata(d.join(p)).unwrap();
            let opened = dir.unwrap().metadata().unwrap();
            assert_eq!((opened.dev(), opened.ino()), (m.dev(), m.ino()));
        }
        // Past `BY_PATH_MAX` bytes of directory path: held.
        let long = Arc::new(DirPair {
            dst_path: d.join("d".repeat(super::BY_PATH_MAX)),
            ..Arc::try_unwrap(held_pair(d, Path::new("s"), Path::new("t")))
                .ok()
                .unwrap()
        });
        assert!(!long.by_path().is_by_path());
    }

    /// A root reopened by its path opens the directory first opened there,
    /// and refuses another put in its place (renamed over it), or a link
    /// to one where no link was to be followed.
    #[test]
    fn a_reopened_root_refuses_a_directory_put_in_its_place() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, other) = (tmp.path().join("root"), tmp.path().join("other"));
        fs::create_dir(&root).unwrap();
        fs::create_dir(&other).unwrap();
        let held = RootDir::reopened(&File::open(&root).unwrap(), &root, false).unwrap();
        assert!(held.open().is_ok());
        fs::rename(&root, tmp.path().join("away")).unwrap();
        fs::rename(&other, &root).unwrap();
        let err = held.open().unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        fs::remove_dir(&root).unwrap();
        std::os::unix::fs::symlink("away", &root).unwrap();
        // ENOTDIR (O_DIRECTORY | O_NOFOLLOW on a link), or ELOOP.
        let code = rustix::io::Errno::from_io_error(&held.open().unwrap_err());
        assert!(
            matches!(
                code,
                Some(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP)
            ),
            "{code:?}"
        );
        let followed = RootDir::reopened(&File::open(&root).unwrap(), &root, true).unwrap();
        assert!(followed.open().is_ok());
    }
}
