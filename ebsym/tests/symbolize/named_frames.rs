//! Frames named for what they are, on synthetic traces: the vDSO from the image a trace
//! carries (`VdsoImage`), the kernel's uprobes page (`[uprobes]`), and one line per binary
//! whose frames lack debug information, saying how to get it.
use crate::common::*;
use crate::trace::{function_address, read_back};
use ebtrace_format::events::CpuSample;
use ebtrace_proto::v1::{self as pb, record::Kind, Record, UnresolvedReason};
use object::{Object, ObjectSymbol};
use serde_json::Value;
use std::path::Path;

/// This process's own vDSO: the bytes of its `[vdso]` mapping (the kernel's image).
fn own_vdso() -> Vec<u8> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| l.ends_with("[vdso]"))
        .expect("a vDSO");
    let (a, rest) = line.split_once('-').unwrap();
    let b = usize::from_str_radix(rest.split_once(' ').unwrap().0, 16).unwrap();
    let a = usize::from_str_radix(a, 16).unwrap();
    // SAFETY: our own vDSO mapping, readable for the life of the process.
    unsafe { std::slice::from_raw_parts(a as *const u8, b - a) }.to_vec()
}

fn vdso_symbol(image: &[u8], name: &str) -> u64 {
    let obj = object::File::parse(image).unwrap();
    let s = obj.dynamic_symbols().find(|s| s.name() == Ok(name));
    s.unwrap_or_else(|| panic!("{name} not in the vDSO"))
        .address()
}

/// A mapping of the synthetic process.
struct Map<'a> {
    path: &'a str,
    start: u64,
    end: u64,
    offset: u64,
    build_id: Option<&'a [u8]>,
}

/// Writes a trace: one process with `maps`, the vDSO record `vdso` (build-id, image) if
/// given, and one CPU sample per stack.
fn write(path: &Path, maps: &[Map<'_>], vdso: Option<(&[u8], &[u8])>, stacks: &[Vec<u64>]) {
    let mut w = trace_writer(b"clock");
    if let Some((id, image)) = vdso {
        let build_id = w.intern_build_id(id).unwrap();
        w.write_record(&Record {
            kind: Some(Kind::VdsoImage(pb::VdsoImage {
                build_id,
                image: image.to_vec(),
            })),
        })
        .unwrap();
    }
    for m in maps {
        let path = w.intern_string(m.path.as_bytes()).unwrap();
        let build_id = match m.build_id {
            Some(b) => w.intern_build_id(b).unwrap(),
            None => 0,
        };
        w.write_record(&Record {
            kind: Some(Kind::Mapping(pb::Mapping {
                generation: 1,
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                path,
                build_id,
                perms: 5,
                source: pb::MappingSource::Snapshot as i32,
                ..Default::default()
            })),
        })
        .unwrap();
    }
    for (i, s) in stacks.iter().enumerate() {
        let stack = w.intern_stack(1, s, &[], 0).unwrap();
        w.cpu_sample(&CpuSample {
            time_ns: 1000 + i as u64,
            generation: 1,
            tid: 42,
            stack,
            cpu: 0,
        })
        .unwrap();
    }
    std::fs::write(path, w.finish(Some(pb::Trailer::default())).unwrap()).unwrap();
}

/// `ebsym top TRACE --kind cpu --json` (symbolized on the fly if raw): the report and
/// ebsym's stderr.
fn top(trace: &Path, args: &[&str]) -> (Value, String) {
    let out = run_ok(
        ebsym()
            .arg("top")
            .arg(trace)
            .args(["--kind", "cpu", "-n", "100", "--json"])
            .args(args),
    );
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Every row's function names, leaf first.
fn row_functions(report: &Value) -> Vec<Vec<String>> {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["function"].as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

const VDSO_AT: u64 = 0x7fff_f7fc_0000;

/// A trace with the vDSO's image names its frames from the image's `.dynsym`: the
/// global `__vdso_*` alias, with the offset into it, symbol table only; the leaf at its
/// address, a return address at the byte before. Without the record (an older trace) the
/// frames stay `[vdso]+0x…` (no build-id); an image whose build-id is not the record's is
/// refused, nothing named.
#[test]
fn vdso_frames_are_named_from_the_trace_image() {
    let image = own_vdso();
    let id = object::File::parse(&image[..])
        .unwrap()
        .build_id()
        .unwrap()
        .expect("the vDSO has a build-id")
        .to_vec();
    let clock = vdso_symbol(&image, "clock_gettime");
    let tod = vdso_symbol(&image, "gettimeofday");
    let dir = tempfile::tempdir().unwrap();
    let map = |build_id| Map {
        path: "[vdso]",
        start: VDSO_AT,
        end: VDSO_AT + image.len() as u64,
        offset: 0,
        build_id,
    };
    let stack = vec![VDSO_AT + clock + 0x10, VDSO_AT + tod + 0x21];

    let trace = dir.path().join("t.pb.zst");
    write(
        &trace,
        &[map(Some(&id))],
        Some((&id, &image)),
        std::slice::from_ref(&stack),
    );
    let out = dir.path().join("t.sym.pb.zst");
    let stderr = String::from_utf8(
        run_ok(ebsym().arg(&trace).arg("-o").arg(&out))
            .stderr
            .clone(),
    )
    .unwrap();
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        stderr.contains(&format!(
            "[vdso] ({hex}): 2 resolved (2 symbol table only), 0 unresolved; symbols from \
             the [vdso] image in the trace (.dynsym)"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("no debug info"),
        "no hint for the vDSO: {stderr}"
    );
    let s = read_back(&out);
    assert_eq!(s.modules.len(), 1);
    assert_eq!(s.modules[0].status(), UnresolvedReason::SymtabOnly);
    assert_eq!(
        s.tables.string(s.modules[0].debug_file),
        "[vdso] image in the trace (.dynsym)"
    );
    let bid = s.modules[0].build_id;
    for (offset, name, within) in [
        (clock + 0x10, "__vdso_clock_gettime", 0x10),
        (tod + 0x20, "__vdso_gettimeofday", 0x20),
    ] {
        let a = &s.addresses[&(bid, offset)];
        assert_eq!(a.reason(), UnresolvedReason::SymtabOnly);
        assert_eq!(a.frames.len(), 1);
        assert_eq!(s.tables.string(a.frames[0].function), name);
        assert_eq!(a.frames[0].offset, within);
        assert_eq!(a.frames[0].file, 0);
    }
    let (report, _) = top(&out, &[]);
    assert_eq!(
        row_functions(&report),
        vec![vec!["__vdso_clock_gettime", "__vdso_gettimeofday"]]
    );

    // An older trace: no image, no build-id on the mapping.
    let old = dir.path().join("old.pb.zst");
    write(&old, &[map(None)], None, std::slice::from_ref(&stack));
    let (report, _) = top(&old, &[]);
    assert_eq!(
        row_functions(&report),
        vec![vec![
            format!("[vdso]+{:#x}", clock + 0x10),
            format!("[vdso]+{:#x}", tod + 0x20)
        ]]
    );
    assert_eq!(
        report["losses"]["unresolved_frames"]["[vdso]: no build-id"],
        2
    );

    // An image that is not the one the record claims: its build-id note altered.
    let mut other = image.clone();
    let at = other
        .windows(id.len())
        .position(|w| w == id.as_slice())
        .expect("the build-id note in the image");
    other[at] ^= 0xff;
    let bad = dir.path().join("bad.pb.zst");
    write(&bad, &[map(Some(&id))], Some((&id, &other)), &[stack]);
    let bad_out = dir.path().join("bad.sym.pb.zst");
    let stderr =
        String::from_utf8(run_ok(ebsym().arg(&bad).arg("-o").arg(&bad_out)).stderr).unwrap();
    assert!(stderr.contains("vDSO image: build-id"), "{stderr}");
    let s = read_back(&bad_out);
    assert_eq!(s.modules[0].status(), UnresolvedReason::BadFile);
    assert!(s.addresses.values().all(|a| a.frames.is_empty()));
}

const UPROBES_AT: u64 = 0x7fff_ffff_e000;

/// Frames in the kernel's uprobes page: a leaf in the return-probe trampoline (a sample
/// while the thread returns through it), the trampoline as a return address (what
/// frame-pointer stacks of kernels before 6.14 hold: the page's first byte, whose
/// `address - 1` is outside it), a leaf in a single-step slot. Each is named for what it
/// is and counted, by ebsym's summary and `ebsym info`, never "outside any mapping".
#[test]
fn uprobes_page_frames_are_named_and_counted() {
    let f = crate::trace::fixture("cpu_split");
    let (hot_a, size) = function_address(&f.full, "_ZN5split5hot_aEml");
    let base = 0x5555_5555_4000;
    let exe = f.bin.to_str().unwrap();
    let loads = ebtrace_symbolize::elf::ElfFile::open(&f.bin)
        .unwrap()
        .info()
        .unwrap();
    let id = loads.build_id.clone().unwrap();
    let mut maps: Vec<Map<'_>> = loads
        .loads
        .iter()
        .map(|l| Map {
            path: exe,
            start: base + (l.vaddr & !0xfff),
            end: base + (l.vaddr + l.memsz).div_ceil(0x1000) * 0x1000,
            offset: l.offset & !0xfff,
            build_id: Some(&id),
        })
        .collect();
    maps.push(Map {
        path: "[uprobes]",
        start: UPROBES_AT,
        end: UPROBES_AT + 0x1000,
        offset: 0,
        build_id: None,
    });
    // hot_a's first byte, before any code inlined into it: as a leaf, and as a return
    // address (+ 1: the call is the byte before).
    assert!(size > 1);
    let (leaf, ret) = (base + hot_a, base + hot_a + 1);
    let stacks = vec![
        vec![UPROBES_AT + 0xd, ret],
        vec![leaf, UPROBES_AT, ret],
        vec![UPROBES_AT + 0x84, ret],
    ];
    let trace = f.dir.join("u.pb.zst");
    write(&trace, &maps, None, &stacks);
    let dbg = f.dbg.to_str().unwrap();
    let out = f.dir.join("u.sym.pb.zst");
    let stderr = String::from_utf8(
        run_ok(
            ebsym()
                .arg(&trace)
                .arg("-o")
                .arg(&out)
                .args(["--debug-dir", dbg]),
        )
        .stderr,
    )
    .unwrap();
    for want in [
        "ebsym: 2 frames in the kernel's uprobes page, shown as \"[uprobes] return \
         trampoline\" (a return probe was pending)",
        "ebsym: 1 frame in the kernel's uprobes page, shown as \"[uprobes] single-step \
         slot\" (a probed instruction was single-stepped)",
    ] {
        assert!(stderr.contains(want), "{want} not in {stderr}");
    }
    assert!(!stderr.contains("outside any mapping"), "{stderr}");
    assert!(!stderr.contains("without a build-id"), "{stderr}");
    let (report, _) = top(&out, &[]);
    let mut got = row_functions(&report);
    got.sort();
    let hot = "split::hot_a(unsigned long, long)".to_string();
    let tramp = "[uprobes] return trampoline".to_string();
    let mut want = vec![
        vec![tramp.clone(), hot.clone()],
        vec![hot.clone(), tramp, hot.clone()],
        vec!["[uprobes] single-step slot".to_string(), hot],
    ];
    want.sort();
    assert_eq!(got, want);
    assert!(
        report["losses"]["unresolved_frames"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{}",
        report["losses"]
    );
    let info = run_ok(ebsym().args(["info", "--json"]).arg(&trace));
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["uprobes_frames"], 3);
    assert!(info["vdso"].is_null());
}

/// A binary without debug info (stripped of DWARF: symbol table only; stripped of all:
/// `.dynsym` only) gets one line, not one per frame, naming its build-id and where
/// `--debug-dir` would look, and debuginfod; with its debug file given, none. The same
/// line when a report symbolizes a raw trace on the fly.
#[test]
fn one_hint_line_per_binary_without_debug_info() {
    let f = crate::trace::fixture("shop");
    let all = f.dir.join("shop-stripped");
    std::fs::copy(&f.bin, &all).unwrap();
    run_ok(
        std::process::Command::new("strip")
            .arg("--strip-all")
            .arg(&all),
    );
    for (bin, what) in [
        (&f.bin, "named from the symbol table only"),
        (&all, "unnamed"),
    ] {
        let info = ebtrace_symbolize::elf::ElfFile::open(bin)
            .unwrap()
            .info()
            .unwrap();
        let id = info.build_id.clone().unwrap();
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let base = 0x5555_5555_4000;
        let path = bin.to_str().unwrap();
        let maps: Vec<Map<'_>> = info
            .loads
            .iter()
            .map(|l| Map {
                path,
                start: base + (l.vaddr & !0xfff),
                end: base + (l.vaddr + l.memsz).div_ceil(0x1000) * 0x1000,
                offset: l.offset & !0xfff,
                build_id: Some(&id),
            })
            .collect();
        let addrs = sample_addresses(&f.full, 8);
        let stacks: Vec<Vec<u64>> = addrs
            .chunks(3)
            .map(|c| c.iter().map(|a| base + a).collect())
            .collect();
        assert!(stacks.len() > 20, "{} stacks", stacks.len());
        let trace = f.dir.join("h.pb.zst");
        write(&trace, &maps, None, &stacks);
        let name = bin.file_name().unwrap().to_str().unwrap();
        let hint = format!("ebsym: {name} (build-id {hex}): no debug info (");
        let lines = |stderr: &str| -> Vec<String> {
            stderr
                .lines()
                .filter(|l| l.starts_with(&hint))
                .map(str::to_string)
                .collect()
        };
        let out = f.dir.join("h.sym.pb.zst");
        let stderr =
            String::from_utf8(run_ok(ebsym().arg(&trace).arg("-o").arg(&out)).stderr).unwrap();
        let found = lines(&stderr);
        assert_eq!(found.len(), 1, "{stderr}");
        let l = &found[0];
        for want in [
            what,
            &format!(
                "give its debug file with --debug-dir DIR (as DIR/.build-id/{}/{}.debug, or DIR{path})",
                &hex[..2],
                &hex[2..]
            ),
            "or set DEBUGINFOD_URLS to a server that has it",
        ] {
            assert!(l.contains(want), "{want} not in {l}");
        }
        // On the fly, for a report: the same one line.
        let (_, stderr) = top(&trace, &[]);
        assert_eq!(lines(&stderr), found, "{stderr}");
        // With the debug file: nothing to say.
        let stderr = String::from_utf8(
            run_ok(
                ebsym()
                    .arg(&trace)
                    .arg("-o")
                    .arg(&out)
                    .args(["--debug-dir", f.dbg.to_str().unwrap()]),
            )
            .stderr,
        )
        .unwrap();
        assert!(lines(&stderr).is_empty(), "{stderr}");
        assert!(!stderr.contains("no debug info"), "{stderr}");
    }
}
