//! One event taken, in time order: what an allocation, a free and a generation's end
//! change — the calls and bytes, temporary allocations, block lifetimes, the live bytes of
//! each stack and generation, and the peak and who held it.
use super::order::{Op, ALLOC, FREE};
use super::sink::HeapSink;
use super::stats::{bucket, stack, weight, Gen};
use super::timeline::touched;
use crate::reports::live::{period32, Block};

impl HeapSink {
    /// One event, in time order.
    pub(super) fn take(&mut self, op: Op) {
        #[cfg(test)]
        self.taken.push((op.time, op.seq, op.what));
        if op.time < self.taken_ns {
            self.late += 1;
        }
        self.taken_ns = self.taken_ns.max(op.time);
        if let Some(tl) = &mut self.timeline {
            tl.enter(op.time, &mut self.stacks, self.live_total);
        }
        let epoch = self.epoch;
        self.gens
            .get_or_insert_with(u64::from(op.generation), || Gen {
                epoch,
                ..Default::default()
            })
            .touch(epoch);
        match op.what {
            ALLOC => self.take_alloc(&op),
            FREE => self.take_free(&op),
            _ => self.take_end(&op),
        }
    }

    /// An allocation: a call, its bytes, and its weight live in its stack and generation
    /// (a new peak when the total passes the last one).
    fn take_alloc(&mut self, op: &Op) {
        let (count, bytes) = self.est.add(op.size, op.period);
        let w = weight(op.size, op.period);
        self.calls += count;
        self.bytes += bytes;
        if op.period > 0 {
            self.max_period = self.max_period.max(op.period);
            if op.size < op.period.saturating_mul(14) {
                self.sampled_small += 1;
            }
        }
        let g = self
            .gens
            .get_mut(u64::from(op.generation))
            .expect("entered in take");
        g.any = true;
        g.last_alloc = Some(op.address);
        let s = stack(&mut self.stacks, op.stack, self.epoch);
        s.allocations += count;
        s.bytes += bytes;
        if !g.ended {
            touched(&mut self.timeline, s, op.stack);
            s.live += w;
            g.live += w;
            if g.live > g.peak {
                g.peak = g.live;
                g.peak_time = op.time;
            }
            self.live_total += w;
            if let Some(tl) = &mut self.timeline {
                tl.max_in = tl.max_in.max(self.live_total);
            }
            if self.live_total > self.peak {
                self.peak = self.live_total;
                self.peak_time = op.time;
                self.epoch += 1;
                s.at_peak = s.live;
                s.epoch = self.epoch;
                g.at_trace_peak = g.live;
                g.epoch = self.epoch;
            }
        }
        self.live.alloc(
            op.generation,
            op.address,
            Block {
                time: op.time,
                stack: op.stack,
                size: op.size,
                period: period32(op.period),
                tid: op.tid,
            },
        );
    }

    /// A free: temporary when its generation's last event was this block's allocation;
    /// its lifetime counted, its weight no longer live.
    fn take_free(&mut self, op: &Op) {
        let g = self
            .gens
            .get_mut(u64::from(op.generation))
            .expect("entered in take");
        let ended = g.ended;
        // A free of a block never seen allocated is not in heaptrack_print's stream
        // (heaptrack_interpret drops it): it neither counts nor breaks a pair.
        let Some(b) = self.live.free(op.generation, op.address, op.time) else {
            self.unmatched_frees += 1;
            return;
        };
        let temporary = g.last_alloc == Some(op.address);
        g.last_alloc = None;
        self.frees_seen += 1;
        let s = stack(&mut self.stacks, b.stack, self.epoch);
        if temporary {
            s.temporary += 1;
            self.temporary += 1;
        }
        let i = bucket(op.time.saturating_sub(b.time));
        if s.lifetimes.len() <= i {
            s.lifetimes.resize(i + 1, 0);
        }
        s.lifetimes[i] += 1;
        if !ended {
            let w = weight(b.size, u64::from(b.period));
            touched(&mut self.timeline, s, b.stack);
            s.live = s.live.saturating_sub(w);
            let g = self
                .gens
                .get_mut(u64::from(op.generation))
                .expect("entered above");
            g.live = g.live.saturating_sub(w);
            self.live_total = self.live_total.saturating_sub(w);
        }
    }

    /// A generation's end (exit or exec): its blocks are gone from the live sums.
    fn take_end(&mut self, op: &Op) {
        let g = self
            .gens
            .get_mut(u64::from(op.generation))
            .expect("entered in take");
        if g.ended {
            return;
        }
        g.ended = true;
        g.last_alloc = None;
        self.live_total = self.live_total.saturating_sub(g.live);
        g.live = 0;
        for b in self.live.generation_blocks(op.generation) {
            let s = stack(&mut self.stacks, b.stack, self.epoch);
            touched(&mut self.timeline, s, b.stack);
            s.live = s.live.saturating_sub(weight(b.size, u64::from(b.period)));
        }
    }
}
