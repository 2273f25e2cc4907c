//! File names in checksum lines: GNU coreutils' escaping, as `sha256sum`
//! and `b3sum` write and read it.
//!
//! A name holding a backslash, a newline or a carriage return is written
//! with those escaped (`\\`, `\n`, `\r`) and the whole line starts with a
//! backslash; other bytes, including invalid UTF-8, are written as they
//! are. `b3sum` 1.2 leaves a carriage return as it is ([`b3sum_line`],
//! `blockio sum`'s BLAKE3 lines); b3sum 1.8 escapes it, and writes a name
//! that is not UTF-8 with U+FFFD ([`b3sum_tool_line`], the `b3sum` tool's
//! lines). In a list, the digest and the name end at a NUL byte (the
//! coreutils read them as C strings).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::algo::Algo;

/// The checksum line for `name`: `<hex>  <name>\n`, escaped if needed.
pub fn line(hex: &str, name: &OsStr) -> Vec<u8> {
    escaped_line(name, |out, name| {
        out.extend_from_slice(hex.as_bytes());
        out.extend_from_slice(b"  ");
        out.extend_from_slice(name);
    })
}

/// The checksum line for `name` as `b3sum` 1.2 writes it: `<hex>  <name>\n`,
/// a backslash and a newline escaped (and the line started with a
/// backslash), a carriage return written as it is.
pub fn b3sum_line(hex: &str, name: &OsStr) -> Vec<u8> {
    let raw = name.as_bytes();
    let needs = raw.iter().any(|&b| matches!(b, b'\\' | b'\n'));
    let mut out = Vec::with_capacity(raw.len() + hex.len() + 4);
    if needs {
        out.push(b'\\');
    }
    out.extend_from_slice(hex.as_bytes());
    out.extend_from_slice(b"  ");
    escape_b3sum_into(&mut out, raw, needs);
    out.push(b'\n');
    out
}

/// The line the `b3sum` tool writes for `name`, as b3sum 1.8 does: the
/// name made UTF-8 (each invalid sequence becomes U+FFFD, as Rust's
/// `to_string_lossy`), a backslash, a newline and a carriage return
/// escaped (and the line started with a backslash); `<hex>  <name>\n`, or
/// `BLAKE3 (<name>) = <hex>\n` for `--tag`.
pub fn b3sum_tool_line(hex: &str, name: &OsStr, tag: bool) -> Vec<u8> {
    let name = name.to_string_lossy();
    let raw = name.as_bytes();
    let needs = raw.iter().any(|&b| matches!(b, b'\\' | b'\n' | b'\r'));
    let mut out = Vec::with_capacity(raw.len() + hex.len() + 16);
    if needs {
        out.push(b'\\');
    }
    if tag {
        out.extend_from_slice(b"BLAKE3 (");
        escape_into(&mut out, raw, needs);
        out.extend_from_slice(b") = ");
        out.extend_from_slice(hex.as_bytes());
    } else {
        out.extend_from_slice(hex.as_bytes());
        out.extend_from_slice(b"  ");
        escape_into(&mut out, raw, needs);
    }
    out.push(b'\n');
    out
}

/// Appends `raw` to `out`, with `\\` and `\n` for a backslash and a
/// newline when `needs` (b3sum's escaping: a carriage return stays as it
/// is).
pub(crate) fn escape_b3sum_into(out: &mut Vec<u8>, raw: &[u8], needs: bool) {
    for &b in raw {
        match (needs, b) {
            (true, b'\\') => out.extend_from_slice(b"\\\\"),
            (true, b'\n') => out.extend_from_slice(b"\\n"),
            _ => out.push(b),
        }
    }
}

/// The `--tag` line for `name`: `<TAG> (<name>) = <hex>\n`, escaped as in
/// [`line()`] (coreutils' BSD-style format).
pub fn tag_line(tag: &str, hex: &str, name: &OsStr) -> Vec<u8> {
    escaped_line(name, |out, name| {
        out.extend_from_slice(tag.as_bytes());
        out.extend_from_slice(b" (");
        out.extend_from_slice(name);
        out.extend_from_slice(b") = ");
        out.extend_from_slice(hex.as_bytes());
    })
}

/// A sum line that `body` writes around the (escaped) name, as both tools
/// write it: a name holding a backslash, a newline or a carriage return
/// is escaped and the line starts with a backslash.
fn escaped_line(name: &OsStr, body: impl FnOnce(&mut Vec<u8>, &[u8])) -> Vec<u8> {
    let raw = name.as_bytes();
    let needs = raw.iter().any(|&b| matches!(b, b'\\' | b'\n' | b'\r'));
    let mut name = Vec::with_capacity(raw.len() + 4);
    escape_into(&mut name, raw, needs);
    let mut out = Vec::with_capacity(name.len() + 80);
    if needs {
        out.push(b'\\');
    }
    body(&mut out, &name);
    out.push(b'\n');
    out
}

/// A check result line, `<name>: <status>\n`, the name escaped (and the
/// line started with a backslash) as the reference tool escapes it: `b3sum
/// -c` when a name holds a backslash or a newline, leaving a carriage
/// return as it is (`b3sum_style`), `sha256sum -c` only when it holds a
/// newline.
pub fn status_line(name: &OsStr, status: &str, b3sum_style: bool) -> Vec<u8> {
    let raw = name.as_bytes();
    let needs = raw.contains(&b'\n') || (b3sum_style && raw.contains(&b'\\'));
    let mut out = Vec::with_capacity(raw.len() + status.len() + 4);
    if needs {
        out.push(b'\\');
    }
    for &b in raw {
        match (needs, b) {
            (true, b'\\') => out.extend_from_slice(b"\\\\"),
            (true, b'\n') => out.extend_from_slice(b"\\n"),
            // sha256sum -c escapes a carriage return, b3sum -c does not.
            (true, b'\r') if !b3sum_style => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
    out.extend_from_slice(b": ");
    out.extend_from_slice(status.as_bytes());
    out.push(b'\n');
    out
}

/// Appends `raw` to `out`, with `\\`, `\n` and `\r` for a backslash, a
/// newline and a carriage return when `needs` (coreutils' escaping of a
/// name in a checksum line).
pub(crate) fn escape_into(out: &mut Vec<u8>, raw: &[u8], needs: bool) {
    for &b in raw {
        match (needs, b) {
            (true, b'\\') => out.extend_from_slice(b"\\\\"),
            (true, b'\n') => out.extend_from_slice(b"\\n"),
            (true, b'\r') => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

/// One line of a checksum list, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The digest, lowercase hex.
    pub hex: String,
    /// The file it is for.
    pub name: OsString,
    /// The algorithm a `--tag` line names (`None` for the plain format).
    pub algo: Option<Algo>,
}

/// Parses one line of a checksum list (without its newline) in any format
/// `sha256sum` and `b3sum` write: `<hex>  <name>`, `<hex> *<name>`
/// (binary-mode marker), `<hex> <name>` (BSD `md5 -r`), `<TAG> (<name>) =
/// <hex>` (`--tag`) and OpenSSL's `<TAG>(<name>)= <hex>`, each maybe after
/// blanks, maybe escaped (a leading backslash) and maybe ending in a
/// carriage return. `None` if it is none of these, or a tagged line for an
/// algorithm we do not have. A list is read with [`ListState`], which
/// tells a BSD single-space line from the others as `sha256sum -c` does.
pub fn parse(line: &[u8]) -> Option<Listed> {
    ListState::default().parse(line)
}

/// What the plain lines of a list read so far decided: whether a single
/// space separates digest and name (BSD `md5 -r` lists), so that a name
/// may begin with a space or a `*`, or a mode character follows the
/// space. As `sha256sum -c`, the first plain line decides for the list,
/// and a line of the other kind is improper.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListState {
    single_space: Option<bool>,
}

impl ListState {
    /// Parses one line (see [`parse`]).
    pub fn parse(&mut self, line: &[u8]) -> Option<Listed> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let blanks = line
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
        let line = &line[blanks..];
        let (escaped, line) = match line.strip_prefix(b"\\") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let (hex, raw, algo) = match parse_tag(line) {
            Some(t) => t,
            None => {
                let (hex, raw) = self.parse_plain(line)?;
                (hex, raw, None)
            }
        };
        // The digest and the name end at a NUL byte, as the coreutils
        // read them (as C strings); an escaped name may not hold one.
        let hex = up_to_nul(hex);
        if hex.is_empty() || !hex.iter().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let name = if escaped {
            unescape(raw)?
        } else {
            up_to_nul(raw).to_vec()
        };
        if name.is_empty() {
            return None;
        }
        Some(Listed {
            hex: String::from_utf8(hex.to_ascii_lowercase()).ok()?,
            name: OsString::from_vec(name),
            algo,
        })
    }

    /// `<hex> <name>`, `<hex>  <name>` or `<hex> *<name>`.
    fn parse_plain<'l>(&mut self, line: &'l [u8]) -> Option<(&'l [u8], &'l [u8])> {
        let end = line.iter().position(|b| !b.is_ascii_hexdigit())?;
        let (hex, rest) = line.split_at(end);
        let rest = rest.strip_prefix(b" ")?;
        let marked = rest.len() > 1 && matches!(rest.first(), Some(b' ' | b'*'));
        if !marked || self.single_space == Some(true) {
            if self.single_space == Some(false) {
                return None;
            }
            self.single_space = Some(true);
            return Some((hex, rest));
        }
        self.single_space = Some(false);
        Some((hex, &rest[1..]))
    }
}

/// `<TAG> (<name>) = <hex>` or `<TAG>(<name>)= <hex>`: the name is
/// everything between the `(` after the tag and the last `)`, which is
/// followed by `=` between blanks.
fn parse_tag(line: &[u8]) -> Option<(&[u8], &[u8], Option<Algo>)> {
    let tag_len = line
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-')
        .count();
    let tag = &line[..tag_len];
    if tag.is_empty() {
        return None;
    }
    let rest = &line[tag_len..];
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    let rest = rest.strip_prefix(b"(")?;
    let close = rest.iter().rposition(|&b| b == b')')?;
    let after = trim_blanks(&rest[close + 1..]);
    let hex = trim_blanks(after.strip_prefix(b"=")?);
    let algo = Algo::from_tag(tag)?;
    Some((hex, &rest[..close], Some(algo)))
}

/// `s` without its leading blanks (spaces and tabs).
pub(crate) fn trim_blanks(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

/// `s` up to its first NUL byte: the tools read the digest and the name of
/// a list line as C strings, which end there (so `-z` output, whose lines
/// end with NUL, checks, and `name\0junk` names `name`).
pub(crate) fn up_to_nul(s: &[u8]) -> &[u8] {
    s.iter().position(|&b| b == 0).map_or(s, |n| &s[..n])
}

/// Undoes the escaping of a name (`\\`, `\n`, `\r`); `None` for any
/// other escape, a trailing backslash or a NUL byte (the tools refuse an
/// escaped name with one).
pub(crate) fn unescape(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut it = raw.iter();
    while let Some(&b) = it.next() {
        if b == 0 {
            return None;
        }
        if b == b'\\' {
            out.push(match it.next()? {
                b'\\' => b'\\',
                b'n' => b'\n',
                b'r' => b'\r',
                _ => return None,
            });
        } else {
            out.push(b);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_escaped_names_round_trip() {
        for name in [
            &b"plain.txt"[..],
            b"with space",
            b"back\\slash",
            b"new\nline",
            b"\xff\xfe not utf-8",
        ] {
            let os = OsStr::from_bytes(name);
            let l = line("ab12", os);
            let p = parse(&l[..l.len() - 1]).unwrap();
            assert_eq!(p.hex, "ab12");
            assert_eq!(p.name.as_bytes(), name);
            let t = tag_line("SHA256", "ab12", os);
            let p = parse(&t[..t.len() - 1]).unwrap();
            assert_eq!((p.hex.as_str(), p.name.as_bytes()), ("ab12", name));
            assert_eq!(p.algo, Some(Algo::Sha256));
        }
        assert_eq!(line("ab", OsStr::new("a\\b")), b"\\ab  a\\\\b\n");
        assert_eq!(line("ab", OsStr::new("a b")), b"ab  a b\n");
        assert!(parse(b"not a checksum line").is_none());
        // As sha256sum -c: escaped only for a newline; as b3sum -c, for a
        // backslash too.
        assert_eq!(status_line(OsStr::new("a\\b"), "OK", false), b"a\\b: OK\n");
        assert_eq!(
            status_line(OsStr::new("a\\b"), "OK", true),
            b"\\a\\\\b: OK\n"
        );
        assert_eq!(
            status_line(OsStr::new("a\n\\b"), "OK", false),
            b"\\a\\n\\\\b: OK\n"
        );
        assert_eq!(
            status_line(OsStr::new("a b"), "FAILED", true),
            b"a b: FAILED\n"
        );
    }

    #[test]
    fn every_list_format_parses() {
        let want = |name: &str, algo| Listed {
            hex: "ab12".into(),
            name: name.into(),
            algo,
        };
        for (line, expect) in [
            (&b"ab12  f"[..], want("f", None)),
            (b"AB12  f", want("f", None)),
            (b"ab12 *f", want("f", None)),
            (b"ab12 f", want("f", None)),
            (b"ab12   f", want(" f", None)),
            (b" \tab12  f", want("f", None)),
            // As sha256sum -c: one space, then the name " ".
            (b"ab12  ", want(" ", None)),
            (b"SHA256(f)= ab12", want("f", Some(Algo::Sha256))),
            (b"MD5 (f)=ab12", want("f", Some(Algo::Md5))),
            (b"ab12  f\r", want("f", None)),
            (b"SHA256 (f) = ab12", want("f", Some(Algo::Sha256))),
            (
                b"BLAKE3 (a (b) = c) = ab12\r",
                want("a (b) = c", Some(Algo::Blake3)),
            ),
            (b"\\BLAKE3 (n\\nl) = ab12", want("n\nl", Some(Algo::Blake3))),
        ] {
            assert_eq!(
                parse(line),
                Some(expect),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        for bad in [&b"XYZ (f) = ab12"[..], b"ab12", b"zz  f", b"\\ab12  a\\qb"] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_first_plain_line_decides_single_space_lists() {
        // BSD `md5 -r` lists: one space, then a name that may start with
        // a space or a star.
        let mut bsd = ListState::default();
        let name = |l: Option<Listed>| l.map(|l| l.name.into_string().unwrap());
        assert_eq!(name(bsd.parse(b"ab12 a")), Some("a".into()));
        assert_eq!(name(bsd.parse(b"ab12  b")), Some(" b".into()));
        assert_eq!(name(bsd.parse(b"ab12 *c")), Some("*c".into()));
        // A list in the usual format cannot switch to single spaces.
        let mut gnu = ListState::default();
        assert_eq!(name(gnu.parse(b"ab12  b")), Some("b".into()));
        assert_eq!(name(gnu.parse(b"ab12 *c")), Some("c".into()));
        assert_eq!(gnu.parse(b"ab12 a"), None);
    }
}
