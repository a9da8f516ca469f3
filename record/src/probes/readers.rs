//! Reading what the programs counted: the per-CPU counters, --aggregate's maps, the
//! kernel's histograms, off-CPU's and the unwinder's tallies.
use super::*;
use libbpf_rs::{MapCore, MapFlags};
use std::collections::BTreeMap;
use std::os::fd::AsFd;

/// The u64 words at `idx` of entry 0 of a per-CPU array, each summed over the CPUs; None
/// when the map cannot be read.
pub(super) fn percpu_words<const N: usize>(
    map: &libbpf_rs::MapMut<'_>,
    idx: [usize; N],
) -> Option<[u64; N]> {
    let cpus = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .ok()??;
    let mut sum = [0u64; N];
    for v in cpus {
        for (s, &i) in sum.iter_mut().zip(&idx) {
            *s += v
                .get(i * 8..i * 8 + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()));
        }
    }
    Some(sum)
}

impl<'obj> Probes<'obj> {
    /// Per-CPU counters of every loaded object, summed by (family, counter) and kept per CPU
    /// for the loss counters.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        let mut read = |map: &dyn MapCore| {
            for key in 0..(FAM_COUNT * CTR_STRIDE) as u32 {
                if let Ok(Some(per_cpu)) = map.lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY) {
                    for (cpu, v) in per_cpu.iter().enumerate() {
                        let v = u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8]));
                        if v > 0 {
                            *c.values.entry((key as usize, cpu as u32)).or_default() += v;
                        }
                    }
                }
            }
        };
        each_skel!(self, s => read(&s.maps.counters));
        if let Some(ch) = &self.chan {
            let (hits, lost) = ch.counts();
            let fams = [
                ebtrace_proto::v1::EventFamily::Alloc as usize,
                ebtrace_proto::v1::EventFamily::Free as usize,
            ];
            for (i, fam) in fams.into_iter().enumerate() {
                for (ctr, v) in [(CTR_HITS, hits[i]), (CTR_LOST_RINGBUF, lost[i])] {
                    if v > 0 {
                        *c.values.entry((fam * CTR_STRIDE + ctr, 0)).or_default() += v;
                    }
                }
            }
        }
        c
    }

    /// The preload sampler's ring buffer (`--alloc-sampler preload`), for the shim's
    /// back-pressure; None without it.
    pub fn sampler_ring(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.sampler.as_ref().map(|s| s.maps.events.as_fd())
    }

    /// --offcpu: the blocks past the threshold so far, kept or left out by the sample, and
    /// their ns off the CPU (exact); None without the off-CPU programs.
    pub fn offcpu_seen(&self) -> Option<(u64, u64)> {
        let p = self.profile.as_ref()?;
        let [n, ns] = percpu_words(&p.maps.offcpu_seen, [0, 1])?;
        Some((n, ns))
    }

    /// --stack-mode cfi|auto: (walks that could use their thread's memo, walks that did),
    /// summed over the objects and CPUs (`uw_rec` in bpf/unwind.bpf.h).
    pub fn unwind_memo(&self) -> (u64, u64) {
        let maps = [
            self.alloc.as_ref().map(|o| &o.maps.uw_rec),
            self.lock.as_ref().map(|o| &o.maps.uw_rec),
            self.profile.as_ref().map(|o| &o.maps.uw_rec),
            self.system.as_ref().map(|o| &o.maps.uw_rec),
        ];
        let mut sum = (0u64, 0u64);
        for [walks, hits] in maps
            .into_iter()
            .flatten()
            .filter_map(|m| percpu_words(m, [1, 2]))
        {
            sum.0 += walks;
            sum.1 += hits;
        }
        sum
    }

    /// --aggregate: every (key, counters) of the counters maps (the key says the family).
    pub fn agg_counts(&self) -> Vec<(agg_key, agg_val)> {
        fn read(m: &libbpf_rs::MapMut<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
            match m.lookup_batch(1024, MapFlags::ANY, MapFlags::ANY) {
                Ok(it) => it.collect(),
                // Batch lookups need 5.6; one key at a time otherwise.
                Err(_) => m
                    .keys()
                    .filter_map(|k| {
                        let v = m.lookup(&k, MapFlags::ANY).ok()??;
                        Some((k, v))
                    })
                    .collect(),
            }
        }
        let mut rows = Vec::new();
        if let Some(a) = &self.alloc {
            rows.extend(read(&a.maps.agg_counts));
        }
        if let Some(l) = &self.lock {
            rows.extend(read(&l.maps.agg_counts));
        }
        if let Some(p) = &self.profile {
            rows.extend(read(&p.maps.agg_counts));
        }
        rows.into_iter()
            .map(|(k, v)| (read_event::<agg_key>(&k), read_event::<agg_val>(&v)))
            .collect()
    }

    /// --syscalls, --bio, --runq: every histogram the kernel keeps (cumulative counts; the
    /// 32-bit bucket counts wrap).
    pub fn histograms(&self) -> Vec<(hist_key, hist_val)> {
        let Some(sy) = &self.system else {
            return Vec::new();
        };
        let m = &sy.maps.hists;
        let keys: Vec<Vec<u8>> = m.keys().collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let Ok(Some(v)) = m.lookup(&k, MapFlags::ANY) else {
                continue; // deleted since the key was listed
            };
            out.push((read_event::<hist_key>(&k), read_event::<hist_val>(&v)));
        }
        out
    }

    /// Forgets histograms read for the last time (their process ended).
    pub fn histograms_forget(&self, keys: &[hist_key]) {
        if let Some(sy) = &self.system {
            for k in keys {
                // SAFETY: hist_key is plain old data of the map's key size.
                let _ = sy.maps.hists.delete(unsafe { plain::as_bytes(k) });
            }
        }
    }

    /// The stacks map of the object that counts `family`.
    fn agg_stacks_of(
        &self,
        family: u32,
    ) -> Option<(&libbpf_rs::MapMut<'_>, &libbpf_rs::MapMut<'_>)> {
        use ebtrace_format::proto::EventFamily as F;
        match family {
            f if f == F::Alloc as u32 => self
                .alloc
                .as_ref()
                .map(|a| (&a.maps.agg_counts, &a.maps.agg_stacks)),
            f if f == F::Lock as u32 => self
                .lock
                .as_ref()
                .map(|a| (&a.maps.agg_counts, &a.maps.agg_stacks)),
            f if f == F::Cpu as u32 || f == F::Offcpu as u32 => self
                .profile
                .as_ref()
                .map(|a| (&a.maps.agg_counts, &a.maps.agg_stacks)),
            _ => None,
        }
    }

    /// --aggregate: the stack written for `key` (None: not there, a full map).
    pub fn agg_stack(&self, key: &agg_key) -> Option<agg_stack> {
        let (_, stacks) = self.agg_stacks_of(key.family)?;
        // SAFETY: agg_key is plain old data of the map's key size.
        let k = unsafe { plain::as_bytes(key) };
        let v = stacks.lookup(k, MapFlags::ANY).ok()??;
        Some(read_event::<agg_stack>(&v))
    }

    /// --aggregate: forgets keys read for the last time (their process ended).
    pub fn agg_forget(&self, keys: &[agg_key]) {
        for key in keys {
            let Some((counts, stacks)) = self.agg_stacks_of(key.family) else {
                continue;
            };
            // SAFETY: as in agg_stack.
            let k = unsafe { plain::as_bytes(key) };
            let _ = counts.delete(k);
            let _ = stacks.delete(k);
        }
    }
}

/// Summed counter values, keyed by (family * CTR_STRIDE + counter, cpu).
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub values: BTreeMap<(usize, u32), u64>,
}

impl Counters {
    pub fn total(&self, family: usize, counter: usize) -> u64 {
        let key = family * CTR_STRIDE + counter;
        self.values
            .range((key, 0)..(key + 1, 0))
            .map(|(_, v)| v)
            .sum()
    }
}

#[cfg(test)]
mod hist_tests {
    /// The kernel's histograms: one shared value per key (not per CPU), 2,136 bytes, so
    /// the map holds at most 33.4 MiB of values whatever the CPU count.
    #[test]
    fn histogram_map_stays_under_34_mib() {
        use ebtrace_format::latency as l;
        assert_eq!(std::mem::size_of::<super::hist_val>(), 2136);
        let bytes = super::HIST_KEYS * std::mem::size_of::<super::hist_val>();
        assert_eq!(super::HIST_KEYS, 16384);
        assert!(bytes <= 34 << 20, "{bytes}");
        // The kernel's layout is the one the records say (sub_buckets 16).
        assert_eq!(super::HIST_BUCKETS, l::LOG_LINEAR_BUCKETS as usize);
        assert_eq!(super::HIST_SUB, l::SUB_BUCKETS as usize);
        assert_eq!(super::HIST_SUB_BITS, l::SUB_BITS as usize);
    }
}
