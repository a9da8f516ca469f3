//! Arbitrary bytes as the decompressed content of one chunk: `decode_records`, then
//! `Tables::observe`, `Family::decode` and `Tables::mapping_at` (`common.rs`).
//!
//! The `reader` target rarely gets past zstd's checksums with new record bytes, so this one
//! fuzzes record and batch parsing directly. Records that parsed must re-encode to bytes
//! that parse to the same records, and the reader's fast path for allocation and free
//! batches must give what prost alone gives.
#![no_main]

#[path = "common.rs"]
mod common;

use ebtrace_format::reader::decode_records;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let (records, err) = decode_records(data);
    // The fast reader of allocation and free batches reads what prost reads.
    let (by_prost, prost_err) = ebtrace_format::reader::decode_records_with(data, false);
    assert_eq!(records, by_prost);
    assert_eq!(err, prost_err);
    let mut again = Vec::new();
    for r in &records {
        r.encode_length_delimited(&mut again).unwrap();
    }
    let (reparsed, err) = decode_records(&again);
    assert!(err.is_none(), "re-encoded records do not parse: {err:?}");
    assert_eq!(reparsed, records);
    assert_eq!(common::exercise(records.into_iter()), reparsed.len() as u64);
});
