//! `blockio cp`: GNU `cp`'s command line around [`blockio_tools::copy`].
//!
//! The arguments are read here, not by clap, the way GNU `getopt_long`
//! reads them, so that `blockio cp` can stand in for `cp`: options and
//! operands in any order (`POSIXLY_CORRECT` stops at the first operand),
//! `--` ends the options, short options bundle (`-av`, `-tDIR`), long
//! options may be abbreviated to any unambiguous prefix (`--rem`), and a
//! usage error prints GNU's message and exits with status 1.

mod ask;
mod help;
mod memory;
mod program;
mod usage;

use crate::progress_line::ProgressLine;
use crate::stdio::say_err;
use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use blockio_tools::copy::{
    self, Backup, CopyError, CopyOptions, Dereference, LinkMode, Preserve, Progress, Reflink,
    Sparse, Update,
};
use blockio_tools::getopt::{self, Opt};

use ask::{ask, STDIN_ERROR};
use help::help;
use memory::{address_space_left, buffers_within, one_arena_under_address_limit, threads_within};
use program::program;
use usage::{argmatch, fatal, write_out, Usage};

/// Options and operands of `blockio cp`, as GNU `cp` takes them (see
/// `blockio cp --help`).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub struct CpArgs {
    /// GNU cp's options and operands, read as `cp` reads them.
    #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
    args: Vec<OsString>,
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

/// A block size for `cp`: 4 KiB to 64 MiB.
fn parse_block(s: &str) -> Result<usize, String> {
    let n = crate::size::parse(s)?;
    if !(4096..=(64 << 20)).contains(&n) {
        return Err(format!("must be between 4K and 64M, got {s}"));
    }
    Ok(n)
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
