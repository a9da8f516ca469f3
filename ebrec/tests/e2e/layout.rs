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

/// ARCHITECTURE.md's table of crates, as (package, the crates of ours it names in its last
/// column); rows of things that are not workspace packages (the C sources, fuzz) left out.
fn architecture_table() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert!(
            cells.len() >= 4,
            "ARCHITECTURE.md row with fewer than 4 cells: {line}"
        );
        // "`ebtrace-ebsym` → `ebsym`": the package is the first name.
        let Some(package) = cells[1].strip_prefix('`').and_then(|c| c.split('`').next()) else {
            continue;
        };
        let deps = cells[cells.len() - 1];
        let deps = if deps == "—" {
            Vec::new()
        } else {
            deps.split(", ").map(|d| d.to_string()).collect()
        };
        rows.push((package.to_string(), deps));
    }
    rows
}

/// A package's direct dependencies of ours (normal and build; tests' own left out), by
/// their short names as the table writes them ("record" for ebtrace-record).
fn our_dependencies() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
            "--locked",
        ])
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let short = |n: &str| {
        let n = n.strip_prefix("ebtrace-").unwrap_or(n);
        n.to_string()
    };
    let mut all = std::collections::BTreeMap::new();
    for p in m["packages"].as_array().unwrap() {
        let deps = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|n| n.starts_with("ebtrace-"))
            .map(short)
            .collect();
        all.insert(p["name"].as_str().unwrap().to_string(), deps);
    }
    all
}

#[test]
fn architecture_md_names_every_crates_dependencies_of_ours() {
    let table = architecture_table();
    let actual = our_dependencies();
    let mut wrong = Vec::new();
    for (package, named) in &table {
        let Some(deps) = actual.get(package) else {
            wrong.push(format!(
                "{package}: in ARCHITECTURE.md, not in the workspace"
            ));
            continue;
        };
        let named: std::collections::BTreeSet<String> = named.iter().cloned().collect();
        if &named != deps {
            wrong.push(format!(
                "{package}: ARCHITECTURE.md says {named:?}, Cargo.toml says {deps:?}"
            ));
        }
    }
    for package in actual.keys() {
        if !table.iter().any(|(p, _)| p == package) {
            wrong.push(format!("{package}: not in ARCHITECTURE.md's table"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The check reads the real table: the recorder's row is there, with its crates.
    let record = table.iter().find(|(p, _)| p == "ebtrace-record").unwrap();
    assert!(record.1.contains(&"bpf".to_string()), "{record:?}");
}

/// The recorder library's public face is narrow: its configuration, the recording (`run`,
/// `Hooks`, `Recording`), and the two doors `host` and `lookup`; every other module is the
/// crate's own (ARCHITECTURE.md, record/).
#[test]
fn the_recorder_library_makes_only_its_narrow_modules_public() {
    let lib = std::fs::read_to_string(workspace().join("record/src/lib.rs")).unwrap();
    let public: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches([';', '{', ' ']))
        .collect();
    assert_eq!(public, ["config", "host", "lookup"], "record/src/lib.rs");
    let crate_own = lib
        .lines()
        .filter(|l| l.starts_with("pub(crate) mod "))
        .count();
    assert!(
        crate_own >= 15,
        "record/src/lib.rs has {crate_own} pub(crate) modules"
    );
}

/// Nothing of ours is built twice into one binary (two versions of object, gimli, addr2line
/// or a demangler would mean two ELF or DWARF readers that can disagree).
#[test]
fn no_crate_is_built_twice() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-d",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .expect("run cargo tree -d");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    // Each block (blank-line separated) starts with a crate built twice, then what uses it.
    let twice: Vec<&str> = tree
        .split("\n\n")
        .filter_map(|block| block.lines().next()?.split_whitespace().next())
        .collect();
    for name in &twice {
        assert!(
            ![
                "object",
                "gimli",
                "addr2line",
                "cpp_demangle",
                "rustc-demangle"
            ]
            .contains(name)
                && !name.starts_with("ebtrace-"),
            "built twice: {name}\n{tree}"
        );
    }
}

/// What the man pages' reader sees: a synopsis with value names (clap_mangen's own wrote
/// `[-n ]`), no Markdown backticks, and EXAMPLES and SEE ALSO on every page (each command's
/// help has an example).
#[test]
fn the_man_pages_read_clean() {
    let committed = workspace().join("docs/man");
    for e in std::fs::read_dir(&committed).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let page = std::fs::read_to_string(&p).unwrap();
        assert!(!page.contains('`'), "{name}: a Markdown backtick");
        let synopsis = page
            .split(".SH SYNOPSIS\n")
            .nth(1)
            .and_then(|s| s.split("\n.SH ").next())
            .unwrap_or_else(|| panic!("{name}: no SYNOPSIS"));
        assert!(
            !synopsis.contains(" \\fR]"),
            "{name}: an option without its value: {synopsis}"
        );
        assert!(page.contains("\n.SH \"SEE ALSO\"\n"), "{name}: no SEE ALSO");
        // The two programs' top pages list commands; every command's page has examples.
        if name != "ebrec.1" {
            assert!(page.contains("\n.SH EXAMPLES\n"), "{name}: no EXAMPLES");
        }
    }
}

/// `ebrec completions` and `ebsym completions`: a script per shell, which bash parses and
/// which completes the commands.
#[test]
fn the_shell_completions_complete_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let ebsym = crate::common::ebsym_path();
    for (exe, name, sub) in [
        (Path::new(env!("CARGO_BIN_EXE_ebrec")), "ebrec", "record"),
        (ebsym.as_path(), "ebsym", "leaks"),
    ] {
        let out = Command::new(exe)
            .args(["completions", "-o"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for f in [name.to_string(), format!("_{name}"), format!("{name}.fish")] {
            let text = std::fs::read_to_string(dir.path().join(&f)).unwrap();
            assert!(text.contains(sub), "{f} does not name `{name} {sub}`");
        }
        let script = format!(
            "source {}; COMP_WORDS=({name} {}); COMP_CWORD=1; _{name} {name} {} {name}; echo \"${{COMPREPLY[@]}}\"",
            dir.path().join(name).display(),
            &sub[..3],
            &sub[..3]
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            sub,
            "bash completes `{name} {}`: {}",
            &sub[..3],
            String::from_utf8_lossy(&out.stderr)
        );
        // The hidden commands (man, completions) are not offered.
        let script = format!(
            "source {}; COMP_WORDS=({name} ''); COMP_CWORD=1; _{name} {name} '' {name}; echo \"${{COMPREPLY[@]}}\"",
            dir.path().join(name).display(),
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        let offered = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = offered.split_whitespace().collect();
        assert!(words.contains(&sub), "{name}: {offered}");
        assert!(
            !words.contains(&"man") && !words.contains(&"completions"),
            "{name} offers its hidden commands: {offered}"
        );
        // --shell prints the same script on stdout.
        let out = Command::new(exe)
            .args(["completions", "--shell", "bash"])
            .output()
            .unwrap();
        let file = std::fs::read(dir.path().join(name)).unwrap();
        assert_eq!(out.stdout, file);
    }
}

/// The Markdown pages render: every code fence is closed (an open one swallowed the rest of
/// the README once), and every relative link leads to a file, and into a page to a heading
/// of it (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
#[test]
fn the_docs_render_and_their_links_lead_somewhere() {
    let root = workspace();
    let mut pages: Vec<std::path::PathBuf> = ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    for dir in ["docs", "docs/decisions"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    let anchors = |page: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(page).unwrap_or_default();
        let mut fenced = false;
        let mut out = Vec::new();
        for l in text.lines() {
            if l.starts_with("```") {
                fenced = !fenced;
            } else if !fenced && l.starts_with('#') {
                let h = l.trim_start_matches('#').trim().to_lowercase();
                let slug: String = h
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || *c == ' ')
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                out.push(slug);
            }
        }
        out
    };
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let name = page.strip_prefix(root).unwrap().display().to_string();
        let fences = text.lines().filter(|l| l.starts_with("```")).count();
        assert!(fences % 2 == 0, "{name}: a code fence is never closed");
        // The prose: fenced blocks and code spans dropped.
        let mut prose = String::new();
        let mut fenced = false;
        for l in text.lines() {
            if l.starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if !fenced {
                let mut in_code = false;
                for c in l.chars() {
                    if c == '`' {
                        in_code = !in_code;
                    } else if !in_code {
                        prose.push(c);
                    }
                }
                prose.push('\n');
            }
        }
        for (i, _) in prose.match_indices("](") {
            let rest = &prose[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let link = &rest[..end];
            if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!("{name}: {link} (no such file)"));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|x| x == "md")
                && !anchors(&target).iter().any(|a| a == anchor)
            {
                broken.push(format!("{name}: {link} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
