//! [`TraceReader`]: iterates the records of a trace, chunk by chunk, with bounded memory.
//!
//! A damaged file is not an error: every complete chunk is returned, and what could not be
//! read is reported by [`TraceReader::damage`] (a cut last chunk is what a killed recorder
//! leaves). Only input that is not a trace at all (bad magic, unknown version) fails
//! [`TraceReader::new`].
use crate::error::{Error, ErrorKind};
use crate::frame::*;
use ebtrace_proto::v1::Record;
use prost::Message;
use std::io::{self, BufRead, BufReader, Read};

/// What kind of damage a reader met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageKind {
    /// The file ends inside a chunk: the recording was cut (killed, disk full).
    Truncated,
    /// A chunk failed to decompress, its checksum or sizes are wrong, or its records do not
    /// parse; the reader skipped it.
    CorruptChunk,
    /// Bytes that are not a chunk descriptor; the reader skipped to the next descriptor.
    Garbage,
}

/// One place where data could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub kind: DamageKind,
    /// Byte offset in the file where it starts.
    pub offset: u64,
    /// Bytes skipped because of it.
    pub bytes: u64,
    /// Sequence number of the affected chunk, when known.
    pub chunk: Option<u32>,
    /// Records of that chunk that were still returned.
    pub records_kept: u32,
    pub message: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            DamageKind::Truncated => "truncated",
            DamageKind::CorruptChunk => "corrupt chunk",
            DamageKind::Garbage => "unreadable bytes",
        };
        write!(f, "{what} at byte {}", self.offset)?;
        if let Some(c) = self.chunk {
            write!(f, " (chunk {c})")?;
        }
        write!(f, ": {} ({} bytes skipped", self.message, self.bytes)?;
        if self.records_kept > 0 {
            write!(f, ", {} records of it kept", self.records_kept)?;
        }
        f.write_str(")")
    }
}

/// Reads records from a trace. Iterate it for the records; then look at
/// [`damage`](Self::damage) and [`chunks`](Self::chunks).
pub struct TraceReader<R: Read> {
    input: BufReader<R>,
    offset: u64,
    version: u32,
    decompressor: zstd::bulk::Decompressor<'static>,
    pending: std::vec::IntoIter<Record>,
    damage: Vec<Damage>,
    chunks: u64,
    records: u64,
    done: bool,
    /// Bytes taken from `input` by a resync that belong to the next chunk.
    carry: Vec<u8>,
    carry_pos: usize,
}

impl<R: Read> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("offset", &self.offset)
            .field("chunks", &self.chunks)
            .field("damage", &self.damage)
            .finish_non_exhaustive()
    }
}

impl TraceReader<std::fs::File> {
    /// Opens the trace at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self, Error> {
        let f = std::fs::File::open(path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
        TraceReader::new(f)
    }
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> TraceReader<R> {
    /// Checks the file magic and format version.
    pub fn new(input: R) -> Result<Self, Error> {
        let mut input = BufReader::with_capacity(1 << 16, input);
        let mut head = [0u8; 24];
        let n = read_full(&mut input, &mut head).map_err(|e| Error::io("cannot read trace", e))?;
        if n == 0 {
            return Err(Error::new(
                ErrorKind::NotATrace,
                "not an ebtrace trace: the file is empty",
            ));
        }
        let magic = u32::from_le_bytes(head[0..4].try_into().unwrap());
        if n < 24 || magic != FILE_FRAME_MAGIC || &head[8..16] != FILE_MAGIC {
            let hint = if head[..4] == [0x28, 0xb5, 0x2f, 0xfd] {
                " (a plain zstd file, not an ebtrace trace)"
            } else {
                ""
            };
            return Err(Error::new(
                ErrorKind::NotATrace,
                format!("not an ebtrace trace: bad file magic{hint}"),
            ));
        }
        let size = u32::from_le_bytes(head[4..8].try_into().unwrap());
        let version = u32::from_le_bytes(head[16..20].try_into().unwrap());
        if version == 0 || version > crate::FORMAT_VERSION {
            return Err(Error::new(
                ErrorKind::UnsupportedVersion,
                format!(
                    "trace format version {version} is not supported (this build reads up to {})",
                    crate::FORMAT_VERSION
                ),
            ));
        }
        let mut offset = 24u64;
        // A later version may carry a longer header payload: skip what we do not know.
        if size > FILE_HEADER_PAYLOAD {
            let extra = u64::from(size - FILE_HEADER_PAYLOAD);
            let skipped = io::copy(&mut (&mut input).take(extra), &mut io::sink())
                .map_err(|e| Error::io("cannot read trace", e))?;
            offset += skipped;
        }
        Ok(TraceReader {
            input,
            offset,
            version,
            decompressor: zstd::bulk::Decompressor::new()
                .map_err(|e| Error::io("zstd init failed", e))?,
            pending: Vec::new().into_iter(),
            damage: Vec::new(),
            chunks: 0,
            records: 0,
            done: false,
            carry: Vec::new(),
            carry_pos: 0,
        })
    }

    /// Format version of the file.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Everything that could not be read, in file order.
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// Chunks read successfully so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Records returned so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes of the file consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads up to `buf.len()` bytes, from bytes put back by [`resync`](Self::resync) first.
    fn read_bytes(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        if self.carry_pos < self.carry.len() {
            let k = (self.carry.len() - self.carry_pos).min(buf.len());
            buf[..k].copy_from_slice(&self.carry[self.carry_pos..self.carry_pos + k]);
            self.carry_pos += k;
            n = k;
        }
        n += read_full(&mut self.input, &mut buf[n..])?;
        self.offset += n as u64;
        Ok(n)
    }

    /// Reads `len` bytes (fewer at EOF) without allocating more than arrives.
    fn read_body(&mut self, len: u64) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut block = vec![0u8; 1 << 16];
        while (out.len() as u64) < len {
            let want = (len - out.len() as u64).min(block.len() as u64) as usize;
            let got = self.read_bytes(&mut block[..want])?;
            if got == 0 {
                break;
            }
            out.extend_from_slice(&block[..got]);
        }
        Ok(out)
    }

    /// Reads the next chunk into `pending`. Returns false at the end of the data.
    fn next_chunk(&mut self) -> bool {
        loop {
            let start = self.offset;
            let mut d = [0u8; CHUNK_DESCRIPTOR_LEN];
            let n = match self.read_bytes(&mut d) {
                Ok(n) => n,
                Err(e) => {
                    self.damage_at(
                        DamageKind::Truncated,
                        start,
                        0,
                        None,
                        format!("read error: {e}"),
                    );
                    return false;
                }
            };
            if n == 0 {
                return false;
            }
            if n < CHUNK_DESCRIPTOR_LEN {
                self.damage_at(
                    DamageKind::Truncated,
                    start,
                    n as u64,
                    None,
                    "file ends inside a chunk descriptor".into(),
                );
                return false;
            }
            let desc = match ChunkDescriptor::decode(&d) {
                Some(desc)
                    if desc.compressed_len <= MAX_COMPRESSED_BYTES
                        && desc.decompressed_len <= MAX_CHUNK_BYTES =>
                {
                    desc
                }
                _ => {
                    // Not a descriptor we can trust: skip to the next one.
                    let skipped = self.resync(start, &d);
                    self.damage_at(
                        DamageKind::Garbage,
                        start,
                        skipped,
                        None,
                        "no valid chunk descriptor here".into(),
                    );
                    continue;
                }
            };
            let compressed = match self.read_body(desc.compressed_len) {
                Ok(c) => c,
                Err(e) => {
                    self.damage_at(
                        DamageKind::Truncated,
                        start,
                        0,
                        Some(desc.sequence),
                        e.to_string(),
                    );
                    return false;
                }
            };
            let got = compressed.len() as u64;
            if got < desc.compressed_len {
                self.damage_at(
                    DamageKind::Truncated,
                    start,
                    CHUNK_DESCRIPTOR_LEN as u64 + got,
                    Some(desc.sequence),
                    format!(
                        "the file ends {got} bytes into a {}-byte chunk",
                        desc.compressed_len
                    ),
                );
                return false;
            }
            let skipped = CHUNK_DESCRIPTOR_LEN as u64 + got;
            let data = match self
                .decompressor
                .decompress(&compressed, desc.decompressed_len as usize)
            {
                Ok(data) if data.len() as u64 == desc.decompressed_len => data,
                Ok(data) => {
                    self.damage_at(
                        DamageKind::CorruptChunk,
                        start,
                        skipped,
                        Some(desc.sequence),
                        format!(
                            "decompressed to {} bytes, descriptor says {}",
                            data.len(),
                            desc.decompressed_len
                        ),
                    );
                    continue;
                }
                Err(e) => {
                    self.damage_at(
                        DamageKind::CorruptChunk,
                        start,
                        skipped,
                        Some(desc.sequence),
                        format!("zstd: {e}"),
                    );
                    continue;
                }
            };
            let (records, err) = decode_records(&data);
            let mismatch = || {
                (records.len() as u64 != u64::from(desc.record_count)).then(|| {
                    format!(
                        "{} records, descriptor says {}",
                        records.len(),
                        desc.record_count
                    )
                })
            };
            if let Some(message) = err.or_else(mismatch) {
                self.damage.push(Damage {
                    kind: DamageKind::CorruptChunk,
                    offset: start,
                    bytes: skipped,
                    chunk: Some(desc.sequence),
                    records_kept: records.len() as u32,
                    message,
                });
            }
            self.chunks += 1;
            if records.is_empty() {
                continue;
            }
            self.pending = records.into_iter();
            return true;
        }
    }

    /// After a bad descriptor at `start` (whose bytes were `consumed`), skips to the next
    /// byte sequence that starts like a chunk descriptor, or to EOF, one byte at a time over
    /// a sliding window (only damaged files get here). Returns the bytes skipped.
    fn resync(&mut self, start: u64, consumed: &[u8; CHUNK_DESCRIPTOR_LEN]) -> u64 {
        let mut pat = [0u8; 8];
        pat[..4].copy_from_slice(&CHUNK_FRAME_MAGIC.to_le_bytes());
        pat[4..].copy_from_slice(&CHUNK_DESCRIPTOR_PAYLOAD.to_le_bytes());
        // The window holds bytes already taken from the input that may still start a chunk:
        // the bad descriptor, then what an earlier resync put back and was not read yet
        // (those bytes come before the input's; dropping them loses the chunks they hold).
        let mut win: Vec<u8> = consumed[1..].to_vec();
        win.extend_from_slice(&self.carry[self.carry_pos..]);
        self.carry.clear();
        self.carry_pos = 0;
        let mut skipped = 1u64;
        loop {
            if let Some(p) = win.windows(8).position(|w| w == pat) {
                skipped += p as u64;
                self.carry = win.split_off(p);
                self.carry_pos = 0;
                self.offset = start + skipped;
                return skipped;
            }
            let drop = win.len().saturating_sub(7);
            skipped += drop as u64;
            win.drain(..drop);
            let buf = self.input.fill_buf().unwrap_or(&[]);
            if buf.is_empty() {
                skipped += win.len() as u64;
                self.carry.clear();
                self.carry_pos = 0;
                self.offset = start + skipped;
                return skipped;
            }
            let k = buf.len().min(1 << 16);
            win.extend_from_slice(&buf[..k]);
            self.input.consume(k);
        }
    }

    fn damage_at(
        &mut self,
        kind: DamageKind,
        offset: u64,
        bytes: u64,
        chunk: Option<u32>,
        message: String,
    ) {
        self.damage.push(Damage {
            kind,
            offset,
            bytes,
            chunk,
            records_kept: 0,
            message,
        });
    }
}

/// Splits a decompressed chunk into records. Returns those decoded and, if something was
/// wrong, why decoding stopped.
pub fn decode_records(data: &[u8]) -> (Vec<Record>, Option<String>) {
    decode_records_with(data, true)
}

/// [`decode_records`] with prost alone (`fast` false: no allocation or free batch read by
/// `fastbatch`): what the `records` fuzz target compares it with.
#[doc(hidden)]
pub fn decode_records_with(mut data: &[u8], fast: bool) -> (Vec<Record>, Option<String>) {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = match prost::encoding::decode_varint(&mut data) {
            Ok(len) => len,
            Err(e) => return (out, Some(format!("bad record length: {e}"))),
        };
        if len > MAX_RECORD_BYTES || len > data.len() as u64 {
            return (
                out,
                Some(format!(
                    "record length {len} exceeds the chunk or the limit"
                )),
            );
        }
        let (body, rest) = data.split_at(len as usize);
        if let Some(r) = fast.then(|| crate::fastbatch::decode(body)).flatten() {
            out.push(r);
            data = rest;
            continue;
        }
        match Record::decode(body) {
            Ok(r) => out.push(r),
            Err(e) => return (out, Some(format!("record does not parse: {e}"))),
        }
        data = rest;
    }
    (out, None)
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        loop {
            if let Some(r) = self.pending.next() {
                self.records += 1;
                return Some(r);
            }
            if self.done || !self.next_chunk() {
                self.done = true;
                return None;
            }
        }
    }
}
