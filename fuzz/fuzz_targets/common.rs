//! What every fuzz target does with the records it gets: feed them to `Tables::observe`,
//! decode every event batch with `Family::decode`, and look addresses up with
//! `Tables::mapping_at`. Nothing may panic; decoded batches have one event per row.
use ebtrace_format::events::Family;
use ebtrace_format::Tables;
use ebtrace_proto::v1::{record::Kind, Record};

/// Consumes `records_in`; returns how many there were.
pub fn exercise(records_in: impl Iterator<Item = Record>) -> u64 {
    let mut tables = Tables::default();
    // (generation, address, time) triples taken from the events, to look up afterwards.
    let mut lookups: Vec<(u32, u64, u64)> = Vec::new();
    let mut records = 0u64;
    for record in records_in {
        records += 1;
        tables.observe(&record);
        let Some(kind) = &record.kind else { continue };
        match kind {
            Kind::Allocs(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                    lookups.extend(evs.iter().map(|e| (e.generation, e.address, e.time_ns)));
                }
            }
            Kind::Frees(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                    lookups.extend(evs.iter().map(|e| (e.generation, e.address, e.time_ns)));
                }
            }
            Kind::Locks(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                    lookups.extend(evs.iter().map(|e| (e.generation, e.mutex, e.time_ns)));
                }
            }
            Kind::Funcs(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                    lookups.extend(evs.iter().map(|e| (e.generation, e.ret, e.time_ns)));
                }
            }
            Kind::CpuSamples(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::Offcpu(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::MemGrowth(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                    lookups.extend(evs.iter().map(|e| (e.generation, e.address, e.time_ns)));
                }
            }
            Kind::Aggregate(a) => {
                if let Ok(rows) = ebtrace_format::events::aggregate_rows(a) {
                    assert_eq!(rows.len(), a.generation.len());
                }
            }
            Kind::Syscalls(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::Bios(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::Runq(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::Tcp(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::Usdts(b) => {
                if let Ok(evs) = b.decode() {
                    assert_eq!(evs.len(), b.len());
                }
            }
            Kind::Histogram(h) => {
                if let Ok(rows) = ebtrace_format::events::histogram_rows(h) {
                    assert_eq!(rows.len(), h.generation.len());
                    assert!(rows
                        .iter()
                        .all(|r| r.buckets.iter().all(|b| b.0 < r.layout.buckets())));
                }
            }
            Kind::Stack(s) => {
                for &ip in s.user_ips.iter().take(8) {
                    lookups.push((s.generation, ip, u64::MAX));
                }
            }
            _ => {}
        }
    }

    // Look up the event addresses, plus the edges of every recorded mapping.
    let mut edges = Vec::new();
    for (&generation, g) in &tables.generations {
        for m in g.mappings.iter().take(16) {
            for addr in [
                m.start,
                m.end,
                m.end.wrapping_sub(1),
                m.start.wrapping_add(1),
            ] {
                edges.push((generation, addr, m.time_ns));
                edges.push((generation, addr, 0));
            }
        }
    }
    for &(generation, addr, time) in lookups.iter().take(256).chain(edges.iter().take(256)) {
        if let Some(m) = tables.mapping_at(generation, addr, time) {
            assert!(
                m.start <= addr && addr < m.end,
                "mapping_at returned a mapping that does not cover the address"
            );
        }
        let _ = tables.build_id_hex(u64::from(generation));
        let _ = tables.string(addr);
    }

    records
}
