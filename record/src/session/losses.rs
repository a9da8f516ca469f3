//! What was kept, lost and filtered per family: the BPF counters read back and the
//! recorder's own losses, as the trailer's FamilyStats and the Lost records.
use super::*;

impl Session<'_> {
    /// Cumulative stats, and Lost records for what was lost since the last call.
    pub fn stats(&mut self, now: u64) -> Result<Vec<FamilyStats>> {
        let c = self.probes.counters();
        for (&(key, cpu), &v) in &c.values {
            let family = key / probes::CTR_STRIDE;
            let reason = match key % probes::CTR_STRIDE {
                probes::CTR_LOST_RINGBUF => LossReason::RingbufFull,
                probes::CTR_LOST_MAP_FULL => LossReason::MapFull,
                probes::CTR_LOST_RATE => LossReason::RateLimit,
                probes::CTR_LOST_UNMATCHED => LossReason::Unmatched,
                _ => continue,
            };
            let before = self.last_counters.insert((key, cpu), v).unwrap_or(0);
            if v > before {
                self.w.write_record(&Record {
                    kind: Some(Kind::Lost(Lost {
                        time_ns: now,
                        family: family as i32,
                        reason: reason as i32,
                        count: v - before,
                        cpu,
                    })),
                })?;
            }
        }
        self.flush_kernel_symbols()?;
        let families: Vec<FamilyStats> = ebtrace_format::family::FAMILIES
            .iter()
            .map(|f| {
                let i = f.number();
                FamilyStats {
                    family: f.id as i32,
                    kept: self.kept[f.id],
                    lost: c.total(i, probes::CTR_LOST_RINGBUF)
                        + c.total(i, probes::CTR_LOST_MAP_FULL)
                        + c.total(i, probes::CTR_LOST_RATE)
                        + c.total(i, probes::CTR_LOST_UNMATCHED),
                    filtered: c.total(i, probes::CTR_FILTERED),
                    hits: c.total(i, probes::CTR_HITS),
                }
            })
            .filter(|f| f.hits > 0 || f.kept > 0 || f.lost > 0)
            .collect();
        let programs = self
            .probes
            .program_stats()
            .into_iter()
            .map(ProgramStats::from)
            .collect();
        self.w.write_record(&Record {
            kind: Some(Kind::Stats(Stats {
                time_ns: now,
                families: families.clone(),
                bytes_written: self.w.stats().bytes_written,
                programs,
                requests_held: c
                    .total(EventFamily::Usdt as usize, probes::CTR_HELD)
                    .saturating_sub(c.total(EventFamily::Usdt as usize, probes::CTR_RELEASED)),
            })),
        })?;
        self.last_families = families.clone();
        Ok(families)
    }
    pub fn sideband_lost(&self) -> u64 {
        self.sideband_lost
    }
}
