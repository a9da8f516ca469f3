//! `ebsym strip` on written traces: the copies go, every other record stays in order, and
//! every failure is one line on stderr (exit 1), never a panic. (Real copies, from a
//! program's own stack, are in `symbolize/unwind.rs`.)
use ebtrace_format::{TraceReader, TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use std::path::Path;
use std::process::{Command, Output};

fn ebsym(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebsym"))
        .args(args)
        .env_remove("DEBUGINFOD_URLS")
        .output()
        .expect("run ebsym")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A trace with one interned stack, `copies` stacks with 1000-byte copies (filled with
/// `fill`), unwind tables and an allocation on each stack.
fn write(path: &Path, copies: u64, fill: u8, trailer: bool) {
    let opts = WriterOptions {
        chunk_bytes: 2048,
        chunk_interval: None,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), pb::Header::default(), opts).unwrap();
    let bid = w.intern_build_id(&[1, 2, 3, 4]).unwrap();
    w.write_record(&Record {
        kind: Some(Kind::UnwindTables(pb::UnwindTables {
            build_id: bid,
            eh_frame: vec![7; 64],
            eh_frame_address: 0x2000,
            ..Default::default()
        })),
    })
    .unwrap();
    let mut stacks = vec![w.intern_stack(1, &[0x1000, 0x1100], &[], 8).unwrap()];
    for i in 0..copies {
        stacks.push(
            w.write_stack_copy(pb::Stack {
                generation: 1,
                user_ips: vec![0x1000 + i],
                flags: 16,
                copy: Some(pb::UserStackCopy {
                    regs: vec![0x7fff_0000, 0x7fff_0010, 0x1000 + i],
                    reg_mask: 1 << 6 | 1 << 7 | 1 << 16,
                    sp: 0x7fff_0010,
                    data: vec![fill; 1000],
                }),
                ..Default::default()
            })
            .unwrap(),
        );
    }
    for (i, &stack) in stacks.iter().enumerate() {
        w.alloc(&ebtrace_format::events::AllocEvent {
            time_ns: 100 + i as u64,
            generation: 1,
            tid: 7,
            stack,
            size: 64,
            address: 0x5000 + 64 * i as u64,
            kind: pb::AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })
        .unwrap();
    }
    let bytes = w
        .finish(trailer.then(|| pb::Trailer {
            stop_reason: "exit".into(),
            ..Default::default()
        }))
        .unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn records(path: &Path) -> Vec<Record> {
    let mut r = TraceReader::open(path).unwrap();
    let v = r.by_ref().collect();
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    v
}

fn one_line_stderr(o: &Output) -> String {
    let err = String::from_utf8(o.stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "{err:?}");
    err.trim_end().to_string()
}

#[test]
fn strip_removes_the_copies_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    for trailer in [true, false] {
        let input = dir.path().join("t.pb.zst");
        let output = dir.path().join("s.pb.zst");
        write(&input, 1500, 0xa5, trailer);
        let o = ebsym(&["strip", p(&input), "-o", p(&output)]);
        assert!(o.status.success(), "{o:?}");
        assert!(o.stdout.is_empty());
        assert_eq!(
            one_line_stderr(&o),
            format!(
                "ebsym: wrote {}: removed 1,500 stack copies (1.4 MiB of target stack); \
                 1,500 of them never unwound (not symbolized): those stacks are now \
                 frame-pointer walks only (`ebsym {}` first keeps them whole)",
                output.display(),
                input.display()
            )
        );
        let (a, b) = (records(&input), records(&output));
        assert_eq!(a.len(), b.len());
        let mut tables = 0;
        for (x, y) in a.iter().zip(&b) {
            let mut x = x.clone();
            match &mut x.kind {
                Some(Kind::Stack(s)) => s.copy = None,
                Some(Kind::UnwindTables(_)) => tables += 1,
                Some(Kind::Trailer(t)) => {
                    let Some(Kind::Trailer(u)) = &y.kind else {
                        panic!("{y:?}")
                    };
                    assert_eq!(t.stop_reason, u.stop_reason);
                    continue;
                }
                _ => {}
            }
            assert_eq!(&x, y);
        }
        assert_eq!(tables, 1, "the unwind tables stay");
        // A stack without a copy is no stack memory.
        let j: serde_json::Value =
            serde_json::from_slice(&ebsym(&["info", "--json", p(&output)]).stdout).unwrap();
        assert_eq!(
            (&j["stack_copies"], &j["stack_copy_bytes"]),
            (&0.into(), &0.into())
        );
        assert_eq!(j["stacks"], 1501);
        assert_eq!(j["ended"], if trailer { "clean" } else { "cut" });
        let j: serde_json::Value =
            serde_json::from_slice(&ebsym(&["info", "--json", p(&input)]).stdout).unwrap();
        assert_eq!(j["stack_copies"], 1500);
        assert_eq!(j["stack_copy_bytes"], 1_500_000);
        let text = String::from_utf8(ebsym(&["info", p(&input)]).stdout).unwrap();
        assert!(
            text.lines().any(|l| l
                == "stack memory 1,500 stack copies, 1.4 MiB of the target's stack \
                    (--stack-mode dwarf): share it only where that is acceptable; \
                    `ebsym strip` removes them"),
            "{text}"
        );
    }
}

#[test]
fn strip_failures_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("t.pb.zst");
    write(&input, 2, 1, true);
    let before = std::fs::read(&input).unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, vec![0x42u8; 4096]).unwrap();
    let out = dir.path().join("out.pb.zst");
    let missing = dir.path().join("missing.pb.zst");
    let no_dir = dir.path().join("no/dir/o");
    let cases: [(&[&str], &str); 5] = [
        (
            &["strip", p(&input), "-o", p(&input)],
            "is the input: write the stripped trace to another file",
        ),
        (&["strip", p(&junk), "-o", p(&out)], "not an ebtrace trace"),
        (&["strip", p(&missing), "-o", p(&out)], "missing.pb.zst"),
        (&["strip", p(&input), "-o", p(&no_dir)], "cannot create"),
        (&["strip", p(&input)], "--output"),
    ];
    for (args, want) in cases {
        let o = ebsym(args);
        assert!(!o.status.success(), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if args.len() == 4 {
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(err.starts_with("ebsym: "), "{err}");
        }
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input is untouched"
    );
    assert!(!out.exists(), "nothing written for an unreadable input");
}
