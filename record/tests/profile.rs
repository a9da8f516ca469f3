//! The profiling families end to end (--cpu, --offcpu, --func, --memgrowth): ebrec records
//! a testdata program whose behaviour is known, ebsym reports, and the numbers are what the
//! program did (its own clock, its own counts) or what a reference tool saw in the same
//! kind of run. Needs root (skips loudly without it; fails when CI=true).

mod common;
use common::{ebsym_json, expect_line, root};
use ebtrace_format::events::{Family, MemGrowthEvent};
use ebtrace_format::proto::{record::Kind, MemGrowthKind};
use ebtrace_format::{Tables, TraceReader};
use serde_json::Value;
use std::path::Path;

/// The function names of a report row's frames, leaf first.
fn functions(row: &Value) -> Vec<String> {
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether `name` is the function `want` (a demangled name with or without parameters).
fn is_fn(name: &str, want: &str) -> bool {
    name == want || name.strip_prefix(want).is_some_and(|r| r.starts_with('('))
}

fn mem_events(path: &Path) -> Vec<MemGrowthEvent> {
    let mut r = TraceReader::open(path).unwrap();
    let mut tables = Tables::default();
    let mut out = Vec::new();
    for rec in r.by_ref() {
        if tables.observe(&rec) {
            continue;
        }
        if let Some(Kind::MemGrowth(b)) = rec.kind {
            out.extend(b.decode().unwrap());
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    out
}

#[test]
fn memory_growth_by_mapping_and_first_touch() {
    if !root() {
        return;
    }
    let rec = common::record("memgrowth", &["--memgrowth"], &[]);
    let expect = expect_line(&rec.out, "memgrowth");
    let page = expect["page_size"].as_u64().unwrap();
    let pages = expect["touched_pages"].as_u64().unwrap();
    let map_bytes = expect["map_bytes"].as_u64().unwrap();
    let map_addr =
        u64::from_str_radix(expect["map_address"].as_str().unwrap().trim_start_matches("0x"), 16)
            .unwrap();

    // The raw events: the one mmap and the one munmap of the region, exactly.
    let events = mem_events(&rec.trace);
    let maps: Vec<&MemGrowthEvent> = events
        .iter()
        .filter(|e| e.kind == MemGrowthKind::Mmap && e.address == map_addr)
        .collect();
    assert_eq!(maps.len(), 1, "mmap events of the region: {maps:?}");
    assert_eq!(maps[0].size, map_bytes);
    let unmaps = events
        .iter()
        .filter(|e| e.kind == MemGrowthKind::Munmap && e.address == map_addr)
        .count();
    assert_eq!(unmaps, 1);
    // First touches inside the region: one fault per page written, at page addresses.
    let in_region: Vec<&MemGrowthEvent> = events
        .iter()
        .filter(|e| {
            e.kind == MemGrowthKind::PageFault
                && e.address >= map_addr
                && e.address < map_addr + map_bytes
        })
        .collect();
    assert_eq!(in_region.len() as u64, pages);
    assert!(in_region
        .iter()
        .all(|e| e.size == page && (e.address - map_addr) % page == 0));
    // The heap grew by brk by at least what the program kept live.
    let brk: u64 = events
        .iter()
        .filter(|e| e.kind == MemGrowthKind::Brk)
        .map(|e| e.size)
        .sum();
    assert!(
        brk >= expect["heap_bytes"].as_u64().unwrap(),
        "brk growth {brk} < heap bytes {}",
        expect["heap_bytes"]
    );

    // The report: the first touches are charged to the function that wrote the pages.
    let t = rec.trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "memgrowth", "--by", "bytes", "-n", "50"]);
    let rows = top["rows"].as_array().unwrap();
    let touch: Vec<&Value> = rows
        .iter()
        .filter(|r| functions(r).first().is_some_and(|f| is_fn(f, "grow::touch_pages")))
        .collect();
    assert_eq!(touch.len(), 1, "{top:#}");
    assert_eq!(touch[0]["count"].as_u64(), Some(pages));
    assert_eq!(touch[0]["bytes"].as_u64(), Some(pages * page));
}
