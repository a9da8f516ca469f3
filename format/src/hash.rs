//! A fast hasher for the integer keys of the per-event maps (live blocks by address,
//! aggregates by stack id; the recorder's stacks, processes and threads): one folded
//! 64×64→128-bit multiply per word instead of SipHash, which the leak report spent a tenth
//! of its time in.
//!
//! The seed is random per process (taken from std's `RandomState`), so a crafted trace
//! cannot aim at collisions it knows in advance, and nothing may depend on the iteration
//! order (nothing did with SipHash either: reports sort what they print).
//!
//! ```
//! use ebtrace_format::hash::FastMap;
//! let mut live: FastMap<u64, u32> = FastMap::default();
//! live.insert(0x7f00_0000_1000, 1);
//! assert_eq!(live[&0x7f00_0000_1000], 1);
//! ```
use std::hash::{BuildHasher, Hasher};

/// A `HashMap` keyed by integers (or tuples of them) with [`FastHash`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastHash>;
/// A `HashSet` of the same.
pub type FastSet<K> = std::collections::HashSet<K, FastHash>;

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Mixes `a` and `b` so that every input bit reaches the low and the high bits (hashbrown
/// takes the bucket from the low bits and the tag from the high ones; addresses have their
/// low bits zero, so a plain multiply would leave the low bits of the hash zero too).
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// The [`BuildHasher`] of [`FastMap`]: a per-process random seed.
#[derive(Debug, Clone, Copy)]
pub struct FastHash {
    seed: u64,
}

impl Default for FastHash {
    fn default() -> Self {
        use std::sync::OnceLock;
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64) | 1
        });
        FastHash { seed }
    }
}

impl BuildHasher for FastHash {
    type Hasher = FastHasher;
    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher { state: self.seed }
    }
}

/// The hasher of [`FastHash`]; made for a few integer words per key.
#[derive(Debug, Clone, Copy)]
pub struct FastHasher {
    state: u64,
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.state = fold_mul(self.state ^ i, K);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page-aligned addresses (low bits all zero) must still spread over the low bits of
    /// the hash, where hashbrown takes the bucket from.
    #[test]
    fn aligned_addresses_spread_over_buckets() {
        let h = FastHash::default();
        let mut buckets = [0u32; 256];
        for i in 0..25_600u64 {
            buckets[(h.hash_one(0x7f00_0000_0000 + (i << 16)) & 255) as usize] += 1;
        }
        let max = *buckets.iter().max().unwrap();
        let min = *buckets.iter().min().unwrap();
        assert!(max < 160 && min > 50, "min {min} max {max}");
    }

    #[test]
    fn tuple_keys_differ_by_every_field() {
        let h = FastHash::default();
        assert_ne!(h.hash_one((1u32, 5u64)), h.hash_one((2u32, 5u64)));
        assert_ne!(h.hash_one((1u32, 5u64)), h.hash_one((1u32, 6u64)));
        assert_ne!(h.hash_one((5u64, 1u64)), h.hash_one((1u64, 5u64)));
    }
}
