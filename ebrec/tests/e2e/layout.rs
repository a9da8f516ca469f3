//! What ARCHITECTURE.md says of the recorder's crates, checked: the recorder library links
//! no command-line parser, symbolizer, analyzer or HTTP client; the man pages in docs/man
//! are the ones the clap definitions give.
use std::path::Path;
use std::process::Command;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// `cargo tree -p PACKAGE -e normal` (no dev or build dependencies; default features).
fn normal_tree(package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn crates(tree: &str) -> Vec<&str> {
    tree.lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

#[test]
fn the_recorder_links_no_parser_symbolizer_analyzer_or_http() {
    let tree = normal_tree("ebtrace-record");
    let names = crates(&tree);
    for banned in [
        "clap",
        "ebtrace-symbolize",
        "ebtrace-analyze",
        "ebtrace-agent",
        "ureq",
        "rustls",
        "regex",
        "addr2line",
        "inferno",
    ] {
        assert!(
            !names.contains(&banned),
            "ebtrace-record links {banned}:\n{tree}"
        );
    }
    // And it does link what it is made of (the check reads a real tree).
    for needed in ["ebtrace-bpf", "ebtrace-format", "libbpf-rs"] {
        assert!(names.contains(&needed), "no {needed} in:\n{tree}");
    }
    // The BPF crate is skeletons and constants: no crate of ours but the schema's.
    let bpf = normal_tree("ebtrace-bpf");
    let ours: Vec<&str> = crates(&bpf)
        .into_iter()
        .filter(|n| n.starts_with("ebtrace-"))
        .collect();
    assert_eq!(ours, ["ebtrace-bpf", "ebtrace-proto"], "{bpf}");
}

#[test]
fn the_man_pages_are_the_ones_clap_gives() {
    let dir = tempfile::tempdir().unwrap();
    let ebsym = crate::common::ebsym_path();
    for exe in [Path::new(env!("CARGO_BIN_EXE_ebrec")), ebsym.as_path()] {
        let out = Command::new(exe)
            .args(["man", "-o"])
            .arg(dir.path())
            .output()
            .expect("run man");
        assert!(
            out.status.success(),
            "{} man: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let committed = workspace().join("docs/man");
    let mut pages = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        let fresh = std::fs::read_to_string(e.path()).unwrap();
        let old = std::fs::read_to_string(committed.join(&name)).unwrap_or_default();
        assert!(
            fresh == old,
            "docs/man/{} is not what `man` writes: run `cargo run -p ebrec -- man` and `cargo run -p ebtrace-ebsym -- man`",
            name.to_string_lossy()
        );
        pages += 1;
    }
    // ebrec and its 6 commands, ebsym and its 17.
    assert!(pages >= 25, "ebrec and ebsym man wrote {pages} pages");
    // And no page is left that neither writes any more.
    let stale: Vec<_> = std::fs::read_dir(&committed)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| !dir.path().join(n).exists())
        .collect();
    assert!(
        stale.is_empty(),
        "docs/man has pages no command writes: {stale:?}"
    );
}
