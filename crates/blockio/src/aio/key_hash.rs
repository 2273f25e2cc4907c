//! A hasher for map keys the engine picks itself: descriptors (numbers
//! the kernel hands out, lowest free first), the addresses of
//! operations' shared state and tokio's runtime ids (a counter). Nobody
//! outside the process chooses them, so the maps need no protection
//! against keys made to collide, which is what std's default hasher
//! (SipHash, keyed per process) pays for: on the thread-pool fallback,
//! where every receive that waits goes through two such maps several
//! times, SipHash took about 1,300 instructions per request under
//! mini-redis (`docs/benchmarks.md`).
//!
//! The hash is one 64 × 64 → 128-bit multiplication by an odd constant,
//! its two halves xor-ed: every bit of the key reaches the low bits that
//! pick a bucket and the high bits the table compares, so neither small
//! consecutive descriptors nor 16-byte-aligned addresses pile up.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by a descriptor or an address (see the [module](self)).
pub(crate) type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// The hasher of [`KeyMap`]: for integer keys; other input is folded in
/// eight bytes at a time.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

/// An odd constant with bits spread over the whole word (the fractional
/// part of the golden ratio, × 2^64).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl KeyHasher {
    fn mix(&mut self, word: u64) {
        let product = u128::from(self.0 ^ word) * u128::from(MULTIPLIER);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_i32(&mut self, n: i32) {
        // Sign-extended: any bijection of the key will do.
        self.mix(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash<T: std::hash::Hash>(key: T) -> u64 {
        BuildHasherDefault::<KeyHasher>::default().hash_one(key)
    }

    /// Asserts that `hashes`, of 1,024 distinct keys, spread like random
    /// ones over both the buckets the low 10 bits pick and the tags the
    /// top 7 bits make, which hashbrown compares before the keys: 1,024
    /// keys hashed at random fill about 647 of 1,024 buckets and all 128
    /// tags. Keys that pile up fill far fewer (the identity hash of
    /// 16-byte-aligned addresses fills 64 buckets; of any key below
    /// 2^57, one tag).
    fn assert_spread(hashes: impl Iterator<Item = u64>) {
        let hashes: Vec<u64> = hashes.collect();
        assert_eq!(hashes.len(), 1024);
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
        assert!(buckets.len() > 600, "{} buckets", buckets.len());
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(tags.len() > 120, "{} tags", tags.len());
    }

    #[test]
    fn consecutive_descriptors_spread_over_the_low_and_top_bits() {
        // The product's low half alone spreads these as well (it maps the
        // key's low 10 bits one to one); the fold is for keys whose low
        // bits are all alike, which the test of addresses checks.
        assert_spread((0..1024i32).map(hash));
    }

    #[test]
    fn aligned_addresses_spread_over_the_low_and_top_bits() {
        let base = 0x7f00_1234_5000usize;
        assert_spread((0..1024usize).map(|i| hash(base + 16 * i)));
    }

    #[test]
    fn a_map_finds_what_it_holds() {
        let mut map: KeyMap<i32, i32> = KeyMap::default();
        for fd in -5..5000 {
            map.insert(fd, fd * 2);
        }
        assert!((-5..5000).all(|fd| map.get(&fd) == Some(&(fd * 2))));
        assert_eq!(map.get(&5000), None);
    }
}
