//! Stack memory never leaves by accident. `testdata/cpp/secret_stack.cpp` holds a 64-byte
//! token, made at run time, in a stack buffer while it allocates. With `--stack-mode dwarf`
//! the raw trace holds it (the copies of the user stack: this proves the search finds it),
//! `ebsym info` says so, and it is gone from ebsym's symbolized output (unless
//! `--keep-stack-copies`) and after `ebsym strip`, while the reports show the same whole
//! stacks. The modes that store return addresses only never hold it. Needs root (skips
//! loudly without it; fails when CI=true) and the `zstd` tool (scripts/setup installs it).

use crate::common;
use common::{ebsym_json, ebsym_path, root, run};
use ebtrace_testdata::Variant;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A recording of secret_stack (built without frame pointers: the stacks through libc's
/// malloc are whole only when unwound with CFI) and the token it held.
struct Secret {
    dir: tempfile::TempDir,
    trace: PathBuf,
    token: String,
}

impl Secret {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn record_secret(mode: &str) -> Secret {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join(format!("{mode}.pb.zst"));
    // A token of its own for every recording.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        ^ u64::from(std::process::id()) << 40;
    let out = common::record_variant_to(
        &trace,
        "secret_stack",
        Variant::NoFramePointer,
        &["--alloc", "--stack-mode", mode],
        &["--seed", &seed.to_string(), "--allocs", "200"],
    );
    let e = common::expect_line(&out, "secret_stack");
    let token = e["token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.starts_with("EBTRACE-SECRET-TOKEN-"), "{token}");
    assert_eq!(e["allocs"], 200);
    // Made at run time: the binary does not hold it.
    let exe = ebtrace_testdata::build("secret_stack", Variant::NoFramePointer).unwrap();
    assert!(!contains(&std::fs::read(exe).unwrap(), &token));
    Secret { dir, trace, token }
}

fn contains(haystack: &[u8], token: &str) -> bool {
    haystack.windows(token.len()).any(|w| w == token.as_bytes())
}

/// The trace's records as `zstd -dc` prints them: every byte the file holds, decompressed.
fn decompressed(trace: &Path) -> Vec<u8> {
    let out = Command::new("zstd")
        .args(["-dcq"])
        .arg(trace)
        .output()
        .unwrap_or_else(|e| panic!("cannot run zstd (scripts/setup installs it): {e}"));
    assert!(
        out.status.success(),
        "zstd -dc {}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());
    out.stdout
}

fn holds_token(trace: &Path, token: &str) -> bool {
    contains(&decompressed(trace), token)
}

/// `ebsym ARGS` (no debuginfod), its stderr.
fn ebsym(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(ebsym_path())
        .args(args)
        .arg("--no-debuginfod")
        .env_remove("DEBUGINFOD_URLS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ebsym {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// `ebsym TRACE -o OUT [EXTRA]`.
fn symbolize(trace: &Path, out: &Path, extra: &[&str]) -> String {
    let mut args = vec![trace.as_os_str(), "-o".as_ref(), out.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    ebsym(&args)
}

/// `ebsym strip TRACE -o OUT`: its one line.
fn strip(trace: &Path, out: &Path) -> String {
    let o = run(
        &ebsym_path(),
        &[
            "strip",
            trace.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

fn info(trace: &Path) -> Value {
    ebsym_json(&["info", trace.to_str().unwrap()])
}

/// The function chains of `ebsym top --kind alloc` (leaf first), with their counts.
fn top_chains(trace: &Path) -> Vec<(Vec<String>, u64)> {
    let r = ebsym_json(&[
        "top",
        trace.to_str().unwrap(),
        "--kind",
        "alloc",
        "--by",
        "count",
        "-n",
        "100000",
        "--no-debuginfod",
    ]);
    let mut chains: Vec<(Vec<String>, u64)> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let frames = row["frames"].as_array().unwrap();
            let names = frames
                .iter()
                .map(|f| f["function"].as_str().unwrap_or("?").to_string())
                .collect();
            (names, row["count"].as_u64().unwrap())
        })
        .collect();
    chains.sort();
    chains
}

/// Records secret_stack with `--stack-mode MODE` and checks that the token is nowhere in
/// the raw trace nor in ebsym's symbolized output, and that `ebsym info` counts no stack
/// copies: a mode that stores return addresses only. One line per mode below.
fn assert_token_absent(mode: &str) {
    let s = record_secret(mode);
    assert!(
        !holds_token(&s.trace, &s.token),
        "--stack-mode {mode}: the raw trace holds the target's stack memory"
    );
    let j = info(&s.trace);
    assert_eq!(j["stack_copies"], 0, "--stack-mode {mode}");
    assert_eq!(j["stack_copy_bytes"], 0, "--stack-mode {mode}");
    let sym = s.path("t.sym.pb.zst");
    symbolize(&s.trace, &sym, &[]);
    assert!(!holds_token(&sym, &s.token), "--stack-mode {mode}");
    // The program's allocations were recorded (the test looked at real events).
    assert!(
        j["events"]["alloc"].as_u64().unwrap() >= 200,
        "--stack-mode {mode}: {j:#}"
    );
}

#[test]
fn return_address_modes_never_store_stack_memory() {
    if !root() {
        return;
    }
    assert_token_absent("fp");
    assert_token_absent("cfi");
    assert_token_absent("auto");
}

#[test]
fn dwarf_stack_memory_leaves_only_when_asked() {
    if !root() {
        return;
    }
    let s = record_secret("dwarf");
    // The copies hold the token: the searches below can fail.
    assert!(
        holds_token(&s.trace, &s.token),
        "the dwarf trace does not hold the token: this test proves nothing"
    );
    let j = info(&s.trace);
    let copies = j["stack_copies"].as_u64().unwrap();
    let bytes = j["stack_copy_bytes"].as_u64().unwrap();
    assert!(copies >= 200, "{j:#}");
    assert!(bytes >= 200 * 64, "{j:#}");
    let text = run(&ebsym_path(), &["info", s.trace.to_str().unwrap()]).stdout;
    let text = String::from_utf8(text).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("stack memory"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("stack copies, ") && line.contains("`ebsym strip` removes them"),
        "{line}"
    );

    // ebsym's symbolized output drops the copies; --keep-stack-copies keeps them.
    let (sym, kept) = (s.path("t.sym.pb.zst"), s.path("kept.sym.pb.zst"));
    let err = symbolize(&s.trace, &sym, &[]);
    assert!(err.contains("left out "), "{err}");
    assert!(
        !holds_token(&sym, &s.token),
        "the symbolized output holds the token"
    );
    symbolize(&s.trace, &kept, &["--keep-stack-copies"]);
    assert!(
        holds_token(&kept, &s.token),
        "--keep-stack-copies lost the copies"
    );
    assert_eq!(info(&sym)["stack_copies"], 0);
    assert_eq!(info(&kept)["stack_copies"], copies);

    // `ebsym strip`, on the raw trace and on the symbolized one with copies.
    let (raw_stripped, sym_stripped) =
        (s.path("raw.stripped.pb.zst"), s.path("sym.stripped.pb.zst"));
    let err = strip(&s.trace, &raw_stripped);
    assert!(
        err.contains(&format!("removed {} stack copies", thousands(copies))),
        "{err}"
    );
    assert!(err.contains("never unwound"), "{err}");
    assert!(!holds_token(&raw_stripped, &s.token));
    let err = strip(&kept, &sym_stripped);
    assert!(!err.contains("never unwound"), "{err}");
    assert!(!holds_token(&sym_stripped, &s.token));
    for t in [&raw_stripped, &sym_stripped] {
        let j = info(t);
        assert_eq!(j["stack_copies"], 0, "{}", t.display());
        assert_eq!(j["stack_copy_bytes"], 0, "{}", t.display());
    }

    // The reports show the same whole stacks with and without the copies, unwound through
    // libc's malloc (no frame pointers there nor in the program) up to main.
    let want = top_chains(&kept);
    let whole = want.iter().find(|(c, _)| {
        let pos = |f: &str| c.iter().position(|x| x.starts_with(f));
        matches!(
            (pos("secret::allocate_with_token("), pos("secret::hold_token("), pos("main")),
            (Some(a), Some(h), Some(m)) if a < h && h < m
        )
    });
    let (_, n) = whole.unwrap_or_else(|| panic!("no whole stack in {want:#?}"));
    assert!(*n >= 200, "{want:#?}");
    assert_eq!(top_chains(&sym), want);
    assert_eq!(top_chains(&sym_stripped), want);
}

/// 1234 → "1,234", as ebsym prints counts.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut s = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            s.push(',');
        }
        s.push(c);
    }
    s
}
