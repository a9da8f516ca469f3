//! --syscalls, --bio, --runq: the log-linear latency histograms the kernel keeps per
//! (process, family, key) (bpf/system.bpf.c `hists`), read every second and at the end and
//! written as one `LatencyHistogram` record per family of what changed since the previous
//! read (`sub_buckets` 16: the layout of `ebtrace_format::latency::Layout::LogLinear`).
use super::*;
use ebtrace_format::proto::LatencyHistogram;

/// What was written last for one kernel key.
#[derive(Debug, Clone)]
struct Written {
    generation: u32,
    count: u64,
    sum: u64,
    buckets: [u32; probes::HIST_BUCKETS],
}

/// The reader's state between reads.
#[derive(Debug, Default)]
pub struct HistState {
    /// (pid, family, key) -> what was written last.
    written: HashMap<(u32, u32, u64), Written>,
    last_ns: u64,
    last_read: Option<std::time::Instant>,
}

/// How often the histograms are read.
const INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl Session<'_> {
    /// Whether the kernel keeps histograms and a second has passed since the last read.
    pub fn histograms_due(&self) -> bool {
        self.probes.system.is_some() && self.hist.last_read.is_none_or(|t| t.elapsed() >= INTERVAL)
    }

    /// Reads the kernel's histograms and writes what changed, one `LatencyHistogram` record
    /// per family.
    pub fn histograms(&mut self) -> Result<()> {
        if self.probes.system.is_none() {
            return Ok(());
        }
        let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        if self.hist.last_read.is_none() {
            self.hist.last_ns = self.start_ns;
        }
        self.hist.last_read = Some(std::time::Instant::now());
        let mut rows = self.probes.histograms();
        // A stable order: the same counts give the same file.
        rows.sort_by_key(|(k, _)| (k.family, k.pid, k.key));
        let mut recs: BTreeMap<u32, LatencyHistogram> = BTreeMap::new();
        let mut done = Vec::new();
        for (k, v) in rows {
            let key = (k.pid, k.family, k.key);
            let mut w = match self.hist.written.get(&key).cloned() {
                Some(w) => w,
                None => Written {
                    generation: self.gen_or_snapshot(k.pid, now)?,
                    count: 0,
                    sum: 0,
                    buckets: [0; probes::HIST_BUCKETS],
                },
            };
            let count = v.count.wrapping_sub(w.count);
            if count != 0 {
                if k.family == EventFamily::Bio as u32 {
                    self.block_device((k.key >> 8) as u32)?;
                }
                let rec = recs.entry(k.family).or_insert_with(|| LatencyHistogram {
                    time_ns: now,
                    since_ns: self.hist.last_ns,
                    family: k.family as i32,
                    sub_buckets: ebtrace_format::latency::Layout::LogLinear.sub_buckets(),
                    ..Default::default()
                });
                rec.generation.push(w.generation);
                rec.key.push(k.key);
                rec.count.push(count);
                rec.sum_ns.push(v.sum.wrapping_sub(w.sum));
                rec.max_ns.push(v.max);
                let mut n = 0;
                for (b, (&now_b, &was)) in v.b.iter().zip(&w.buckets).enumerate() {
                    // 32-bit counts: a difference is right while fewer than 2^32 calls of
                    // one key land in one bucket in a second.
                    let d = now_b.wrapping_sub(was);
                    if d != 0 {
                        rec.bucket.push(b as u32);
                        rec.bucket_count.push(u64::from(d));
                        n += 1;
                    }
                }
                rec.nbuckets.push(n);
            }
            w.count = v.count;
            w.sum = v.sum;
            w.buckets = v.b;
            if self.generation_ended(k.pid, w.generation) {
                self.hist.written.remove(&key);
                done.push(k);
            } else {
                self.hist.written.insert(key, w);
            }
        }
        self.hist.last_ns = now;
        for rec in recs.into_values() {
            self.w.write_record(&Record {
                kind: Some(Kind::Histogram(rec)),
            })?;
        }
        self.probes.histograms_forget(&done);
        Ok(())
    }
}
