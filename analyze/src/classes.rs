//! Each stack id's merge class ([`crate::model::Loaded::stack_class`]), made once: the id
//! of its frames' keys ([`FrameIds`]), under which every report merges the stack ids that
//! symbolize alike. A trace read for several
//! reports (`ebsym report`: heap rows, leaks, top, summary, flame graph of one kind) used to
//! resolve every stack and hash its hundred-frame key once per report; now the first one
//! does, and the others look the class up by stack id (a u32 merge key).
//!
//! What resolving counts (frames left unresolved, stacks cut) is counted again at each
//! lookup, as a report resolving the stack itself would: each stack keeps the counts of its
//! resolution, interned (most stacks have none).
use crate::hash::{FastHash, IdMap};
use crate::interned::FrameIds;
use std::collections::BTreeMap;

/// The merge classes of a loaded trace's stacks.
#[derive(Debug, Default)]
pub struct StackClasses {
    /// Class id -> its key, each key held once.
    keys: indexmap::IndexSet<FrameIds, FastHash>,
    /// Stack id -> (class, its counts' index in `counts`).
    of: IdMap<(u32, u32)>,
    /// What resolving a stack counts: (unresolved frames, stacks cut) by reason; index 0
    /// counts nothing.
    counts: Vec<Counts>,
    counts_index: BTreeMap<Counts, u32>,
}

/// The losses one stack's resolution counts.
pub(crate) type Counts = (Vec<(String, u64)>, Vec<(String, u64)>);

impl StackClasses {
    /// The key of class `class`: its frames' (function, file, line, inlined) ids.
    pub fn key(&self, class: u32) -> &FrameIds {
        self.keys
            .get_index(class as usize)
            .expect("a class handed out")
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

    /// Stack `id`'s (class, counts) if it has one.
    pub(crate) fn of(&self, id: u64) -> Option<(u32, u32)> {
        self.of.get(id).copied()
    }

    /// Gives stack `id` the class of `key`, with what its resolution `counted`; returns
    /// (class, counts' index).
    pub(crate) fn insert(&mut self, id: u64, key: FrameIds, counted: Counts) -> (u32, u32) {
        let counts = self.counts_id(counted);
        let (class, _) = self.keys.insert_full(key);
        let v = (class as u32, counts);
        self.of.get_or_insert_with(id, || v);
        v
    }

    /// What counts index `i` counts: (unresolved frames, stacks cut) by reason.
    pub(crate) fn counted(&self, i: u32) -> &Counts {
        &self.counts[i as usize]
    }

    fn counts_id(&mut self, c: Counts) -> u32 {
        if c.0.is_empty() && c.1.is_empty() {
            return 0;
        }
        if self.counts.is_empty() {
            self.counts.push(Default::default());
        }
        if let Some(&i) = self.counts_index.get(&c) {
            return i;
        }
        let i = self.counts.len() as u32;
        self.counts.push(c.clone());
        self.counts_index.insert(c, i);
        i
    }
}
