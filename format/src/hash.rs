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

/// A map from ids a trace's writer hands out from a counter (stack ids, process
/// generations) to values: a vector indexed by the id while ids stay dense, a [`FastMap`]
/// for the rest (an id far past the others: a trace merged from several). Looking an id up
/// is an index, not a hash: `ebsym heap` looks up a stack and a generation at every
/// allocation and free. Iteration is in insertion order.
#[derive(Debug, Clone)]
pub struct IdMap<V> {
    /// Id -> index in `values` ([`IdMap::NONE`]: absent), for ids below its length.
    dense: Vec<u32>,
    sparse: FastMap<u64, u32>,
    values: Vec<(u64, V)>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            dense: Vec::new(),
            sparse: FastMap::default(),
            values: Vec::new(),
        }
    }
}

impl<V> IdMap<V> {
    const NONE: u32 = u32::MAX;
    /// Ids below this may go to the vector, when also below 8 per value plus 4096 (so the
    /// vector stays within 32 bytes a value).
    const DENSE_LIMIT: u64 = 1 << 24;

    #[inline]
    fn index(&self, id: u64) -> Option<usize> {
        match self.dense.get(id as usize) {
            Some(&i) if i != Self::NONE => Some(i as usize),
            // An id in the hash map may lie below the vector's end (the vector grew past
            // it later).
            _ if self.sparse.is_empty() => None,
            _ => self.sparse.get(&id).map(|&i| i as usize),
        }
    }

    pub fn get(&self, id: u64) -> Option<&V> {
        self.index(id).map(|i| &self.values[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        self.index(id).map(|i| &mut self.values[i].1)
    }

    /// The value of `id`, made by `f` when absent.
    #[inline]
    pub fn get_or_insert_with(&mut self, id: u64, f: impl FnOnce() -> V) -> &mut V {
        let i = match self.index(id) {
            Some(i) => i,
            None => self.insert_new(id, f()),
        };
        &mut self.values[i].1
    }

    #[cold]
    fn insert_new(&mut self, id: u64, v: V) -> usize {
        let i = self.values.len();
        let slot = u32::try_from(i).expect("fewer than 4 G ids");
        self.values.push((id, v));
        if id < Self::DENSE_LIMIT && id <= 8 * i as u64 + 4096 {
            if self.dense.len() <= id as usize {
                self.dense.resize(id as usize + 1, Self::NONE);
            }
            self.dense[id as usize] = slot;
        } else {
            self.sparse.insert(id, slot);
        }
        i
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every (id, value), in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        self.values.iter().map(|(id, v)| (*id, v))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.values.iter_mut().map(|(_, v)| v)
    }

    /// Every (id, value), in insertion order, the map consumed (its vector, not a copy).
    pub fn into_vec(self) -> Vec<(u64, V)> {
        self.values
    }
}

impl<V> std::ops::Index<u64> for IdMap<V> {
    type Output = V;
    /// The value of `id`; panics when absent, as a `HashMap`'s index does.
    fn index(&self, id: u64) -> &V {
        self.get(id).expect("id present in IdMap")
    }
}

impl<V: Default> IdMap<V> {
    #[inline]
    pub fn entry_or_default(&mut self, id: u64) -> &mut V {
        self.get_or_insert_with(id, V::default)
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
    #[test]
    fn id_map_dense_sparse_and_order() {
        let mut m: IdMap<u32> = IdMap::default();
        for id in [3u64, 1, 1 << 40, 7, 3] {
            *m.entry_or_default(id) += 1;
        }
        // An id past the dense limit, and one far past the others, go to the hash map.
        *m.entry_or_default(IdMap::<u32>::DENSE_LIMIT + 5) += 1;
        *m.entry_or_default(100_000) += 1;
        // Dense ids up to past 100,000: the vector grows past the id in the hash map.
        for id in 8..20_000u64 {
            m.entry_or_default(id * 8);
        }
        assert_eq!(m.get(100_000), Some(&1));
        *m.entry_or_default(100_000) += 1;
        assert_eq!(m.get(100_000), Some(&2));
        assert_eq!(m.get(3), Some(&2));
        assert_eq!(m.get(1 << 40), Some(&1));
        assert_eq!(m.get(100_000), Some(&2));
        assert_eq!(m.get(4), None);
        assert_eq!(m.get(2_000_000), None);
        let ids: Vec<u64> = m.iter().map(|(id, _)| id).take(6).collect();
        assert_eq!(
            ids,
            vec![3, 1, 1 << 40, 7, IdMap::<u32>::DENSE_LIMIT + 5, 100_000]
        );
        assert!(m.dense.len() < 160_008);
    }
}
