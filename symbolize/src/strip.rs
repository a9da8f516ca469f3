//! Removing the target's stack memory from a trace (`ebsym strip`): every record is copied
//! through in order, each `Stack` without its raw copy (`UserStackCopy`, written by
//! `ebrec --stack-mode dwarf`) and with its id, generation, ips and flags unchanged.
//! `UnwindTables` stay: they are the binaries' `.eh_frame`, not target memory. The USDT
//! string arguments `ebrec --usdt-string` kept (target memory too) are removed as well.
//!
//! On a symbolized trace nothing a report shows changes (the unwound frames are
//! `UnwoundStack` records). A raw trace stripped before it is symbolized can no longer be
//! unwound offline: its stacks are then the frame-pointer walks ebrec took as a fallback.
//!
//! ```no_run
//! let r = ebtrace_symbolize::strip::strip_stack_copies("t.pb.zst".as_ref(), "s.pb.zst".as_ref()).unwrap();
//! eprintln!("removed {} copies ({} bytes)", r.removed.copies, r.removed.bytes);
//! ```
use crate::trace::{create_private, Error, ErrorKind, Stripped};
use ebtrace_format::proto::record::Kind;
use ebtrace_format::{TraceReader, TraceWriter, WriterOptions};
use std::collections::HashSet;
use std::io::{self, Write};
use std::path::Path;

/// What [`strip_stack_copies`] did.
#[derive(Debug, Clone, Default)]
pub struct StripReport {
    /// The copies removed and their bytes.
    pub removed: Stripped,
    /// Of those, the copies of stacks the trace has no `UnwoundStack` for: their whole
    /// stacks are lost (a raw trace not symbolized yet).
    pub not_unwound: u64,
    /// Damage found in the input (it was read as far as possible, and the output holds
    /// what could be read).
    pub input_damage: Vec<String>,
    /// Whether the input ended cleanly (had a trailer); the output then does too.
    pub clean_end: bool,
}

/// Writes `output`: the trace at `input` without its stack copies.
pub fn strip_stack_copies(input: &Path, output: &Path) -> Result<StripReport, Error> {
    let in_err = |e: ebtrace_format::Error| {
        Error::new(
            ErrorKind::Input,
            format!("cannot read {}", input.display()),
            e,
        )
    };
    if same_file(input, output) {
        return Err(Error::plain(
            ErrorKind::Output,
            format!(
                "{} is the input: write the stripped trace to another file",
                output.display()
            ),
        ));
    }
    let mut reader = TraceReader::open(input).map_err(in_err)?;
    // The first record of a trace is its header: the writer writes it first.
    let first = reader.next();
    let (header, pending) = match first {
        Some(r) => match r.kind {
            Some(Kind::Header(h)) => (h, None),
            _ => (Default::default(), Some(r)),
        },
        None => (Default::default(), None),
    };
    let out_err = |e: io::Error| {
        Error::new(
            ErrorKind::Output,
            format!("cannot write {}", output.display()),
            e,
        )
    };
    let file = create_private(output).map_err(|e| {
        Error::new(
            ErrorKind::Output,
            format!("cannot create {}", output.display()),
            e,
        )
    })?;
    let wopts = WriterOptions {
        chunk_interval: None,
        ..Default::default()
    };
    let mut w = TraceWriter::new(io::BufWriter::with_capacity(1 << 20, file), header, wopts)
        .map_err(out_err)?;
    let mut report = StripReport::default();
    let mut copied: HashSet<u64> = HashSet::new();
    let mut unwound: HashSet<u64> = HashSet::new();
    let mut trailer = None;
    for mut rec in pending.into_iter().chain(reader.by_ref()) {
        match &rec.kind {
            Some(Kind::Trailer(t)) => {
                trailer = Some(t.clone());
                continue;
            }
            Some(Kind::Stack(s)) if s.copy.is_some() => {
                copied.insert(s.id);
            }
            Some(Kind::UnwoundStack(u)) => {
                unwound.insert(u.stack);
            }
            _ => {}
        }
        report.removed.strip(&mut rec);
        report.removed.strip_strings(&mut rec);
        w.write_record(&rec).map_err(out_err)?;
    }
    report.input_damage = reader.damage().iter().map(|d| d.to_string()).collect();
    report.not_unwound = copied.difference(&unwound).count() as u64;
    report.clean_end = trailer.is_some();
    // A cut input stays cut: no trailer is made up for it.
    let mut out = w.finish(trailer).map_err(out_err)?;
    out.flush().map_err(out_err)?;
    Ok(report)
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebtrace_format::proto::{Header, Record, Stack, Trailer, UnwoundStack, UserStackCopy};
    use ebtrace_format::Tables;

    fn trace(dir: &Path, with_unwound: bool, trailer: bool) -> std::path::PathBuf {
        let path = dir.join("in.pb.zst");
        let opts = WriterOptions {
            chunk_bytes: 256,
            chunk_interval: None,
            ..Default::default()
        };
        let header = Header {
            hostname: "h".into(),
            ..Default::default()
        };
        let mut w = TraceWriter::new(Vec::new(), header, opts).unwrap();
        let plain = w
            .intern_stack(1, &[0x1000, 0x2000], &[0xffff_1000], 0)
            .unwrap();
        let mut ids = vec![];
        for i in 0..3u64 {
            ids.push(
                w.write_stack_copy(Stack {
                    generation: 1,
                    user_ips: vec![0x1000 + i],
                    flags: 16,
                    copy: Some(UserStackCopy {
                        regs: vec![1, 2, 3],
                        reg_mask: 1 << 6 | 1 << 7 | 1 << 16,
                        sp: 0x7fff_0000,
                        data: vec![0xab; 100 * (i as usize + 1)],
                    }),
                    ..Default::default()
                })
                .unwrap(),
            );
        }
        if with_unwound {
            for &id in &ids[..2] {
                w.write_record(&Record {
                    kind: Some(Kind::UnwoundStack(UnwoundStack {
                        stack: id,
                        user_ips: vec![0x1000, 0x3000],
                        ..Default::default()
                    })),
                })
                .unwrap();
            }
        }
        assert_eq!(plain, 1);
        let bytes = w
            .finish(trailer.then(|| Trailer {
                stop_reason: "done".into(),
                ..Default::default()
            }))
            .unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn records(path: &Path) -> Vec<Record> {
        let mut r = TraceReader::open(path).unwrap();
        let v: Vec<Record> = r.by_ref().collect();
        assert!(r.damage().is_empty(), "{:?}", r.damage());
        v
    }

    #[test]
    fn usdt_strings_go_with_their_count() {
        let mut rec = Record {
            kind: Some(Kind::Usdts(ebtrace_format::proto::UsdtBatch {
                probe: vec![1, 1, 2],
                text: vec![b"UPDATE t SET v = 1;".to_vec(), Vec::new(), b"abc".to_vec()],
                ..Default::default()
            })),
        };
        let mut s = Stripped::default();
        s.strip_strings(&mut rec);
        assert_eq!((s.strings, s.string_bytes), (2, 22));
        let Some(Kind::Usdts(b)) = &rec.kind else {
            unreachable!()
        };
        assert!(b.text.is_empty());
        assert_eq!(b.probe, [1, 1, 2]);
    }

    #[test]
    fn copies_go_everything_else_stays_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for (with_unwound, trailer) in [(true, true), (false, false)] {
            let input = trace(dir.path(), with_unwound, trailer);
            let output = dir.path().join("out.pb.zst");
            let r = strip_stack_copies(&input, &output).unwrap();
            assert_eq!(
                r.removed,
                Stripped {
                    copies: 3,
                    bytes: 600,
                    strings: 0,
                    string_bytes: 0,
                }
            );
            assert_eq!(r.not_unwound, if with_unwound { 1 } else { 3 });
            assert_eq!(r.clean_end, trailer);
            assert!(r.input_damage.is_empty());
            let (a, b) = (records(&input), records(&output));
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                let mut x = x.clone();
                if let Some(Kind::Stack(s)) = &mut x.kind {
                    s.copy = None;
                }
                match (&x.kind, &y.kind) {
                    // Counts are the writer's (chunks are laid out anew).
                    (Some(Kind::Trailer(t)), Some(Kind::Trailer(u))) => {
                        assert_eq!(t.stop_reason, u.stop_reason)
                    }
                    _ => assert_eq!(&x, y),
                }
            }
            let mut t = Tables::default();
            for rec in &b {
                t.observe(rec);
            }
            assert!(t.stacks.values().all(|s| s.copy.is_none()));
            assert_eq!(t.stacks[&2].flags, 16);
            // Stripping again removes nothing.
            let again = dir.path().join("again.pb.zst");
            let r = strip_stack_copies(&output, &again).unwrap();
            assert_eq!(r.removed, Stripped::default());
        }
    }

    #[test]
    fn errors_name_the_file_and_never_overwrite_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let input = trace(dir.path(), false, true);
        let before = std::fs::read(&input).unwrap();
        let e = strip_stack_copies(&input, &input).unwrap_err();
        assert!(e.to_string().contains("is the input"), "{e}");
        assert_eq!(std::fs::read(&input).unwrap(), before);
        let missing = dir.path().join("missing.pb.zst");
        let e = strip_stack_copies(&missing, &dir.path().join("o")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Input);
        assert!(e.to_string().contains("missing.pb.zst"), "{e}");
        let e = strip_stack_copies(&input, &dir.path().join("no/such/dir/o")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Output);
    }
}
