//! The live blocks of a trace's allocations while it streams by: what the leak report
//! groups and pprof's `inuse_*` count. A leaf: it uses no other report module.
use crate::hash::FastMap;
use crate::model::{Estimator, Event};
use std::collections::BTreeMap;

/// A live block: allocation time, stack id, size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) time: u64,
    pub(crate) stack: u64,
    pub(crate) size: u64,
    /// Bytes per sample when the allocation was sampled by bytes (0: not sampled; a
    /// period past 4 GiB, never used, would read as 4 GiB).
    pub(crate) period: u32,
    /// The thread that allocated it (0: not known).
    pub(crate) tid: u32,
}

/// A sampling period as [`Block`] keeps it.
pub(crate) fn period32(period: u64) -> u32 {
    u32::try_from(period).unwrap_or(u32::MAX)
}

/// No next block.
const NONE: u32 = u32::MAX;
/// `Node::next` of a slot whose block was freed (the slot waits in `Live::free`).
const FREED: u32 = u32::MAX - 1;

/// A live block in the slab, with the next (later) live block at the same address, and
/// its generation: the slab read in order is every live block (FREED slots skipped), which
/// a walk of the whole set does without a cache miss a block (a million blocks live at the
/// end made those walks a fifth of `ebsym heap`'s time).
#[derive(Debug, Clone, Copy)]
struct Node {
    block: Block,
    next: u32,
    generation: u32,
}

/// The slab indexes of the oldest and the newest live block at an address.
#[derive(Debug, Clone, Copy)]
struct Chain {
    head: u32,
    tail: u32,
}

/// A vector in chunks of 2^SHIFT values: it grows without moving what it holds, so a
/// million live blocks cost their own memory, not twice it while a doubled vector is copied
/// (the copy, and its page faults, were a tenth of `ebsym heap`'s time on ninja).
#[derive(Debug)]
struct Chunked<T, const SHIFT: u32> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T, const SHIFT: u32> Default for Chunked<T, SHIFT> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T, const SHIFT: u32> Chunked<T, SHIFT> {
    const MASK: usize = (1 << SHIFT) - 1;

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, v: T) {
        if self.len & Self::MASK == 0 {
            self.chunks.push(Vec::with_capacity(1 << SHIFT));
        }
        self.chunks.last_mut().expect("a chunk").push(v);
        self.len += 1;
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i >> SHIFT)?.get(i & Self::MASK)
    }

    fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flatten()
    }
}

impl<T, const SHIFT: u32> std::ops::Index<usize> for Chunked<T, SHIFT> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.chunks[i >> SHIFT][i & Self::MASK]
    }
}

impl<T, const SHIFT: u32> std::ops::IndexMut<usize> for Chunked<T, SHIFT> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> SHIFT][i & Self::MASK]
    }
}

/// Slots of a page of [`AddrIndex`]: a chain per 16-byte granule of 4 KiB of addresses.
const PAGE_SLOTS: usize = 256;
/// The chain of an address with no live block.
const EMPTY: Chain = Chain {
    head: NONE,
    tail: NONE,
};

/// A generation's live addresses -> their chains, in pages of address space: a chain per
/// 16-byte granule (malloc's alignment), 256 to a page of 4 KiB. An allocator hands out
/// neighbouring addresses one after the other, so consecutive events touch the same or the
/// next page and the index stays in the cache; a hash map's random buckets made every one
/// of them a cache miss once a million blocks were live (a third of `ebsym heap`'s time on
/// ninja). Addresses off the 16-byte grid (a custom allocator's) go to a hash map, and so
/// do those of new pages once pages would hold more than [`AddrIndex::budget`] slots a live
/// block (scattered blocks: a page each would take 2 KiB a block).
#[derive(Debug)]
struct AddrIndex {
    /// Page number (address >> 12) -> index in `slabs`.
    pages: FastMap<u64, u32>,
    /// In chunks of 256 pages (512 KiB).
    slabs: Chunked<[Chain; PAGE_SLOTS], 8>,
    /// The last page looked up: (page number, index), u64::MAX when none.
    last: (u64, u32),
    /// Addresses off the grid, or of pages not made (see `budget`).
    other: FastMap<u64, Chain>,
    /// Addresses with a chain.
    len: usize,
    /// Page slots allowed per live block (plus 64 pages' worth in any case).
    budget: usize,
}

impl Default for AddrIndex {
    fn default() -> Self {
        AddrIndex {
            pages: FastMap::default(),
            slabs: Chunked::default(),
            last: (u64::MAX, 0),
            other: FastMap::default(),
            len: 0,
            budget: 16,
        }
    }
}

impl AddrIndex {
    /// The page slot of `address` (slab, index in it), if it is on the grid and its page
    /// exists (made when `create` and the budget allows). The last page's is found inline,
    /// any other through [`AddrIndex::find_page`].
    #[inline(always)]
    fn slot(&mut self, address: u64, create: bool) -> Option<(usize, usize)> {
        if address & 15 != 0 {
            return None;
        }
        let page = address >> 12;
        if self.last.0 != page {
            self.find_page(page, create)?;
        }
        Some((
            self.last.1 as usize,
            (address >> 4) as usize & (PAGE_SLOTS - 1),
        ))
    }

    /// Makes `page` the last page looked up; None if it has no slab and none is made.
    #[inline(never)]
    fn find_page(&mut self, page: u64, create: bool) -> Option<()> {
        let idx = match self.pages.get(&page) {
            Some(&idx) => idx,
            None => {
                if !create
                    || self.slabs.len() * PAGE_SLOTS > self.budget * self.len + 64 * PAGE_SLOTS
                {
                    return None;
                }
                let idx = u32::try_from(self.slabs.len()).ok()?;
                self.slabs.push([EMPTY; PAGE_SLOTS]);
                self.pages.insert(page, idx);
                idx
            }
        };
        self.last = (page, idx);
        Some(())
    }

    /// The chain at `address` to add a block to (EMPTY when none: the caller fills it and
    /// says so with [`AddrIndex::added`]).
    #[inline]
    fn entry(&mut self, address: u64) -> &mut Chain {
        // An address that went to `other` stays there while it has blocks.
        if !self.other.is_empty() && self.other.contains_key(&address) {
            return self.other.get_mut(&address).expect("present");
        }
        match self.slot(address, true) {
            Some((p, i)) => &mut self.slabs[p][i],
            None => self.other.entry(address).or_insert(EMPTY),
        }
    }

    /// The chain at `address`, if it has blocks.
    #[inline]
    fn get_mut(&mut self, address: u64) -> Option<&mut Chain> {
        if !self.other.is_empty() && self.other.contains_key(&address) {
            return self.other.get_mut(&address);
        }
        let (p, i) = self.slot(address, false)?;
        Some(&mut self.slabs[p][i]).filter(|c| c.head != NONE)
    }

    /// `address` has no block left.
    #[inline]
    fn remove(&mut self, address: u64) {
        self.len -= 1;
        if !self.other.is_empty() && self.other.remove(&address).is_some() {
            return;
        }
        if let Some((p, i)) = self.slot(address, false) {
            self.slabs[p][i] = EMPTY;
        }
    }

    /// Every chain.
    fn values(&self) -> impl Iterator<Item = &Chain> + '_ {
        self.slabs
            .iter()
            .flat_map(|s| s.iter())
            .filter(|c| c.head != NONE)
            .chain(self.other.values())
    }
}

/// The live blocks of the leak report.
///
/// Each generation maps an address to the slab indexes of its oldest and newest live blocks
/// (16 bytes a bucket, so the table of tens of thousands of live blocks stays in the L2
/// cache: with the blocks in the table itself, lookups were cache misses and the report ran
/// at 3–5 M events/s instead of 7–8). The blocks at one address are chained oldest first:
/// usually one, more when allocations reused the address before the free of the previous
/// block was read (the writer puts a batch's allocations before its frees, and allocators
/// hand a freed block straight back, so one address can gather a batch's thousands of
/// allocations). An allocation in time order goes after the newest block in O(1), and a
/// free in time order takes the oldest, so such chains cost nothing per event; only an
/// allocation older than the newest block walks the chain. Freed slots are reused last-in
/// first-out, so the slab's hot part is as small as the blocks that churn.
#[derive(Debug, Default)]
struct Live {
    /// Per generation, address -> its chain; the previous event's generation cached.
    generations: Vec<(u32, AddrIndex)>,
    last: usize,
    /// Generation -> index in `generations`.
    index: FastMap<u32, usize>,
    /// In chunks of 32 Ki blocks (1.25 MiB).
    nodes: Chunked<Node, 15>,
    free: Vec<u32>,
}

impl Live {
    fn generation(&mut self, generation: u32) -> usize {
        if self
            .generations
            .get(self.last)
            .is_none_or(|g| g.0 != generation)
        {
            let n = self.generations.len();
            self.last = *self.index.entry(generation).or_insert(n);
            if self.last == n {
                self.generations.push((generation, AddrIndex::default()));
            }
        }
        self.last
    }

    /// A slot for `block` (a free one if any).
    fn node(
        nodes: &mut Chunked<Node, 15>,
        free: &mut Vec<u32>,
        generation: u32,
        block: Block,
        next: u32,
    ) -> u32 {
        let n = Node {
            block,
            next,
            generation,
        };
        match free.pop() {
            Some(i) => {
                nodes[i as usize] = n;
                i
            }
            None => {
                // 4 G live blocks would take 128 GiB here first.
                let i = u32::try_from(nodes.len())
                    .ok()
                    .filter(|&i| i < FREED)
                    .expect("fewer than 4 G live blocks");
                nodes.push(n);
                i
            }
        }
    }

    /// Adds `b` at `address`, after every block there allocated at or before its time.
    #[inline]
    fn alloc(&mut self, generation: u32, address: u64, b: Block) {
        let g = self.generation(generation);
        let (nodes, free) = (&mut self.nodes, &mut self.free);
        let index = &mut self.generations[g].1;
        let chain = index.entry(address);
        if chain.head == NONE {
            let i = Self::node(nodes, free, generation, b, NONE);
            *chain = Chain { head: i, tail: i };
            index.len += 1;
            return;
        }
        // In time order: after the newest block.
        if b.time >= nodes[chain.tail as usize].block.time {
            let i = Self::node(nodes, free, generation, b, NONE);
            nodes[chain.tail as usize].next = i;
            chain.tail = i;
            return;
        }
        if b.time < nodes[chain.head as usize].block.time {
            chain.head = Self::node(nodes, free, generation, b, chain.head);
            return;
        }
        // Between two blocks (not after the tail): walk.
        let mut at = chain.head;
        loop {
            let next = nodes[at as usize].next;
            if next == NONE || b.time < nodes[next as usize].block.time {
                let i = Self::node(nodes, free, generation, b, next);
                nodes[at as usize].next = i;
                return;
            }
            at = next;
        }
    }

    /// Frees the latest block at `address` allocated at or before `time`, if any, and
    /// returns it.
    #[inline]
    fn free(&mut self, generation: u32, address: u64, time: u64) -> Option<Block> {
        let g = self.generation(generation);
        let map = &mut self.generations[g].1;
        let chain = map.get_mut(address)?;
        // The last node with time <= `time`, and the one before it.
        let (mut prev, mut found) = (NONE, NONE);
        let mut at = chain.head;
        while at != NONE && self.nodes[at as usize].block.time <= time {
            (prev, found) = (found, at);
            at = self.nodes[at as usize].next;
        }
        if found == NONE {
            return None;
        }
        let next = self.nodes[found as usize].next;
        if prev == NONE {
            if next == NONE {
                map.remove(address);
            } else {
                chain.head = next;
            }
        } else {
            self.nodes[prev as usize].next = next;
            if next == NONE {
                chain.tail = prev;
            }
        }
        self.free.push(found);
        self.nodes[found as usize].next = FREED;
        Some(self.nodes[found as usize].block)
    }

    /// The live blocks of one generation: the slab in order when the generation holds
    /// much of it, else its chains (a trace of many short processes ends each with a few).
    fn generation_blocks(&self, generation: u32) -> Box<dyn Iterator<Item = &Block> + '_> {
        let Some(map) = self.index.get(&generation).map(|&i| &self.generations[i].1) else {
            return Box::new(std::iter::empty());
        };
        if map.len * 8 >= self.nodes.len() - self.free.len() {
            return Box::new(
                self.nodes
                    .iter()
                    .filter(move |n| n.next != FREED && n.generation == generation)
                    .map(|n| &n.block),
            );
        }
        Box::new(map.values().flat_map(move |chain| {
            let mut at = chain.head;
            std::iter::from_fn(move || {
                let n = self.nodes.get(at as usize)?;
                at = n.next;
                Some(&n.block)
            })
        }))
    }

    /// Every live block, with its generation: the slab in order.
    fn blocks(&self) -> impl Iterator<Item = (u32, &Block)> + '_ {
        self.nodes
            .iter()
            .filter(|n| n.next != FREED)
            .map(|n| (n.generation, &n.block))
    }
}

/// The blocks still outstanding at the end, per stack id: what pprof's `inuse_objects` and
/// `inuse_space` count (the leak report's blocks, before merging and the held-by rules).
#[derive(Debug, Default)]
pub(crate) struct Outstanding {
    live: Live,
    /// --aggregate: the last live gauges per (stack, generation), and since when non-zero.
    gauges: BTreeMap<(u64, u32), (u64, u64, u64)>,
    /// The custom allocator (`--alloc-fn`) of each stack id that had one.
    allocators: FastMap<u64, u32>,
}

impl Outstanding {
    /// Notes that stack `stack` allocated with custom allocator `allocator` (not 0).
    #[inline]
    pub(crate) fn note_allocator(&mut self, stack: u64, allocator: u32) {
        self.allocators.insert(stack, allocator);
    }

    /// The allocator of stack `stack`: 0 (malloc's family) unless a custom one was noted.
    pub(crate) fn allocator_of(&self, stack: u64) -> u32 {
        self.allocators.get(&stack).copied().unwrap_or(0)
    }

    /// Every live block, with its generation.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u32, &Block)> + '_ {
        self.live.blocks()
    }

    /// --aggregate: per (stack, generation), the last live gauges (blocks, bytes) and the
    /// start of the first interval they were non-zero in (u64::MAX while zero).
    pub(crate) fn gauges(&self) -> &BTreeMap<(u64, u32), (u64, u64, u64)> {
        &self.gauges
    }

    /// A block allocated at `address` in `generation`.
    #[inline]
    pub(crate) fn alloc(&mut self, generation: u32, address: u64, b: Block) {
        self.live.alloc(generation, address, b);
    }

    /// Frees the latest block at `address` of `generation` allocated at or before `time`,
    /// and returns it (None: no such block was traced).
    #[inline]
    pub(crate) fn free(&mut self, generation: u32, address: u64, time: u64) -> Option<Block> {
        self.live.free(generation, address, time)
    }

    /// The live blocks of one generation.
    pub(crate) fn generation_blocks(&self, generation: u32) -> impl Iterator<Item = &Block> + '_ {
        self.live.generation_blocks(generation)
    }

    #[inline]
    pub(crate) fn event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Alloc(e) => {
                if e.allocator != 0 {
                    self.note_allocator(e.stack, e.allocator);
                }
                self.live.alloc(
                    e.generation,
                    e.block(),
                    Block {
                        time: e.time_ns,
                        stack: e.stack,
                        size: e.size,
                        period: period32(e.sample_period),
                        tid: e.tid,
                    },
                )
            }
            Event::Free(e) => {
                self.live.free(e.generation, e.block(), e.time_ns);
            }
            Event::Aggregated(ebtrace_format::proto::EventFamily::Alloc, r) => {
                if let Some((count, bytes)) = r.live {
                    let g = self
                        .gauges
                        .entry((r.stack, r.generation))
                        .or_insert((0, 0, u64::MAX));
                    (g.0, g.1) = (count, bytes);
                    if count == 0 {
                        g.2 = u64::MAX;
                    } else if g.2 == u64::MAX {
                        g.2 = r.since_ns;
                    }
                }
            }
            _ => {}
        }
    }

    /// (stack id, thread) -> (blocks, bytes) outstanding (estimates when sampled by
    /// bytes), the thread `generation << 32 | tid` of the allocation (0 for --aggregate's
    /// gauges, which have none), leaving out the blocks allocated before a pause of the
    /// allocator probes (their free may have come while paused).
    pub(crate) fn by_stack_thread(&self, pauses: &[(u64, u64)]) -> FastMap<(u64, u64), (u64, u64)> {
        let mut out: FastMap<(u64, u64), (u64, u64)> = FastMap::default();
        let mut est = Estimator::default();
        for (generation, b) in self.live.blocks() {
            if pauses.iter().any(|&(start, _)| b.time < start) {
                continue;
            }
            let (c, bytes) = est.add(b.size, u64::from(b.period));
            let thread = (u64::from(generation) << 32) | u64::from(b.tid);
            let e = out.entry((b.stack, thread)).or_default();
            e.0 += c;
            e.1 += bytes;
        }
        for (&(stack, _), &(count, bytes, since)) in &self.gauges {
            if count == 0 || pauses.iter().any(|&(start, _)| since < start) {
                continue;
            }
            let e = out.entry((stack, 0)).or_default();
            e.0 += count;
            e.1 += bytes;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live blocks as the leak report kept them before [`Live`]: per (generation,
    /// address), every block sorted by time, a free taking the latest at or before it.
    #[derive(Default)]
    struct Naive(BTreeMap<(u32, u64), Vec<Triple>>);
    /// (time, stack, size)
    type Triple = (u64, u64, u64);

    impl Naive {
        fn alloc(&mut self, g: u32, a: u64, b: Block) {
            let v = self.0.entry((g, a)).or_default();
            let i = v.partition_point(|x| x.0 <= b.time);
            v.insert(i, (b.time, b.stack, b.size));
        }
        fn free(&mut self, g: u32, a: u64, t: u64) {
            if let Some(v) = self.0.get_mut(&(g, a)) {
                let i = v.partition_point(|x| x.0 <= t);
                if i > 0 {
                    v.remove(i - 1);
                }
                if v.is_empty() {
                    self.0.remove(&(g, a));
                }
            }
        }
        fn blocks(&self) -> Vec<(u32, u64, u64, u64)> {
            let mut v: Vec<_> = self
                .0
                .iter()
                .flat_map(|(&(g, _), v)| v.iter().map(move |&(t, s, z)| (g, t, s, z)))
                .collect();
            v.sort_unstable();
            v
        }
    }

    fn live_blocks(l: &Live) -> Vec<(u32, u64, u64, u64)> {
        let mut v: Vec<_> = l
            .blocks()
            .map(|(g, b)| (g, b.time, b.stack, b.size))
            .collect();
        v.sort_unstable();
        v
    }

    /// Random allocations and frees over few addresses and generations, with frees that
    /// come after later allocations at the same address (as batches deliver them), frees
    /// of nothing, and times out of order: the slab gives the same live blocks as the
    /// plain model, and reuses its slots.
    #[test]
    fn live_blocks_match_a_plain_model() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..40 {
            let (mut live, mut naive) = (Live::default(), Naive::default());
            let addresses = [4, 16, 64, 1000][round % 4];
            let mut t = 1000;
            for i in 0..20_000 {
                let g = rnd(3) as u32 + 1;
                // Rounds 0-19 scatter the addresses (a page each, past the pages' budget
                // in the rounds of 1000); 20-39 pack them on the grid, a few off it.
                let a = if round < 20 {
                    0x7f00_0000_0000 + (rnd(addresses) << 16)
                } else {
                    0x5555_0000_0000 + rnd(addresses) * 16 + if rnd(8) == 0 { 8 } else { 0 }
                };
                // Mostly increasing times, some from the past (a free batch read late).
                t += rnd(10);
                let time = if rnd(4) == 0 { t - rnd(50).min(t) } else { t };
                if rnd(2) == 0 {
                    let b = Block {
                        time,
                        stack: i,
                        size: rnd(4096),
                        period: 0,
                        tid: 0,
                    };
                    live.alloc(g, a, b);
                    naive.alloc(g, a, b);
                } else {
                    live.free(g, a, time);
                    naive.free(g, a, time);
                }
                if i % 997 == 0 {
                    assert_eq!(live_blocks(&live), naive.blocks(), "round {round} op {i}");
                }
            }
            assert_eq!(live_blocks(&live), naive.blocks(), "round {round}");
            // Slots are reused: no more than the most blocks ever live at once could need.
            assert!(live.nodes.len() - live.free.len() == naive.blocks().len());
            let chains: usize = live.generations.iter().map(|g| g.1.values().count()).sum();
            let len: usize = live.generations.iter().map(|g| g.1.len).sum();
            assert_eq!(chains, len, "round {round}");
        }
    }

    /// Scattered addresses take pages only up to the budget, the rest go to the map, and
    /// both give their blocks back.
    #[test]
    fn scattered_addresses_stay_within_the_pages_budget() {
        let mut live = Live::default();
        let b = |time| Block {
            time,
            stack: 1,
            size: 8,
            period: 0,
            tid: 0,
        };
        for i in 0..10_000u64 {
            live.alloc(1, 0x7f00_0000_0000 + (i << 20), b(i));
        }
        let idx = &live.generations[0].1;
        assert!(idx.slabs.len() * PAGE_SLOTS <= idx.budget * idx.len + 65 * PAGE_SLOTS);
        assert!(!idx.other.is_empty());
        for i in 0..10_000u64 {
            assert_eq!(
                live.free(1, 0x7f00_0000_0000 + (i << 20), 20_000)
                    .map(|b| b.time),
                Some(i)
            );
        }
        assert_eq!(live.blocks().count(), 0);
        assert_eq!(live.generations[0].1.len, 0);
    }

    /// One address reused by a whole batch of allocations before the batch's frees are
    /// read (what made the leak report quadratic): each free takes the oldest block, the
    /// chain stays consistent through out-of-order allocations, and the last survives.
    #[test]
    fn a_batch_of_reuses_at_one_address_then_its_frees() {
        let mut live = Live::default();
        let b = |time, stack| Block {
            time,
            stack,
            size: 64,
            period: 0,
            tid: 0,
        };
        for i in 0..1000 {
            live.alloc(1, 0x1000, b(10 * i, i));
        }
        live.alloc(1, 0x1000, b(5007, 5000)); // out of order, between two blocks
        live.alloc(1, 0x1000, b(99_990, 9999)); // the newest, equal time: after it
        for i in 0..999 {
            let freed = live.free(1, 0x1000, 10 * i + 5).expect("a block");
            assert_eq!(freed.stack, i);
            if i == 500 {
                assert_eq!(live.free(1, 0x1000, 5008).map(|b| b.stack), Some(5000));
            }
        }
        assert_eq!(
            live_blocks(&live),
            [(1, 9990, 999, 64), (1, 99_990, 9999, 64)]
        );
        live.free(1, 0x1000, 99_995);
        live.alloc(1, 0x1000, b(100_000, 7)); // after the new tail
        assert_eq!(
            live_blocks(&live),
            [(1, 9990, 999, 64), (1, 100_000, 7, 64)]
        );
    }

    /// A block allocated at an address whose previous block's free is read later (same
    /// batch window): the free takes the older block, the newer stays.
    #[test]
    fn a_free_read_after_the_next_allocation_frees_the_older_block() {
        let mut live = Live::default();
        let b = |time, stack| Block {
            time,
            stack,
            size: 64,
            period: 0,
            tid: 0,
        };
        live.alloc(1, 0x1000, b(10, 1));
        live.alloc(1, 0x1000, b(30, 2)); // reuse, allocated after the free at 20
        live.free(1, 0x1000, 20);
        assert_eq!(live_blocks(&live), [(1, 30, 2, 64)]);
        live.free(1, 0x1000, 5); // before every block there: frees nothing
        assert_eq!(live_blocks(&live), [(1, 30, 2, 64)]);
        live.free(1, 0x1000, 40);
        assert!(live_blocks(&live).is_empty());
        live.alloc(1, 0x1000, b(50, 3));
        live.alloc(2, 0x1000, b(50, 4)); // another process, same address
        live.alloc(1, 0x1000, b(45, 5)); // earlier than the head
        live.free(1, 0x1000, 47);
        assert_eq!(live_blocks(&live), [(1, 50, 3, 64), (2, 50, 4, 64)]);
        assert_eq!(live.nodes.len(), 3, "slots reused");
    }
}

/// The allocators of a trace by number: 0 "malloc" (the system allocator: malloc's family,
/// operator new through it), then each `--alloc-fn`'s NAME in the order of the header's
/// `alloc-fn-name` options (written by the recorder, which parsed the specs).
pub(crate) fn allocator_names(header: &ebtrace_format::proto::Header) -> Vec<String> {
    let mut names = vec!["malloc".to_string()];
    for o in header.options.iter().filter(|o| o.key == "alloc-fn-name") {
        names.push(o.value.clone());
    }
    names
}

/// The name of allocator `id` among `names` ([`allocator_names`]).
pub(crate) fn allocator_name(names: &[String], id: u32) -> String {
    names
        .get(id as usize)
        .cloned()
        .unwrap_or_else(|| format!("allocator {id}"))
}
