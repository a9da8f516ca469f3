//! Building test binaries in variants, sampling addresses, running tools.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `ebsym`, kept off any debuginfod server the environment names.
pub fn ebsym() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ebsym"));
    c.env_remove("DEBUGINFOD_URLS");
    c
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compiles testdata program `program` with `-O2 -g … extra` into `dir/name`.
pub fn build(program: &str, dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    run_ok(
        Command::new("g++")
            .args(["-O2", "-g", "-pthread", "-Wl,--build-id", "-std=c++17"])
            .args(extra)
            .arg("-o")
            .arg(&out)
            .arg(ebtrace_testdata::source_path(program)),
    );
    out
}

/// `objcopy --only-keep-debug` into `debug`, then `strip --strip-debug` the binary.
pub fn split_debug(bin: &Path, debug: &Path) {
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(bin)
            .arg(debug),
    );
    run_ok(Command::new("strip").arg("--strip-debug").arg(bin));
}

/// The build-id of `bin`, as read by the crate under test.
pub fn build_id(bin: &Path) -> Vec<u8> {
    let f = ebtrace_symbolize::elf::ElfFile::open(bin).unwrap();
    f.info().unwrap().build_id.expect("built with --build-id")
}

/// `DIR/.build-id/xx/rest.debug` for `id`.
pub fn build_id_path(dir: &Path, id: &[u8]) -> PathBuf {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(".build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]))
}

/// Text symbols of `bin` from `nm -S`: (address, size, mangled name).
pub fn functions(bin: &Path) -> Vec<(u64, u64, String)> {
    let out = run_ok(Command::new("nm").args(["-S", "--defined-only"]).arg(bin));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            if p.len() != 4 || !matches!(p[2], "t" | "T") {
                return None;
            }
            Some((
                u64::from_str_radix(p[0], 16).ok()?,
                u64::from_str_radix(p[1], 16).ok()?,
                p[3].to_string(),
            ))
        })
        .collect()
}

/// About `per_function` addresses spread over every function of `bin`.
pub fn sample_addresses(bin: &Path, per_function: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (addr, size, _) in functions(bin) {
        let step = (size / per_function).max(1);
        out.extend((0..size).step_by(step as usize).map(|o| addr + o));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Runs `program args` with `input` on stdin and returns stdout.
pub fn run_with_stdin(cmd: &mut Command, input: &str) -> String {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A trace writer for a synthetic trace (no chunk timer), with its header and one existing
/// process written: generation 1, pid 42, named `comm`.
pub fn trace_writer(comm: &[u8]) -> ebtrace_format::TraceWriter<Vec<u8>> {
    use ebtrace_proto::v1::{self as pb, record::Kind, Record};
    let header = pb::Header {
        recorder_version: "test".into(),
        arch: "x86_64".into(),
        ..Default::default()
    };
    let opts = ebtrace_format::WriterOptions {
        chunk_interval: None,
        ..Default::default()
    };
    let mut w = ebtrace_format::TraceWriter::new(Vec::new(), header, opts).unwrap();
    let comm = w.intern_string(comm).unwrap();
    w.write_record(&Record {
        kind: Some(Kind::Process(pb::Process {
            generation: 1,
            pid: 42,
            comm,
            event: pb::ProcessEvent::Existing as i32,
            ..Default::default()
        })),
    })
    .unwrap();
    w
}
