//! Stack copies (`--stack-mode dwarf|auto`): a copy arrives in the ring buffer before its
//! event and waits here until the event that owns it joins it.
use super::*;

impl Session<'_> {
    /// Keeps a stack copy (`copy_event`, sent up to its last byte) for the event after it.
    pub(super) fn keep_copy(&mut self, data: &[u8]) {
        use std::mem::offset_of;
        type C = probes::copy_event;
        let at = |off: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(data.get(off..off + 8)?.try_into().ok()?))
        };
        let (Some(id), Some(ip), Some(sp), Some(bp)) = (
            at(offset_of!(C, id)),
            at(offset_of!(C, ip)),
            at(offset_of!(C, sp)),
            at(offset_of!(C, bp)),
        ) else {
            self.malformed += 1;
            return;
        };
        let start = offset_of!(C, data);
        let len = data
            .get(offset_of!(C, len)..offset_of!(C, len) + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()) as usize)
            .unwrap_or(0);
        let Some(bytes) = data.get(start..start + len) else {
            self.malformed += 1;
            return;
        };
        self.pending_copies.insert(
            id,
            PendingCopy {
                ip,
                sp,
                bp,
                data: bytes.to_vec(),
            },
        );
        while self.pending_copies.len() > MAX_PENDING_COPIES {
            self.pending_copies.pop_first();
        }
    }
}
