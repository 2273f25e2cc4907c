//! The options of a copy ([`CopyOptions`]), one field per `cp` option,
//! and the choices some of them take.

/// Which symbolic links among the sources are followed (copied as the
/// file they lead to) rather than copied as links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dereference {
    /// None (`-P`, and the default with `-r`).
    Never,
    /// Those named on the command line (`-H`).
    CommandLine,
    /// All of them, on the command line and, with `recursive`, inside the
    /// trees (`-L`, and the default without `-r`).
    Always,
}

/// What of the source a copy keeps besides its data (`--preserve=LIST`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preserve {
    /// The permission bits (with set-user-ID, set-group-ID and sticky) and
    /// the POSIX ACLs.
    pub mode: bool,
    /// Owner and group (as root; otherwise the group when the copier
    /// belongs to it, and the special bits are then dropped).
    pub ownership: bool,
    /// Access and modification times.
    pub timestamps: bool,
    /// Which names in the copy are one file (hard links).
    pub links: bool,
    /// Extended attributes other than the ACLs (which go with `mode`).
    pub xattr: bool,
    /// `--preserve=xattr` named (GNU's `require_preserve_xattr`): every
    /// failure to copy an extended attribute is reported and fails the
    /// copy. Neither `-a` nor `--preserve=all` sets or clears it.
    pub xattr_required: bool,
    /// `-a` (GNU's `reduce_diagnostics`): failures to copy extended
    /// attributes are silent, unless `xattr_required` or
    /// `CopyOptions::attributes_only`.
    pub xattr_quiet: bool,
}

impl Preserve {
    /// `-p`, `--preserve`: mode, ownership and timestamps.
    pub const P: Preserve = Preserve {
        mode: true,
        ownership: true,
        timestamps: true,
        links: false,
        xattr: false,
        xattr_required: false,
        xattr_quiet: false,
    };
    /// `-a`, `--preserve=all`.
    pub const ALL: Preserve = Preserve {
        mode: true,
        ownership: true,
        timestamps: true,
        links: true,
        xattr: true,
        xattr_required: false,
        xattr_quiet: false,
    };
    /// Whether any attribute is set on the copy after its data.
    pub fn attrs(&self) -> bool {
        self.mode || self.ownership || self.timestamps || self.xattr
    }
}

/// Whether and how an existing destination is kept aside before it is
/// replaced (`-b`, `--backup=CONTROL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backup {
    /// No backups (the default).
    None,
    /// `name` + the suffix (`simple`, `never`).
    Simple,
    /// `name.~N~`, one more than the highest there (`numbered`, `t`).
    Numbered,
    /// Numbered if numbered backups of the name exist, else simple
    /// (`existing`, `nil`; `-b`).
    Existing,
}

/// Where a copy has holes (`--sparse=WHEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sparse {
    /// Where the source has holes (the default): its data extents alone
    /// are copied.
    Auto,
    /// Nowhere: every byte is written.
    Never,
    /// Also wherever the source holds a block of zeros (4 KiB).
    Always,
}

/// Whether copies share the source's blocks (`--reflink[=WHEN]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reflink {
    /// Where the file systems do it on their own (`copy_file_range`
    /// clones on Btrfs and XFS); the default.
    Auto,
    /// Always, with `FICLONE`; a file that cannot be cloned is an error.
    Always,
    /// Never: the data is read and written (no `copy_file_range`).
    Never,
}

/// What is made at the destination for each file that is not a
/// directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// A copy (the default).
    Copy,
    /// A hard link to the source (`-l`).
    Hard,
    /// A symbolic link to the source, named as given (`-s`).
    Symbolic,
}

/// Which existing destinations are replaced (`--update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Every one (the default).
    All,
    /// None: they are skipped (`--update=none`, like `-n`).
    None,
    /// Those older than their source (`-u`, `--update=older`).
    Older,
}

/// How `copy` works.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Copy directories and what they hold (`-r`); without it a directory
    /// operand is reported ("omitting directory") and left out.
    pub recursive: bool,
    /// Which symbolic links are followed (default: `Never`, as `cp -r`).
    pub dereference: Dereference,
    /// Read FIFOs and devices and copy what they give into regular files,
    /// instead of making new FIFOs and device nodes: always without
    /// `recursive`, as cp does, and with it for `--copy-contents`.
    pub copy_contents: bool,
    /// The destination is the copy's name even when it is a directory
    /// (`-T`): `cp -rT s d` merges `s` into `d`, and a file is never
    /// copied into `d`.
    pub no_target_directory: bool,
    /// Directories on other file systems than their operand's (mount
    /// points) are made but not walked (`-x`).
    pub one_file_system: bool,
    /// Copies, or hard or symbolic links to the sources (`-l`, `-s`);
    /// directories are made either way.
    pub link: LinkMode,
    /// Only the attributes are copied (`--attributes-only`): a new file is
    /// empty, an existing one keeps its data.
    pub attributes_only: bool,
    /// Where copies have holes (`--sparse`).
    pub sparse: Sparse,
    /// Whether copies share blocks with their sources (`--reflink`).
    pub reflink: Reflink,
    /// Each source is copied under the destination directory by its whole
    /// path as given, the directories on the way made (`--parents`).
    pub parents: bool,
    /// Backups of replaced destinations (`-b`).
    pub backup: Backup,
    /// The suffix of simple backups (`-S`; default `~`).
    pub suffix: std::ffi::OsString,
    /// What the copy keeps besides the data (`-p`, `-a`, `--preserve`).
    pub preserve: Preserve,
    /// New files and directories get the default permission bits (0666
    /// and 0777) minus the umask, not the source's (`--no-preserve=mode`).
    pub default_mode: bool,
    /// Do not overwrite existing files (`-n`).
    pub no_clobber: bool,
    /// Which existing destinations are replaced (`-u`).
    pub update: Update,
    /// Asks before replacing an existing destination (`-i`): called with
    /// the question (`overwrite 'x'? `), it answers whether to go on.
    /// Calls from several threads are the callee's to serialize.
    pub ask: Option<fn(&str) -> bool>,
    /// An existing destination file that cannot be opened for writing is
    /// removed and created anew (`-f`).
    pub force: bool,
    /// An existing destination file is removed before the copy is made
    /// (`--remove-destination`), rather than written into.
    pub remove_destination: bool,
    /// Print `'src' -> 'dst'` on standard output for each entry copied,
    /// and `removed 'dst'` for each destination removed (`-v`).
    pub verbose: bool,
    /// Make the copy durable: files of 1 MiB or more are fsynced each (a
    /// failure names the file), then one `syncfs` per destination file
    /// system makes the rest durable (a failure there names the file
    /// system).
    pub fsync: bool,
    /// Bytes per read and write (default 1 MiB).
    pub block: usize,
    /// Bytes in flight per worker: one wave of reads, then its writes
    /// (default 16 MiB).
    pub wave: usize,
    /// Files per group handed to a worker (default 32).
    pub group: usize,
    /// Files of at least this many bytes are copied with `copy_file_range`
    /// (default 256 KiB; `u64::MAX`: never).
    pub copy_range_min: u64,
    /// With `fsync`, files of at least this many bytes are written with
    /// `O_DIRECT` from the worker's buffers (default 256 MiB; `u64::MAX`:
    /// never). The copy then leaves the page cache as it found it and uses
    /// less CPU. Its speed hangs on the buffers, which are huge pages
    /// (see `blockio::AlignedBuf`): each 1 MiB write is one device request
    /// instead of the two that 256 small pages need on a virtio disk. On
    /// the reference machine, durable copies of two 1 GiB files took less
    /// time this way than through the page cache, and smaller files tied
    /// or lost (`docs/benchmarks.md`, "Durable copies of large files with
    /// `O_DIRECT`"), hence the 256 MiB threshold.
    pub direct_write_min: u64,
    /// Threads (default: the CPUs plus one). Each walks directories and
    /// copies files alike.
    pub threads: usize,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            recursive: true,
            dereference: Dereference::Never,
            copy_contents: false,
            no_target_directory: false,
            one_file_system: false,
            link: LinkMode::Copy,
            attributes_only: false,
            sparse: Sparse::Auto,
            reflink: Reflink::Auto,
            parents: false,
            backup: Backup::None,
            suffix: "~".into(),
            preserve: Preserve::default(),
            default_mode: false,
            no_clobber: false,
            update: Update::All,
            ask: None,
            force: false,
            remove_destination: false,
            verbose: false,
            fsync: false,
            block: 1 << 20,
            wave: 16 << 20,
            group: 32,
            copy_range_min: 256 << 10,
            direct_write_min: 256 << 20,
            // One more than the CPUs: a thread waiting on a lock or the
            // disk leaves its core to another (measured faster on many
            // small files; docs/benchmarks.md).
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()) + 1,
        }
    }
}
