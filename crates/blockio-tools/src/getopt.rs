//! Command lines read as GNU `getopt_long` reads them, for the tools
//! `blockio` stands in for (`md5sum`, `cksum`, `cp`, …): short options grouped
//! (`-bz`) with their argument attached or next (`-l128`, `-l 128`), long
//! options abbreviated to any unambiguous prefix (`--stat`), `--opt=value`
//! or `--opt value`, operands anywhere (unless `POSIXLY_CORRECT` is set),
//! `--` ending the options, and glibc's messages for each mistake.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// One option a tool takes.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// What the caller matches on.
    pub id: &'static str,
    /// The short form (`'c'`), if any.
    pub short: Option<char>,
    /// The long form without dashes (`"check"`), if any.
    pub long: Option<&'static str>,
    /// Whether it takes an argument.
    pub takes_arg: bool,
    /// Whether that argument may be left out: then only `--opt=value`
    /// gives one (`--backup[=CONTROL]`), as `getopt_long`'s
    /// `optional_argument`.
    pub arg_optional: bool,
    /// Whether the long form is matched whole only, never as the
    /// abbreviation of a prefix: a tool's own options beside a standard
    /// set, which must not make a standard abbreviation ambiguous.
    pub whole_only: bool,
}

impl Opt {
    /// An option that takes no argument.
    pub const fn flag(id: &'static str, short: Option<char>, long: Option<&'static str>) -> Opt {
        Opt {
            id,
            short,
            long,
            takes_arg: false,
            arg_optional: false,
            whole_only: false,
        }
    }

    /// An option that takes an argument.
    pub const fn arg(id: &'static str, short: Option<char>, long: Option<&'static str>) -> Opt {
        Opt {
            id,
            short,
            long,
            takes_arg: true,
            arg_optional: false,
            whole_only: false,
        }
    }

    /// A long option whose argument may be left out (`--backup[=CONTROL]`).
    pub const fn optional_arg(id: &'static str, long: &'static str) -> Opt {
        Opt {
            id,
            short: None,
            long: Some(long),
            takes_arg: true,
            arg_optional: true,
            whole_only: false,
        }
    }

    /// The same option, its long form matched whole only.
    pub const fn whole_only(self) -> Opt {
        Opt {
            whole_only: true,
            ..self
        }
    }
}

/// A command line, read: options in the order given, then the operands.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Each option's id and argument, in order.
    pub opts: Vec<(&'static str, Option<OsString>)>,
    /// The operands, in order.
    pub operands: Vec<OsString>,
}

/// Reads `args` (without the program name) against `opts`; on a mistake,
/// the message glibc's `getopt_long` prints (without the program name).
pub fn parse(args: &[OsString], opts: &[Opt]) -> Result<Parsed, String> {
    match parse_in_order(args, opts) {
        (parsed, None) => Ok(parsed),
        (_, Some(message)) => Err(message),
    }
}

/// Reads `args` as [`parse`] does, but returns the options read before a
/// mistake along with its message: a tool acts on its options in order,
/// as `getopt_long` hands them over, so `--help --bogus` prints the help
/// and `--bogus --help` is a usage error.
pub fn parse_in_order(args: &[OsString], opts: &[Opt]) -> (Parsed, Option<String>) {
    let mut parsed = Parsed::default();
    let error = read_into(args, opts, &mut parsed).err();
    (parsed, error)
}

fn read_into(args: &[OsString], opts: &[Opt], parsed: &mut Parsed) -> Result<(), String> {
    let posix = std::env::var_os("POSIXLY_CORRECT").is_some();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_bytes();
        i += 1;
        if arg == b"--" {
            parsed.operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(long) = arg.strip_prefix(b"--") {
            let (name, value) = match long.iter().position(|&b| b == b'=') {
                Some(eq) => (&long[..eq], Some(&long[eq + 1..])),
                None => (long, None),
            };
            let opt = find_long(opts, name, arg)?;
            let full = opt.long.unwrap_or_default();
            let value = match (opt.takes_arg, value) {
                (true, Some(v)) => Some(OsStr::from_bytes(v).to_owned()),
                (true, None) if opt.arg_optional => None,
                (true, None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(v.clone())
                    }
                    None => return Err(format!("option '--{full}' requires an argument")),
                },
                (false, Some(_)) => {
                    return Err(format!("option '--{full}' doesn't allow an argument"))
                }
                (false, None) => None,
            };
            parsed.opts.push((opt.id, value));
        } else if arg.len() > 1 && arg[0] == b'-' {
            let mut k = 1;
            while k < arg.len() {
                let c = arg[k] as char;
                k += 1;
                let Some(opt) = opts.iter().find(|o| o.short == Some(c)) else {
                    return Err(format!("invalid option -- '{}'", escape_char(arg[k - 1])));
                };
                if !opt.takes_arg || (opt.arg_optional && k == arg.len()) {
                    parsed.opts.push((opt.id, None));
                    continue;
                }
                let value = if k < arg.len() {
                    OsStr::from_bytes(&arg[k..]).to_owned()
                } else if let Some(v) = args.get(i) {
                    i += 1;
                    v.clone()
                } else {
                    return Err(format!("option requires an argument -- '{c}'"));
                };
                parsed.opts.push((opt.id, Some(value)));
                break;
            }
        } else {
            parsed.operands.push(args[i - 1].clone());
            if posix {
                parsed.operands.extend(args[i..].iter().cloned());
                break;
            }
        }
    }
    Ok(())
}

/// The long option `name` abbreviates: an exact name, else the only one it
/// is a prefix of (or several that are one option). The empty name (`--=`)
/// is a prefix of every one. An ambiguous one is named whole, value and
/// all, with the first option it abbreviates and every other that is not
/// that same option, as glibc's `getopt_long` lists them.
fn find_long<'o>(opts: &'o [Opt], name: &[u8], arg: &[u8]) -> Result<&'o Opt, String> {
    if let Some(o) = opts
        .iter()
        .find(|o| o.long.map(str::as_bytes) == Some(name))
    {
        return Ok(o);
    }
    let candidates: Vec<&Opt> = opts
        .iter()
        .filter(|o| !o.whole_only && o.long.is_some_and(|l| l.as_bytes().starts_with(name)))
        .collect();
    match candidates.as_slice() {
        [] => Err(format!(
            "unrecognized option '{}'",
            String::from_utf8_lossy(arg)
        )),
        [one] => Ok(one),
        [first, rest @ ..] if rest.iter().all(|o| o.id == first.id) => Ok(first),
        [first, rest @ ..] => {
            let list: String = std::iter::once(first)
                .chain(rest.iter().filter(|o| o.id != first.id))
                .map(|o| format!(" '--{}'", o.long.unwrap_or_default()))
                .collect();
            Err(format!(
                "option '{}' is ambiguous; possibilities:{list}",
                String::from_utf8_lossy(arg)
            ))
        }
    }
}

/// An option character as glibc shows it.
fn escape_char(b: u8) -> String {
    if b.is_ascii_graphic() {
        (b as char).to_string()
    } else {
        format!("\\{b:03o}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[
        Opt::flag("check", Some('c'), Some("check")),
        Opt::flag("status", None, Some("status")),
        Opt::flag("strict", None, Some("strict")),
        Opt::arg("length", Some('l'), Some("length")),
        Opt::flag("zero", Some('z'), Some("zero")),
    ];

    fn run(args: &[&str]) -> Result<Parsed, String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&args, OPTS)
    }

    #[test]
    fn reads_as_getopt_long() {
        let p = run(&["a", "-cz", "--stat", "-l8", "--length=16", "--", "-c"]).unwrap();
        let ids: Vec<_> = p.opts.iter().map(|(id, v)| (*id, v.clone())).collect();
        assert_eq!(
            ids,
            vec![
                ("check", None),
                ("zero", None),
                ("status", None),
                ("length", Some("8".into())),
                ("length", Some("16".into())),
            ]
        );
        assert_eq!(p.operands, vec![OsString::from("a"), "-c".into()]);
        let p = run(&["-l", "24", "-", "--length", "32"]).unwrap();
        assert_eq!(p.operands, vec![OsString::from("-")]);
        assert_eq!(p.opts.len(), 2);
    }

    #[test]
    fn optional_arguments_and_whole_only_names() {
        const OPTS: &[Opt] = &[
            Opt::optional_arg("backup", "backup"),
            Opt::flag("backup", Some('b'), None),
            Opt::flag("bogus-free", None, Some("bold")).whole_only(),
        ];
        let args: Vec<OsString> = ["--backup", "x", "--backup=t", "--ba", "-b", "--bold"]
            .iter()
            .map(OsString::from)
            .collect();
        let p = parse(&args, OPTS).unwrap();
        assert_eq!(
            p.opts,
            vec![
                ("backup", None),
                ("backup", Some("t".into())),
                ("backup", None),
                ("backup", None),
                ("bogus-free", None),
            ]
        );
        assert_eq!(p.operands, vec![OsString::from("x")]);
        // A whole-only name is no candidate for an abbreviation.
        let bo: Vec<OsString> = vec!["--bo".into()];
        assert_eq!(parse(&bo, OPTS).unwrap_err(), "unrecognized option '--bo'");
    }

    #[test]
    fn mistakes_as_glibc_words_them() {
        for (args, want) in [
            (&["-x"][..], "invalid option -- 'x'"),
            (&["-l"], "option requires an argument -- 'l'"),
            (&["--length"], "option '--length' requires an argument"),
            (&["--check=1"], "option '--check' doesn't allow an argument"),
            (&["--bogus=1"], "unrecognized option '--bogus=1'"),
            (
                &["--st"],
                "option '--st' is ambiguous; possibilities: '--status' '--strict'",
            ),
        ] {
            assert_eq!(run(args).unwrap_err(), want, "{args:?}");
        }
    }
}
