//! The heap sink's tests: the time-order queues, and the measures taken in that order.
use super::order::{Runs, SLACK_NS};
use super::sink::HeapSink;
use super::stats::{bucket, weight};
use crate::model::{Event, Sink};
use ebtrace_format::events::{AllocEvent, FreeEvent};
use ebtrace_format::proto::AllocKind;

fn alloc(t: u64, g: u32, address: u64, stack: u64, size: u64) -> AllocEvent {
    AllocEvent {
        time_ns: t,
        generation: g,
        tid: 7,
        stack,
        size,
        address,
        kind: AllocKind::Malloc,
        sample_period: 0,
        allocator: 0,
    }
}

fn free(t: u64, g: u32, address: u64) -> FreeEvent {
    FreeEvent {
        time_ns: t,
        generation: g,
        tid: 7,
        address,
        allocator: 0,
    }
}

/// What the test feeds: an allocation or a free, in file order.
enum E {
    A(AllocEvent),
    F(FreeEvent),
    End(u32, u64),
}

fn run(events: &[E]) -> HeapSink {
    let mut s = HeapSink::default();
    for e in events {
        match e {
            E::A(a) => s.event(&Event::Alloc(a)),
            E::F(f) => s.event(&Event::Free(f)),
            E::End(g, t) => s.generation_end(*g, *t),
        }
    }
    s.finish();
    s
}

/// A small random number generator (xorshift).
struct Rnd(u64);
impl Rnd {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs against a sorted list: batches in order, batches out of order within and
/// against what waits, single events that extend the last run or not, taken in
/// between; every event comes out once, in (time, seq) order.
#[test]
fn runs_give_events_back_in_time_and_arrival_order() {
    let mut rnd = Rnd(0x9e37_79b9_7f4a_7c15);
    for round in 0..50 {
        let mut runs: Runs<FreeEvent> = Runs::default();
        let mut model: Vec<(u64, u64)> = Vec::new();
        let (mut seq, mut t) = (0u64, 1000u64);
        for _ in 0..300 {
            let n = if rnd.below(3) == 0 {
                1
            } else {
                rnd.below(40) as usize
            };
            let batch: Vec<FreeEvent> = (0..n)
                .map(|_| {
                    t += rnd.below(5);
                    // Some from the past (further back in later rounds).
                    let back = if rnd.below(6) == 0 {
                        rnd.below(20 + round)
                    } else {
                        0
                    };
                    free(t - back, 1, 0x10)
                })
                .collect();
            for (i, e) in batch.iter().enumerate() {
                model.push((e.time_ns, seq + 1 + i as u64));
            }
            if n == 1 && rnd.below(2) == 0 {
                runs.push_one(batch[0], seq + 1);
            } else {
                runs.push(batch, seq + 1);
            }
            seq += n as u64;
            // A gap in the numbering (events of the other queue).
            seq += rnd.below(3);
            model.sort_unstable();
            assert_eq!(runs.len(), model.len());
            for _ in 0..rnd.below(30) {
                let Some(op) = runs.pop_front() else {
                    assert!(model.is_empty());
                    break;
                };
                assert_eq!((op.time, op.seq), model.remove(0), "round {round}");
            }
            assert_eq!(runs.front_key(), model.first().copied());
        }
        while let Some(op) = runs.pop_front() {
            assert_eq!((op.time, op.seq), model.remove(0));
        }
        assert!(model.is_empty());
    }
}

/// Allocations and frees given as batches, or a generation's end (generation, time).
type Batch = Result<(Vec<AllocEvent>, Vec<FreeEvent>), (u32, u64)>;

/// Batches given whole ([`Sink::allocs`], [`Sink::frees`]) take the same events in
/// the same order as the same events one by one, and end with the same numbers:
/// batches in time order, batches with late events (past the watermark), generation
/// ends between them, and past [`MAX_PENDING`](super::order::MAX_PENDING) waiting.
#[test]
fn batches_are_taken_as_their_events_one_by_one() {
    let mut rnd = Rnd(0x2545_f491_4f6c_dd1d);
    for round in 0..6u64 {
        // (allocations?, batch, or a generation's end)
        let mut batches: Vec<Batch> = Vec::new();
        let mut t = 1_000_000_000u64;
        let mut live: Vec<(u32, u64)> = Vec::new();
        let big = round >= 4;
        let count = if big { 60 } else { 400 };
        for b in 0..count {
            let n = if big {
                8192
            } else {
                1 + rnd.below(300) as usize
            };
            let step = if big { 10 } else { 1 + rnd.below(200_000) };
            let start = t;
            let mut allocs = Vec::new();
            for _ in 0..n {
                t += rnd.below(step);
                let g = 1 + rnd.below(2) as u32;
                let a = 0x5555_0000_0000 + rnd.below(1 << 12) * 16;
                // Late ones: up to 30 ms back (the slack is 10).
                let late = if rnd.below(50) == 0 {
                    rnd.below(30_000_000)
                } else {
                    0
                };
                allocs.push(alloc(
                    t.saturating_sub(late),
                    g,
                    a,
                    rnd.below(9),
                    1 + rnd.below(100),
                ));
                live.push((g, a));
            }
            let mut frees = Vec::new();
            let mut ft = start;
            // In the big rounds frees fall behind: allocations pile up past MAX_PENDING.
            let nf = if big && b % 3 != 0 {
                0
            } else {
                live.len().min(n + 50)
            };
            for _ in 0..nf {
                let i = rnd.below(live.len() as u64) as usize;
                let (g, a) = live.swap_remove(i);
                ft += rnd.below(step.max(2) * 2);
                frees.push(free(ft, g, a));
            }
            batches.push(Ok((allocs, Vec::new())));
            batches.push(Ok((Vec::new(), frees)));
            if rnd.below(40) == 0 {
                batches.push(Err((1 + rnd.below(2) as u32, t - rnd.below(1_000_000))));
            }
        }
        let one_by_one = {
            let mut s = HeapSink::default();
            for b in &batches {
                match b {
                    Ok((a, f)) => {
                        a.iter().for_each(|e| s.event(&Event::Alloc(e)));
                        f.iter().for_each(|e| s.event(&Event::Free(e)));
                    }
                    Err((g, t)) => s.generation_end(*g, *t),
                }
            }
            s.finish();
            s
        };
        let whole = {
            let mut s = HeapSink::default();
            for b in batches {
                match b {
                    Ok((a, f)) => {
                        if !a.is_empty() {
                            s.allocs(a);
                        }
                        if !f.is_empty() {
                            s.frees(f);
                        }
                    }
                    Err((g, t)) => s.generation_end(g, t),
                }
            }
            s.finish();
            s
        };
        assert!(one_by_one.taken.len() > 1000);
        assert_eq!(one_by_one.taken, whole.taken, "round {round}");
        assert_eq!(one_by_one.late, whole.late);
        assert_eq!(one_by_one.temporary, whole.temporary);
        assert_eq!(one_by_one.peak, whole.peak);
        assert_eq!(one_by_one.unmatched_frees, whole.unmatched_frees);
        assert_eq!(one_by_one.alloc_events, whole.alloc_events);
        assert_eq!(one_by_one.last_ns, whole.last_ns);
        if round == 0 {
            assert!(one_by_one.late > 0, "some events came late");
        }
    }
}

fn temporary(s: &HeapSink, stack: u64) -> u64 {
    s.stacks.get(stack).map_or(0, |x| x.temporary)
}

fn at_peak(s: &HeapSink, stack: u64) -> u64 {
    s.stacks.get(stack).map_or(0, |x| x.at_peak)
}

/// heaptrack's rule: a free is temporary when the previous event of its process was
/// the allocation of the same block; any allocation or free in between (of any
/// thread) breaks it, another process's events do not.
#[test]
fn temporary_is_a_free_right_after_its_allocation() {
    use E::*;
    let s = run(&[
        A(alloc(10, 1, 0xa0, 1, 16)), // freed at once: temporary
        F(free(11, 1, 0xa0)),
        A(alloc(20, 1, 0xb0, 2, 16)), // another allocation before its free: not
        A(alloc(21, 1, 0xc0, 3, 16)),
        F(free(22, 1, 0xb0)),
        F(free(23, 1, 0xc0)),         // a free before it: not
        A(alloc(30, 1, 0xd0, 4, 16)), // only another process in between: temporary
        A(alloc(31, 2, 0xe0, 5, 16)),
        F(free(32, 1, 0xd0)),
        F(free(33, 2, 0xe0)), // its process's previous event was its allocation
        A(alloc(40, 1, 0xf0, 6, 16)), // a free of an untraced block between: temporary
        F(free(41, 1, 0x999)),
        F(free(42, 1, 0xf0)),
    ]);
    assert_eq!(s.temporary, 4);
    assert_eq!(
        [1, 2, 3, 4, 5, 6].map(|k| temporary(&s, k)),
        [1, 0, 0, 1, 1, 1],
        "per stack"
    );
    assert_eq!(s.calls, 6);
    assert_eq!(s.frees_seen, 6);
    assert_eq!(s.unmatched_frees, 1);
    assert_eq!(s.late, 0);
}

/// realloc is a free of the old block then the allocation of the new one (both
/// recording paths send them in that order): a block reallocated right after its
/// allocation was temporary, as heaptrack counts it; the new block lives on.
#[test]
fn realloc_frees_the_old_block_then_allocates() {
    use E::*;
    let mut r = alloc(12, 1, 0xa0, 2, 64);
    r.kind = AllocKind::Realloc;
    let s = run(&[
        A(alloc(10, 1, 0xa0, 1, 32)),
        F(free(11, 1, 0xa0)), // realloc in place
        A(r),
    ]);
    assert_eq!(s.temporary, 1);
    assert_eq!(temporary(&s, 1), 1);
    assert_eq!(s.calls, 2);
    assert_eq!(s.peak, 64, "the old block is gone when the new one comes");
    assert_eq!(s.live_total, 64);
    let left: Vec<_> = s.live.blocks().map(|(_, b)| (b.stack, b.size)).collect();
    assert_eq!(left, [(2, 64)]);
}

/// The writer puts a batch's allocations before its frees: the free of a block comes
/// after the allocation that reused its address. In time order the free follows its
/// allocation (temporary), and the two blocks were never live together.
#[test]
fn frees_read_after_later_allocations_are_put_in_time_order() {
    use E::*;
    let s = run(&[
        // batch 1: allocations, then frees
        A(alloc(10, 1, 0xa0, 1, 100)),
        A(alloc(30, 1, 0xa0, 2, 100)), // the address reused after the free at 20
        A(alloc(40, 1, 0xb0, 3, 10)),
        F(free(20, 1, 0xa0)),
        // batch 2
        A(alloc(60, 1, 0xc0, 3, 10)),
        F(free(50, 1, 0xa0)),
        F(free(55, 1, 0xb0)),
    ]);
    assert_eq!(
        s.temporary, 1,
        "only the block freed at 20 right after its alloc"
    );
    assert_eq!(temporary(&s, 1), 1);
    assert_eq!(
        s.peak, 110,
        "not 210: the first block was freed before the second"
    );
    assert_eq!(s.peak_time, 40);
    assert_eq!(
        (at_peak(&s, 1), at_peak(&s, 2), at_peak(&s, 3)),
        (0, 100, 10)
    );
    assert_eq!(s.late, 0);
    let left: Vec<_> = s.live.blocks().map(|(_, b)| b.time).collect();
    assert_eq!(left, [60]);
    // Lifetimes: 10 ns (bucket [8, 16)), 20 ns ([16, 32)), 15 ns ([8, 16)).
    assert_eq!(s.stacks[1].lifetimes[bucket(10)], 1);
    assert_eq!(s.stacks[2].lifetimes[bucket(20)], 1);
    assert_eq!(s.stacks[3].lifetimes[bucket(15)], 1);
    assert_eq!(bucket(10), 4);
}

/// The peak and the stacks that held it: the peak's stacks are their bytes at that
/// moment, whatever they did after.
#[test]
fn the_peak_is_what_was_live_at_its_moment() {
    use E::*;
    let s = run(&[
        A(alloc(10, 1, 0x10, 1, 100)),
        A(alloc(20, 1, 0x20, 2, 50)), // 150: the peak
        F(free(30, 1, 0x10)),
        A(alloc(40, 1, 0x30, 2, 30)), // 80
        A(alloc(50, 1, 0x40, 3, 60)), // 140
        F(free(60, 1, 0x20)),
    ]);
    assert_eq!((s.peak, s.peak_time), (150, 20));
    assert_eq!([1, 2, 3].map(|k| at_peak(&s, k)), [100, 50, 0]);
    // A later, higher peak moves it.
    let s = run(&[
        A(alloc(10, 1, 0x10, 1, 100)),
        A(alloc(20, 1, 0x20, 2, 50)),
        F(free(30, 1, 0x10)),
        A(alloc(40, 1, 0x30, 2, 200)), // 250
        F(free(50, 1, 0x30)),
    ]);
    assert_eq!((s.peak, s.peak_time), (250, 40));
    assert_eq!([1, 2].map(|k| at_peak(&s, k)), [0, 250]);
    assert_eq!(s.gens[1].peak, 250);
    assert_eq!(s.gens[1].at_trace_peak, 250);
}

/// Processes: each has its own peak; the trace's is of their sum, and a process's
/// blocks stop counting when it ends (they are still leaks).
#[test]
fn processes_peak_apart_and_their_end_frees_their_blocks() {
    use E::*;
    let s = run(&[
        A(alloc(10, 1, 0x10, 1, 100)),
        A(alloc(20, 2, 0x10, 2, 70)), // 170: the trace's peak
        End(1, 25),                   // process 1 exits: its 100 bytes go
        A(alloc(30, 2, 0x20, 2, 80)), // 150
        F(free(40, 2, 0x10)),
    ]);
    assert_eq!((s.peak, s.peak_time), (170, 20));
    assert_eq!((s.gens[1].peak, s.gens[2].peak), (100, 150));
    assert_eq!(s.gens[2].peak_time, 30);
    assert_eq!(
        (s.gens[1].at_trace_peak, s.gens[2].at_trace_peak),
        (100, 70)
    );
    assert_eq!(s.live_total, 80);
    assert_eq!([1, 2].map(|k| at_peak(&s, k)), [100, 70]);
    assert_eq!(s.stacks[1].live, 0, "ended with its process");
    assert_eq!(
        s.live.blocks().count(),
        2,
        "the blocks never freed stay leaks"
    );
}

/// An event older than what was already taken (past the slack and the bound) is
/// counted as late, not silently misplaced.
#[test]
fn events_past_the_slack_are_counted_late() {
    let mut s = HeapSink::default();
    let big = SLACK_NS * 10;
    s.event(&Event::Alloc(&alloc(big, 1, 0x10, 1, 8)));
    s.event(&Event::Free(&free(big + 1, 1, 0x10)));
    s.event(&Event::Alloc(&alloc(big * 2, 1, 0x20, 1, 8)));
    s.event(&Event::Free(&free(big * 2, 1, 0x30)));
    // Taken up to the watermark: the first two.
    assert_eq!(s.allocs.len() + s.frees.len(), 2);
    s.event(&Event::Free(&free(5, 1, 0x40)));
    s.finish();
    assert_eq!(s.late, 1);
}

/// Sampled weights: a block's free takes off exactly what its allocation added.
#[test]
fn sampled_blocks_weigh_the_same_at_both_ends() {
    let mut a = alloc(10, 1, 0x10, 1, 100);
    a.sample_period = 1000;
    let mut s = HeapSink::default();
    s.event(&Event::Alloc(&a));
    s.event(&Event::Free(&free(20, 1, 0x10)));
    s.finish();
    assert_eq!(s.peak, weight(100, 1000));
    assert!(
        s.peak > 1000,
        "100 bytes at a 1000-byte period stand for ~1050"
    );
    assert_eq!(s.live_total, 0);
    assert_eq!(s.max_period, 1000);
    assert_eq!(weight(4096, 0), 4096);
    assert_eq!(weight(64, 1), 64);
}
