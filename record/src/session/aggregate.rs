//! --aggregate: the allocation counters the kernel keeps per (process, stack) — calls,
//! bytes, live blocks and bytes (bpf/alloc.bpf.c `agg_counts`) — read every interval and
//! written as `Aggregate` records of what changed since the previous read.
use super::*;
use ebtrace_format::proto::Aggregate;

/// What was written last for one kernel key.
#[derive(Debug, Default, Clone)]
struct Written {
    generation: u32,
    /// The stack's id in the current file (0: to intern, e.g. after a rotation).
    stack: u64,
    count: u64,
    bytes: u64,
    live_count: u64,
    live_bytes: u64,
}

/// The reader's state between reads.
#[derive(Debug, Default)]
pub struct AggState {
    /// (pid, mm, hash) -> what was written last.
    written: HashMap<(u32, u64, u64), Written>,
    last_ns: u64,
    /// Write every stack's live gauges at the next read (a new file must say them).
    full: bool,
    /// Whether frees are tracked (the live columns are written).
    pub frees: bool,
    /// Keys whose stack was not in `agg_stacks` (never expected: the stack goes in first).
    pub stacks_missing: u64,
    /// Counters read and written, for the summary: calls.
    pub calls: u64,
    interval: std::time::Duration,
    last_read: Option<std::time::Instant>,
}

impl AggState {
    /// A new file (--rotate): stacks are interned again and every live gauge written.
    pub fn new_file(&mut self) {
        for w in self.written.values_mut() {
            w.stack = 0;
        }
        self.full = true;
    }
}

impl Session<'_> {
    /// --aggregate: read the counters every `interval` (`aggregate_due`) and at the end.
    pub fn start_aggregating(&mut self, frees: bool, interval: std::time::Duration) {
        self.aggregating = true;
        self.agg.frees = frees;
        self.agg.interval = interval;
        self.agg.last_read = Some(std::time::Instant::now());
        self.agg.last_ns = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    }

    /// Whether an interval has passed since the last read.
    pub fn aggregate_due(&self) -> bool {
        self.aggregating
            && self
                .agg
                .last_read
                .is_some_and(|t| t.elapsed() >= self.agg.interval)
    }

    /// Whether generation `g` of `pid` has ended (an exit or a later exec): its counters
    /// will not change again.
    fn generation_ended(&self, pid: u32, g: u32) -> bool {
        let latest = self.by_pid.get(&pid).and_then(|v| v.last()).copied();
        if latest != Some(g) {
            return true;
        }
        let start = self.gens.get(g as usize - 1).map_or(0, |x| x.start_ns);
        self.exited.get(&pid).is_some_and(|&t| t >= start)
    }

    /// Reads the kernel's counters and writes what changed as one `Aggregate` record.
    pub fn aggregate(&mut self) -> Result<()> {
        let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        self.agg.last_read = Some(std::time::Instant::now());
        let rows = self.probes.agg_counts();
        let mut rec = Aggregate {
            time_ns: now,
            since_ns: self.agg.last_ns,
            family: EventFamily::Alloc as i32,
            ..Default::default()
        };
        let full = std::mem::take(&mut self.agg.full);
        let mut done = Vec::new();
        for (k, v) in rows {
            let key = (k.pid, k.mm, k.hash);
            let known = self.agg.written.get(&key).cloned();
            let mut w = match known {
                Some(w) => w,
                None => Written {
                    generation: self.gen_or_snapshot(k.pid, v.first_ns)?,
                    ..Default::default()
                },
            };
            if w.stack == 0 {
                let Some(st) = self.probes.agg_stack(&k) else {
                    self.agg.stacks_missing += 1;
                    continue;
                };
                self.family = EventFamily::Alloc as usize;
                w.stack = self.stack(w.generation, &st.ips, st.nframes, &[], st.flags, 0)?;
            }
            let count = v.count.wrapping_sub(w.count);
            let bytes = v.bytes.wrapping_sub(w.bytes);
            let live = v.live_count != w.live_count || v.live_bytes != w.live_bytes;
            if count != 0 || bytes != 0 || (self.agg.frees && (live || (full && v.live_count != 0)))
            {
                rec.generation.push(w.generation);
                rec.stack.push(w.stack);
                rec.count.push(count);
                rec.sum.push(bytes);
                if self.agg.frees {
                    // The gauges may pass through "negative" while a free lands before the
                    // count of its allocation on another CPU; never written so.
                    rec.live_count.push(if (v.live_count as i64) < 0 {
                        0
                    } else {
                        v.live_count
                    });
                    rec.live_bytes.push(if (v.live_bytes as i64) < 0 {
                        0
                    } else {
                        v.live_bytes
                    });
                }
                self.agg.calls += count;
                self.kept[EventFamily::Alloc] += count;
            }
            w.count = v.count;
            w.bytes = v.bytes;
            w.live_count = v.live_count;
            w.live_bytes = v.live_bytes;
            if self.generation_ended(k.pid, w.generation) {
                self.agg.written.remove(&key);
                done.push(k);
            } else {
                self.agg.written.insert(key, w);
            }
        }
        self.agg.last_ns = now;
        if !rec.generation.is_empty() {
            self.w.write_record(&Record {
                kind: Some(Kind::Aggregate(rec)),
            })?;
        }
        self.probes.agg_forget(&done);
        Ok(())
    }
}
