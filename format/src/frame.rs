//! The byte-level framing of a trace file: the file magic frame and chunk descriptors, both
//! zstd skippable frames so that `zstd -dc` reads a trace as a plain record stream.

/// Skippable-frame magic of the file header (zstd reserves 0x184D2A50..=0x184D2A5F).
pub const FILE_FRAME_MAGIC: u32 = 0x184D_2A50;
/// Skippable-frame magic of a chunk descriptor.
pub const CHUNK_FRAME_MAGIC: u32 = 0x184D_2A51;
/// Bytes 0..8 of the file header payload.
pub const FILE_MAGIC: &[u8; 8] = b"EBTRACE\0";
/// Payload size of the file header frame: magic, version u32, flags u32.
pub const FILE_HEADER_PAYLOAD: u32 = 16;
/// Payload size of a chunk descriptor: compressed u64, decompressed u64, records u32, seq u32.
pub const CHUNK_DESCRIPTOR_PAYLOAD: u32 = 24;
/// Total bytes of a chunk descriptor frame (8-byte frame header + payload).
pub const CHUNK_DESCRIPTOR_LEN: usize = 8 + CHUNK_DESCRIPTOR_PAYLOAD as usize;

/// Largest decompressed chunk a reader accepts (the writer closes chunks at ~4 MiB).
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;
/// Largest compressed chunk a reader accepts.
pub const MAX_COMPRESSED_BYTES: u64 = MAX_CHUNK_BYTES + (1 << 20);
/// Largest single record a reader accepts.
pub const MAX_RECORD_BYTES: u64 = 16 << 20;

/// The fixed-size descriptor written before each chunk's zstd frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkDescriptor {
    pub compressed_len: u64,
    pub decompressed_len: u64,
    pub record_count: u32,
    pub sequence: u32,
}

impl ChunkDescriptor {
    pub fn encode(&self) -> [u8; CHUNK_DESCRIPTOR_LEN] {
        let mut b = [0u8; CHUNK_DESCRIPTOR_LEN];
        b[0..4].copy_from_slice(&CHUNK_FRAME_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&CHUNK_DESCRIPTOR_PAYLOAD.to_le_bytes());
        b[8..16].copy_from_slice(&self.compressed_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.decompressed_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.record_count.to_le_bytes());
        b[28..32].copy_from_slice(&self.sequence.to_le_bytes());
        b
    }

    /// Parses a descriptor; `None` if the magic or size is not that of a descriptor.
    pub fn decode(b: &[u8; CHUNK_DESCRIPTOR_LEN]) -> Option<Self> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if u32_at(0) != CHUNK_FRAME_MAGIC || u32_at(4) != CHUNK_DESCRIPTOR_PAYLOAD {
            return None;
        }
        Some(ChunkDescriptor {
            compressed_len: u64_at(8),
            decompressed_len: u64_at(16),
            record_count: u32_at(24),
            sequence: u32_at(28),
        })
    }
}

/// The file header frame for `version`.
pub fn file_header(version: u32) -> [u8; 8 + FILE_HEADER_PAYLOAD as usize] {
    let mut b = [0u8; 24];
    b[0..4].copy_from_slice(&FILE_FRAME_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&FILE_HEADER_PAYLOAD.to_le_bytes());
    b[8..16].copy_from_slice(FILE_MAGIC);
    b[16..20].copy_from_slice(&version.to_le_bytes());
    b
}
