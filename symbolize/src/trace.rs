//! Symbolizing a trace file: every user frame of every `Stack` is normalized (runtime
//! address → mapping → file offset → ELF virtual address), the addresses are grouped by
//! build-id and resolved per build-id in parallel, and a new trace is written: the input's
//! records copied through, then a `SymbolizerInfo`, one `ModuleResolution` per build-id and
//! one `SymbolizedAddress` per (build-id, looked-up address).
//!
//! A stack with a raw copy of the user stack (`ebrec --stack-mode dwarf`) is first unwound
//! with CFI ([`crate::unwind::TraceUnwinder`]): one `UnwoundStack` per such stack is
//! written after the `SymbolizerInfo`, and its user ips are the ones resolved. The copy
//! itself (the target's stack memory: request data, keys, passwords) is then dropped from
//! the output, the `Stack` written with its id, generation, ips and flags as they were, so
//! every report reads the same; [`Options::keep_stack_copies`] keeps it. [`crate::strip`]
//! removes the copies from any trace.
//!
//! The output depends on the input and the files found only: everything is sorted, the
//! writer closes chunks by size only, and `SymbolizerInfo.realtime_ns` honours
//! `SOURCE_DATE_EPOCH`.
//!
//! [`symbolize_trace_with`] reports the resolution's progress (addresses resolved) to a
//! [`Progress`]: ebsym draws it as a progress bar.
//!
//! ```no_run
//! use ebtrace_symbolize::{trace::symbolize_trace, Options};
//! let report = symbolize_trace("t.pb.zst".as_ref(), "t.sym.pb.zst".as_ref(), &Options::default()).unwrap();
//! for m in &report.modules { eprintln!("{}", m.summary_line()); }
//! ```
use crate::elf::hex;
use crate::mapping::mapping_for;
use crate::progress::{NoProgress, Progress};
use crate::resolve::{Frame, Lookup, Options, Reason, Symbolizer, Unresolved};
use ebtrace_format::proto::{
    record::Kind, InternedString, KeyValue, ModuleResolution, Record, SymbolFrame,
    SymbolizedAddress, SymbolizerInfo, UnresolvedReason, UnwoundStack,
};
use ebtrace_format::tables::UprobesFrame;
use ebtrace_format::{Tables, TraceReader, TraceWriter, WriterOptions};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong while symbolizing a trace (not an unresolved address: those are
/// answers).
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading the input trace failed.
    Input,
    /// Writing the output failed.
    Output,
}

impl Error {
    pub(crate) fn new(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An error that is its own cause.
    pub(crate) fn plain(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

/// What happened to one build-id.
#[derive(Debug, Clone)]
pub struct ModuleReport {
    pub build_id: Vec<u8>,
    /// The recorded path of the binary.
    pub path: String,
    pub debug_file: Option<PathBuf>,
    /// Addresses with frames (DWARF or symbol table).
    pub resolved: u64,
    /// Of the resolved ones, those named from the symbol table only (no file:line).
    pub symtab_only: u64,
    /// Unresolved addresses by reason.
    pub unresolved: BTreeMap<Reason, u64>,
    /// The module-wide reason and detail, when nothing resolved.
    pub status: Option<Unresolved>,
    /// The binary found for it (the one at its recorded path, or debuginfod's), if any.
    pub binary: Option<PathBuf>,
    /// Whether its symbols came with DWARF (file:line, inlined frames); false when they
    /// came from a symbol table only or when nothing was found.
    pub dwarf: bool,
    /// Named from the trace's own vDSO image (`VdsoImage`, its `.dynsym`).
    pub vdso_image: bool,
}

impl ModuleReport {
    /// One line for stderr: `path (build-id): N resolved, M unresolved (reason: k, …)`.
    pub fn summary_line(&self) -> String {
        let unresolved: u64 = self.unresolved.values().sum();
        let mut s = format!(
            "{} ({}): {} resolved, {} unresolved",
            self.path,
            hex(&self.build_id),
            self.resolved,
            unresolved
        );
        if self.symtab_only > 0 {
            s = s.replacen(
                " resolved,",
                &format!(" resolved ({} symbol table only),", self.symtab_only),
                1,
            );
        }
        if unresolved > 0 {
            let reasons: Vec<String> = self
                .unresolved
                .iter()
                .map(|(r, n)| format!("{r}: {n}"))
                .collect();
            s += &format!(" ({})", reasons.join(", "));
        }
        match (&self.debug_file, &self.status) {
            (_, Some(u)) => {
                if let Some(d) = &u.detail {
                    s += &format!("; {d}");
                }
            }
            _ if self.vdso_image => s += &format!("; symbols from the {}", crate::vdso::SOURCE),
            (Some(d), None) => s += &format!("; symbols from {}", d.display()),
            _ => {}
        }
        s
    }

    /// Whether frames of this module were left without what debug information would
    /// give: none of its addresses came with DWARF (named from a symbol table only, or
    /// not named at all). The vDSO, named from its own symbols, has nothing more to get.
    pub fn lacks_debug_info(&self) -> bool {
        !self.dwarf
            && !self.vdso_image
            && (self.symtab_only > 0 || self.unresolved.values().any(|&n| n > 0))
    }
}

/// What [`symbolize_trace`] did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub modules: Vec<ModuleReport>,
    /// Frames outside every recorded mapping.
    pub no_mapping: u64,
    /// Frames in mappings without a build-id (anonymous, JIT, `[vdso]` of a trace without
    /// its image).
    pub no_build_id: u64,
    /// Frames in the kernel's uprobes page (`[uprobes]`): the return-probe trampoline, or
    /// a single-step slot. Kernel code, not the program's: named for what they are
    /// ([`UprobesFrame::name`]) by the reports, not resolved.
    pub uprobes: BTreeMap<UprobesFrame, u64>,
    /// Damage found in the input (it was read as far as possible).
    pub input_damage: Vec<String>,
    /// The stack copies (`--stack-mode dwarf`) unwound.
    pub unwind: crate::unwind::UnwindSummary,
    /// The stack copies left out of the output, and their bytes of target stack (0 with
    /// [`Options::keep_stack_copies`]).
    pub dropped: Stripped,
}

/// Stack copies removed from a trace: how many, and the bytes of target stack they held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stripped {
    pub copies: u64,
    pub bytes: u64,
    /// USDT string arguments (`--usdt-string`) removed by `ebsym strip`, and their bytes.
    pub strings: u64,
    pub string_bytes: u64,
}

impl Stripped {
    /// Takes the copy out of `record` if it is a stack with one, counting it.
    pub fn strip(&mut self, record: &mut Record) {
        if let Some(Kind::Stack(s)) = &mut record.kind {
            if let Some(c) = s.copy.take() {
                self.copies += 1;
                self.bytes += c.data.len() as u64;
            }
        }
    }

    /// Takes the string arguments (`--usdt-string`: target memory) out of `record` if it is
    /// a batch of USDT hits with some, counting them.
    pub fn strip_strings(&mut self, record: &mut Record) {
        if let Some(Kind::Usdts(b)) = &mut record.kind {
            for t in std::mem::take(&mut b.text) {
                if !t.is_empty() {
                    self.strings += 1;
                    self.string_bytes += t.len() as u64;
                }
            }
        }
    }
}

/// Addresses of one build-id to resolve.
#[derive(Debug, Default)]
struct Work {
    build_id: Vec<u8>,
    /// Recorded paths seen for it; the smallest is used (deterministic).
    paths: BTreeSet<Vec<u8>>,
    /// File offsets of the looked-up addresses.
    offsets: BTreeSet<u64>,
}

struct Resolved {
    report: ModuleReport,
    searched: Vec<String>,
    addresses: Vec<(u64, Lookup)>,
}

/// Reads `input`, resolves every user frame of its stacks and writes `output`.
pub fn symbolize_trace(input: &Path, output: &Path, options: &Options) -> Result<Report, Error> {
    symbolize_trace_with(input, output, options, &NoProgress)
}

/// [`symbolize_trace`], telling `progress` how the resolution goes.
pub fn symbolize_trace_with(
    input: &Path,
    output: &Path,
    options: &Options,
    progress: &dyn Progress,
) -> Result<Report, Error> {
    let (report, _) = symbolize(input, options, progress, || {
        let file = create_private(output).map_err(|e| {
            Error::new(
                ErrorKind::Output,
                format!("cannot create {}", output.display()),
                e,
            )
        })?;
        Ok((
            io::BufWriter::with_capacity(1 << 20, file),
            output.display().to_string(),
        ))
    })?;
    Ok(report)
}

/// [`symbolize_trace_with`] into memory: the symbolized trace's bytes, for a report to
/// read without a file (`TraceReader::new(&bytes[..])`).
pub fn symbolize_trace_to_vec(
    input: &Path,
    options: &Options,
    progress: &dyn Progress,
) -> Result<(Report, Vec<u8>), Error> {
    symbolize(input, options, progress, || {
        Ok((Vec::new(), "memory".to_string()))
    })
}

/// Reads `input` twice (definitions, then a copy through) and writes the symbolized trace
/// to what `output` makes (a writer and its name for errors), called once the addresses
/// are resolved.
fn symbolize<W: io::Write>(
    input: &Path,
    options: &Options,
    progress: &dyn Progress,
    output: impl FnOnce() -> Result<(W, String), Error>,
) -> Result<(Report, W), Error> {
    let open = || {
        TraceReader::open(input).map_err(|e| {
            Error::new(
                ErrorKind::Input,
                format!("cannot read {}", input.display()),
                e,
            )
        })
    };

    // Pass 1: the definitions.
    let mut tables = Tables::default();
    let mut header = None;
    let mut max_string_id = 0;
    let mut reader = open()?;
    // Stack copies are unwound as they come (in batches), and their unwound user ips are
    // the ones resolved.
    let mut unwinder = crate::unwind::TraceUnwinder::new(&options.locator);
    // The vDSO images by build-id id (one per file, from ebrec).
    let mut vdso_images: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut data = crate::data::DataAddresses::default();
    for rec in reader.by_ref() {
        data.observe(&rec, &tables);
        match &rec.kind {
            Some(Kind::Header(h)) if header.is_none() => header = Some(h.clone()),
            Some(Kind::String(s)) => max_string_id = max_string_id.max(s.id),
            Some(Kind::VdsoImage(v)) => {
                vdso_images
                    .entry(v.build_id)
                    .or_insert_with(|| v.image.clone());
            }
            _ => {}
        }
        tables.observe(&rec);
        unwinder.observe(&rec, &mut tables);
    }
    let unwound = unwinder.finish(&mut tables);
    let mut report = Report {
        input_damage: reader.damage().iter().map(|d| d.to_string()).collect(),
        unwind: unwound.summary.clone(),
        ..Default::default()
    };

    // Normalize: group the looked-up addresses by build-id.
    let mut work: BTreeMap<u64, Work> = BTreeMap::new();
    // The string ids of the uprobes page's path: frames in it are counted, not resolved.
    let uprobes_paths: Vec<u64> = tables
        .strings
        .iter()
        .filter(|(_, v)| v.as_slice() == ebtrace_format::tables::UPROBES_PATH)
        .map(|(&id, _)| id)
        .collect();
    let mut stack_ids: Vec<&u64> = tables.stacks.keys().collect();
    stack_ids.sort();
    for id in stack_ids {
        let stack = &tables.stacks[id];
        let (user_ips, exact): (&Vec<u64>, &[u32]) = match unwound.stacks.get(id) {
            Some((u, _)) if !u.ips.is_empty() => (&u.ips, &u.exact),
            _ => (&stack.user_ips, &[]),
        };
        for (i, &ip) in user_ips.iter().enumerate() {
            // Frames past the leaf are return addresses: the call is the byte before (but
            // for the instruction a signal interrupted, which is exact).
            let addr = if i > 0 && !exact.contains(&(i as u32)) {
                ip.wrapping_sub(1)
            } else {
                ip
            };
            let m = mapping_for(&tables, stack.generation, addr);
            // The uprobes page, by the recorded address: a return address that is the
            // trampoline is the page's first byte, and `addr` lies before it.
            if !uprobes_paths.is_empty() && m.is_none_or(|m| uprobes_paths.contains(&m.path)) {
                if let Some(u) = mapping_for(&tables, stack.generation, ip)
                    .and_then(|m| tables.uprobes_frame(m, ip))
                {
                    *report.uprobes.entry(u).or_default() += 1;
                    continue;
                }
            }
            let Some(m) = m else {
                report.no_mapping += 1;
                continue;
            };
            let Some(build_id) = tables
                .build_ids
                .get(&m.build_id)
                .filter(|_| m.build_id != 0)
            else {
                report.no_build_id += 1;
                continue;
            };
            let w = work.entry(m.build_id).or_default();
            w.build_id = build_id.clone();
            w.paths
                .insert(tables.strings.get(&m.path).cloned().unwrap_or_default());
            // A hostile trace may declare any offset: an impossible one resolves nothing.
            if let Some(off) = (addr - m.start).checked_add(m.file_offset) {
                w.offsets.insert(off);
            }
        }
    }

    // Resolve, one build-id per task.
    let symbolizer = Symbolizer::new(options.clone());
    let work: Vec<(u64, Work)> = work.into_iter().collect();
    progress.resolve_start(work.iter().map(|(_, w)| w.offsets.len() as u64).sum());
    let resolved: Vec<(u64, Resolved)> = work
        .par_iter()
        .map(|(id, w)| {
            let image = vdso_images.get(id).map(Vec::as_slice);
            (*id, resolve_module(&symbolizer, w, image, progress))
        })
        .collect();
    progress.resolve_done();

    // Pass 2: copy the input through, then append the results.
    let (out, out_name) = output()?;
    let wopts = WriterOptions {
        chunk_interval: None,
        ..Default::default()
    };
    let out_err =
        |e: io::Error| Error::new(ErrorKind::Output, format!("cannot write {out_name}"), e);
    let mut w = TraceWriter::new(out, header.unwrap_or_default(), wopts).map_err(out_err)?;
    let mut trailer = None;
    let mut seen_header = false;
    for mut rec in open()? {
        match rec.kind {
            Some(Kind::Header(_)) if !seen_header => seen_header = true,
            Some(Kind::Trailer(t)) => trailer = Some(t),
            _ => {
                // Unwound above: the output needs the frames, not the target's memory.
                if !options.keep_stack_copies {
                    report.dropped.strip(&mut rec);
                }
                w.write_record(&rec).map_err(out_err)?
            }
        }
    }
    let mut strings = Strings {
        next: max_string_id + 1,
        ids: HashMap::new(),
    };
    let realtime_ns = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|s| s * 1_000_000_000)
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
    let mut kv = vec![KeyValue {
        key: "root".into(),
        value: options.locator.root.display().to_string(),
    }];
    for d in &options.locator.debug_dirs {
        kv.push(KeyValue {
            key: "debug-dir".into(),
            value: d.display().to_string(),
        });
    }
    kv.push(KeyValue {
        key: "demangle".into(),
        value: options.demangle.to_string(),
    });
    w.write_record(&Record {
        kind: Some(Kind::SymbolizerInfo(SymbolizerInfo {
            symbolizer_version: format!("ebsym {}", env!("CARGO_PKG_VERSION")),
            realtime_ns,
            options: kv,
        })),
    })
    .map_err(out_err)?;
    for (&stack, (u, stop)) in &unwound.stacks {
        let stop_reason = strings.id(&mut w, stop.as_bytes()).map_err(out_err)?;
        w.write_record(&Record {
            kind: Some(Kind::UnwoundStack(UnwoundStack {
                stack,
                user_ips: u.ips.clone(),
                stop_reason,
                exact_frames: u.exact.clone(),
            })),
        })
        .map_err(out_err)?;
    }
    for (build_id, r) in resolved {
        write_module(&mut w, &mut strings, build_id, &r).map_err(out_err)?;
        report.modules.push(r.report);
    }
    for d in data.name(&tables, &symbolizer) {
        let name = strings.id(&mut w, d.name.as_bytes()).map_err(out_err)?;
        let module = strings.id(&mut w, &d.module).map_err(out_err)?;
        w.write_record(&Record {
            kind: Some(Kind::DataSymbol(ebtrace_format::proto::DataSymbol {
                generation: d.generation,
                address: d.address,
                name,
                module,
            })),
        })
        .map_err(out_err)?;
    }
    let mut out = w.finish(trailer).map_err(out_err)?;
    out.flush().map_err(out_err)?;
    Ok((report, out))
}

/// Whether the trace at `path` is symbolized: whether it has the records
/// [`symbolize_trace`] appends (a `SymbolizerInfo`, then `UnwoundStack`,
/// `ModuleResolution` and `SymbolizedAddress` records, and the strings they name).
///
/// Cheap on a trace of any size: those records are the last of the file but for its
/// trailer, so only the chunk descriptors are read (each chunk's compressed body is
/// skipped) and the chunks are decompressed from the last one back until one holds a
/// record other than a string or the trailer. A file whose chunks cannot be walked so
/// (damaged, cut short) is read whole, as [`TraceReader`] reads it, as is a trace older
/// than this rule (the answer is the same: every symbolized trace ebsym ever wrote ends
/// so).
pub fn is_symbolized(path: &Path) -> Result<bool, ebtrace_format::Error> {
    if let Some(answer) = symbolized_by_tail(path) {
        return Ok(answer);
    }
    let reader = TraceReader::open(path)?;
    for rec in reader {
        if matches!(rec.kind, Some(Kind::SymbolizerInfo(_))) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`is_symbolized`] from the last chunks; None when the chunks cannot be walked from
/// their descriptors alone.
fn symbolized_by_tail(path: &Path) -> Option<bool> {
    use ebtrace_format::frame::{
        ChunkDescriptor, CHUNK_DESCRIPTOR_LEN, FILE_FRAME_MAGIC, MAX_COMPRESSED_BYTES,
    };
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let mut head = [0u8; 8];
    file.read_exact(&mut head).ok()?;
    if u32::from_le_bytes(head[0..4].try_into().ok()?) != FILE_FRAME_MAGIC {
        return None;
    }
    let header_len = 8 + u64::from(u32::from_le_bytes(head[4..8].try_into().ok()?));
    let mut header = vec![0u8; usize::try_from(header_len).ok()?];
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_exact(&mut header).ok()?;
    // Every chunk: where it starts and its length, descriptor included.
    let mut chunks: Vec<(u64, u64)> = Vec::new();
    let mut at = header_len;
    while at < len {
        let mut d = [0u8; CHUNK_DESCRIPTOR_LEN];
        file.seek(SeekFrom::Start(at)).ok()?;
        file.read_exact(&mut d).ok()?;
        let desc = ChunkDescriptor::decode(&d)?;
        if desc.compressed_len > MAX_COMPRESSED_BYTES || desc.sequence as usize != chunks.len() {
            return None;
        }
        let size = CHUNK_DESCRIPTOR_LEN as u64 + desc.compressed_len;
        chunks.push((at, size));
        at = at.checked_add(size)?;
    }
    if at != len {
        return None;
    }
    for &(start, size) in chunks.iter().rev() {
        file.seek(SeekFrom::Start(start)).ok()?;
        let one = (&header[..]).chain((&mut file).take(size));
        let mut reader = TraceReader::new(one).ok()?;
        let records: Vec<Record> = reader.by_ref().collect();
        if !reader.damage().is_empty() {
            return None;
        }
        for rec in records.iter().rev() {
            match &rec.kind {
                // A kind this build does not know (a later format's) says nothing either.
                Some(Kind::String(_) | Kind::Trailer(_)) | None => continue,
                Some(
                    Kind::SymbolizerInfo(_)
                    | Kind::UnwoundStack(_)
                    | Kind::ModuleResolution(_)
                    | Kind::SymbolizedAddress(_),
                ) => return Some(true),
                _ => return Some(false),
            }
        }
    }
    Some(false)
}

pub(crate) fn create_private(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // A trace holds the target's stacks: keep an existing file private too.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// Addresses per progress report (a module's addresses are resolved in steps of
/// this many; the answers do not depend on it).
const PROGRESS_STEP: usize = 1 << 16;

/// Where a module's answers come from: its files, or the trace's vDSO image.
enum Resolver<'a> {
    Files(&'a crate::resolve::Module),
    Vdso(&'a crate::vdso::VdsoImage),
}

impl Resolver<'_> {
    fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        match self {
            Resolver::Files(m) => m.offset_to_vaddr(offset),
            Resolver::Vdso(v) => v.offset_to_vaddr(offset),
        }
    }

    fn resolve_many(&self, addrs: &[u64]) -> Vec<Lookup> {
        match self {
            Resolver::Files(m) => m
                .resolve_many(addrs)
                .into_iter()
                .map(std::sync::Arc::unwrap_or_clone)
                .collect(),
            Resolver::Vdso(v) => addrs.iter().map(|&a| v.resolve(a)).collect(),
        }
    }
}

fn resolve_module(
    symbolizer: &Symbolizer,
    w: &Work,
    vdso: Option<&[u8]>,
    progress: &dyn Progress,
) -> Resolved {
    use std::os::unix::ffi::OsStrExt;
    let path_bytes = w.paths.iter().next().cloned().unwrap_or_default();
    let path = std::ffi::OsStr::from_bytes(&path_bytes);
    // The files first: a debug directory or debuginfod may have the vDSO's DWARF (the
    // kernel's debug package ships it); else the trace's own image.
    let module = symbolizer.open(Some(&w.build_id), Path::new(path));
    let image = match (vdso, &module.status) {
        (Some(image), Err(_)) => Some(crate::vdso::VdsoImage::parse(image.to_vec(), &w.build_id)),
        _ => None,
    };
    let mut report = ModuleReport {
        build_id: w.build_id.clone(),
        path: String::from_utf8_lossy(&path_bytes).into_owned(),
        debug_file: module.debug_file.clone(),
        resolved: 0,
        symtab_only: 0,
        unresolved: BTreeMap::new(),
        status: module.status.clone().err(),
        binary: module.binary.clone(),
        dwarf: module.status == Ok(crate::resolve::Source::Dwarf),
        vdso_image: false,
    };
    let source = match &image {
        Some(Ok(v)) => {
            report.status = None;
            report.vdso_image = true;
            Resolver::Vdso(v)
        }
        Some(Err(e)) => {
            report.status = Some(Unresolved {
                reason: Reason::BadFile,
                detail: Some(e.clone()),
            });
            Resolver::Files(&module)
        }
        None => Resolver::Files(&module),
    };
    // Keyed by file offset (what a reader of the trace can compute from the mappings);
    // resolved at the ELF virtual address the PT_LOAD segments give for it.
    // All of a module's addresses at once: spread over the cores (see
    // `Module::resolve_many`), the same answers at any thread count.
    let vaddrs: Vec<Option<u64>> = w
        .offsets
        .iter()
        .map(|&o| source.offset_to_vaddr(o))
        .collect();
    let known: Vec<u64> = vaddrs.iter().flatten().copied().collect();
    let mut answers = Vec::with_capacity(known.len());
    for step in known.chunks(PROGRESS_STEP) {
        answers.extend(source.resolve_many(step));
        progress.resolved(step.len() as u64);
    }
    progress.resolved((w.offsets.len() - known.len()) as u64);
    let mut answers = answers.into_iter();
    let addresses: Vec<(u64, Lookup)> = w
        .offsets
        .iter()
        .zip(&vaddrs)
        .map(|(&off, vaddr)| {
            let lookup = match vaddr {
                Some(_) => answers.next().expect("one answer per known address"),
                // Without the file we cannot turn the offset into an address: the
                // module's reason is the answer.
                None => Err(report
                    .status
                    .clone()
                    .unwrap_or_else(|| Reason::NoMapping.into())),
            };
            (off, lookup)
        })
        .collect();
    for (_, l) in &addresses {
        match l {
            Ok(f) if f.iter().all(|f| f.from_symtab) => {
                report.resolved += 1;
                report.symtab_only += 1;
            }
            Ok(_) => report.resolved += 1,
            Err(u) => *report.unresolved.entry(u.reason).or_default() += 1,
        }
    }
    report.unresolved.retain(|_, n| *n > 0);
    Resolved {
        report,
        searched: module.searched.iter().map(|s| s.to_string()).collect(),
        addresses,
    }
}

/// Strings this run adds, with ids past every id of the input: the writer's own interner
/// starts at 1 and knows nothing of the copied records' ids.
struct Strings {
    next: u64,
    ids: HashMap<Vec<u8>, u64>,
}

impl Strings {
    fn id<W: io::Write>(&mut self, w: &mut TraceWriter<W>, s: &[u8]) -> io::Result<u64> {
        if s.is_empty() {
            return Ok(0);
        }
        if let Some(&id) = self.ids.get(s) {
            return Ok(id);
        }
        let id = self.next;
        self.next += 1;
        self.ids.insert(s.to_vec(), id);
        w.write_record(&Record {
            kind: Some(Kind::String(InternedString {
                id,
                value: s.to_vec(),
            })),
        })?;
        Ok(id)
    }
}

fn write_module<W: io::Write>(
    w: &mut TraceWriter<W>,
    strings: &mut Strings,
    build_id: u64,
    r: &Resolved,
) -> io::Result<()> {
    let debug_file = match &r.report.debug_file {
        _ if r.report.vdso_image => strings.id(w, crate::vdso::SOURCE.as_bytes())?,
        Some(p) => strings.id(w, p.as_os_str().as_encoded_bytes())?,
        None => 0,
    };
    let mut searched = Vec::new();
    for s in &r.searched {
        searched.push(strings.id(w, s.as_bytes())?);
    }
    let (status, detail) = match &r.report.status {
        Some(u) => (
            u.reason.to_proto(),
            strings.id(w, u.detail.as_deref().unwrap_or("").as_bytes())?,
        ),
        None if (r.report.debug_file.is_some() || r.report.vdso_image)
            && r.addresses
                .iter()
                .all(|(_, l)| matches!(l, Ok(f) if f.iter().all(|f| f.from_symtab))) =>
        {
            (UnresolvedReason::SymtabOnly, 0)
        }
        None => (UnresolvedReason::None, 0),
    };
    w.write_record(&Record {
        kind: Some(Kind::ModuleResolution(ModuleResolution {
            build_id,
            debug_file,
            searched,
            status: status as i32,
            detail,
        })),
    })?;
    for (addr, lookup) in &r.addresses {
        let (frames, reason) = match lookup {
            Ok(frames) => {
                let mut out = Vec::with_capacity(frames.len());
                for f in frames {
                    out.push(symbol_frame(w, strings, f)?);
                }
                let symtab = frames.iter().all(|f| f.from_symtab);
                let reason = if symtab {
                    UnresolvedReason::SymtabOnly
                } else {
                    UnresolvedReason::None
                };
                (out, reason)
            }
            Err(u) => (Vec::new(), u.reason.to_proto()),
        };
        w.write_record(&Record {
            kind: Some(Kind::SymbolizedAddress(SymbolizedAddress {
                build_id,
                address: *addr,
                frames,
                reason: reason as i32,
            })),
        })?;
    }
    Ok(())
}

fn symbol_frame<W: io::Write>(
    w: &mut TraceWriter<W>,
    strings: &mut Strings,
    f: &Frame,
) -> io::Result<SymbolFrame> {
    Ok(SymbolFrame {
        function: strings.id(w, f.function.as_deref().unwrap_or("").as_bytes())?,
        file: strings.id(w, f.file.as_deref().unwrap_or("").as_bytes())?,
        line: f.line,
        column: f.column,
        inlined: f.inlined,
        offset: f.offset.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clean trace is answered from its chunk descriptors and last chunks, without the
    /// full read.
    #[test]
    fn clean_traces_are_answered_from_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw.pb.zst");
        let opts = WriterOptions {
            chunk_bytes: 1,
            chunk_interval: None,
            ..Default::default()
        };
        let mut w = TraceWriter::new(Vec::new(), Default::default(), opts).unwrap();
        for id in 1..20 {
            w.write_record(&Record {
                kind: Some(Kind::String(InternedString {
                    id,
                    value: b"s".to_vec(),
                })),
            })
            .unwrap();
        }
        std::fs::write(&raw, w.finish(Some(Default::default())).unwrap()).unwrap();
        assert_eq!(symbolized_by_tail(&raw), Some(false));
        let sym = dir.path().join("sym.pb.zst");
        symbolize_trace(&raw, &sym, &Options::default()).unwrap();
        assert_eq!(symbolized_by_tail(&sym), Some(true));
    }
}
