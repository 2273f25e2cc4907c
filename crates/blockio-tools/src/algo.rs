//! Hash algorithms.

use std::fmt;
use std::str::FromStr;

use sha2::Digest;

/// A checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algo {
    /// BLAKE3, 256-bit (as `b3sum`).
    #[default]
    Blake3,
    /// SHA-256 (as `sha256sum`).
    Sha256,
    /// XXH3, 64-bit, big-endian hex (as `xxhsum -H3` prints the digest).
    Xxh3,
    /// CRC-32C (Castagnoli), 8 hex digits.
    Crc32c,
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algo::Blake3 => "blake3",
            Algo::Sha256 => "sha256",
            Algo::Xxh3 => "xxh3",
            Algo::Crc32c => "crc32c",
        })
    }
}

impl FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> Result<Algo, String> {
        match s {
            "blake3" => Ok(Algo::Blake3),
            "sha256" => Ok(Algo::Sha256),
            "xxh3" => Ok(Algo::Xxh3),
            "crc32c" => Ok(Algo::Crc32c),
            _ => Err(format!(
                "unknown algorithm {s:?}: expected blake3, sha256, xxh3 or crc32c"
            )),
        }
    }
}

impl Algo {
    /// The name `--tag` lines carry (`SHA256 (f) = …`, `BLAKE3 (f) = …`).
    pub fn tag(self) -> &'static str {
        match self {
            Algo::Blake3 => "BLAKE3",
            Algo::Sha256 => "SHA256",
            Algo::Xxh3 => "XXH3",
            Algo::Crc32c => "CRC32C",
        }
    }

    /// The algorithm a `--tag` line names, if it is one of ours.
    pub fn from_tag(tag: &[u8]) -> Option<Algo> {
        Self::ALL.into_iter().find(|a| a.tag().as_bytes() == tag)
    }

    /// Hex digits in a digest.
    pub fn hex_len(self) -> usize {
        match self {
            Algo::Blake3 | Algo::Sha256 => 64,
            Algo::Xxh3 => 16,
            Algo::Crc32c => 8,
        }
    }

    /// Every algorithm.
    pub const ALL: [Algo; 4] = [Algo::Blake3, Algo::Sha256, Algo::Xxh3, Algo::Crc32c];
}

/// A running hash.
pub enum Hasher {
    /// BLAKE3.
    Blake3(Box<blake3::Hasher>),
    /// SHA-256.
    Sha256(sha2::Sha256),
    /// XXH3-64.
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
    /// CRC-32C.
    Crc32c(u32),
}

impl Hasher {
    /// A fresh hash of `algo`.
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
            Algo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algo::Xxh3 => Hasher::Xxh3(Box::new(xxhash_rust::xxh3::Xxh3::new())),
            Algo::Crc32c => Hasher::Crc32c(0),
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Blake3(h) => {
                // Large blocks are hashed on several cores (as b3sum does).
                if data.len() >= 1 << 20 {
                    h.update_rayon(data);
                } else {
                    h.update(data);
                }
            }
            Hasher::Sha256(h) => h.update(data),
            Hasher::Xxh3(h) => h.update(data),
            Hasher::Crc32c(c) => *c = crc32c::crc32c_append(*c, data),
        }
    }

    /// The digest as lowercase hex.
    pub fn finish_hex(self) -> String {
        match self {
            Hasher::Blake3(h) => h.finalize().to_hex().to_string(),
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::Xxh3(h) => format!("{:016x}", h.digest()),
            Hasher::Crc32c(c) => format!("{c:08x}"),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests_of_abc() {
        let h = |a| {
            let mut h = Hasher::new(a);
            h.update(b"abc");
            h.finish_hex()
        };
        assert_eq!(
            h(Algo::Sha256),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            h(Algo::Blake3),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert_eq!(h(Algo::Crc32c), "364b3fb7");
        assert_eq!(h(Algo::Xxh3), "78af5f94892f3950");
    }
}
