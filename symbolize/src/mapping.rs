//! Which recorded mapping a runtime address of a stack is in: shared by the unwinder
//! ([`crate::unwind`], to find each frame's module) and the trace symbolizer
//! ([`crate::trace`], to normalize each frame).
use ebtrace_format::proto::{Mapping, MappingSource};
use ebtrace_format::Tables;

/// The mapping that gives meaning to `addr` in `generation`: the latest recorded one that
/// covers it. Stacks carry no time, so an unmap recorded later does not hide a mapping.
pub(crate) fn mapping_for(tables: &Tables, generation: u32, addr: u64) -> Option<&Mapping> {
    if let Some(m) = tables.mapping_at(generation, addr, u64::MAX) {
        return Some(m);
    }
    tables
        .generations
        .get(&generation)?
        .mappings
        .iter()
        .filter(|m| m.start <= addr && addr < m.end && m.source() != MappingSource::Unmap)
        .max_by_key(|m| m.time_ns)
}
