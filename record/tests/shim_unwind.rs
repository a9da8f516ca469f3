//! The preload shim's in-process unwinder (bpf/preload_unwind.c), compiled here with the
//! system cc into a program that checks it (tests/shim_unwind.c): a walk equal to glibc's
//! backtrace() that ends cleanly at _start, truncation flagged, and a frame whose return
//! address slot lies in unmapped memory stopped as a bad frame instead of read (the
//! walker read it before, and the program crashed).

#[test]
fn the_shims_unwinder_walks_like_backtrace_and_never_reads_past_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = dir.path().join("shim_unwind");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .args([
            "-O2",
            "-fomit-frame-pointer",
            "-Wall",
            "-Wextra",
            "-Wno-unused-function",
        ])
        .arg("-I")
        .arg(root.join("../bpf"))
        .arg("-o")
        .arg(&exe)
        .arg(root.join("tests/shim_unwind.c"))
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = std::process::Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{:?}:\n{text}", run.status);
    for check in ["available", "whole", "truncated", "past the stack"] {
        assert!(text.contains(&format!("ok {check}\n")), "{check}:\n{text}");
    }
}
