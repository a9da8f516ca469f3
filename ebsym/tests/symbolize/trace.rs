//! Whole traces symbolized end to end: synthetic traces written with `TraceWriter` that
//! map test binaries at PIE bases, run through `ebsym TRACE`, and read back.
use crate::common::*;
use ebtrace_format::{Tables, TraceReader};
use ebtrace_proto::v1::{
    self as pb, record::Kind, ModuleResolution, Record, SymbolizedAddress, UnresolvedReason,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) const BASE: u64 = 0x5555_5555_4000;

/// A binary mapped in the synthetic process.
pub(crate) struct Image {
    /// Recorded path.
    path: PathBuf,
    build_id: Vec<u8>,
    /// PT_LOADs of the real binary.
    loads: Vec<ebtrace_symbolize::elf::Load>,
    base: u64,
}

impl Image {
    pub(crate) fn new(bin: &Path, recorded: &Path, base: u64) -> Image {
        let f = ebtrace_symbolize::elf::ElfFile::open(bin).unwrap();
        let info = f.info().unwrap();
        Image {
            path: recorded.to_path_buf(),
            build_id: info.build_id.unwrap(),
            loads: info.loads,
            base,
        }
    }
    /// The runtime address of ELF virtual address `vaddr` (PIE: base + vaddr).
    fn ip(&self, vaddr: u64) -> u64 {
        self.base + vaddr
    }
}

/// Writes a trace with one process that maps `images` and has `stacks` (runtime ips).
pub(crate) fn write_trace(path: &Path, images: &[Image], stacks: &[Vec<u64>]) {
    let mut w = trace_writer(b"shop");
    for img in images {
        let p = w
            .intern_string(img.path.to_str().unwrap().as_bytes())
            .unwrap();
        let b = w.intern_build_id(&img.build_id).unwrap();
        for l in &img.loads {
            let page = |x: u64| x & !0xfff;
            w.write_record(&Record {
                kind: Some(Kind::Mapping(pb::Mapping {
                    generation: 1,
                    start: img.base + page(l.vaddr),
                    end: img.base + (l.vaddr + l.memsz).div_ceil(0x1000) * 0x1000,
                    file_offset: page(l.offset),
                    path: p,
                    build_id: b,
                    perms: 5,
                    source: pb::MappingSource::Snapshot as i32,
                    ..Default::default()
                })),
            })
            .unwrap();
        }
    }
    for s in stacks {
        w.intern_stack(1, s, &[], 0).unwrap();
    }
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// The symbolizer records of a trace, and its strings.
pub(crate) struct Symbolized {
    pub(crate) tables: Tables,
    pub(crate) modules: Vec<ModuleResolution>,
    pub(crate) addresses: BTreeMap<(u64, u64), SymbolizedAddress>,
    pub(crate) has_trailer: bool,
}

pub(crate) fn read_back(path: &Path) -> Symbolized {
    let mut r = TraceReader::open(path).unwrap();
    let mut s = Symbolized {
        tables: Tables::default(),
        modules: Vec::new(),
        addresses: BTreeMap::new(),
        has_trailer: false,
    };
    for rec in r.by_ref() {
        s.tables.observe(&rec);
        match rec.kind {
            Some(Kind::ModuleResolution(m)) => s.modules.push(m),
            Some(Kind::SymbolizedAddress(a)) => {
                s.addresses.insert((a.build_id, a.address), a);
            }
            Some(Kind::Trailer(_)) => s.has_trailer = true,
            _ => {}
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    s
}

pub(crate) fn symbolize(trace: &Path, out: &Path, args: &[&str]) -> String {
    let o = run_ok(ebsym().arg(trace).arg("-o").arg(out).args(args));
    String::from_utf8(o.stderr).unwrap()
}

/// The (function, file:line) chain binutils gives for `vaddr`, innermost first.
pub(crate) fn binutils_chain(bin: &Path, vaddr: u64) -> Vec<(String, String)> {
    let out = run_ok(
        Command::new("addr2line")
            .args(["-f", "-i", "-C", "-e"])
            .arg(bin)
            .arg(format!("{vaddr:#x}")),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .map(|c| {
            let loc = c[1].split(" (discriminator").next().unwrap();
            (c[0].to_string(), loc.to_string())
        })
        .collect()
}

pub(crate) fn function_address(bin: &Path, mangled: &str) -> (u64, u64) {
    functions(bin)
        .into_iter()
        .find(|(_, _, n)| n == mangled)
        .map(|(a, s, _)| (a, s))
        .unwrap_or_else(|| panic!("{mangled} not in {}", bin.display()))
}

/// The shop binary, stripped, with its debug file in a build-id tree under `dbg`.
pub(crate) struct Fixture {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) dir: PathBuf,
    pub(crate) full: PathBuf,
    pub(crate) bin: PathBuf,
    pub(crate) dbg: PathBuf,
}

pub(crate) fn fixture(program: &str) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let bin = build(program, &dir, program, &[]);
    let full = dir.join(format!("{program}.full"));
    std::fs::copy(&bin, &full).unwrap();
    let dbg = dir.join("dbg");
    let target = build_id_path(&dbg, &build_id(&bin));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    split_debug(&bin, &target);
    Fixture {
        _dir: tmp,
        dir,
        full,
        bin,
        dbg,
    }
}

#[test]
fn stacks_resolve_to_functions_lines_and_inlined_frames() {
    let f = fixture("shop");
    let img = Image::new(&f.bin, &f.bin, BASE);
    let (handle, handle_size) = function_address(
        &f.full,
        "_ZN4shop6Server14handle_requestEmRNS_11WorkerStatsE",
    );
    let (worker, worker_size) =
        function_address(&f.full, "_ZN4shop6Server11worker_loopElPNS_11WorkerStatsE");
    // A leaf address inside handle_request where binutils sees inlined frames.
    let leaf = (handle..handle + handle_size)
        .find(|&a| binutils_chain(&f.full, a).len() >= 2)
        .expect("handle_request has inlined code");
    // A return address inside worker_loop (its call is the byte before).
    let ret = worker + worker_size / 2;
    let lookup = [leaf, ret - 1];
    let trace = f.dir.join("t.pb.zst");
    write_trace(&trace, &[img], &[vec![BASE + leaf, BASE + ret]]);
    let out = f.dir.join("t.sym.pb.zst");
    let dbg = f.dbg.to_str().unwrap();
    let stderr = symbolize(&trace, &out, &["--debug-dir", dbg]);
    assert!(stderr.contains("2 resolved, 0 unresolved"), "{stderr}");
    let s = read_back(&out);
    assert!(s.has_trailer);
    assert_eq!(s.modules.len(), 1);
    assert_eq!(s.modules[0].status(), UnresolvedReason::None);
    assert_eq!(s.addresses.len(), 2);
    for vaddr in lookup {
        let a = &s.addresses[&(s.modules[0].build_id, vaddr)];
        assert_eq!(a.reason(), UnresolvedReason::None);
        let ours: Vec<(String, String)> = a
            .frames
            .iter()
            .map(|fr| {
                (
                    s.tables.string(fr.function).into_owned(),
                    format!("{}:{}", s.tables.string(fr.file), fr.line),
                )
            })
            .collect();
        assert_eq!(ours, binutils_chain(&f.full, vaddr), "at {vaddr:#x}");
        let n = a.frames.len();
        assert!(a.frames[..n - 1].iter().all(|fr| fr.inlined));
        assert!(!a.frames[n - 1].inlined);
    }
    assert!(
        s.addresses[&(1, leaf)].frames.len() >= 2,
        "the leaf has an inlined frame"
    );
    assert!(s
        .tables
        .string(s.addresses[&(1, ret - 1)].frames.last().unwrap().function)
        .starts_with("shop::Server::worker_loop"));
}

#[test]
fn debug_file_with_another_build_id_is_refused() {
    let f = fixture("shop");
    // Another build of the same program (another build-id) where the wanted one should be.
    let other = build(
        "shop",
        &f.dir,
        "shop-other",
        &["-DEBTRACE_OTHER_BUILD=1", "-gdwarf-4"],
    );
    assert_ne!(build_id(&other), build_id(&f.bin));
    let wrong_dbg = f.dir.join("wrongdbg");
    let target = build_id_path(&wrong_dbg, &build_id(&f.bin));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(&other, &target).unwrap();
    // The binary is not at its recorded path: only the wrong file is around.
    let img = Image::new(&f.bin, Path::new("/nonexistent/shop"), BASE);
    let (handle, _) = function_address(
        &f.full,
        "_ZN4shop6Server14handle_requestEmRNS_11WorkerStatsE",
    );
    let trace = f.dir.join("t.pb.zst");
    write_trace(&trace, &[img], &[vec![BASE + handle]]);
    let out = f.dir.join("t.sym.pb.zst");
    let stderr = symbolize(&trace, &out, &["--debug-dir", wrong_dbg.to_str().unwrap()]);
    assert!(stderr.contains("build-id mismatch"), "{stderr}");
    let s = read_back(&out);
    let m = &s.modules[0];
    assert_eq!(m.status(), UnresolvedReason::BuildIdMismatch);
    let searched: Vec<String> = m
        .searched
        .iter()
        .map(|&i| s.tables.string(i).into_owned())
        .collect();
    assert!(
        searched
            .iter()
            .any(|x| x.starts_with(target.to_str().unwrap()) && x.contains("build-id mismatch")),
        "{searched:?}"
    );
    assert!(
        s.addresses.values().all(|a| a.frames.is_empty()),
        "no wrong symbol"
    );
}

#[test]
fn binary_not_found_says_where_it_looked() {
    let f = fixture("forker");
    let img = Image::new(&f.bin, Path::new("/nonexistent/forker"), BASE);
    let trace = f.dir.join("t.pb.zst");
    let (child, _) = function_address(&f.full, "_Z10child_workv");
    write_trace(&trace, &[img], &[vec![BASE + child]]);
    let out = f.dir.join("t.sym.pb.zst");
    let empty = f.dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let stderr = symbolize(&trace, &out, &["--debug-dir", empty.to_str().unwrap()]);
    assert!(stderr.contains("no file with build-id"), "{stderr}");
    let s = read_back(&out);
    let m = &s.modules[0];
    assert_eq!(m.status(), UnresolvedReason::NoFile);
    let searched: Vec<String> = m
        .searched
        .iter()
        .map(|&i| s.tables.string(i).into_owned())
        .collect();
    for want in [
        build_id_path(&empty, &build_id(&f.bin))
            .display()
            .to_string(),
        "/nonexistent/forker: not found".to_string(),
        empty.join("nonexistent/forker").display().to_string(),
    ] {
        assert!(
            searched.iter().any(|x| x.contains(&want)),
            "{want} not in {searched:?}"
        );
    }
    assert!(s.tables.string(m.detail).contains("no file with build-id"));
}

#[test]
fn same_output_at_one_and_four_threads() {
    let shop = fixture("shop");
    let alloc = fixture("alloc_workload");
    let images = [
        Image::new(&shop.bin, &shop.bin, BASE),
        Image::new(&alloc.bin, &alloc.bin, 0x7f00_0000_0000),
    ];
    let mut stacks = Vec::new();
    for (img, full) in images.iter().zip([&shop.full, &alloc.full]) {
        let addrs = sample_addresses(full, 10);
        for w in addrs.chunks(3) {
            stacks.push(w.iter().map(|&a| img.ip(a)).collect::<Vec<u64>>());
        }
    }
    stacks.push(vec![0x1234]); // outside any mapping
    let trace = shop.dir.join("t.pb.zst");
    write_trace(&trace, &images, &stacks);
    let mut outputs = Vec::new();
    for threads in ["1", "4"] {
        let out = shop.dir.join(format!("t{threads}.sym.pb.zst"));
        run_ok(
            ebsym()
                .arg(&trace)
                .arg("-o")
                .arg(&out)
                .args(["--debug-dir", shop.dbg.to_str().unwrap()])
                .args(["--debug-dir", alloc.dbg.to_str().unwrap()])
                .env("RAYON_NUM_THREADS", threads)
                .env("SOURCE_DATE_EPOCH", "1700000000"),
        );
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    let s = read_back(&shop.dir.join("t1.sym.pb.zst"));
    assert_eq!(s.modules.len(), 2);
    assert!(s.addresses.len() > 100);
}

#[test]
fn default_output_name_and_private_mode() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture("forker");
    let img = Image::new(&f.bin, &f.bin, BASE);
    let (child, _) = function_address(&f.full, "_Z10child_workv");
    let trace = f.dir.join("run.pb.zst");
    write_trace(&trace, &[img], &[vec![BASE + child]]);
    run_ok(
        ebsym()
            .arg(&trace)
            .args(["--debug-dir", f.dbg.to_str().unwrap()]),
    );
    let out = f.dir.join("run.sym.pb.zst");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let s = read_back(&out);
    let a = s.addresses.values().next().unwrap();
    assert_eq!(
        s.tables.string(a.frames.last().unwrap().function),
        "child_work()"
    );
}

/// With stderr on a terminal, ebsym draws its progress bar there (at once with
/// `EBSYM_PROGRESS_DELAY_MS=0`), and stdout and the symbolized trace stay byte for byte
/// what they are without a terminal.
#[test]
fn progress_bar_on_a_terminal_changes_no_output() {
    let f = fixture("shop");
    let img = Image::new(&f.bin, &f.bin, BASE);
    let (handle, size) = function_address(
        &f.full,
        "_ZN4shop6Server14handle_requestEmRNS_11WorkerStatsE",
    );
    let stacks: Vec<Vec<u64>> = (0..size)
        .step_by(4)
        .map(|o| vec![BASE + handle + o])
        .collect();
    let trace = f.dir.join("t.pb.zst");
    write_trace(&trace, &[img], &stacks);
    let ebsym_exe = env!("CARGO_BIN_EXE_ebsym");
    let run = |name: &str, terminal: bool| -> (Vec<u8>, Vec<u8>, String) {
        let out = f.dir.join(format!("{name}.sym.pb.zst"));
        let stdout = f.dir.join(format!("{name}.stdout"));
        let command = format!(
            "'{ebsym_exe}' '{}' -o '{}' --debug-dir '{}' > '{}'",
            trace.display(),
            out.display(),
            f.dbg.display(),
            stdout.display()
        );
        let mut cmd = if terminal {
            // `script` runs the command on a pseudo-terminal and copies what it prints
            // there (stderr here) to its stdout.
            let mut c = Command::new("script");
            c.args(["-q", "-e", "-c", &command, "/dev/null"]);
            c
        } else {
            let mut c = Command::new("sh");
            c.args(["-c", &command]);
            c
        };
        cmd.env("SOURCE_DATE_EPOCH", "1")
            .env("EBSYM_PROGRESS_DELAY_MS", "0")
            .env_remove("DEBUGINFOD_URLS");
        let o = run_ok(&mut cmd);
        let seen =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (
            std::fs::read(&out).unwrap(),
            std::fs::read(&stdout).unwrap(),
            seen,
        )
    };
    let (trace_plain, stdout_plain, stderr_plain) = run("plain", false);
    let (trace_tty, stdout_tty, terminal) = run("tty", true);
    assert!(
        terminal.contains("resolving"),
        "no progress bar:\n{terminal}"
    );
    assert!(!stderr_plain.contains("resolving"), "{stderr_plain}");
    assert_eq!(stdout_tty, stdout_plain);
    assert_eq!(trace_tty, trace_plain);
}
