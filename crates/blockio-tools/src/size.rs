//! Byte sizes on the command line: a number of bytes, or with a `K`, `M` or
//! `G` suffix (powers of 1024, either case), as `--block-size 1M`.

/// Parses `s` as a byte size; the error names what was given and the form
/// expected.
pub fn parse(s: &str) -> Result<usize, String> {
    let (num, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("not a size: {s:?} (bytes, or with a K, M or G suffix)"))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn numbers_and_suffixes() {
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("64k"), Ok(64 << 10));
        assert_eq!(parse("1M"), Ok(1 << 20));
        assert_eq!(parse("2g"), Ok(2 << 30));
        // The last two overflow: the number itself, and the number times 2^30.
        for bad in [
            "",
            "M",
            "1.5M",
            "-1",
            "1T",
            "99999999999999999999",
            "17179869184G",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
