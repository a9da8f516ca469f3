//! Arbitrary bytes through the whole read path: `TraceReader` (framing, resync,
//! decompression, record parsing), then `Tables::observe`, every batch's `Family::decode`
//! and `Tables::mapping_at` (`common.rs`). Nothing may panic, hang or allocate without
//! bound, and the reader must account for every input byte.
//!
//! Run: `cargo +nightly fuzz run reader` (from the workspace root); seeds are in
//! `fuzz/corpus/reader/` (regenerate with
//! `cargo test -p ebtrace-format --test fuzz_seeds -- --ignored`).
#![no_main]

#[path = "common.rs"]
mod common;

use ebtrace_format::TraceReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = TraceReader::new(data) else {
        return;
    };
    let records = common::exercise(reader.by_ref());

    // The reader's own accounting.
    assert_eq!(reader.records(), records);
    for d in reader.damage() {
        let _ = d.to_string();
        assert!(
            d.offset.saturating_add(d.bytes) <= data.len() as u64,
            "damage past the end of the input: {d:?} (input {} bytes)",
            data.len()
        );
    }
    assert_eq!(
        reader.offset(),
        data.len() as u64,
        "the reader stopped before the end of the input (damage: {:?})",
        reader.damage()
    );
});
