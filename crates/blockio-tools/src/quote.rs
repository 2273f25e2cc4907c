//! File names in messages, quoted as GNU coreutils quote them (the
//! `shell-escape-always` style): a name can be pasted back into a shell,
//! and a newline or a stray byte in it cannot forge or split a line of
//! the message.
//!
//! * `'name'` in the usual case;
//! * `"it's"` when the name holds a single quote and nothing a shell
//!   would expand inside double quotes;
//! * `'it'\''s$x'` when it holds both;
//! * control characters and bytes that are not UTF-8 as `$'…'` escapes
//!   between quoted runs: `'x'$'\n''y'`, `'bad'$'\377'`, and after an
//!   empty quoted run when the name starts with one: `''$'\377'`;
//! * names with a single quote that end in an escape as gnulib's
//!   two-pass quoting leaves them (`'''it'\''s'$'\n'`, see `render`).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `p` quoted for a message.
pub fn quote(p: &Path) -> String {
    quote_bytes(p.as_os_str().as_bytes())
}

/// `p` as the coreutils name a file in most messages (`quotef`): as it is
/// when it holds only characters a shell takes literally (printable
/// characters beyond ASCII among them, as in a UTF-8 locale), else quoted
/// as [`quote`] does.
pub fn quote_if_needed(p: &Path) -> String {
    let b = p.as_os_str().as_bytes();
    match std::str::from_utf8(b) {
        Ok(t)
            if !t.is_empty()
                && t.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || "%+,-./:=@_^".contains(c)
                        || (!c.is_ascii() && !c.is_control())
                }) =>
        {
            t.to_string()
        }
        _ => quote_bytes(b),
    }
}

/// `b` quoted for a message (see the module doc).
pub fn quote_bytes(b: &[u8]) -> String {
    render(pieces(b))
}

/// Quoted text and `$'…'` escapes for `pieces`, written as gnulib's
/// `quotearg` writes them in the `shell-escape-always` style.
///
/// A name holding a single quote is quoted twice over there: once to see
/// whether double quotes would do, then again for the output. Whether an
/// escape run is open (`'$'…` written, its closing `''` not yet) carries
/// over from the end of the first pass into the second, so a name that
/// holds a single quote and ends in an escape starts as if one were open:
/// its first printable character gets a `''` first (`'''it'\''s'$'\n'`),
/// a first escape goes without its `'$'` (`'\n''it'\''s'$'\n'`), and a
/// first single quote closes it. The coreutils print those names so.
fn render(pieces: Vec<Piece>) -> String {
    if let [Piece::Text(t)] = pieces.as_slice() {
        if t.contains('\'') && !t.contains(['"', '$', '`', '\\', '!']) {
            return format!("\"{t}\"");
        }
    }
    let has_quote = pieces
        .iter()
        .any(|p| matches!(p, Piece::Text(t) if t.contains('\'')));
    // An escape run open: its `''` is written before the next printable
    // character.
    let mut escape_open = has_quote && matches!(pieces.last(), Some(Piece::Escaped(_)));
    let mut out = String::from("'");
    for p in pieces {
        match p {
            Piece::Text(t) => {
                for c in t.chars() {
                    if c == '\'' {
                        out.push_str("'\\'");
                        escape_open = false;
                    } else if escape_open {
                        out.push_str("''");
                        escape_open = false;
                    }
                    out.push(c);
                }
            }
            Piece::Escaped(bytes) => {
                if !escape_open {
                    out.push_str("'$'");
                    escape_open = true;
                }
                for c in bytes {
                    match c {
                        0x07 => out.push_str("\\a"),
                        0x08 => out.push_str("\\b"),
                        b'\t' => out.push_str("\\t"),
                        b'\n' => out.push_str("\\n"),
                        0x0b => out.push_str("\\v"),
                        0x0c => out.push_str("\\f"),
                        b'\r' => out.push_str("\\r"),
                        c => out.push_str(&format!("\\{c:03o}")),
                    }
                }
            }
        }
    }
    out.push('\'');
    out
}

/// Runs of printable text and runs of bytes to escape.
enum Piece {
    Text(String),
    Escaped(Vec<u8>),
}

fn pieces(mut b: &[u8]) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let text = |out: &mut Vec<Piece>, s: &str| {
        for ch in s.chars() {
            if ch.is_control() {
                let mut buf = [0u8; 4];
                escaped(out, ch.encode_utf8(&mut buf).as_bytes());
            } else {
                match out.last_mut() {
                    Some(Piece::Text(t)) => t.push(ch),
                    _ => out.push(Piece::Text(ch.to_string())),
                }
            }
        }
    };
    while !b.is_empty() {
        match std::str::from_utf8(b) {
            Ok(s) => {
                text(&mut out, s);
                break;
            }
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                text(&mut out, std::str::from_utf8(good).expect("valid prefix"));
                let bad = e.error_len().unwrap_or(rest.len());
                escaped(&mut out, &rest[..bad]);
                b = &rest[bad..];
            }
        }
    }
    out
}

fn escaped(out: &mut Vec<Piece>, bytes: &[u8]) {
    match out.last_mut() {
        Some(Piece::Escaped(e)) => e.extend_from_slice(bytes),
        _ => out.push(Piece::Escaped(bytes.to_vec())),
    }
}

/// `p` as the coreutils name a file in a message in the C locale
/// (`quotef`: the `shell-escape` style, with `:` quoted too): as it is when
/// no byte of it is special to a shell, else quoted as [`quote_bytes`]
/// quotes, with every byte outside printable ASCII escaped (in the C
/// locale no such byte is printable: `'caf'$'\303\251'`).
pub fn quotef_c_locale(p: &Path) -> String {
    let b = p.as_os_str().as_bytes();
    let special = |(i, &c): (usize, &u8)| match c {
        b'#' | b'~' => i == 0,
        b'{' | b'}' => b.len() == 1,
        b'!' | b'"' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b':' | b';' | b'<' | b'='
        | b'>' | b'?' | b'[' | b'\\' | b'^' | b'`' | b'|' | b' ' => true,
        c => !(0x21..0x7f).contains(&c),
    };
    if !b.is_empty() && !b.iter().enumerate().any(special) {
        return String::from_utf8_lossy(b).into_owned();
    }
    render(ascii_pieces(b))
}

/// `b` as the coreutils quote an argument in a message in the C locale
/// (`quote`: the `locale` style): between single quotes, a single quote
/// and a backslash escaped with a backslash, control characters as C
/// escapes (`\t`), every other byte outside printable ASCII in octal
/// (`'\303\251'`).
pub fn quote_c_locale(b: &[u8]) -> String {
    let mut out = String::from("'");
    for &c in b {
        match c {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x0b => out.push_str("\\v"),
            0x20..=0x7e => out.push(c as char),
            c => out.push_str(&format!("\\{c:03o}")),
        }
    }
    out.push('\'');
    out
}

/// `s` as the coreutils quote an argument in a message (`quote`: the
/// `locale` style) in the locale the environment names: between curly
/// quotes (`‘x’`) when its character set is UTF-8, as [`quote_c_locale`]
/// otherwise. In curly quotes a backslash is escaped and control
/// characters are C escapes; every other character is written as it is.
///
/// The character set is read from `LC_ALL`, `LC_CTYPE` or `LANG`, the
/// first one set, as the C library picks it; a UTF-8 locale that is not
/// installed (which the C library would replace by `C`) still counts as
/// UTF-8.
pub fn quote_locale(s: &str) -> String {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let name = var("LC_ALL")
        .or_else(|| var("LC_CTYPE"))
        .or_else(|| var("LANG"));
    if !name.as_deref().is_some_and(names_utf8) {
        return quote_c_locale(s.as_bytes());
    }
    let mut out = String::from("\u{2018}");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => match u8::try_from(c) {
                Ok(b) => out.push_str(quote_c_locale(&[b]).trim_matches('\'')),
                Err(_) => out.push(c),
            },
            c => out.push(c),
        }
    }
    out.push('\u{2019}');
    out
}

/// Whether a locale name (`lang_TERRITORY.charset@modifier`) names the
/// UTF-8 character set (`C.UTF-8`, `en_US.utf8`).
fn names_utf8(locale: &str) -> bool {
    let charset = locale.split_once('.').map_or("", |(_, c)| c);
    let charset = charset.split('@').next().unwrap_or("");
    charset.replace('-', "").eq_ignore_ascii_case("utf8")
}

/// Runs of printable ASCII and runs of every other byte.
fn ascii_pieces(b: &[u8]) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for &c in b {
        if (0x20..0x7f).contains(&c) {
            match out.last_mut() {
                Some(Piece::Text(t)) => t.push(c as char),
                _ => out.push(Piece::Text((c as char).to_string())),
            }
        } else {
            escaped(&mut out, &[c]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{names_utf8, quote_bytes, quote_if_needed};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// Each case as GNU cp 9.1 printed it in "can make relative symbolic
    /// links only in current directory" (`quotef`), in a UTF-8 locale.
    #[test]
    fn quotes_only_what_needs_it_as_gnu_does() {
        for (name, want) in [
            (&b"d/plain-1.x"[..], "d/plain-1.x"),
            ("d/\u{e9}t\u{e9}2".as_bytes(), "d/\u{e9}t\u{e9}2"),
            (b"with space", "'with space'"),
            (b"new\nline", "'new'$'\\n''line'"),
            (b"bad\xffz", "'bad'$'\\377''z'"),
            (b"\xff", "''$'\\377'"),
            (b"\nx", "''$'\\n''x'"),
        ] {
            let p = Path::new(std::ffi::OsStr::from_bytes(name));
            assert_eq!(quote_if_needed(p), want, "{name:?}");
        }
    }

    /// Each case as GNU cp 9.1 printed it in "cannot stat …".
    #[test]
    fn quotes_as_gnu_does() {
        for (name, want) in [
            (&b"plain"[..], "'plain'"),
            (b"a b", "'a b'"),
            (b"a$b", "'a$b'"),
            (b"a'b", "\"a'b\""),
            (b"it's$x", "'it'\\''s$x'"),
            (b"x\ny", "'x'$'\\n''y'"),
            (b"a\tb", "'a'$'\\t''b'"),
            (b"bad\xffz", "'bad'$'\\377''z'"),
            (b"q\x01", "'q'$'\\001'"),
            (b"\xff", "''$'\\377'"),
            (b"\xff/f", "''$'\\377''/f'"),
            (b"\n", "''$'\\n'"),
            (b"it's\n", r"'''it'\''s'$'\n'"),
            (b"\nit's\n", r"'\n''it'\''s'$'\n'"),
            (b"\x01'\x02", r"'\001'\'''$'\002'"),
            (b"'a\n", r"''\''a'$'\n'"),
            (b"'\n", r"''\'''$'\n'"),
            (b"\n'x", r"''$'\n'\''x'"),
            (b"a'b\nc", r"'a'\''b'$'\n''c'"),
            (b"", "''"),
            ("h\u{e9}llo".as_bytes(), "'h\u{e9}llo'"),
        ] {
            assert_eq!(quote_bytes(name), want, "{name:?}");
        }
    }

    #[test]
    fn utf8_locales_are_told_by_their_character_set() {
        for name in ["C.UTF-8", "en_US.utf8", "de_DE.UTF-8@euro", "C.utf-8"] {
            assert!(names_utf8(name), "{name}");
        }
        for name in ["C", "POSIX", "en_US", "en_US.ISO-8859-1", "utf8"] {
            assert!(!names_utf8(name), "{name}");
        }
    }
}
