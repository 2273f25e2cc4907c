//! `blockio cp`: GNU `cp`'s command line around [`blockio_tools::copy`].
//!
//! The arguments are read here, not by clap, the way GNU `getopt_long`
//! reads them, so that `blockio cp` can stand in for `cp`: options and
//! operands in any order (`POSIXLY_CORRECT` stops at the first operand),
//! `--` ends the options, short options bundle (`-av`, `-tDIR`), long
//! options may be abbreviated to any unambiguous prefix (`--rem`), and a
//! usage error prints GNU's message and exits with status 1.

use crate::progress_line::ProgressLine;
use crate::stdio::say_err;
use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Duration;

use blockio_tools::copy::{
    self, Backup, CopyError, CopyOptions, Dereference, LinkMode, Preserve, Progress, Reflink,
    Sparse, Update,
};
use blockio_tools::getopt::{self, Opt};
use blockio_tools::quote::quote_locale;
use blockio_tools::room::{address_space_left, one_arena_under_address_limit, threads_within};

/// Options and operands of `blockio cp`, as GNU `cp` takes them (see
/// `blockio cp --help`).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct CpArgs {
    /// GNU cp's options and operands, read as `cp` reads them.
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
    args: Vec<OsString>,
}

/// The name messages, `--help` and `--version` use, chosen in this one
/// place: `blockio cp`, or when the binary runs under another name (a link
/// named `cp`), that name as invoked, as GNU `cp` names itself by its
/// `argv[0]`.
fn program() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let argv0 = std::env::args_os().next().unwrap_or_default();
        let base = std::path::Path::new(&argv0)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        if base.is_empty() || base.starts_with("blockio") {
            "blockio cp".to_string()
        } else {
            argv0.to_string_lossy().into_owned()
        }
    })
}

/// GNU `cp`'s options: the long ones in GNU's order (which its messages
/// about ambiguous abbreviations list them in), then the short ones that
/// differ from their long form (`-b` takes no argument, `--backup` an
/// optional one) or have none, then blockio's own, which are matched
/// whole only, so that they never make a GNU abbreviation ambiguous. Each
/// id names the option it stands for.
const OPTS: &[Opt] = &[
    Opt::flag("a", Some('a'), Some("archive")),
    Opt::flag("attributes-only", None, Some("attributes-only")),
    Opt::optional_arg("b", "backup"),
    Opt::flag("copy-contents", None, Some("copy-contents")),
    Opt::flag("L", Some('L'), Some("dereference")),
    Opt::flag("f", Some('f'), Some("force")),
    Opt::flag("i", Some('i'), Some("interactive")),
    Opt::flag("l", Some('l'), Some("link")),
    Opt::flag("n", Some('n'), Some("no-clobber")),
    Opt::flag("P", Some('P'), Some("no-dereference")),
    Opt::arg("no-preserve", None, Some("no-preserve")),
    Opt::flag("T", Some('T'), Some("no-target-directory")),
    Opt::flag("x", Some('x'), Some("one-file-system")),
    Opt::flag("parents", None, Some("parents")),
    Opt::flag("parents", None, Some("path")),
    Opt::optional_arg("preserve", "preserve"),
    Opt::flag("R", Some('R'), Some("recursive")),
    Opt::flag("remove-destination", None, Some("remove-destination")),
    Opt::arg("sparse", None, Some("sparse")),
    Opt::optional_arg("reflink", "reflink"),
    Opt::flag(
        "strip-trailing-slashes",
        None,
        Some("strip-trailing-slashes"),
    ),
    Opt::arg("S", Some('S'), Some("suffix")),
    Opt::flag("s", Some('s'), Some("symbolic-link")),
    Opt::arg("t", Some('t'), Some("target-directory")),
    Opt::optional_arg("u", "update"),
    Opt::flag("v", Some('v'), Some("verbose")),
    Opt::optional_arg("Z", "context"),
    Opt::flag("help", None, Some("help")),
    Opt::flag("version", None, Some("version")),
    // GNU's short options (`abdfHilLnprst:uvxPRS:TZ`) not given above.
    Opt::flag("b", Some('b'), None),
    Opt::flag("d", Some('d'), None),
    Opt::flag("H", Some('H'), None),
    Opt::flag("p", Some('p'), None),
    Opt::flag("R", Some('r'), None),
    Opt::flag("u", Some('u'), None),
    Opt::flag("Z", Some('Z'), None),
    // blockio's own.
    Opt::flag("fsync", None, Some("fsync")).whole_only(),
    Opt::flag("json", None, Some("json")).whole_only(),
    Opt::arg("block-size", None, Some("block-size")).whole_only(),
    Opt::arg("threads", None, Some("threads")).whole_only(),
];

/// A usage error: GNU's message, then (`hint`) the pointer to `--help`.
#[derive(Debug)]
struct Usage {
    msg: String,
    hint: bool,
}

/// A usage error followed by the pointer to `--help`.
#[allow(non_snake_case)]
fn Usage(msg: String) -> Usage {
    Usage { msg, hint: true }
}

/// A usage error that GNU reports alone.
fn fatal(msg: String) -> Usage {
    Usage { msg, hint: false }
}

/// An option given: the name of the option it stands for, and its
/// argument.
type Given = (&'static str, Option<OsString>);

/// The options given, each by the name of the option it stands for, with
/// its argument; and the operands, in order (read as GNU `getopt_long`
/// reads them, by [`getopt::parse`]).
/// The options and operands of `args`. As `getopt_long` hands options
/// over in order, `--help` or `--version` before a mistake is answered
/// (`--help --bogus` prints the help), and the mistake is not reached.
fn getopt(args: &[OsString]) -> Result<(Vec<Given>, Vec<OsString>), Usage> {
    let (parsed, error) = getopt::parse_in_order(args, OPTS);
    match error {
        Some(e)
            if !parsed
                .opts
                .iter()
                .any(|(id, _)| matches!(*id, "help" | "version")) =>
        {
            Err(Usage(e))
        }
        _ => Ok((parsed.opts, parsed.operands)),
    }
}

/// What the command line asks for.
struct Command {
    opts: CopyOptions,
    sources: Vec<PathBuf>,
    dest: PathBuf,
    json: bool,
}

/// Reads the command line; `Ok(None)` when `--help` or `--version` was
/// answered.
fn parse(args: &[OsString]) -> Result<Option<Command>, Usage> {
    let (given, mut operands) = getopt(args)?;
    let given_ids: Vec<&str> = given.iter().map(|(id, _)| *id).collect();
    let mut opts = CopyOptions {
        recursive: false,
        ..CopyOptions::default()
    };
    let mut dereference = None;
    let mut target: Option<OsString> = None;
    let mut no_target = false;
    let mut strip = false;
    let mut json = false;
    let mut threads = None;
    let mut backup: Option<Option<String>> = None;
    let mut suffix: Option<OsString> = None;
    for (id, value) in given {
        let value_str = || value.as_deref().unwrap_or_default().to_string_lossy();
        match id {
            "help" => {
                write_out(&help())?;
                return Ok(None);
            }
            "version" => {
                write_out(&format!(
                    "{} (blockio) {}\n",
                    program().rsplit(['/', ' ']).next().unwrap_or("cp"),
                    env!("CARGO_PKG_VERSION")
                ))?;
                return Ok(None);
            }
            "a" => {
                dereference = Some(Dereference::Never);
                // GNU's -a reduces the diagnostics of extended
                // attributes, but leaves an earlier `--preserve=xattr`'s
                // demand that each be copied.
                opts.preserve = Preserve {
                    xattr_required: opts.preserve.xattr_required,
                    xattr_quiet: true,
                    ..Preserve::ALL
                };
                // The mode is kept, so an earlier `--no-preserve=mode`'s
                // default mode no longer applies (GNU consults it only
                // when the mode is not kept).
                opts.default_mode = false;
                opts.recursive = true;
            }
            "d" => {
                dereference = Some(Dereference::Never);
                opts.preserve.links = true;
            }
            "P" => dereference = Some(Dereference::Never),
            "H" => dereference = Some(Dereference::CommandLine),
            "L" => dereference = Some(Dereference::Always),
            "p" => preserve_list(&mut opts, "mode,ownership,timestamps", true)?,
            "preserve" => {
                let list = value.as_deref().map(OsStr::to_string_lossy);
                let list = list.as_deref().unwrap_or("mode,ownership,timestamps");
                preserve_list(&mut opts, list, true)?
            }
            "no-preserve" => preserve_list(&mut opts, &value_str(), false)?,
            "Z" => {
                if value.is_some() {
                    say_err!(
                        "{}: warning: ignoring --context; it requires an SELinux-enabled kernel",
                        program()
                    );
                }
            }
            "R" => opts.recursive = true,
            // The last of -i and -n counts, as with GNU cp 9.1.
            "n" => {
                opts.no_clobber = true;
                opts.ask = None;
            }
            "i" => {
                opts.ask = Some(ask);
                opts.no_clobber = false;
            }
            "f" => opts.force = true,
            "x" => opts.one_file_system = true,
            "attributes-only" => opts.attributes_only = true,
            "parents" => opts.parents = true,
            "sparse" => {
                let words = [
                    ("never", Sparse::Never),
                    ("auto", Sparse::Auto),
                    ("always", Sparse::Always),
                ];
                opts.sparse = argmatch(&value_str(), "--sparse", &words)?;
            }
            "reflink" => {
                let words = [
                    ("auto", Reflink::Auto),
                    ("always", Reflink::Always),
                    ("never", Reflink::Never),
                ];
                opts.reflink = match &value {
                    None => Reflink::Always,
                    Some(_) => argmatch(&value_str(), "--reflink", &words)?,
                };
            }
            "b" => {
                let control = value.as_deref().map(|v| v.to_string_lossy().into_owned());
                backup = Some(control.or(backup.flatten()));
            }
            "S" => {
                suffix = value;
                backup = Some(backup.flatten());
            }
            "l" => opts.link = LinkMode::Hard,
            "s" => opts.link = LinkMode::Symbolic,
            "remove-destination" => opts.remove_destination = true,
            "v" => opts.verbose = true,
            "u" => {
                let words = [
                    ("all", Update::All),
                    ("none", Update::None),
                    ("older", Update::Older),
                ];
                opts.update = match &value {
                    None => Update::Older,
                    Some(_) => argmatch(&value_str(), "--update", &words)?,
                };
            }
            "copy-contents" => opts.copy_contents = true,
            "strip-trailing-slashes" => strip = true,
            "t" => {
                if target.is_some() {
                    return Err(fatal("multiple target directories specified".into()));
                }
                target = value;
            }
            "T" => no_target = true,
            "fsync" => opts.fsync = true,
            "json" => json = true,
            "block-size" => {
                opts.block = parse_block(&value_str())
                    .map_err(|e| Usage(format!("invalid --block-size '{}': {e}", value_str())))?
            }
            "threads" => match value_str().parse::<usize>() {
                Ok(n) if n > 0 => threads = Some(n),
                _ => {
                    return Err(Usage(format!(
                        "invalid --threads '{}': a number of at least 1",
                        value_str()
                    )))
                }
            },
            // Every option of the tables is handled above.
            other => return Err(Usage(format!("unrecognized option '{other}'"))),
        }
    }
    if given_ids.contains(&"l") && given_ids.contains(&"s") {
        return Err(Usage("cannot make both hard and symbolic links".into()));
    }
    if let Some(control) = backup {
        if opts.no_clobber {
            return Err(Usage(
                "options --backup and --no-clobber are mutually exclusive".into(),
            ));
        }
        // `--backup=` (empty) is GNU's plain `--backup`: the environment's
        // choice, else the default.
        let (control, from) = match control.filter(|c| !c.is_empty()) {
            Some(c) => (c, "backup type"),
            None => match std::env::var("VERSION_CONTROL") {
                Ok(c) if !c.is_empty() => (c, "$VERSION_CONTROL"),
                _ => ("existing".to_string(), "backup type"),
            },
        };
        opts.backup = backup_type(&control, from)?;
        let suffix = suffix.or_else(|| std::env::var_os("SIMPLE_BACKUP_SUFFIX"));
        // A suffix with a slash would put the backup elsewhere: GNU's
        // default then.
        opts.suffix = match suffix {
            Some(s) if !s.is_empty() && !s.as_bytes().contains(&b'/') => s,
            _ => "~".into(),
        };
    }
    opts.dereference = dereference.unwrap_or(if opts.recursive && opts.link != LinkMode::Hard {
        Dereference::Never
    } else {
        Dereference::Always
    });
    opts.wave = opts.wave.max(opts.block);
    if let Some(t) = threads {
        opts.threads = t;
    }
    if opts.reflink == Reflink::Always && opts.sparse != Sparse::Auto {
        // A clone shares the source's blocks as they are: no holes made
        // or filled.
        return Err(Usage(
            "--reflink can be used only with --sparse=auto".into(),
        ));
    }
    if target.is_some() && no_target {
        return Err(fatal(
            "cannot combine --target-directory (-t) and --no-target-directory (-T)".into(),
        ));
    }
    let quote = |s: &OsStr| blockio_tools::quote::quote(std::path::Path::new(s));
    let dest = match target {
        Some(t) => {
            if operands.is_empty() {
                return Err(Usage("missing file operand".into()));
            }
            match std::fs::metadata(&t) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(fatal(format!(
                        "target directory {}: Not a directory",
                        quote(&t)
                    )))
                }
                Err(e) => {
                    return Err(fatal(format!(
                        "target directory {}: {}",
                        quote(&t),
                        blockio_tools::reason::reason(&e)
                    )))
                }
            }
            t
        }
        None => {
            match operands.len() {
                0 => return Err(Usage("missing file operand".into())),
                1 => {
                    return Err(Usage(format!(
                        "missing destination file operand after {}",
                        quote(&operands[0])
                    )))
                }
                n if no_target && n > 2 => {
                    return Err(Usage(format!("extra operand {}", quote(&operands[2]))))
                }
                _ => {}
            }
            operands.pop().expect("two operands at least")
        }
    };
    // With several sources a destination that is not a directory is the
    // copy's "target 'X': ..." first, as GNU's order is.
    let several = operands.len() > 1;
    if opts.parents
        && (no_target || (!several && !std::fs::metadata(&dest).is_ok_and(|m| m.is_dir())))
    {
        return Err(Usage(
            "with --parents, the destination must be a directory".into(),
        ));
    }
    // As GNU, only for sources copied into a directory (`cp --strip...
    // dl/ x`, with `x` new, still follows the link `dl`).
    let into_dir = !no_target && std::fs::metadata(&dest).is_ok_and(|m| m.is_dir());
    if strip && into_dir {
        for s in &mut operands {
            let b = s.as_bytes();
            let end = b.len() - b.iter().rev().take_while(|&&c| c == b'/').count();
            if end > 0 && end < b.len() {
                *s = OsStr::from_bytes(&b[..end]).to_owned();
            }
        }
    }
    opts.no_target_directory = no_target;
    Ok(Some(Command {
        opts,
        sources: operands.into_iter().map(PathBuf::from).collect(),
        dest: PathBuf::from(dest),
        json,
    }))
}

/// `--preserve=LIST` (`keep`) or `--no-preserve=LIST`: GNU's attribute
/// names, comma-separated. `context` (SELinux) is not kept: asked for
/// explicitly it is an error, as with GNU on a kernel without SELinux.
fn preserve_list(opts: &mut CopyOptions, list: &str, keep: bool) -> Result<(), Usage> {
    const NAMES: &[&str] = &[
        "mode",
        "timestamps",
        "ownership",
        "links",
        "context",
        "xattr",
        "all",
    ];
    let option = if keep { "--preserve" } else { "--no-preserve" };
    for name in list.split(',') {
        // GNU takes unambiguous abbreviations here too.
        let words: Vec<(&str, &str)> = NAMES.iter().map(|n| (*n, *n)).collect();
        let name = argmatch(name, option, &words)?;
        let p = &mut opts.preserve;
        match name {
            "mode" => {
                p.mode = keep;
                opts.default_mode = !keep;
            }
            "timestamps" => p.timestamps = keep,
            "ownership" => p.ownership = keep,
            "links" => p.links = keep,
            "xattr" => {
                p.xattr = keep;
                p.xattr_required = keep;
            }
            "context" if keep => {
                return Err(fatal(
                    "cannot preserve security context without an SELinux-enabled kernel".into(),
                ))
            }
            "context" => {}
            _ => {
                // As GNU's `all`: how failures to copy extended
                // attributes are reported is left as it was.
                *p = Preserve {
                    xattr_required: p.xattr_required,
                    xattr_quiet: p.xattr_quiet,
                    ..if keep {
                        Preserve::ALL
                    } else {
                        Preserve::default()
                    }
                };
                opts.default_mode = !keep;
            }
        }
    }
    Ok(())
}

/// A backup CONTROL word (or an unambiguous abbreviation of one).
fn backup_type(control: &str, from: &str) -> Result<Backup, Usage> {
    let words = [
        ("none", Backup::None),
        ("off", Backup::None),
        ("simple", Backup::Simple),
        ("never", Backup::Simple),
        ("existing", Backup::Existing),
        ("nil", Backup::Existing),
        ("numbered", Backup::Numbered),
        ("t", Backup::Numbered),
    ];
    argmatch(control, from, &words)
}

/// The value of `arg` among `words`, as GNU's `argmatch` finds it: the
/// word itself, or the only value the words it begins stand for; else
/// GNU's message ("invalid" or "ambiguous" argument) with the valid words,
/// those of one value on one line.
fn argmatch<T: Copy + PartialEq>(arg: &str, option: &str, words: &[(&str, T)]) -> Result<T, Usage> {
    if let Some((_, v)) = words.iter().find(|(w, _)| *w == arg) {
        return Ok(*v);
    }
    let found: Vec<T> = words
        .iter()
        .filter(|(w, _)| w.starts_with(arg))
        .map(|(_, v)| *v)
        .collect();
    let problem = match found.as_slice() {
        [first, rest @ ..] if rest.iter().all(|v| v == first) => return Ok(*first),
        [] => "invalid",
        _ => "ambiguous",
    };
    let mut msg = format!(
        "{problem} argument {} for {}\nValid arguments are:",
        quote_locale(arg),
        quote_locale(option)
    );
    let mut k = 0;
    while k < words.len() {
        let same: Vec<String> = words[k..]
            .iter()
            .take_while(|(_, v)| *v == words[k].1)
            .map(|(w, _)| quote_locale(w))
            .collect();
        msg.push_str(&format!("\n  - {}", same.join(", ")));
        k += same.len();
    }
    Err(Usage(msg))
}

/// `-i`: asks on standard error, one question at a time, and reads the
/// answer from standard input: yes when it starts with `y` or `Y`.
fn ask(question: &str) -> bool {
    use std::io::Write;
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}: {question}", program());
    let _ = err.flush();
    let line = match read_answer() {
        Ok(line) => line,
        Err(e) => {
            record_stdin_error(&e);
            String::new()
        }
    };
    matches!(line.trim_start().chars().next(), Some('y' | 'Y'))
}

/// One line of standard input, read a byte at a time (nothing after the
/// line is taken from a later question's answer), from descriptor 0
/// itself: `std::io::stdin` takes a closed descriptor (`EBADF`) for an
/// empty input, and GNU reports it.
fn read_answer() -> std::io::Result<String> {
    use std::io::Read;
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Keeps the first error of reading an answer (which counts as "no"),
/// reported once at the end as GNU's "error closing file".
fn record_stdin_error(e: &std::io::Error) {
    let code = e.raw_os_error().unwrap_or(libc::EIO);
    let _ = STDIN_ERROR.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
}

/// The first error of reading an answer from standard input (`-i`), as an
/// errno; 0 for none. Reported when the copy ends, with status 1.
static STDIN_ERROR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// A block size for `cp`: 4 KiB to 64 MiB.
fn parse_block(s: &str) -> Result<usize, String> {
    let n = crate::size::parse(s)?;
    if !(4096..=(64 << 20)).contains(&n) {
        return Err(format!("must be between 4K and 64M, got {s}"));
    }
    Ok(n)
}

/// Writes `text` to standard output, flushed; a failure (`> /dev/full`)
/// is GNU's "write error" with exit status 1, never a panic.
fn write_out(text: &str) -> Result<(), Usage> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Usage {
            msg: format!("write error: {}", blockio_tools::reason::reason(&e)),
            hint: false,
        })
}

/// The text `--help` prints.
fn help() -> String {
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

/// The arguments with the `--` clap drops when it comes first (`cp -- -x
/// f`: `-x` is a file), found by looking at the process's own arguments:
/// clap hands on the ones after it unchanged.
fn with_leading_dashes(args: &[OsString]) -> Vec<OsString> {
    let all: Vec<OsString> = std::env::args_os().collect();
    let n = args.len();
    // A `--` among the arguments clap hands on is one it kept; the one
    // right before them is one it dropped.
    if all.len() > n && all[all.len() - n..] == *args && all[all.len() - n - 1] == "--" {
        let mut v = vec![OsString::from("--")];
        v.extend_from_slice(args);
        return v;
    }
    args.to_vec()
}

/// The smallest read a copy fitted to an address-space limit makes.
const LEAST_BLOCK: usize = 64 << 10;

/// The bytes per read (`block`) and in flight per worker (`wave`) of a
/// copy on `threads` workers with `room` bytes of address space left
/// under a limit: the waves together at most an eighth of the room, in
/// whole blocks of at least [`LEAST_BLOCK`]; as given when they fit, or
/// with no limit. Without this a worker's 16 MiB wave made a large file
/// fail ("memory exhausted") where a small one fit.
fn buffers_within(block: usize, wave: usize, threads: usize, room: Option<u64>) -> (usize, usize) {
    let Some(room) = room else {
        return (block, wave);
    };
    let most = usize::try_from(room / 8 / threads.max(1) as u64).unwrap_or(usize::MAX);
    if wave <= most {
        return (block, wave);
    }
    let block = block.min(most / LEAST_BLOCK * LEAST_BLOCK).max(LEAST_BLOCK);
    (block, (most / block * block).max(block))
}

/// Runs `cp`; `Ok(false)` when anything failed (each failure reported),
/// including a usage error (exit status 1, as GNU's).
pub fn run(args: &CpArgs) -> anyhow::Result<bool> {
    crate::oom::set_program(program());
    let limit = one_arena_under_address_limit();
    // Before any other thread starts (see its doc). Not under a limit on
    // address space, where the copy is fitted to what is left and a
    // thread and a list of the files in flight could tip it over; there,
    // and if no thread can be had, the copy goes on as GNU's does: an
    // interrupt leaves what is being copied.
    if limit.is_none() {
        let _ = copy::remove_unfinished_on_signals();
    }
    let room = limit.map(address_space_left);
    let mut cmd = match parse(&with_leading_dashes(&args.args)) {
        Ok(Some(cmd)) => cmd,
        Ok(None) => return Ok(true),
        Err(Usage { msg, hint }) => {
            let p = program();
            say_err!("{p}: {msg}");
            if hint {
                say_err!("Try '{p} --help' for more information.");
            }
            return Ok(false);
        }
    };
    cmd.opts.threads = threads_within(cmd.opts.threads, room);
    (cmd.opts.block, cmd.opts.wave) =
        buffers_within(cmd.opts.block, cmd.opts.wave, cmd.opts.threads, room);
    let progress = Progress::default();
    let bar = ProgressLine::new(std::io::stderr().is_terminal() && !cmd.json);
    let on_error = |e: &CopyError| bar.suspend(|| say_err!("{}: {e}", program()));
    let done = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|s| {
        let (progress, bar, done) = (&progress, &bar, &done);
        let started = std::time::Instant::now();
        // Only for a bar shown; a thread that cannot be had (under a
        // limit on address space or threads) leaves the bar still.
        let ticker = move || {
            while !done.load(Ordering::Relaxed) {
                let bytes = progress.bytes.load(Ordering::Relaxed);
                let rate = bytes as f64 / started.elapsed().as_secs_f64().max(1e-3);
                bar.draw(&format!(
                    "{} files, {} dirs, {:.1} MiB, {:.1} MiB/s",
                    progress.files.load(Ordering::Relaxed),
                    progress.dirs.load(Ordering::Relaxed),
                    bytes as f64 / (1 << 20) as f64,
                    rate / (1 << 20) as f64
                ));
                std::thread::sleep(Duration::from_millis(100));
            }
        };
        if bar.is_shown() {
            let _ = std::thread::Builder::new().spawn_scoped(s, ticker);
        }
        let r = copy::copy(&cmd.sources, &cmd.dest, &cmd.opts, progress, &on_error);
        done.store(true, Ordering::Relaxed);
        r
    });
    bar.clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => match e.get_ref() {
            Some(inner) if inner.is::<copy::UsageError>() => {
                say_err!("{}: {inner}", program());
                return Ok(false);
            }
            // The engine could not be set up (no memory, no thread): one
            // line in GNU's words, nothing copied. Under a limit on address
            // space a thread that cannot start (EAGAIN) ran out of memory
            // as much as an allocation that fails: GNU's "memory
            // exhausted" either way, whichever came first.
            _ if room.is_some()
                && matches!(blockio::errno(&e), Some(libc::EAGAIN | libc::ENOMEM)) =>
            {
                say_err!("{}: memory exhausted", program());
                return Ok(false);
            }
            _ => {
                say_err!("{}: {}", program(), blockio_tools::reason::reason(&e));
                return Ok(false);
            }
        },
    };
    // Run as `cp` (a link of that name) its messages are GNU's alone, as
    // the checksum tools' are; `--json` still says which backend ran.
    if let Some(reason) = report
        .fallback_reason
        .as_ref()
        .filter(|_| program() == "blockio cp")
    {
        crate::fallback_notice("cp", reason);
    }
    let mut ok = report.errors == 0;
    if cmd.json {
        let text = format!("{}\n", serde_json::to_string_pretty(&report)?);
        if let Err(Usage { msg, .. }) = write_out(&text) {
            say_err!("{}: {msg}", program());
            ok = false;
        }
    }
    let flushed = {
        use std::io::Write;
        std::io::stdout().flush()
    };
    if let Some(e) = report
        .output_error
        .map(std::io::Error::from_raw_os_error)
        .or(flushed.err())
    {
        if e.raw_os_error() == Some(libc::EPIPE) {
            // The copy is whole; now end as the closed pipe would have.
            crate::stdio::end_as_a_closed_pipe_would();
        }
        say_err!(
            "{}: write error: {}",
            program(),
            blockio_tools::reason::reason(&e)
        );
        ok = false;
    }
    match STDIN_ERROR.load(Ordering::Relaxed) {
        0 => {}
        code => {
            let e = std::io::Error::from_raw_os_error(code);
            say_err!(
                "{}: error closing file: {}",
                program(),
                blockio_tools::reason::reason(&e)
            );
            ok = false;
        }
    }
    Ok(ok)
}
