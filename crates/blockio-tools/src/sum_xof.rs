//! `b3sum -l` of more than [`INLINE_MAX`] bytes: BLAKE3's extendable
//! output streamed to the output in pieces of 64 KiB, in bounded
//! memory, as b3sum streams it, whatever the length.
//!
//! Shorter outputs are made whole by the hashing workers and handed on as
//! one digest (see [`crate::sum_tool::print_sums`]). A longer one cannot
//! be: its bytes come from the hash's final state, which only the output
//! reader holds. So here each file is hashed in turn on the calling thread
//! (read in 1 MiB pieces, as standard input is), and its line written
//! around the output read piece by piece: the time goes to writing the
//! output, which is the length asked for per file.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::algo::{Algo, Blake3Params, Hasher};
use crate::sum::{SumError, STDIN};
use crate::sum_program::{Format, Tool};

/// The longest output made whole in memory, as one digest; longer ones
/// are streamed here.
pub const INLINE_MAX: usize = 1 << 20;

/// Bytes of output read from the hash at a time.
const PIECE: usize = 64 << 10;

/// The parameters of `algo` when its output is streamed here: BLAKE3 of
/// more than [`INLINE_MAX`] bytes.
pub(crate) fn streamed(algo: Algo) -> Option<&'static Blake3Params> {
    match algo {
        Algo::Blake3With(p) if p.len > INLINE_MAX => Some(p),
        _ => None,
    }
}

/// Hashes `files` in order (standard input for `-`, or when there are
/// none) and writes each one's line with its output of `params.len` bytes
/// streamed; problems go to `err` as the tool reports them. With the key
/// on standard input, `-` is refused in its place. Returns whether every
/// file was hashed.
pub(crate) fn print_sums(
    tool: &Tool,
    params: &Blake3Params,
    files: &[PathBuf],
    format: Format,
    out: &mut impl io::Write,
    err: &mut impl io::Write,
) -> io::Result<bool> {
    let files = crate::sum::or_stdin(files);
    let mut ok = true;
    for path in files.iter() {
        let stdin = path.as_os_str() == STDIN;
        if stdin && tool.key_on_stdin() {
            ok = false;
            out.flush()?;
            tool.say(err, "-: Cannot open `-` in keyed mode")?;
            continue;
        }
        let hashed = open(path, stdin).and_then(|f| hash(tool.algo, f));
        match hashed {
            Ok(h) => write_line(out, h, params, format, path)?,
            Err(error) => {
                ok = false;
                out.flush()?;
                let e = SumError {
                    path: path.clone(),
                    error,
                };
                tool.say_unreadable(err, &e)?;
            }
        }
    }
    out.flush()?;
    Ok(ok)
}

/// `path` to read from (standard input for `-`); a directory is refused
/// (`EISDIR`), as the hashing workers refuse it.
fn open(path: &Path, stdin: bool) -> io::Result<File> {
    if stdin {
        return crate::sum::stdin();
    }
    let f = File::open(path)?;
    if f.metadata()?.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok(f)
}

/// The hash of everything `r` yields.
fn hash(algo: Algo, mut r: impl Read) -> io::Result<Hasher> {
    let mut h = Hasher::new(algo);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(h),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes the line of `name` (b3sum's: its prefix, the output, its
/// suffix; the output alone with `--no-names`, its bytes with `--raw`),
/// the output read from `h` a piece at a time.
fn write_line(
    out: &mut impl io::Write,
    h: Hasher,
    params: &Blake3Params,
    format: Format,
    name: &Path,
) -> io::Result<()> {
    let Some(mut reader) = h.finish_xof() else {
        return Err(io::Error::other("not an extendable-output hash"));
    };
    let (prefix, suffix) = if format.raw {
        (Vec::new(), Vec::new())
    } else if format.no_names {
        (Vec::new(), b"\n".to_vec())
    } else {
        split_line(name, format.tag)
    };
    out.write_all(&prefix)?;
    let mut piece = vec![0u8; PIECE];
    let mut text = Vec::with_capacity(2 * PIECE);
    let mut left = params.len;
    while left > 0 {
        let n = left.min(PIECE);
        reader.fill(&mut piece[..n]);
        if format.raw {
            out.write_all(&piece[..n])?;
        } else {
            text.clear();
            hex_into(&mut text, &piece[..n]);
            out.write_all(&text)?;
        }
        left -= n;
    }
    out.write_all(&suffix)
}

/// b3sum's line for `name` cut where the digest goes: before it, after it.
fn split_line(name: &Path, tag: bool) -> (Vec<u8>, Vec<u8>) {
    let mut line = crate::names::b3sum_tool_line("", name.as_os_str(), tag);
    // `BLAKE3 (name) = <hex>\n`; `<hex>  name\n`, after a backslash when
    // the name is escaped (the line then starts with it; a plain line
    // otherwise starts with the two spaces).
    let at = if tag {
        line.len() - 1
    } else {
        usize::from(line.first() == Some(&b'\\'))
    };
    let suffix = line.split_off(at);
    (line, suffix)
}

/// Appends `bytes` in lowercase hex.
fn hex_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::Blake3Mode;

    fn params(len: usize, seek: u64) -> &'static Blake3Params {
        Box::leak(Box::new(Blake3Params {
            mode: Blake3Mode::Hash,
            len,
            seek,
        }))
    }

    /// The streamed line is the one made whole, piece boundaries and all.
    #[test]
    fn streamed_output_is_the_whole_digest() {
        for (len, seek) in [(PIECE + 5, 0), (3 * PIECE, 7), (1, 3)] {
            let p = params(len, seek);
            let algo = Algo::Blake3With(p);
            let whole = {
                let mut h = Hasher::new(algo);
                h.update(b"hello");
                h.finish_hex()
            };
            for (tag, name) in [(false, "plain"), (false, "a\\b"), (true, "x\ny")] {
                let format = Format {
                    tag,
                    ..Format::default()
                };
                let mut out = Vec::new();
                let h = hash(algo, &b"hello"[..]).unwrap();
                write_line(&mut out, h, p, format, Path::new(name)).unwrap();
                let expected = crate::names::b3sum_tool_line(&whole, name.as_ref(), tag);
                assert!(out == expected, "len {len} seek {seek} {name:?} tag {tag}");
            }
        }
    }

    #[test]
    fn only_long_blake3_outputs_are_streamed() {
        assert!(streamed(Algo::Blake3).is_none());
        assert!(streamed(Algo::Blake3With(params(INLINE_MAX, 0))).is_none());
        assert!(streamed(Algo::Blake3With(params(INLINE_MAX + 1, 0))).is_some());
    }
}
