//! Compiles `bpf/*.bpf.c` into skeletons with clang-19 (Debian's default clang-14 fails on
//! some BPF code). The skeletons are generated into OUT_DIR, never committed.
use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

const PROGRAMS: &[&str] = &["alloc", "lock", "profile"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let bpf = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bpf");
    let clang = std::env::var("EBTRACE_CLANG").unwrap_or_else(|_| "clang-19".into());
    for name in PROGRAMS {
        let src = bpf.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang(&clang)
            .clang_args(["-I", bpf.to_str().unwrap(), "-Wall", "-Wno-unused-function"])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
    for f in [
        "vmlinux.h",
        "events.h",
        "common.bpf.h",
        "targets.bpf.h",
        "alloc.bpf.c",
        "lock.bpf.c",
        "profile.bpf.c",
    ] {
        println!("cargo:rerun-if-changed={}", bpf.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=EBTRACE_CLANG");
}
