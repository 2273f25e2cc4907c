//! File names in checksum lines: GNU coreutils' escaping, as `sha256sum`
//! and `b3sum` write and read it.
//!
//! A name holding a backslash, a newline or a carriage return is written
//! with those escaped (`\\`, `\n`, `\r`) and the whole line starts with a
//! backslash. Other bytes, including invalid UTF-8, are written as they are.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The checksum line for `name`: `<hex>  <name>\n`, escaped if needed.
pub fn line(hex: &str, name: &OsStr) -> Vec<u8> {
    let raw = name.as_bytes();
    let needs = raw.iter().any(|&b| matches!(b, b'\\' | b'\n' | b'\r'));
    let mut out = Vec::with_capacity(hex.len() + raw.len() + 4);
    if needs {
        out.push(b'\\');
    }
    out.extend_from_slice(hex.as_bytes());
    out.extend_from_slice(b"  ");
    escape_into(&mut out, raw, needs);
    out.push(b'\n');
    out
}

/// A check result line, `<name>: <status>\n`, with the name escaped as in
/// [`line()`] (GNU `sha256sum -c` and `b3sum -c` print it so).
pub fn status_line(name: &OsStr, status: &str) -> Vec<u8> {
    let raw = name.as_bytes();
    let needs = raw.iter().any(|&b| matches!(b, b'\\' | b'\n' | b'\r'));
    let mut out = Vec::with_capacity(raw.len() + status.len() + 4);
    if needs {
        out.push(b'\\');
    }
    escape_into(&mut out, raw, needs);
    out.extend_from_slice(b": ");
    out.extend_from_slice(status.as_bytes());
    out.push(b'\n');
    out
}

fn escape_into(out: &mut Vec<u8>, raw: &[u8], needs: bool) {
    for &b in raw {
        match (needs, b) {
            (true, b'\\') => out.extend_from_slice(b"\\\\"),
            (true, b'\n') => out.extend_from_slice(b"\\n"),
            (true, b'\r') => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

/// Parses one line of a checksum file (without its newline) into the hex
/// digest and the name. `None` if it is not a checksum line.
pub fn parse(line: &[u8]) -> Option<(String, OsString)> {
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let sep = line.windows(2).position(|w| w == b"  ")?;
    let hex = std::str::from_utf8(&line[..sep]).ok()?;
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let raw = &line[sep + 2..];
    let name = if escaped {
        let mut out = Vec::with_capacity(raw.len());
        let mut it = raw.iter();
        while let Some(&b) = it.next() {
            if b == b'\\' {
                match it.next()? {
                    b'\\' => out.push(b'\\'),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    _ => return None,
                }
            } else {
                out.push(b);
            }
        }
        out
    } else {
        raw.to_vec()
    };
    if name.is_empty() {
        return None;
    }
    Some((hex.to_ascii_lowercase(), OsString::from_vec(name)))
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
            let (hex, back) = parse(&l[..l.len() - 1]).unwrap();
            assert_eq!(hex, "ab12");
            assert_eq!(back.as_bytes(), name);
        }
        assert_eq!(line("ab", OsStr::new("a\\b")), b"\\ab  a\\\\b\n");
        assert_eq!(line("ab", OsStr::new("a b")), b"ab  a b\n");
        assert!(parse(b"not a checksum line").is_none());
        assert_eq!(status_line(OsStr::new("a\\b"), "OK"), b"\\a\\\\b: OK\n");
        assert_eq!(status_line(OsStr::new("a b"), "FAILED"), b"a b: FAILED\n");
    }
}
