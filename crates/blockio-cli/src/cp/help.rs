//! The texts `--help` and `--version` print.

use super::program::program;

/// The text `--version` prints.
pub(super) fn version() -> String {
    format!(
        "{} (blockio) {}\n",
        program().rsplit(['/', ' ']).next().unwrap_or("cp"),
        env!("CARGO_PKG_VERSION")
    )
}

/// The text `--help` prints.
pub(super) fn help() -> String {
    let p = program();
    format!(
        "Usage: {p} [OPTION]... [-T] SOURCE DEST
  or:  {p} [OPTION]... SOURCE... DIRECTORY
  or:  {p} [OPTION]... -t DIRECTORY SOURCE...
Copy SOURCE to DEST, or multiple SOURCE(s) to DIRECTORY, as GNU cp does,
on io_uring.

Mandatory arguments to long options are mandatory for short options too.
  -a, --archive                same as -dR --preserve=all
      --attributes-only        don't copy the file data, just the attributes
  -b                           like --backup but does not accept an argument
      --backup[=CONTROL]       make a backup of each existing destination file
      --copy-contents          copy contents of special files when recursive
  -d                           same as --no-dereference --preserve=links
  -f, --force                  if an existing destination file cannot be
                                 opened, remove it and try again
  -H                           follow command-line symbolic links in SOURCE
  -i, --interactive            prompt before overwrite (overrides a previous -n
                                 option)
  -l, --link                   hard link files instead of copying
  -L, --dereference            always follow symbolic links in SOURCE
  -n, --no-clobber             do not overwrite an existing file (overrides
                                 a previous -i option)
  -P, --no-dereference         never follow symbolic links in SOURCE
  -p                           same as --preserve=mode,ownership,timestamps
      --preserve[=ATTR_LIST]   preserve the specified attributes (default:
                                 mode,ownership,timestamps), if possible
                                 additional attributes: links, xattr, all
                                 (context, SELinux's, is not supported)
      --no-preserve=ATTR_LIST  don't preserve the specified attributes
      --parents                use full source file name under DIRECTORY
  -R, -r, --recursive          copy directories recursively
      --remove-destination     remove each existing destination file before
                                 attempting to open it
      --reflink[=WHEN]         control clone/CoW copies: auto (the file system
                                 decides, through copy_file_range), always
                                 (FICLONE, or fail), never
  -s, --symbolic-link          make symbolic links instead of copying
  -S, --suffix=SUFFIX          override the usual backup suffix
      --sparse=WHEN            control creation of sparse files: auto (holes
                                 where the source has them), always (also
                                 for blocks of zeros), never
      --strip-trailing-slashes  remove any trailing slashes from each SOURCE
  -t, --target-directory=DIRECTORY  copy all SOURCE arguments into DIRECTORY
  -T, --no-target-directory    treat DEST as a normal file
  -u, --update[=UPDATE]        copy only when the SOURCE file is newer than
                                 the destination file or when the destination
                                 file is missing (UPDATE: all, none, older;
                                 -u is older)
  -v, --verbose                explain what is being done
  -x, --one-file-system        stay on this file system
  -Z, --context[=CTX]          accepted; SELinux contexts are not supported
      --help        display this help and exit
      --version     output version information and exit

blockio's own options:
      --fsync              make the copy durable before exiting
      --json               print a JSON summary on stdout at the end
      --block-size=SIZE    bytes per read and write (4K to 64M; default 1M)
      --threads=N          worker threads (default: the CPUs plus one)

The backup suffix is '~', unless set with --suffix or SIMPLE_BACKUP_SUFFIX.
The version control method may be selected via the --backup option or
through the VERSION_CONTROL environment variable: none/off, numbered/t,
existing/nil (numbered if numbered backups exist, simple otherwise),
simple/never.

By default, sparse SOURCE files are copied with their holes. Symbolic links
on the command line are followed unless -R (then -H and -L choose).
"
    )
}
