//! [`TraceWriter`]: streams records into chunks, interns strings, build-ids and stacks, and
//! gathers events into packed-column batches.
use crate::error::Error;
use crate::events::{
    AllocEvent, BioEvent, CpuSample, Deltas, Family, FreeEvent, FuncEvent, LockEvent,
    MemGrowthEvent, OffCpuEvent, RunqEvent, SyscallEvent, TcpEvent, UsdtEvent,
};
use crate::frame::{file_header, ChunkDescriptor};
use crate::hash::FastMap;
use ebtrace_proto::v1::{
    record::Kind, AllocBatch, BioBatch, BuildId, CpuSampleBatch, FreeBatch, FuncBatch, Header,
    InternedString, LockBatch, MemGrowthBatch, OffCpuBatch, Record, RunqBatch, Stack, SyscallBatch,
    TcpBatch, Trailer, UsdtBatch,
};
use prost::Message;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// When chunks are closed and how hard they are compressed.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Close the open chunk once it holds this many uncompressed bytes.
    pub chunk_bytes: usize,
    /// Close the open chunk once it has been open this long (checked on every write and by
    /// [`TraceWriter::flush_if_due`]). `None` makes the output depend on the input only.
    pub chunk_interval: Option<Duration>,
    /// zstd level.
    pub level: i32,
    /// Events per batch record.
    pub batch_events: usize,
    /// The stack interning table is emptied when its keys hold more than this many words
    /// (8 bytes each): a stack seen again after that is defined again under a new id. It
    /// bounds the recorder's memory on a long recording with ever new stacks.
    pub max_stack_words: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_bytes: 4 << 20,
            chunk_interval: Some(Duration::from_secs(1)),
            level: 3,
            batch_events: 8192,
            max_stack_words: 4 << 20,
        }
    }
}

#[derive(Default)]
struct Pending<B> {
    batch: B,
    deltas: Deltas,
}

/// Counters the writer keeps about what it wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Records written, including those still in the open chunk.
    pub records: u64,
    /// Chunks closed.
    pub chunks: u64,
    /// Bytes written to the output, compressed, including headers.
    pub bytes_written: u64,
    /// Interned strings, build-ids and stacks.
    pub strings: u64,
    pub build_ids: u64,
    pub stacks: u64,
    /// Times the stack interning table was emptied (see `max_stack_words`).
    pub stack_evictions: u64,
    /// Events given to the writer (kept or, after a [`Fault`], dropped).
    pub events: u64,
}

/// The end of a whole chunk in the output, and what the output held up to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Bytes of the output up to the chunk's end.
    pub bytes: u64,
    pub chunks: u64,
    pub records: u64,
    pub events: u64,
    /// When the chunk was written (None: no chunk yet, the file magic only).
    pub until: Option<SystemTime>,
}

/// What a write error left. The writer writes nothing more (later records and events are
/// counted here, not written); a file it created is cut back to its last whole chunk
/// ([`Kept`]), with `ftruncate`, which needs no space. [`TraceWriter::close`] then tries
/// to write the trailer there.
#[derive(Debug)]
pub struct Fault {
    /// The write error: [`crate::ErrorKind::NoSpace`] for a full disk or quota, else
    /// [`crate::ErrorKind::Io`].
    pub error: Error,
    pub at: SystemTime,
    /// What the output holds.
    pub kept: Kept,
    /// Records and events given to the writer and not in the output.
    pub records_dropped: u64,
    pub events_dropped: u64,
}

/// How [`TraceWriter::close`] left the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Everything written, the trailer last.
    Whole,
    /// Cut at its last whole chunk by a [`Fault`]; `trailer`: whether the trailer then
    /// fitted after it (else the file ends at that chunk, with no trailer).
    Cut { trailer: bool },
}

/// A streaming trace writer. Records go into the open chunk, which is compressed into one
/// zstd frame and written out when it reaches [`WriterOptions::chunk_bytes`] or
/// [`WriterOptions::chunk_interval`]. Events are gathered per family into batches of
/// [`WriterOptions::batch_events`]; every batch is in the output by the time its chunk is.
pub struct TraceWriter<W: Write> {
    out: Option<W>,
    opts: WriterOptions,
    compressor: zstd::bulk::Compressor<'static>,
    chunk: Vec<u8>,
    chunk_records: u32,
    chunk_opened: Option<Instant>,
    stats: WriterStats,
    strings: FastMap<Box<[u8]>, u64>,
    build_ids: FastMap<Box<[u8]>, u64>,
    stacks: FastMap<Box<[u64]>, u64>,
    /// Words in the keys of `stacks`, and the next stack id.
    stack_words: usize,
    next_stack: u64,
    scratch: Vec<u64>,
    allocs: Pending<AllocBatch>,
    frees: Pending<FreeBatch>,
    locks: Pending<LockBatch>,
    funcs: Pending<FuncBatch>,
    cpu: Pending<CpuSampleBatch>,
    offcpu: Pending<OffCpuBatch>,
    mem: Pending<MemGrowthBatch>,
    syscalls: Pending<SyscallBatch>,
    bios: Pending<BioBatch>,
    runq: Pending<RunqBatch>,
    tcp: Pending<TcpBatch>,
    usdt: Pending<UsdtBatch>,
    /// The file under `out` (a handle of its own) when the writer created it: what a write
    /// error cuts back to the last whole chunk.
    file: Option<File>,
    /// The ends of the last chunks written (the output's buffer may hold some).
    boundaries: VecDeque<Kept>,
    /// Events in the open chunk's batch records.
    chunk_events: u64,
    fault: Option<Fault>,
    /// Closed by [`TraceWriter::detach`]: records are counted, not written.
    detached: bool,
}

impl<W: Write> std::fmt::Debug for TraceWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl TraceWriter<io::BufWriter<File>> {
    /// Creates (or truncates) `path` with mode 0600 and starts a trace in it.
    pub fn create(path: &Path, header: Header, opts: WriterOptions) -> io::Result<Self> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        // An existing file keeps its old mode through O_CREAT: traces hold stacks and
        // arguments of the target, so make sure nobody else can read this one.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let handle = file.try_clone()?;
        let mut w = TraceWriter::new(io::BufWriter::with_capacity(1 << 20, file), header, opts)?;
        w.file = Some(handle);
        Ok(w)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace on `out`: the file magic frame, then `header` as the first record
    /// (its `format_version` is set to this crate's).
    pub fn new(mut out: W, mut header: Header, opts: WriterOptions) -> io::Result<Self> {
        let magic = file_header(crate::FORMAT_VERSION);
        out.write_all(&magic)?;
        let mut compressor = zstd::bulk::Compressor::new(opts.level)?;
        compressor.include_checksum(true)?;
        compressor.include_contentsize(true)?;
        let mut w = TraceWriter {
            out: Some(out),
            compressor,
            chunk: Vec::with_capacity(opts.chunk_bytes + (64 << 10)),
            chunk_records: 0,
            chunk_opened: None,
            stats: WriterStats {
                bytes_written: magic.len() as u64,
                ..Default::default()
            },
            strings: FastMap::default(),
            build_ids: FastMap::default(),
            stacks: FastMap::default(),
            stack_words: 0,
            next_stack: 1,
            scratch: Vec::new(),
            allocs: Pending::default(),
            frees: Pending::default(),
            locks: Pending::default(),
            funcs: Pending::default(),
            cpu: Pending::default(),
            offcpu: Pending::default(),
            mem: Pending::default(),
            syscalls: Pending::default(),
            bios: Pending::default(),
            runq: Pending::default(),
            tcp: Pending::default(),
            usdt: Pending::default(),
            file: None,
            boundaries: VecDeque::new(),
            chunk_events: 0,
            fault: None,
            detached: false,
            opts,
        };
        w.boundaries.push_back(Kept {
            bytes: w.stats.bytes_written,
            chunks: 0,
            records: 0,
            events: 0,
            until: None,
        });
        header.format_version = crate::FORMAT_VERSION;
        w.write_record(&Record {
            kind: Some(Kind::Header(header)),
        })?;
        Ok(w)
    }

    /// What has been written so far.
    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    /// Cuts `file` (the file under the output, a handle of its own) on a write error:
    /// what [`TraceWriter::create`] does for its file, for a writer made by `new`.
    pub fn cut_on_error(&mut self, file: File) {
        self.file = Some(file);
    }

    /// The write error that stopped the writer, if one did (see [`Fault`]).
    pub fn fault(&self) -> Option<&Fault> {
        self.fault.as_ref()
    }

    /// A write error on the output: the writer stops writing, drops its buffered bytes and
    /// cuts a file it created back to the last whole chunk that reached it.
    fn fail(&mut self, err: io::Error) {
        if self.fault.is_some() {
            return;
        }
        // Dropping the buffer tries its bytes once more: the cut below takes them back.
        drop(self.out.take());
        let mut kept = *self.boundaries.front().expect("the magic's end");
        if let Some(file) = &self.file {
            let size = file.metadata().map_or(0, |m| m.len());
            // Not even the magic reached the file: it is emptied.
            kept = Kept {
                bytes: 0,
                chunks: 0,
                records: 0,
                events: 0,
                until: None,
            };
            if let Some(b) = self.boundaries.iter().rev().find(|b| b.bytes <= size) {
                kept = *b;
            }
            let _ = file.set_len(kept.bytes);
        } else if let Some(b) = self.boundaries.back() {
            kept = *b;
        }
        self.fault = Some(Fault {
            error: Error::write("cannot write the trace", err),
            at: SystemTime::now(),
            kept,
            records_dropped: self.stats.records - kept.records,
            events_dropped: self.stats.events - kept.events,
        });
        self.chunk.clear();
        self.chunk_records = 0;
        self.chunk_events = 0;
    }

    /// Every interned string as (id, bytes): what a recorder that goes on in a new file (it
    /// rotates) must define again there.
    pub fn interned_strings(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.strings.iter().map(|(k, &v)| (v, &**k))
    }

    /// Every interned build-id as (id, bytes).
    pub fn interned_build_ids(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.build_ids.iter().map(|(k, &v)| (v, &**k))
    }

    /// Appends one record to the open chunk (closing the chunk if it is full or due).
    pub fn write_record(&mut self, record: &Record) -> io::Result<()> {
        self.append(record);
        self.close_chunk_if_due()
    }

    fn append(&mut self, record: &Record) {
        self.stats.records += 1;
        if let Some(f) = &mut self.fault {
            f.records_dropped += 1;
            return;
        }
        if self.detached {
            return;
        }
        if self.chunk_opened.is_none() {
            self.chunk_opened = Some(Instant::now());
        }
        // Encoding into a Vec cannot fail: it grows as needed.
        record
            .encode_length_delimited(&mut self.chunk)
            .expect("Vec<u8> grows");
        self.chunk_records += 1;
    }

    fn close_chunk_if_due(&mut self) -> io::Result<()> {
        let full = self.chunk.len() >= self.opts.chunk_bytes;
        let old = match (self.opts.chunk_interval, self.chunk_opened) {
            (Some(max), Some(opened)) => opened.elapsed() >= max,
            _ => false,
        };
        if full || old {
            self.close_chunk()?;
        }
        Ok(())
    }

    /// Flushes pending batches and closes the open chunk if it has been open for
    /// `chunk_interval`: the recorder calls this from its poll loop so that a quiet trace
    /// still reaches the disk every second.
    pub fn flush_if_due(&mut self) -> io::Result<()> {
        if let (Some(max), Some(opened)) = (self.opts.chunk_interval, self.chunk_opened) {
            if opened.elapsed() >= max {
                return self.flush();
            }
        } else if self.chunk_opened.is_none() && self.has_pending_events() {
            self.chunk_opened = Some(Instant::now());
        }
        Ok(())
    }

    fn has_pending_events(&self) -> bool {
        !(self.allocs.batch.is_empty()
            && self.frees.batch.is_empty()
            && self.locks.batch.is_empty()
            && self.funcs.batch.is_empty()
            && self.cpu.batch.is_empty()
            && self.offcpu.batch.is_empty()
            && self.mem.batch.is_empty()
            && self.syscalls.batch.is_empty()
            && self.bios.batch.is_empty()
            && self.runq.batch.is_empty()
            && self.tcp.batch.is_empty()
            && self.usdt.batch.is_empty())
    }

    /// Writes pending batches, closes the open chunk and flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_batches();
        self.close_chunk()?;
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.flush() {
                self.fail(e);
            }
        }
        Ok(())
    }

    fn flush_batches(&mut self) {
        fn take<B: Family>(p: &mut Pending<B>) -> Option<(Record, u64)> {
            (!p.batch.is_empty()).then(|| {
                let n = p.batch.len() as u64;
                (std::mem::take(&mut p.batch).into_record(), n)
            })
        }
        let records = [
            take(&mut self.allocs),
            take(&mut self.frees),
            take(&mut self.locks),
            take(&mut self.funcs),
            take(&mut self.cpu),
            take(&mut self.offcpu),
            take(&mut self.mem),
            take(&mut self.syscalls),
            take(&mut self.bios),
            take(&mut self.runq),
            take(&mut self.tcp),
            take(&mut self.usdt),
        ];
        for (r, n) in records.into_iter().flatten() {
            self.chunk_events += n;
            self.append(&r);
        }
    }

    fn close_chunk(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() || self.fault.is_some() || self.detached {
            self.chunk.clear();
            self.chunk_records = 0;
            self.chunk_events = 0;
            self.chunk_opened = None;
            return Ok(());
        }
        let compressed = self.compressor.compress(&self.chunk)?;
        let desc = ChunkDescriptor {
            compressed_len: compressed.len() as u64,
            decompressed_len: self.chunk.len() as u64,
            record_count: self.chunk_records,
            sequence: self.stats.chunks as u32,
        };
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| io::Error::other("trace writer finished"))?;
        let written = out
            .write_all(&desc.encode())
            .and_then(|()| out.write_all(&compressed));
        if let Err(e) = written {
            self.fail(e);
            return Ok(());
        }
        self.stats.bytes_written += (desc.encode().len() + compressed.len()) as u64;
        self.stats.chunks += 1;
        let last = self.boundaries.back().copied().expect("the magic's end");
        if self.boundaries.len() >= 64 {
            self.boundaries.pop_front();
        }
        self.boundaries.push_back(Kept {
            bytes: self.stats.bytes_written,
            chunks: self.stats.chunks,
            records: last.records + u64::from(self.chunk_records),
            events: last.events + self.chunk_events,
            until: Some(SystemTime::now()),
        });
        self.chunk.clear();
        self.chunk_records = 0;
        self.chunk_events = 0;
        self.chunk_opened = None;
        Ok(())
    }

    /// The id of `s`, writing its definition the first time.
    pub fn intern_string(&mut self, s: &[u8]) -> io::Result<u64> {
        if let Some(&id) = self.strings.get(s) {
            return Ok(id);
        }
        let id = self.strings.len() as u64 + 1;
        self.strings.insert(s.into(), id);
        self.stats.strings += 1;
        self.write_record(&Record {
            kind: Some(Kind::String(InternedString {
                id,
                value: s.to_vec(),
            })),
        })?;
        Ok(id)
    }

    /// The id of the build-id `b`, writing its definition the first time.
    pub fn intern_build_id(&mut self, b: &[u8]) -> io::Result<u64> {
        if let Some(&id) = self.build_ids.get(b) {
            return Ok(id);
        }
        let id = self.build_ids.len() as u64 + 1;
        self.build_ids.insert(b.into(), id);
        self.stats.build_ids += 1;
        self.write_record(&Record {
            kind: Some(Kind::BuildId(BuildId {
                id,
                value: b.to_vec(),
            })),
        })?;
        Ok(id)
    }

    /// The id of a stack of `generation` (user and kernel ips leaf first, `StackFlag` bits),
    /// writing its definition the first time.
    pub fn intern_stack(
        &mut self,
        generation: u32,
        user: &[u64],
        kernel: &[u64],
        flags: u32,
    ) -> io::Result<u64> {
        self.scratch.clear();
        self.scratch
            .push(u64::from(generation) | (u64::from(flags) << 32));
        self.scratch.push(user.len() as u64);
        self.scratch.extend_from_slice(user);
        self.scratch.extend_from_slice(kernel);
        if let Some(&id) = self.stacks.get(&self.scratch[..]) {
            return Ok(id);
        }
        let id = self.new_stack_id(self.scratch.len());
        self.stacks.insert(self.scratch.as_slice().into(), id);
        self.stats.stacks += 1;
        self.write_record(&Record {
            kind: Some(Kind::Stack(Stack {
                id,
                generation,
                user_ips: user.to_vec(),
                kernel_ips: kernel.to_vec(),
                flags,
                copy: None,
            })),
        })?;
        Ok(id)
    }

    /// Writes a stack that carries a raw copy of the user stack (never deduplicated: two
    /// copies are rarely equal). Returns its id.
    pub fn write_stack_copy(&mut self, mut stack: Stack) -> io::Result<u64> {
        // Ids come from a counter, so nothing needs reserving in the interning table.
        let id = self.new_stack_id(0);
        self.stats.stacks += 1;
        stack.id = id;
        self.write_record(&Record {
            kind: Some(Kind::Stack(stack)),
        })?;
        Ok(id)
    }

    /// A fresh stack id for a key of `words` words, emptying the interning table first if it
    /// has grown past `max_stack_words`.
    fn new_stack_id(&mut self, words: usize) -> u64 {
        if words > 0 {
            if self.stack_words + words > self.opts.max_stack_words && !self.stacks.is_empty() {
                self.stacks = FastMap::default();
                self.stack_words = 0;
                self.stats.stack_evictions += 1;
            }
            self.stack_words += words;
        }
        let id = self.next_stack;
        self.next_stack += 1;
        id
    }

    fn push<B: Family>(
        &mut self,
        select: fn(&mut Self) -> &mut Pending<B>,
        e: &B::Event,
    ) -> io::Result<()> {
        let limit = self.opts.batch_events;
        self.stats.events += 1;
        if let Some(f) = &mut self.fault {
            f.events_dropped += 1;
            return Ok(());
        }
        if self.detached {
            return Ok(());
        }
        let p = select(self);
        p.batch.push(&mut p.deltas, e);
        if p.batch.len() >= limit {
            // Every family's pending events go out together, allocations before frees, so
            // that a free is never in the file before the allocation it frees (readers that
            // pair them, like the leak report, can stream).
            self.flush_batches();
            self.close_chunk_if_due()?;
        } else if self.chunk_opened.is_none() {
            self.chunk_opened = Some(Instant::now());
        }
        Ok(())
    }

    pub fn alloc(&mut self, e: &AllocEvent) -> io::Result<()> {
        self.push(|w| &mut w.allocs, e)
    }
    pub fn free(&mut self, e: &FreeEvent) -> io::Result<()> {
        self.push(|w| &mut w.frees, e)
    }
    pub fn lock(&mut self, e: &LockEvent) -> io::Result<()> {
        self.push(|w| &mut w.locks, e)
    }
    pub fn func(&mut self, e: &FuncEvent) -> io::Result<()> {
        self.push(|w| &mut w.funcs, e)
    }
    pub fn cpu_sample(&mut self, e: &CpuSample) -> io::Result<()> {
        self.push(|w| &mut w.cpu, e)
    }
    pub fn offcpu(&mut self, e: &OffCpuEvent) -> io::Result<()> {
        self.push(|w| &mut w.offcpu, e)
    }
    pub fn mem_growth(&mut self, e: &MemGrowthEvent) -> io::Result<()> {
        self.push(|w| &mut w.mem, e)
    }
    pub fn syscall(&mut self, e: &SyscallEvent) -> io::Result<()> {
        self.push(|w| &mut w.syscalls, e)
    }
    pub fn bio(&mut self, e: &BioEvent) -> io::Result<()> {
        self.push(|w| &mut w.bios, e)
    }
    pub fn runq(&mut self, e: &RunqEvent) -> io::Result<()> {
        self.push(|w| &mut w.runq, e)
    }
    pub fn tcp(&mut self, e: &TcpEvent) -> io::Result<()> {
        self.push(|w| &mut w.tcp, e)
    }
    pub fn usdt(&mut self, e: &UsdtEvent) -> io::Result<()> {
        self.push(|w| &mut w.usdt, e)
    }

    /// Writes pending batches, then `trailer` (with record and chunk counts filled in) if
    /// given, closes the last chunk and returns the output.
    pub fn finish(mut self, trailer: Option<Trailer>) -> io::Result<W> {
        self.flush_batches();
        if let Some(mut t) = trailer {
            t.record_count = self.stats.records;
            t.chunk_count = self.stats.chunks;
            self.append(&Record {
                kind: Some(Kind::Trailer(t)),
            });
        }
        self.flush()?;
        match self.out.take() {
            Some(out) => Ok(out),
            None => Err(self
                .fault
                .take()
                .and_then(|f| {
                    f.error
                        .io_error()
                        .map(|e| io::Error::new(e.kind(), f.error.to_string()))
                })
                .unwrap_or_else(|| io::Error::other("trace writer finished"))),
        }
    }

    /// Writes pending batches and `trailer` (with its counts), closes the last chunk and the
    /// output. After a [`Fault`], the trailer (its counts those of the whole chunks kept)
    /// goes in a chunk of its own at the cut, where it fits: it needs no more space than the
    /// cut freed, on most file systems; if it does not fit, the file is cut again.
    pub fn close(self, trailer: Option<Trailer>) -> io::Result<Closed> {
        self.close_faulted(trailer).map(|(c, _)| c)
    }

    /// [`close`](Self::close), with the fault that cut the file (one may come from the
    /// last writes, the trailer's).
    pub fn close_faulted(
        mut self,
        trailer: Option<Trailer>,
    ) -> io::Result<(Closed, Option<Fault>)> {
        let closed = self.close_in_place(trailer)?;
        Ok((closed, self.fault.take()))
    }

    /// [`close`](Self::close), the writer kept: it writes nothing more (records and events
    /// given to it are counted in [`stats`](Self::stats) only), but its interning tables
    /// stay, for a recorder that goes on in a new file later (`ebrec agent`, when its next
    /// window's file cannot be created).
    pub fn detach(&mut self, trailer: Option<Trailer>) -> io::Result<Closed> {
        if self.detached {
            return Ok(Closed::Cut { trailer: false });
        }
        let closed = self.close_in_place(trailer);
        self.detached = true;
        self.fault = None;
        self.out = None;
        self.file = None;
        closed
    }

    /// Whether [`detach`](Self::detach) closed it.
    pub fn is_detached(&self) -> bool {
        self.detached
    }

    fn close_in_place(&mut self, trailer: Option<Trailer>) -> io::Result<Closed> {
        if self.detached {
            return Ok(Closed::Cut { trailer: false });
        }
        if self.fault.is_none() {
            self.flush_batches();
            if let Some(mut t) = trailer.clone() {
                t.record_count = self.stats.records;
                t.chunk_count = self.stats.chunks;
                self.append(&Record {
                    kind: Some(Kind::Trailer(t)),
                });
            }
            self.flush()?;
            if self.fault.is_none() {
                drop(self.out.take());
                return Ok(Closed::Whole);
            }
        }
        let (Some(file), Some(fault), Some(mut t)) = (self.file.take(), &self.fault, trailer)
        else {
            return Ok(Closed::Cut { trailer: false });
        };
        use std::os::unix::fs::FileExt;
        let kept = fault.kept;
        if kept.chunks == 0 {
            // No header in the file: a trailer alone would not make it a trace.
            return Ok(Closed::Cut { trailer: false });
        }
        t.record_count = kept.records;
        t.chunk_count = kept.chunks;
        let mut data = Vec::new();
        Record {
            kind: Some(Kind::Trailer(t)),
        }
        .encode_length_delimited(&mut data)
        .expect("Vec<u8> grows");
        let compressed = self.compressor.compress(&data)?;
        let desc = ChunkDescriptor {
            compressed_len: compressed.len() as u64,
            decompressed_len: data.len() as u64,
            record_count: 1,
            sequence: kept.chunks as u32,
        };
        let mut bytes = desc.encode().to_vec();
        bytes.extend_from_slice(&compressed);
        let written = file
            .write_all_at(&bytes, kept.bytes)
            .and_then(|()| file.sync_data());
        let trailer = written.is_ok();
        let end = if trailer {
            kept.bytes + bytes.len() as u64
        } else {
            kept.bytes
        };
        file.set_len(end)?;
        Ok(Closed::Cut { trailer })
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    /// A writer dropped without `finish` (an error path, a panic) still writes what it has,
    /// without a trailer, so the file reads back as a cut recording rather than losing the
    /// open chunk.
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = self.flush();
        }
    }
}
