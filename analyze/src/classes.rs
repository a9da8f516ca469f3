//! Each stack id's merge class ([`crate::model::Loaded::stack_class`]), made once: the id
//! of its frames' keys (each frame's (function, file, line, inlined) ids, a [`FrameKey`],
//! itself held once and named by a u32: a class key is 4 bytes a frame), under which every
//! report merges the stack ids that symbolize alike. A trace read for several
//! reports (`ebsym report`: heap rows, leaks, top, summary, flame graph of one kind) used to
//! resolve every stack and hash its hundred-frame key once per report; now the first one
//! does, and the others look the class up by stack id (a u32 merge key).
//!
//! What resolving counts (frames left unresolved, stacks cut) is counted again at each
//! lookup, as a report resolving the stack itself would: each stack keeps the counts of its
//! resolution, reasons by index (most stacks count nothing; a stripped program's, one).
use crate::hash::{FastHash, IdMap};
use crate::interned::{FrameKey, IFrame};
use std::cmp::Ordering;

/// The merge classes of a loaded trace's stacks.
#[derive(Debug, Default)]
pub struct StackClasses {
    /// Class id -> its key (its frames' ids in `frames`), each key held once.
    keys: indexmap::IndexSet<Box<[u32]>, FastHash>,
    /// Frame key id -> the frame's key, each held once.
    frames: indexmap::IndexSet<FrameKey, FastHash>,
    /// Stack id -> (class, what its resolution counted: a range of `counted`).
    of: IdMap<(u32, Counted)>,
    /// What resolving a stack counts, stack after stack: (reason's index in `reasons`,
    /// count); most stacks count nothing.
    counted: Vec<(u32, u64)>,
    /// (a stack cut rather than a frame unresolved, reason).
    reasons: indexmap::IndexSet<(bool, String), FastHash>,
}

/// What one stack's resolution counted: (start, end) in [`StackClasses`]' counts.
pub(crate) type Counted = (u32, u32);

/// The losses one stack's resolution counts: (unresolved frames, stacks cut) by reason.
pub(crate) type Counts = (
    std::collections::BTreeMap<String, u64>,
    std::collections::BTreeMap<String, u64>,
);

impl StackClasses {
    /// The key of class `class`: its frames' (function, file, line, inlined) ids, leaf
    /// first.
    pub fn key(&self, class: u32) -> impl ExactSizeIterator<Item = FrameKey> + '_ {
        self.keys
            .get_index(class as usize)
            .expect("a class handed out")
            .iter()
            .map(|&f| {
                *self
                    .frames
                    .get_index(f as usize)
                    .expect("a frame id handed out")
            })
    }

    /// Classes `a` and `b` in the order of their keys (as [`crate::interned::FrameIds`]
    /// sort).
    pub fn cmp(&self, a: u32, b: u32) -> Ordering {
        if a == b {
            return Ordering::Equal;
        }
        self.key(a).cmp(self.key(b))
    }

    /// The places of `classes` in an order by their frames' names, frame after frame from
    /// the leaf: the function's rank in `rank` (the names' ranks,
    /// [`crate::interned::Names::ranks`]), the file's, the line, the inlined flag; a key
    /// that is the start of another first. Indexed by class id (classes not asked for:
    /// `u32::MAX`).
    ///
    /// Each frame key's place in that order is found once, then the classes are sorted by
    /// their lists of places with a multikey quicksort (three-way partitions on one frame at
    /// a time): stacks share long runs of frames from the leaf (the allocator's, then its
    /// wrappers'), which a sort comparing whole keys read again at every comparison.
    pub fn name_places(&self, rank: &[u32], classes: &[u32]) -> Vec<u32> {
        let ranked = |k: &FrameKey| {
            let (f, file) = (k.function() as usize, k.file() as usize);
            (rank[f], rank[file], k.line(), k.inlined())
        };
        let mut ids: Vec<u32> = (0..self.frames.len() as u32).collect();
        ids.sort_unstable_by_key(|&i| ranked(&self.frames[i as usize]));
        let mut place = vec![0u32; ids.len()];
        for (p, &i) in ids.iter().enumerate() {
            place[i as usize] = p as u32;
        }
        // A class's frame at `depth` as its place + 1, 0 past its end.
        let at = |c: u32, depth: usize| -> u32 {
            self.keys[c as usize]
                .get(depth)
                .map_or(0, |&f| place[f as usize] + 1)
        };
        let mut order = classes.to_vec();
        multikey_sort(&mut order, 0, &at);
        let mut out = vec![u32::MAX; self.keys.len()];
        for (p, &c) in order.iter().enumerate() {
            out[c as usize] = p as u32;
        }
        out
    }

    /// The id of frame `f`'s key (its function, file, line and inlined flag).
    pub fn frame_id(&mut self, f: &IFrame) -> u32 {
        let k = FrameKey::new(f.function, f.file, f.line, f.inlined);
        self.frames.insert_full(k).0 as u32
    }

    /// How many classes there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgets every stack's class (a record came that may resolve them differently); the
    /// classes stay, so a class id keeps its key.
    pub(crate) fn forget_stacks(&mut self) {
        if !self.of.is_empty() {
            self.of = IdMap::default();
        }
    }

    /// Forgets every class (the frames' ids stay: resolved addresses keep theirs), for a
    /// caller done merging that wants the memory back.
    pub(crate) fn forget(&mut self) {
        self.keys = Default::default();
        self.of = IdMap::default();
        self.counted = Vec::new();
    }

    /// Stack `id`'s class and what its resolution counted, if it has a class.
    pub(crate) fn of(&self, id: u64) -> Option<(u32, Counted)> {
        self.of.get(id).copied()
    }

    /// Gives stack `id` the class of `key`, with what its resolution `counts`; returns
    /// (class, what was counted).
    pub(crate) fn insert(&mut self, id: u64, key: Box<[u32]>, counts: Counts) -> (u32, Counted) {
        let start = self.counted.len() as u32;
        for (cut, m) in [(false, counts.0), (true, counts.1)] {
            for (reason, n) in m {
                let (r, _) = self.reasons.insert_full((cut, reason));
                self.counted.push((r as u32, n));
            }
        }
        let (class, _) = self.keys.insert_full(key);
        let v = (class as u32, (start, self.counted.len() as u32));
        self.of.get_or_insert_with(id, || v);
        v
    }

    /// What a stack's resolution counted: (a stack cut rather than a frame unresolved,
    /// reason, count).
    pub(crate) fn counted(&self, c: Counted) -> impl Iterator<Item = (bool, &str, u64)> + '_ {
        self.counted[c.0 as usize..c.1 as usize]
            .iter()
            .map(|&(r, n)| {
                let (cut, reason) = self.reasons.get_index(r as usize).expect("a reason kept");
                (*cut, reason.as_str(), n)
            })
    }
}

/// Sorts `ids` by their sequences `at(id, depth)`, `at(id, depth + 1)`, … (0 ends a
/// sequence; ids with equal sequences end up side by side): Bentley and Sedgewick's
/// multikey quicksort, each element's sequence read one position per partition.
fn multikey_sort(ids: &mut [u32], mut depth: usize, at: &impl Fn(u32, usize) -> u32) {
    let mut ids = ids;
    loop {
        if ids.len() <= 12 {
            ids.sort_unstable_by(|&a, &b| {
                (depth..)
                    .map(|d| (at(a, d), at(b, d)))
                    .find(|(x, y)| x != y || *x == 0)
                    .map_or(Ordering::Equal, |(x, y)| x.cmp(&y))
            });
            return;
        }
        let n = ids.len();
        let mut three = [
            at(ids[0], depth),
            at(ids[n / 2], depth),
            at(ids[n - 1], depth),
        ];
        three.sort_unstable();
        let pivot = three[1];
        // Three-way partition: [0, lt) below, [lt, gt) equal, [gt, n) above.
        let (mut lt, mut i, mut gt) = (0, 0, n);
        while i < gt {
            let k = at(ids[i], depth);
            match k.cmp(&pivot) {
                Ordering::Less => {
                    ids.swap(lt, i);
                    lt += 1;
                    i += 1;
                }
                Ordering::Greater => {
                    gt -= 1;
                    ids.swap(i, gt);
                }
                Ordering::Equal => i += 1,
            }
        }
        let (below, rest) = ids.split_at_mut(lt);
        let (equal, above) = rest.split_at_mut(gt - lt);
        multikey_sort(below, depth, at);
        multikey_sort(above, depth, at);
        if pivot == 0 {
            // Sequences that ended here: equal.
            return;
        }
        ids = equal;
        depth += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The multikey quicksort orders sequences as comparing them whole does: shared
    /// prefixes, a sequence that is the start of another, equal sequences.
    #[test]
    fn multikey_sort_is_the_sequences_order() {
        let mut seqs: Vec<Vec<u32>> = Vec::new();
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for _ in 0..3000 {
            // A shared run from the "leaf" (an allocator's frames), then a few of its own.
            let shared = next(30) as usize;
            let mut s: Vec<u32> = (0..shared).map(|i| 1 + (i as u32 % 3)).collect();
            for _ in 0..next(6) {
                s.push(1 + next(5) as u32);
            }
            seqs.push(s);
        }
        seqs.push(Vec::new());
        seqs.push(seqs[7].clone());
        let at = |i: u32, d: usize| seqs[i as usize].get(d).copied().unwrap_or(0);
        let mut ids: Vec<u32> = (0..seqs.len() as u32).collect();
        multikey_sort(&mut ids, 0, &at);
        let got: Vec<&Vec<u32>> = ids.iter().map(|&i| &seqs[i as usize]).collect();
        let mut want: Vec<&Vec<u32>> = seqs.iter().collect();
        want.sort();
        assert_eq!(got, want);
    }
}
