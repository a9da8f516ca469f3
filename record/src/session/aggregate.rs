//! --aggregate: the counters the kernel keeps per (process, family, stack) — alloc: calls,
//! bytes, live blocks and bytes; cpu: samples; offcpu: blocks and ns; lock: waits, ns
//! waited and held (bpf/aggregate.bpf.h) — read every interval and written as one
//! `Aggregate` record per family of what changed since the previous read.
use super::decode::RawStack;
use super::*;
use ebtrace_format::proto::Aggregate;

/// What was written last for one kernel key.
#[derive(Debug, Default, Clone)]
struct Written {
    generation: u32,
    /// The stack's id in the current file (0: to intern, e.g. after a rotation).
    stack: u64,
    mutex: u64,
    count: u64,
    sum: u64,
    sum2: u64,
    live_count: u64,
    live_bytes: u64,
}

/// The reader's state between reads.
#[derive(Debug, Default)]
pub struct AggState {
    /// (pid, family, mm, hash) -> what was written last.
    written: HashMap<(u32, u32, u64, u64), Written>,
    last_ns: u64,
    /// Write every stack's live gauges at the next read (a new file must say them).
    full: bool,
    /// Whether frees are tracked (the alloc rows' live columns are written).
    pub frees: bool,
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
    pub(super) fn generation_ended(&self, pid: u32, g: u32) -> bool {
        let latest = self.by_pid.get(&pid).and_then(|v| v.last()).copied();
        if latest != Some(g) {
            return true;
        }
        let start = self.gens.get(g as usize - 1).map_or(0, |x| x.start_ns);
        self.exited.get(&pid).is_some_and(|&t| t >= start)
    }

    /// Reads the kernel's counters and writes what changed, one `Aggregate` record per
    /// family.
    pub fn aggregate(&mut self) -> Result<()> {
        let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        self.agg.last_read = Some(std::time::Instant::now());
        let rows = self.probes.agg_counts();
        let mut recs: BTreeMap<u32, Aggregate> = BTreeMap::new();
        let full = std::mem::take(&mut self.agg.full);
        let mut done = Vec::new();
        for (k, v) in rows {
            let key = (k.pid, k.family, k.mm, k.hash);
            let mut w = match self.agg.written.get(&key).cloned() {
                Some(w) => w,
                None => Written {
                    generation: self.gen_or_snapshot(k.pid, v.first_ns)?,
                    ..Default::default()
                },
            };
            // (A stack missing from its map is never expected: it goes in before the counts.)
            let stack = if w.stack == 0 {
                self.probes.agg_stack(&k)
            } else {
                None
            };
            if let Some(st) = stack {
                let n = (st.nframes as usize).min(st.ips.len());
                let kn = (st.kframes as usize).min(st.ips.len() - n);
                self.family = k.family as usize;
                w.stack = self.stack(
                    w.generation,
                    RawStack {
                        user: &st.ips[..n],
                        n: n as u32,
                        kernel: &st.ips[n..n + kn],
                        flags: st.flags,
                        copy_id: 0,
                    },
                )?;
                w.mutex = st.mutex;
            }
            let count = v.count.wrapping_sub(w.count);
            let sum = v.sum.wrapping_sub(w.sum);
            let sum2 = v.sum2.wrapping_sub(w.sum2);
            let gauges = k.family == EventFamily::Alloc as u32 && self.agg.frees;
            let live = v.live_count != w.live_count || v.live_bytes != w.live_bytes;
            let changed = count != 0
                || sum != 0
                || sum2 != 0
                || (gauges && (live || (full && v.live_count != 0)));
            if changed && w.stack == 0 {
                // Counts without their stack cannot be written: a counted loss. The stack is
                // looked for again at the next read.
                if count > 0 {
                    self.w.write_record(&Record {
                        kind: Some(Kind::Lost(Lost {
                            time_ns: now,
                            family: k.family as i32,
                            reason: LossReason::MapFull as i32,
                            count,
                            cpu: 0,
                        })),
                    })?;
                }
            } else if changed {
                let rec = recs.entry(k.family).or_insert_with(|| Aggregate {
                    time_ns: now,
                    since_ns: self.agg.last_ns,
                    family: k.family as i32,
                    ..Default::default()
                });
                rec.generation.push(w.generation);
                rec.stack.push(w.stack);
                rec.count.push(count);
                if k.family != EventFamily::Cpu as u32 {
                    rec.sum.push(sum);
                }
                if k.family == EventFamily::Lock as u32 {
                    rec.sum2.push(sum2);
                    rec.mutex.push(w.mutex);
                }
                if gauges {
                    // The gauges may pass through "negative" while a free lands before the
                    // count of its allocation on another CPU; never written so.
                    let clamp = |x: u64| if (x as i64) < 0 { 0 } else { x };
                    rec.live_count.push(clamp(v.live_count));
                    rec.live_bytes.push(clamp(v.live_bytes));
                }
                if let Some(f) = EventFamily::try_from(k.family as i32)
                    .ok()
                    .filter(|_| (k.family as usize) < ebtrace_format::family::COUNT)
                {
                    self.kept[f] += count;
                }
            }
            w.count = v.count;
            w.sum = v.sum;
            w.sum2 = v.sum2;
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
        for rec in recs.into_values() {
            self.w.write_record(&Record {
                kind: Some(Kind::Aggregate(rec)),
            })?;
        }
        self.probes.agg_forget(&done);
        Ok(())
    }
}
