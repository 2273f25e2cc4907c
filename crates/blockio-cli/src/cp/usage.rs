//! A mistake on the command line, in GNU's words, and writing what
//! `--help` and `--version` print.

use blockio_tools::quote::quote_locale;

/// A usage error: GNU's message, then (`hint`) the pointer to `--help`.
#[derive(Debug)]
pub(super) struct Usage {
    /// GNU's message.
    pub msg: String,
    /// Whether the pointer to `--help` follows it.
    pub hint: bool,
}

/// A usage error followed by the pointer to `--help`.
#[allow(non_snake_case)]
pub(super) fn Usage(msg: String) -> Usage {
    Usage { msg, hint: true }
}

/// A usage error that GNU reports alone.
pub(super) fn fatal(msg: String) -> Usage {
    Usage { msg, hint: false }
}

/// The value of `arg` among `words`, as GNU's `argmatch` finds it: the
/// word itself, or the only value the words it begins stand for; else
/// GNU's message ("invalid" or "ambiguous" argument) with the valid words,
/// those of one value on one line.
pub(super) fn argmatch<T: Copy + PartialEq>(
    arg: &str,
    option: &str,
    words: &[(&str, T)],
) -> Result<T, Usage> {
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

/// Writes `text` to standard output, flushed; a failure (`> /dev/full`)
/// is GNU's "write error" with exit status 1, never a panic.
pub(super) fn write_out(text: &str) -> Result<(), Usage> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Usage {
            msg: format!("write error: {}", blockio_tools::reason::reason(&e)),
            hint: false,
        })
}
