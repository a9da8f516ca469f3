//! The examples of the task pages cannot rot: scripts/docs-examples records the bundled shop
//! (and testdata's request_server and usdt_server, and docs/examples/query_server.cpp) as the
//! pages say and writes each documented command's output; this test runs it and
//! fails when a command no longer runs, when its output lost a heading or a row label the
//! committed one (docs/examples/) has, or when a page quotes a command no example runs.
//! Needs root (skips loudly without it; fails when CI=true).
use crate::common::root;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// What an output is made of, whatever the run: the first word of each line that is not
/// indented (a heading, a row's label, a family's name), each number as `N`; for ebrec's lines
/// the word after `ebrec:`, for doctor's the check after its verdict (the verdicts are the
/// machine's). Lines that come and go with the run (ebsym's notes on each binary, ebrec's
/// notes and warnings, the estimates' and unresolved notes, ebrec's count of off-CPU wakers
/// outside the targets: a timer's interrupt lands in whatever thread runs) do not count.
fn shape(text: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for l in text.lines().skip(1) {
        if l.is_empty()
            || l.starts_with(char::is_whitespace)
            || l.contains("off-CPU wakers outside the traced processes")
        {
            continue;
        }
        let words: Vec<&str> = l.split_whitespace().collect();
        let w = match words.as_slice() {
            ["ebrec:", second, ..] => format!("ebrec: {second}"),
            ["ok" | "warn" | "FAIL", check, ..] => format!("check {check}"),
            [first, ..] => first.to_string(),
            [] => continue,
        };
        // Every run of digits as one N: a pid has 4 or 5 of them.
        let mut masked = String::new();
        let mut in_number = false;
        for c in w.chars() {
            if c.is_ascii_digit() {
                if !in_number {
                    masked.push('N');
                }
                in_number = true;
            } else {
                masked.push(c);
                in_number = false;
            }
        }
        let w = masked;
        let noise = [
            "ebsym:",
            "unresolved",
            "stacks",
            "estimates:",
            "ebrec: note:",
            "ebrec: warning:",
            "ebrec: attached",
        ];
        if !noise.contains(&w.as_str()) {
            set.insert(w);
        }
    }
    set
}

fn examples(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .map(|p| {
            (
                p.file_stem().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The documented commands: the first line of each committed example, without the pid a
/// run gives the service (`-p 4242` → `-p PID`).
fn command(example: &str) -> String {
    let first = example.lines().next().unwrap_or("");
    let mut words: Vec<String> = first.split_whitespace().map(str::to_string).collect();
    for i in 1..words.len() {
        if words[i - 1] == "-p" {
            words[i] = "PID".into();
        }
    }
    words.join(" ")
}

#[test]
fn the_task_pages_quote_commands_the_examples_run() {
    let committed = examples(&workspace().join("docs/examples"));
    assert!(
        committed.len() >= 10,
        "docs/examples has {}",
        committed.len()
    );
    let commands: BTreeSet<String> = committed.iter().map(|(_, t)| command(t)).collect();
    // Every `$ ebrec …`/`$ ebsym …` line of a task page is one of them.
    for e in std::fs::read_dir(workspace().join("docs")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("task-") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for l in text.lines() {
            if l.starts_with("$ ebrec ") || l.starts_with("$ ebsym ") {
                assert!(
                    commands.contains(&command(l)),
                    "docs/{name} quotes `{l}`, which scripts/docs-examples does not run"
                );
            }
        }
    }
}

#[test]
fn the_documented_commands_still_run_with_the_same_shape() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let out = Command::new(workspace().join("scripts/docs-examples"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/docs-examples: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("scripts/docs-examples: {:.1} s", t.elapsed().as_secs_f64());
    let fresh: std::collections::BTreeMap<String, String> =
        examples(dir.path()).into_iter().collect();
    for (name, old) in examples(&workspace().join("docs/examples")) {
        let Some(new) = fresh.get(&name) else {
            panic!("scripts/docs-examples no longer writes docs/examples/{name}.txt");
        };
        assert_eq!(command(&old), command(new), "{name}: the command changed");
        let missing: Vec<String> = shape(&old).difference(&shape(new)).cloned().collect();
        assert!(
            missing.is_empty(),
            "{name}: the output has no {missing:?} any more (run scripts/docs-examples and \
             update the pages that quote it):\n{new}"
        );
    }
}
