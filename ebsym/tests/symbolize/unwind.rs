//! The CFI unwinder on real stacks: `testdata/cpp/selfstack.cpp` copies its own registers
//! and the top of its stack deep in call chains through libc and libstdc++ (no frame
//! pointers there) and prints glibc's `backtrace()` at the same point; the unwinder,
//! given the copy, the process maps and the ELF files on disk, must find the same return
//! addresses. Also: copies cut short, garbage, and modules without CFI.
use crate::common::*;
use ebtrace_format::proto::UserStackCopy;
use ebtrace_symbolize::unwind::{unwind, Mapped, Stop, UnwindInfo, Unwound, MAX_FRAMES};
use ebtrace_testdata::Variant;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of /proc/PID/maps.
#[derive(Debug, Clone)]
pub(crate) struct MapLine {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub path: String,
}

pub(crate) fn parse_maps(text: &str) -> Vec<MapLine> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let (_dev, _inode) = (f.next()?, f.next()?);
            let path = f.collect::<Vec<_>>().join(" ");
            let (s, e) = range.split_once('-')?;
            Some(MapLine {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms: perms.to_string(),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// What one `capture(NAME)` of selfstack took.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    pub name: String,
    pub copy: UserStackCopy,
    pub maps: Vec<MapLine>,
    /// glibc's backtrace(): [0] is inside capture(), [1..] the callers.
    pub backtrace: Vec<u64>,
}

fn hex(v: &serde_json::Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Runs `exe --out DIR` and reads its captures.
pub(crate) fn run_selfstack(exe: &Path, extra: &[&str]) -> Vec<Capture> {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(Command::new(exe).arg("--out").arg(dir.path()).args(extra));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let json = stdout
        .lines()
        .find_map(|l| l.strip_prefix("EXPECT "))
        .unwrap_or_else(|| panic!("no EXPECT in {stdout}"));
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let data = std::fs::read(c["stack"].as_str().unwrap()).unwrap();
            assert_eq!(data.len() as u64, c["size"].as_u64().unwrap());
            let maps = std::fs::read_to_string(c["maps"].as_str().unwrap()).unwrap();
            // DWARF numbering, increasing: rbp 6, rsp 7, rip 16.
            let copy = UserStackCopy {
                regs: vec![hex(&c["rbp"]), hex(&c["rsp"]), hex(&c["rip"])],
                reg_mask: 1 << 6 | 1 << 7 | 1 << 16,
                sp: hex(&c["rsp"]),
                data,
            };
            Capture {
                name: c["name"].as_str().unwrap().to_string(),
                copy,
                maps: parse_maps(&maps),
                backtrace: c["backtrace"].as_array().unwrap().iter().map(hex).collect(),
            }
        })
        .collect()
}

/// The unwind tables of every file in the maps, read from disk once.
#[derive(Default)]
pub(crate) struct Files {
    infos: HashMap<String, Option<UnwindInfo>>,
    /// Paths whose tables are withheld (as if the file had none).
    pub hidden: Vec<String>,
}

impl Files {
    fn load(&mut self, maps: &[MapLine]) {
        for m in maps {
            if m.path.starts_with('/') && !self.infos.contains_key(&m.path) {
                let info = std::fs::read(&m.path)
                    .ok()
                    .and_then(|b| UnwindInfo::from_elf(&b).ok());
                self.infos.insert(m.path.clone(), info);
            }
        }
    }

    /// Unwinds `c` with its maps; modules are numbered by their index in the maps.
    pub(crate) fn unwind(&mut self, c: &Capture, copy: &UserStackCopy, max: usize) -> Unwound {
        self.load(&c.maps);
        let find = |addr: u64| {
            let (i, m) = c
                .maps
                .iter()
                .enumerate()
                .find(|(_, m)| m.start <= addr && addr < m.end && m.perms.contains('x'))?;
            let info = if self.hidden.contains(&m.path) {
                None
            } else {
                self.infos.get(&m.path).and_then(Option::as_ref)
            };
            Some(Mapped {
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                info,
                module: i as u64,
            })
        };
        unwind(copy, find, max)
    }
}

/// The mapping of `addr` in `maps`.
fn map_of(maps: &[MapLine], addr: u64) -> Option<&MapLine> {
    maps.iter().find(|m| m.start <= addr && addr < m.end)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A test binary: its path, `nm` symbols and tables.
struct Exe {
    path: PathBuf,
    syms: Vec<(u64, u64, String)>,
    info: UnwindInfo,
}

impl Exe {
    fn new(path: PathBuf) -> Exe {
        let info = UnwindInfo::from_elf(&std::fs::read(&path).unwrap()).unwrap();
        Exe {
            syms: functions(&path),
            path,
            info,
        }
    }
}

/// The name of the function of `exe` holding runtime address `addr` (a return address
/// looks up addr - 1), from `nm`; None outside `exe`.
fn exe_function(exe: &Exe, maps: &[MapLine], addr: u64) -> Option<String> {
    let (syms, info) = (&exe.syms, &exe.info);
    let m = map_of(maps, addr)?;
    if Path::new(&m.path) != exe.path {
        return None;
    }
    let vaddr = info.offset_to_vaddr(addr - m.start + m.offset)?;
    syms.iter()
        .find(|(a, s, _)| *a <= vaddr && vaddr < a + s)
        .map(|(_, _, n)| n.clone())
}

/// Where each frame is, for messages: `file+offset` per frame.
fn describe(maps: &[MapLine], ips: &[u64]) -> String {
    ips.iter()
        .map(|&ip| match map_of(maps, ip) {
            Some(m) => format!("{}+{:#x}", file_name(&m.path), ip - m.start + m.offset),
            None => format!("{ip:#x}"),
        })
        .collect::<Vec<_>>()
        .join(" ← ")
}

fn selfstack(variant: Variant) -> PathBuf {
    ebtrace_testdata::build("selfstack", variant).unwrap()
}

/// The unwound return addresses are glibc backtrace()'s, in both builds, through libc's
/// qsort and pthread_once, a signal frame, libstdc++'s thread start, down to `_start`
/// and `clone3` (the outermost frames).
#[test]
fn unwinds_like_glibc_backtrace_through_libc_and_libstdcxx() {
    // Per variant and capture: each frame's function in the exe, or the library's name.
    let mut chains: Vec<Vec<Vec<String>>> = Vec::new();
    for variant in Variant::ALL {
        chains.push(Vec::new());
        let exe = Exe::new(selfstack(variant));
        let captures = run_selfstack(&exe.path, &[]);
        let names: Vec<&str> = captures.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["qsort", "call_once", "signal", "thread", "fault"]);
        let mut files = Files::default();
        for c in &captures {
            let u = files.unwind(c, &c.copy, MAX_FRAMES);
            let what = format!(
                "{variant:?} {}:\n unwound   {}\n backtrace {}\n stop {:?}",
                c.name,
                describe(&c.maps, &u.ips),
                describe(&c.maps, &c.backtrace),
                u.stop
            );
            assert_eq!(u.stop, None, "{what}");
            assert_eq!(u.fp_steps, 0, "{what}");
            assert_eq!(u.ips[0], c.copy.regs[2], "{what}");
            assert!(u.ips.len() >= 6, "{what}");
            assert_eq!(u.ips[1..], c.backtrace[1..], "{what}");
            // The frames cross the shared libraries, whose code has no frame pointers.
            let in_lib = |lib: &str| {
                u.ips.iter().any(|&ip| {
                    map_of(&c.maps, ip).is_some_and(|m| file_name(&m.path).starts_with(lib))
                })
            };
            match c.name.as_str() {
                "qsort" | "call_once" | "signal" | "fault" => {
                    assert!(in_lib("libc.so"), "{what}")
                }
                "thread" => assert!(in_lib("libc.so") && in_lib("libstdc++.so"), "{what}"),
                _ => unreachable!(),
            }
            let fns: Vec<Option<String>> = u
                .ips
                .iter()
                .enumerate()
                .map(|(i, &ip)| exe_function(&exe, &c.maps, ip - u64::from(i > 0)))
                .collect();
            chains.last_mut().unwrap().push(
                fns.iter()
                    .zip(&u.ips)
                    .map(|(f, &ip)| match f {
                        Some(f) => f.clone(),
                        None => file_name(&map_of(&c.maps, ip).unwrap().path).to_string(),
                    })
                    .collect(),
            );
            let has = |f: &str| fns.iter().flatten().any(|n| n.contains(f));
            assert!(fns[0].as_deref().unwrap().contains("capture"), "{what}");
            if c.name == "thread" {
                assert!(has("thread_main") && has("deep"), "{what}");
                continue;
            }
            // Main thread: … main ← __libc_start_call_main (libc) ← … ← _start.
            let main = fns
                .iter()
                .position(|n| n.as_deref() == Some("main"))
                .unwrap_or_else(|| panic!("no main: {what}"));
            assert!(has("run_scenarios"), "{what}");
            let after = map_of(&c.maps, u.ips[main + 1]).unwrap();
            assert!(file_name(&after.path).starts_with("libc.so"), "{what}");
            assert_eq!(fns.last().unwrap().as_deref(), Some("_start"), "{what}");
            if c.name == "qsort" {
                for f in ["compare", "via_qsort", "level_lambda", "via_function"] {
                    assert!(has(f), "{f}: {what}");
                }
            }
            if c.name == "fault" {
                // After the signal frame: the faulting instruction itself, the first of
                // its function (its `pc - 1` is in another function).
                let start = exe
                    .syms
                    .iter()
                    .find(|s| s.2 == "selfstack_fault_first")
                    .unwrap()
                    .0;
                let vaddr = |ip: u64| {
                    let m = map_of(&c.maps, ip)?;
                    exe.info.offset_to_vaddr(ip - m.start + m.offset)
                };
                let i = u
                    .ips
                    .iter()
                    .position(|&ip| vaddr(ip) == Some(start))
                    .unwrap_or_else(|| panic!("{what}"));
                assert!(
                    fns[i + 1].as_deref().unwrap().contains("via_fault"),
                    "{what}"
                );
            }
        }
    }
    // With frame pointers or without, the same chains of functions.
    assert_eq!(chains[0], chains[1]);
}

/// A copy shorter than the live stack gives the frames found so far and says so.
#[test]
fn copy_cut_short_stops_with_copy_too_small() {
    let exe = selfstack(Variant::NoFramePointer);
    let captures = run_selfstack(&exe, &[]);
    let mut files = Files::default();
    for c in &captures {
        let full = files.unwind(c, &c.copy, MAX_FRAMES);
        assert_eq!(full.stop, None, "{}", c.name);
        let mut saw_partial = false;
        for len in [
            0,
            8,
            64,
            200,
            512,
            1024,
            2048,
            c.copy.data.len() / 2,
            c.copy.data.len() - 8,
        ] {
            let mut cut = c.copy.clone();
            cut.data.truncate(len);
            let u = files.unwind(c, &cut, MAX_FRAMES);
            assert_eq!(
                u.ips[..],
                full.ips[..u.ips.len()],
                "{} cut at {len}",
                c.name
            );
            if u.ips == full.ips {
                // Everything the walk reads was in the first `len` bytes.
                assert_eq!(u.stop, None, "{} cut at {len}", c.name);
                continue;
            }
            match u.stop {
                Some(Stop::CopyTooSmall { address }) => {
                    assert!(address >= cut.sp + len as u64, "{} cut at {len}", c.name)
                }
                other => panic!("{} cut at {len}: {other:?}", c.name),
            }
            saw_partial |= u.ips.len() > 2;
        }
        assert!(saw_partial, "{}", c.name);
    }
    // Frame limits.
    let c = &captures[0];
    let u = files.unwind(c, &c.copy, 3);
    assert_eq!(u.ips.len(), 3);
    assert_eq!(u.stop, Some(Stop::MaxFrames));
}

/// A tiny deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Random stack bytes and registers (fully random, or the real ones with the bytes
/// damaged) never panic, never loop past the limit, and end with a reason or a frame
/// whose rule says it is the outermost.
#[test]
fn garbage_copies_and_registers_never_panic() {
    let exe = selfstack(Variant::NoFramePointer);
    let captures = run_selfstack(&exe, &[]);
    let mut files = Files::default();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut stops: HashMap<&'static str, u64> = HashMap::new();
    for case in 0..3000 {
        let c = &captures[case % captures.len()];
        let mut copy = c.copy.clone();
        match case % 3 {
            // Random everything, rip somewhere in the mapped code.
            0 => {
                let code: Vec<&MapLine> = c.maps.iter().filter(|m| m.perms.contains('x')).collect();
                let m = code[rng.below(code.len() as u64) as usize];
                let len = rng.below(4096) as usize;
                copy.data = (0..len).map(|_| rng.next() as u8).collect();
                copy.sp = rng.next();
                copy.regs = vec![
                    rng.next(),
                    copy.sp.wrapping_add(rng.below(64)),
                    m.start + rng.below(m.end - m.start),
                ];
            }
            // The real copy with bytes overwritten.
            1 => {
                for _ in 0..1 + rng.below(64) {
                    let i = rng.below(copy.data.len() as u64) as usize;
                    copy.data[i] = rng.next() as u8;
                }
            }
            // Real bytes, random registers and mask, regs shorter than the mask says.
            _ => {
                copy.reg_mask = rng.next();
                copy.regs = (0..rng.below(20)).map(|_| rng.next()).collect();
                if rng.below(2) == 0 {
                    copy.sp = rng.next();
                }
            }
        }
        let u = files.unwind(c, &copy, MAX_FRAMES);
        assert!(u.ips.len() <= MAX_FRAMES);
        *stops
            .entry(u.stop.map_or("complete", |s| s.reason()))
            .or_default() += 1;
    }
    // The cases exercise more than one way of stopping.
    assert!(stops.len() >= 3, "{stops:?}");
}

/// Damaged unwind tables do not panic either (they give "bad CFI", "no CFI" or odd
/// frames).
#[test]
fn damaged_tables_never_panic() {
    let exe = selfstack(Variant::NoFramePointer);
    let captures = run_selfstack(&exe, &[]);
    let bytes = std::fs::read(&exe).unwrap();
    let good = UnwindInfo::from_elf(&bytes).unwrap();
    let c = &captures[0];
    let m = c
        .maps
        .iter()
        .find(|m| Path::new(&m.path) == exe && m.perms.contains('x'))
        .unwrap();
    // The tables as a trace carries them, damaged.
    let obj = object::File::parse(&*bytes).unwrap();
    use object::{Object, ObjectSection};
    let sec = |n: &str| {
        let s = obj.section_by_name(n).unwrap();
        (s.data().unwrap().to_vec(), s.address())
    };
    let (eh, eh_addr) = sec(".eh_frame");
    let (hdr, hdr_addr) = sec(".eh_frame_hdr");
    let load_segments: Vec<u64> = good
        .segments()
        .iter()
        .flat_map(|s| [s.vaddr, s.offset, s.filesz])
        .collect();
    let mut rng = Rng(42);
    for case in 0..400 {
        let mut t = ebtrace_format::proto::UnwindTables {
            build_id: 1,
            eh_frame: eh.clone(),
            eh_frame_address: eh_addr,
            eh_frame_hdr: hdr.clone(),
            eh_frame_hdr_address: hdr_addr,
            load_segments: load_segments.clone(),
        };
        let target = if case % 2 == 0 {
            &mut t.eh_frame
        } else {
            &mut t.eh_frame_hdr
        };
        for _ in 0..1 + rng.below(16) {
            let i = rng.below(target.len() as u64) as usize;
            target[i] = rng.next() as u8;
        }
        if case % 5 == 0 {
            t.eh_frame_hdr.clear();
        }
        let Ok(info) = UnwindInfo::from_tables(&t) else {
            continue;
        };
        let find = |addr: u64| {
            (m.start <= addr && addr < m.end).then_some(Mapped {
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                info: Some(&info),
                module: 0,
            })
        };
        let u = unwind(&c.copy, find, MAX_FRAMES);
        assert!(!u.ips.is_empty());
    }
}

/// A module without CFI for an address: the frame-pointer chain is followed where the
/// code keeps one (and counted), and where it does not, the walk stops and names the
/// module. Tested on the frame-pointer build with its tables withheld, and on builds
/// without unwind tables (`-fno-asynchronous-unwind-tables`: only the C runtime's
/// objects keep a few FDEs).
#[test]
fn module_without_cfi_falls_back_to_frame_pointers() {
    // The fp build, its tables withheld: every one of its frames comes by the rbp
    // chain, libc's by CFI; the same frames as with all tables, until `_start` (rbp 0).
    let exe = selfstack(Variant::FramePointer);
    let captures = run_selfstack(&exe, &[]);
    let mut files = Files::default();
    for c in &captures {
        let full = files.unwind(c, &c.copy, MAX_FRAMES);
        files.hidden = vec![exe.to_string_lossy().into_owned()];
        let u = files.unwind(c, &c.copy, MAX_FRAMES);
        files.hidden.clear();
        let what = format!(
            "{}:\n with fp  {}\n with cfi {}\n {:?}",
            c.name,
            describe(&c.maps, &u.ips),
            describe(&c.maps, &full.ips),
            u.stop
        );
        assert!(u.fp_steps >= 3, "{what}");
        if c.name == "thread" {
            assert_eq!(u.ips, full.ips, "{what}");
            assert_eq!(u.stop, None, "{what}");
        } else if c.name == "fault" {
            // Interrupted at the first instruction of a function: the rbp chain skips its
            // caller (via_fault), as every frame-pointer walk does at a function entry.
            let mut rest = full.ips.iter();
            assert!(u.ips.iter().all(|ip| rest.any(|f| f == ip)), "{what}");
            assert_eq!(u.ips.len() + 1, full.ips.len(), "{what}");
        } else {
            // `_start` itself has no frame pointer (it zeroes rbp): named, not guessed.
            assert_eq!(u.ips, full.ips, "{what}");
            assert!(matches!(u.stop, Some(Stop::NoCfi { .. })), "{what}");
        }
    }

    // Built without unwind tables (`-fno-asynchronous-unwind-tables`): gcc writes
    // `.debug_frame` instead (for -g), and the walk takes it. With that section removed
    // too, the exe's own frames come by frame pointers.
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "-fno-omit-frame-pointer",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
        "-fno-exceptions",
    ];
    let with_debug_frame = build("selfstack", dir.path(), "selfstack-debugframe", &flags);
    let without = dir.path().join("selfstack-nocfi");
    run_ok(
        Command::new("objcopy")
            .arg("--remove-section=.debug_frame")
            .arg(&with_debug_frame)
            .arg(&without),
    );
    for (bin, debug_frame) in [(with_debug_frame, true), (without, false)] {
        let bin = Exe::new(bin);
        assert_eq!(bin.info.has_debug_frame(), debug_frame);
        let captures = run_selfstack(&bin.path, &[]);
        let mut files = Files::default();
        let c = captures.iter().find(|c| c.name == "qsort").unwrap();
        let u = files.unwind(c, &c.copy, MAX_FRAMES);
        let fns: Vec<String> = u
            .ips
            .iter()
            .enumerate()
            .filter_map(|(i, &ip)| exe_function(&bin, &c.maps, ip - u64::from(i > 0)))
            .collect();
        let what = format!(
            "{}\n{fns:?}\n{:?} fp {}\n{:?}",
            describe(&c.maps, &u.ips),
            u.stop,
            u.fp_steps,
            bin.info
        );
        let want = [
            "capture",
            "compare",
            "via_qsort",
            "level_lambda",
            "via_function",
            "run_scenarios",
            "main",
        ];
        let mut at = 0;
        for f in fns.iter() {
            if at < want.len() && f.contains(want[at]) {
                at += 1;
            }
        }
        assert_eq!(at, want.len(), "{what}");
        if debug_frame {
            // The C runtime's `_start` keeps its .eh_frame FDE: a complete walk.
            assert_eq!(u.fp_steps, 0, "{what}");
            assert_eq!(u.stop, None, "{what}");
        } else {
            assert!(u.fp_steps >= 5, "{what}");
            // The libc frames between compare and via_qsort came by CFI.
            assert!(u.ips.len() as u32 > u.fp_steps + 2, "{what}");
        }
    }
}

/// Unwinding speed on the selfstack copies (printed; run with `--release --nocapture`).
#[test]
fn unwinding_speed() {
    let exe = selfstack(Variant::NoFramePointer);
    let captures = run_selfstack(&exe, &[]);
    let mut files = Files::default();
    // Tables parsed and rows cached by a first pass.
    let t = std::time::Instant::now();
    let cold: usize = captures
        .iter()
        .map(|c| files.unwind(c, &c.copy, MAX_FRAMES).ips.len())
        .sum();
    let cold_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let mut frames = 0;
    let mut rounds = 0;
    while t.elapsed().as_secs_f64() < 0.5 {
        for c in &captures {
            frames += files.unwind(c, &c.copy, MAX_FRAMES).ips.len();
        }
        rounds += 1;
    }
    let s = t.elapsed().as_secs_f64();
    // Every row looked up again: FDE search, CFI program, each frame.
    let t = std::time::Instant::now();
    let mut uncached = 0;
    while t.elapsed().as_secs_f64() < 0.5 {
        for c in &captures {
            for info in files.infos.values().flatten() {
                info.clear_cache();
            }
            uncached += files.unwind(c, &c.copy, MAX_FRAMES).ips.len();
        }
    }
    let uncached_s = t.elapsed().as_secs_f64();
    eprintln!(
        "unwind: first pass {cold} frames in {:.1} ms (tables read and parsed); \
         then {:.0} frames/s with cached rows ({rounds} rounds of {} stacks), \
         {:.0} frames/s without",
        cold_s * 1e3,
        frames as f64 / s,
        captures.len(),
        uncached as f64 / uncached_s
    );
    assert!(frames > 0 && uncached > 0);
}

/// The bytes and address of section `name` of an ELF file ("", 0 when missing).
fn section(bytes: &[u8], name: &str) -> (Vec<u8>, u64) {
    use object::{Object, ObjectSection};
    let obj = object::File::parse(bytes).unwrap();
    obj.section_by_name(name)
        .map(|s| (s.data().unwrap().to_vec(), s.address()))
        .unwrap_or_default()
}

/// A trace as `ebrec --stack-mode dwarf` writes it, from selfstack's captures: the maps
/// with build-ids, `UnwindTables` for the executable only (libc and libstdc++ are found on
/// disk at their recorded paths), one stack per capture whose frame-pointer fallback is
/// just `rip`, plus the "qsort" copy cut to 256 bytes; one allocation per stack (size
/// 1000 + index).
fn write_dwarf_trace(path: &Path, exe: &Path, captures: &[Capture]) {
    use ebtrace_format::events::AllocEvent;
    use ebtrace_format::proto::{self as pb, record::Kind, Record};
    let mut w = trace_writer(b"selfstack");
    // The maps of the last capture hold every mapping (the thread's stack included).
    let maps = &captures.last().unwrap().maps;
    let mut build_ids: HashMap<String, u64> = HashMap::new();
    for m in maps {
        let (path, build_id) = if m.path.starts_with('/') {
            let id = match build_ids.get(&m.path) {
                Some(&id) => id,
                None => {
                    let bytes = std::fs::read(&m.path).unwrap();
                    let obj = object::File::parse(&*bytes).unwrap();
                    use object::Object;
                    let raw = obj.build_id().unwrap().expect("a build-id").to_vec();
                    let id = w.intern_build_id(&raw).unwrap();
                    if Path::new(&m.path) == exe {
                        let (eh_frame, eh_frame_address) = section(&bytes, ".eh_frame");
                        let (eh_frame_hdr, eh_frame_hdr_address) = section(&bytes, ".eh_frame_hdr");
                        let info = UnwindInfo::from_elf(&bytes).unwrap();
                        w.write_record(&Record {
                            kind: Some(Kind::UnwindTables(pb::UnwindTables {
                                build_id: id,
                                eh_frame,
                                eh_frame_address,
                                eh_frame_hdr,
                                eh_frame_hdr_address,
                                load_segments: info
                                    .segments()
                                    .iter()
                                    .flat_map(|s| [s.vaddr, s.offset, s.filesz])
                                    .collect(),
                            })),
                        })
                        .unwrap();
                    }
                    build_ids.insert(m.path.clone(), id);
                    id
                }
            };
            (w.intern_string(m.path.as_bytes()).unwrap(), id)
        } else {
            (w.intern_string(m.path.as_bytes()).unwrap(), 0)
        };
        let perms = m.perms.bytes().zip([1, 2, 4]).fold(
            0,
            |p, (c, bit)| {
                if c != b'-' {
                    p | bit
                } else {
                    p
                }
            },
        );
        w.write_record(&Record {
            kind: Some(Kind::Mapping(pb::Mapping {
                generation: 1,
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                path,
                build_id,
                perms,
                source: pb::MappingSource::Snapshot as i32,
                ..Default::default()
            })),
        })
        .unwrap();
    }
    let mut copies: Vec<UserStackCopy> = captures.iter().map(|c| c.copy.clone()).collect();
    let mut cut = captures[0].copy.clone();
    cut.data.truncate(256);
    copies.push(cut);
    for (i, copy) in copies.into_iter().enumerate() {
        let stack = w
            .write_stack_copy(pb::Stack {
                generation: 1,
                user_ips: vec![copy.regs[2]],
                copy: Some(copy),
                ..Default::default()
            })
            .unwrap();
        w.alloc(&AllocEvent {
            time_ns: 1000 + i as u64,
            generation: 1,
            tid: 42,
            stack,
            size: 1000 + i as u64,
            address: 0x1000 * (i as u64 + 1),
            kind: pb::AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })
        .unwrap();
    }
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// `ebsym TRACE` unwinds every stack copy (tables from the trace or from the files on
/// disk), appends one `UnwoundStack` per stack and symbolizes the unwound frames; the
/// reports, on the symbolized trace and on the raw one alike, show the whole stacks and
/// count the one cut short.
#[test]
fn trace_stack_copies_are_unwound_symbolized_and_reported() {
    use ebtrace_format::proto::record::Kind;
    let exe = selfstack(Variant::NoFramePointer);
    let captures = run_selfstack(&exe, &[]);
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("t.pb.zst");
    let sym = dir.path().join("t.sym.pb.zst");
    write_dwarf_trace(&raw, &exe, &captures);
    let report = ebtrace_symbolize::trace::symbolize_trace(
        &raw,
        &sym,
        &ebtrace_symbolize::Options::default(),
    )
    .unwrap();
    let u = &report.unwind;
    assert_eq!((u.stacks, u.complete, u.fp_frames), (6, 5, 0), "{u:?}");
    assert_eq!(u.stops.len(), 1, "{u:?}");
    assert_eq!(u.stops["copy too small"], 1, "{u:?}");
    // The executable's tables from the trace; libc's, libstdc++'s, … from the files.
    assert_eq!(u.tables_in_trace, 1, "{u:?}");
    assert!(u.tables_from_files >= 3 && u.no_tables.is_empty(), "{u:?}");
    eprintln!("{}", u.summary_line());

    let mut r = ebtrace_format::TraceReader::open(&sym).unwrap();
    let mut tables = ebtrace_format::Tables::default();
    let mut unwound = Vec::new();
    for rec in r.by_ref() {
        tables.observe(&rec);
        if let Some(Kind::UnwoundStack(u)) = rec.kind {
            unwound.push(u);
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    assert_eq!(unwound.len(), captures.len() + 1);
    unwound.sort_by_key(|u| u.stack);
    for (u, c) in unwound.iter().zip(&captures) {
        let mut want = vec![c.copy.regs[2]];
        want.extend(&c.backtrace[1..]);
        assert_eq!(u.user_ips, want, "{}", c.name);
        assert_eq!(u.stop_reason, 0, "{}", c.name);
    }
    let cut = unwound.last().unwrap();
    assert_eq!(tables.string(cut.stop_reason), "copy too small");
    assert!(cut.user_ips.len() >= 2 && cut.user_ips.len() < unwound[0].user_ips.len());

    // Folded stacks: root first, `;`-separated, value last; the same on the raw trace
    // (symbolized on the fly, which also says, once per binary, how to name more of its
    // frames: on Debian, libstdc++'s frame that its .dynsym does not cover).
    let folded = |trace: &Path| -> (String, String, Vec<String>) {
        let o = run_ok(
            ebsym()
                .args(["folded", "--kind", "alloc", "--no-debuginfod"])
                .arg(trace),
        );
        let stderr = String::from_utf8(o.stderr).unwrap();
        let (hints, rest): (Vec<&str>, Vec<&str>) = stderr
            .split_inclusive('\n')
            .partition(|l| l.starts_with("ebsym: ") && l.contains(" (build-id "));
        (
            String::from_utf8(o.stdout).unwrap(),
            rest.concat(),
            hints.iter().map(|h| h.trim_end().to_string()).collect(),
        )
    };
    let (lines, losses, none) = folded(&sym);
    assert_eq!(none, Vec::<String>::new());
    let (raw_lines, raw_losses, hints) = folded(&raw);
    assert_eq!((raw_lines, raw_losses), (lines.clone(), losses.clone()));
    // (One per binary: this host's libstdc++ and libc, if their debug files are missing.)
    let mut binaries: Vec<&str> = hints
        .iter()
        .map(|h| h.split(" (").next().unwrap())
        .collect();
    binaries.sort_unstable();
    binaries.dedup();
    assert_eq!(binaries.len(), hints.len(), "{hints:?}");
    let qsort = lines
        .lines()
        .find(|l| l.ends_with(" 1000"))
        .unwrap_or_else(|| panic!("{lines}"));
    let frames: Vec<&str> = qsort.rsplit_once(' ').unwrap().0.split(';').collect();
    let pos = |f: &str| {
        frames
            .iter()
            .position(|x| x.starts_with(f))
            .unwrap_or_else(|| panic!("{f} not in {qsort}"))
    };
    assert!(pos("main") < pos("selfstack::run_scenarios()"), "{qsort}");
    assert!(pos("selfstack::via_function(int)") < pos("selfstack::level_lambda(int)"));
    assert!(
        pos("selfstack::via_qsort(int)") < pos("selfstack::compare("),
        "{qsort}"
    );
    // Between via_qsort and compare: libc's frames (no frame pointers there).
    assert!(
        pos("selfstack::compare(") - pos("selfstack::via_qsort(int)") >= 3,
        "{qsort}"
    );
    assert!(
        frames.last().unwrap().starts_with("selfstack::capture("),
        "{qsort}"
    );
    // The fault: the instruction the signal interrupted is an exact address (the record
    // says which frame), so it is named after its own function, not the one before it.
    let fault_idx = captures.iter().position(|c| c.name == "fault").unwrap();
    let fu = &unwound[fault_idx];
    assert!(
        !fu.exact_frames.is_empty(),
        "no exact frame after the signal frame"
    );
    let fault = lines
        .lines()
        .find(|l| l.contains("selfstack_fault_first"))
        .unwrap_or_else(|| panic!("the faulting function is not named: {lines}"));
    assert!(!fault.contains("selfstack_before"), "{fault}");
    let thread = lines.lines().find(|l| l.ends_with(" 1003")).unwrap();
    assert!(thread.contains("selfstack::thread_main()"), "{thread}");
    // libstdc++'s thread start (a local symbol, not in its .dynsym), then libc's.
    assert!(
        thread.starts_with("clone3;start_thread;libstdc++.so"),
        "{thread}"
    );
    assert!(
        losses.contains("stacks cut short: copy too small (1)"),
        "{losses}"
    );

    // The same output at 1 and 4 threads.
    let outputs: Vec<Vec<u8>> = ["1", "4"]
        .iter()
        .map(|threads| {
            let out = dir.path().join(format!("t{threads}.sym.pb.zst"));
            run_ok(
                ebsym()
                    .arg(&raw)
                    .arg("-o")
                    .arg(&out)
                    .arg("--no-debuginfod")
                    .env("RAYON_NUM_THREADS", threads)
                    .env("SOURCE_DATE_EPOCH", "1700000000"),
            );
            std::fs::read(&out).unwrap()
        })
        .collect();
    assert!(outputs[0] == outputs[1], "1 and 4 threads differ");

    // JSON losses count the cut stack by reason.
    let o = run_ok(
        ebsym()
            .args(["top", "--kind", "alloc", "--json", "--no-debuginfod"])
            .arg(&sym),
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["losses"]["stacks_cut"]["copy too small"], 1, "{v}");
}

/// The stack copies of a trace (count, bytes of data), read record by record.
fn stack_copies(path: &Path) -> (u64, u64) {
    use ebtrace_format::proto::record::Kind;
    let mut r = ebtrace_format::TraceReader::open(path).unwrap();
    let mut n = (0, 0);
    for rec in r.by_ref() {
        if let Some(Kind::Stack(s)) = rec.kind {
            if let Some(c) = s.copy {
                n.0 += 1;
                n.1 += c.data.len() as u64;
            }
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    n
}

/// Every record of a trace, stacks without their copies, `SymbolizerInfo` and the
/// trailer's counts left out (the writer's own).
fn records_without_copies(path: &Path) -> Vec<ebtrace_format::proto::Record> {
    use ebtrace_format::proto::record::Kind;
    ebtrace_format::TraceReader::open(path)
        .unwrap()
        .filter_map(|mut rec| {
            match &mut rec.kind {
                Some(Kind::Stack(s)) => s.copy = None,
                Some(Kind::SymbolizerInfo(_) | Kind::Trailer(_)) => return None,
                _ => {}
            }
            Some(rec)
        })
        .collect()
}

/// The symbolized output holds no stack memory unless asked: the copies are dropped once
/// unwound (every record but them is the same, and so is every report),
/// `--keep-stack-copies` keeps them, `ebsym strip` removes them from any trace, and
/// `ebsym info` counts them.
#[test]
fn symbolized_output_drops_the_stack_copies_unless_asked() {
    let exe = selfstack(Variant::NoFramePointer);
    let captures = run_selfstack(&exe, &[]);
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let raw = path("t.pb.zst");
    write_dwarf_trace(&raw, &exe, &captures);
    let in_raw = stack_copies(&raw);
    assert_eq!(in_raw.0, captures.len() as u64 + 1);
    assert!(in_raw.1 > 256, "{in_raw:?}");

    let symbolize = |out: &Path, extra: &[&str]| -> String {
        let o = run_ok(
            ebsym()
                .arg(&raw)
                .arg("-o")
                .arg(out)
                .arg("--no-debuginfod")
                .args(extra)
                .env("SOURCE_DATE_EPOCH", "1700000000"),
        );
        String::from_utf8(o.stderr).unwrap()
    };
    let (sym, kept) = (path("t.sym.pb.zst"), path("kept.sym.pb.zst"));
    let err = symbolize(&sym, &[]);
    assert!(
        err.contains(&format!(
            "ebsym: left out {} stack copies (",
            captures.len() + 1
        )),
        "{err}"
    );
    let err = symbolize(&kept, &["--keep-stack-copies"]);
    assert!(err.contains("kept the stack copies"), "{err}");
    assert_eq!(stack_copies(&sym), (0, 0));
    assert_eq!(stack_copies(&kept), in_raw);
    // The same trace but for the copies: ids, generations, ips and flags unchanged.
    assert!(records_without_copies(&sym) == records_without_copies(&kept));

    // `ebsym strip`: one line saying what went, on a symbolized trace and a raw one.
    let strip = |input: &Path, out: &Path| -> String {
        let o = run_ok(ebsym().arg("strip").arg(input).arg("-o").arg(out));
        assert!(o.stdout.is_empty());
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        err
    };
    let stripped = path("stripped.sym.pb.zst");
    let err = strip(&kept, &stripped);
    assert!(
        err.starts_with(&format!(
            "ebsym: wrote {}: removed {} stack copies (",
            stripped.display(),
            in_raw.0
        )),
        "{err}"
    );
    assert!(!err.contains("never unwound"), "{err}");
    assert_eq!(stack_copies(&stripped), (0, 0));
    assert!(records_without_copies(&stripped) == records_without_copies(&kept));
    let raw_stripped = path("stripped.pb.zst");
    let err = strip(&raw, &raw_stripped);
    assert!(
        err.contains(&format!("{} of them never unwound", in_raw.0)),
        "{err}"
    );
    assert_eq!(stack_copies(&raw_stripped), (0, 0));
    let err = strip(&sym, &path("again.pb.zst"));
    assert!(err.contains("removed 0 stack copies (0 B"), "{err}");

    // The reports read the same with and without the copies.
    let folded = |trace: &Path| -> String {
        let o = run_ok(
            ebsym()
                .args(["folded", "--kind", "alloc", "--no-debuginfod"])
                .arg(trace),
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let want = folded(&kept);
    assert!(want.contains("selfstack::compare("), "{want}");
    for t in [&sym, &stripped, &raw] {
        assert_eq!(folded(t), want, "{}", t.display());
    }

    // `ebsym info` says how much stack memory a trace holds.
    let info = |trace: &Path| -> serde_json::Value {
        let o = run_ok(ebsym().args(["info", "--json"]).arg(trace));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for (t, (n, bytes)) in [
        (&raw, in_raw),
        (&kept, in_raw),
        (&sym, (0, 0)),
        (&stripped, (0, 0)),
    ] {
        let j = info(t);
        assert_eq!(j["stack_copies"], n, "{}", t.display());
        assert_eq!(j["stack_copy_bytes"], bytes, "{}", t.display());
    }
    let text = String::from_utf8(run_ok(ebsym().arg("info").arg(&raw)).stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("stack memory"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(&format!("{} stack copies, ", in_raw.0))
            && line.contains("of the target's stack (--stack-mode dwarf)")
            && line.contains("`ebsym strip` removes them"),
        "{line}"
    );
    let text = String::from_utf8(run_ok(ebsym().arg("info").arg(&stripped)).stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("stack memory") && l.ends_with("none (no stack copies)")),
        "{text}"
    );
}
