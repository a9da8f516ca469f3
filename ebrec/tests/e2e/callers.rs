//! Blame the caller: testdata's alloc_wrapper allocates through its own wrapper
//! (`my_alloc`, called from parse_headers and read_body), through a helper of one caller
//! (`pool_take`, from build_index) and through `operator new[]` (new_records), each phase
//! on a thread it names. Recorded with `--alloc` (every allocation), `ebsym top --by site`
//! names the callers with their exact counts and bytes, the wrappers folded into them and
//! the thread; `leaks --by site` the blocks each caller kept; the summary's alloc finding
//! names the top caller, not the wrapper; `--wrapper` folds the one-caller helper and
//! `--no-wrapper-rules` gives the wrapper back. Needs root (skips loudly without it; fails
//! when CI=true).

use crate::common;
use common::{ebsym_json, ebsym_path, expect_line, record, root, run};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The row whose site is `function` (with or without its parameters).
fn site_row<'a>(rep: &'a Value, function: &str) -> Option<&'a Value> {
    rep["rows"].as_array().unwrap().iter().find(|r| {
        let f = r["site"]["function"].as_str().unwrap_or("");
        f == function || f.strip_prefix(function).is_some_and(|x| x.starts_with('('))
    })
}

fn has_row<'a>(rep: &'a Value, function: &str) -> &'a Value {
    site_row(rep, function).unwrap_or_else(|| panic!("no site {function}: {rep:#}"))
}

#[test]
fn sites_name_the_callers_of_the_wrappers() {
    if !root() {
        return;
    }
    let rec = record("alloc_wrapper", &["--alloc"], &[]);
    let want = expect_line(&rec.out, "alloc_wrapper");
    let sites = &want["sites"];
    let t = rec.trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "alloc", "--by", "site", "-n", "1000"]);
    assert_eq!(top["group"], "site", "{top:#}");
    assert_eq!(top["by"], "bytes");
    let learnt: Vec<&str> = top["wrappers_learnt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(learnt, ["my_alloc(unsigned long)"], "{top:#}");
    for name in ["parse_headers", "read_body", "build_index", "new_records"] {
        if name == "build_index" {
            continue; // its site is pool_take, below
        }
        let row = has_row(&top, name);
        let s = &sites[name];
        assert_eq!(u(&row["count"]), u(&s["calls"]), "{name}: {row:#}");
        assert_eq!(u(&row["bytes"]), u(&s["bytes"]), "{name}: {row:#}");
        assert_eq!(row["thread"], s["thread"], "{name}: {row:#}");
        let file = row["site"]["file"].as_str().unwrap_or("");
        assert!(file.ends_with("alloc_wrapper.cpp"), "{name}: {row:#}");
        assert!(u(&row["site"]["line"]) > 0, "{name}: {row:#}");
        // The row's frames start at the site.
        let f0 = row["frames"][0]["function"].as_str().unwrap();
        assert!(f0.starts_with(name), "{name}: {row:#}");
        let wrappers: Vec<&str> = row["site"]["wrappers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            wrappers.iter().any(|w| w.contains("malloc")),
            "{name}: {wrappers:?}"
        );
        if name != "new_records" {
            assert!(
                wrappers.contains(&"my_alloc(unsigned long)"),
                "{name}: {wrappers:?}"
            );
        } else {
            assert!(
                wrappers.iter().any(|w| w.starts_with("operator new")),
                "{name}: {wrappers:?}"
            );
        }
    }
    // One caller: pool_take is build_index's helper, the site itself.
    assert!(site_row(&top, "build_index").is_none(), "{top:#}");
    let pool = has_row(&top, "pool_take");
    assert_eq!(u(&pool["count"]), u(&sites["build_index"]["calls"]));
    assert!(site_row(&top, "my_alloc").is_none(), "{top:#}");
    // The text says the site and what was folded into it.
    let text = String::from_utf8(
        run(
            &ebsym_path(),
            &["top", t, "--kind", "alloc", "--by", "site", "-n", "3"],
        )
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("malloc <- my_alloc(unsigned long):"),
        "{text}"
    );
    assert!(text.contains("thread body-1"), "{text}");

    // --wrapper: the helper of one caller folded too.
    let w = ebsym_json(&[
        "top",
        t,
        "--kind",
        "alloc",
        "--by",
        "site",
        "-n",
        "1000",
        "--wrapper",
        "pool_take*",
    ]);
    let bi = has_row(&w, "build_index");
    assert_eq!(u(&bi["count"]), u(&sites["build_index"]["calls"]), "{bi:#}");
    assert_eq!(u(&bi["bytes"]), u(&sites["build_index"]["bytes"]), "{bi:#}");
    assert_eq!(bi["thread"], "indexer");
    assert!(site_row(&w, "pool_take").is_none());
    // --no-wrapper-rules: my_alloc is nobody's wrapper, the site of both callers.
    let none = ebsym_json(&[
        "top",
        t,
        "--kind",
        "alloc",
        "--by",
        "site",
        "-n",
        "1000",
        "--no-wrapper-rules",
    ]);
    let my = has_row(&none, "my_alloc");
    assert_eq!(
        u(&my["count"]),
        u(&sites["parse_headers"]["calls"]) + u(&sites["read_body"]["calls"]),
        "{my:#}"
    );
    assert_eq!(my["thread"], "parser, body-1", "{my:#}");
    // --by site with a measure.
    let by_count = ebsym_json(&["top", t, "--kind", "alloc", "--by", "site,count", "-n", "1"]);
    assert_eq!(by_count["by"], "count");
    assert!(
        by_count["rows"][0]["site"]["function"]
            .as_str()
            .unwrap()
            .starts_with("parse_headers"),
        "{by_count:#}"
    );

    // leaks --by site: the blocks each caller kept.
    let leaks = ebsym_json(&["leaks", t, "--by", "site", "-n", "1000"]);
    assert_eq!(leaks["group"], "site");
    for name in ["parse_headers", "read_body"] {
        let row = has_row(&leaks, name);
        assert_eq!(u(&row["count"]), u(&sites[name]["leaked_count"]), "{row:#}");
        assert_eq!(u(&row["bytes"]), u(&sites[name]["leaked_bytes"]), "{row:#}");
        assert_eq!(row["thread"], sites[name]["thread"], "{row:#}");
    }

    // The summary names the caller that asked for the most, not the wrapper.
    let summary = ebsym_json(&["summary", t]);
    let alloc = summary["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["family"] == "alloc")
        .unwrap_or_else(|| panic!("no alloc finding: {summary:#}"));
    assert_eq!(alloc["subject"], "read_body", "{alloc:#}");
    assert_eq!(
        u(&alloc["value"]),
        u(&sites["read_body"]["bytes"]),
        "{alloc:#}"
    );
    // With the wrapper rules off, the wrapper is the finding: the rules made the change.
    let off = ebsym_json(&["summary", t, "--no-wrapper-rules"]);
    let alloc = off["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["family"] == "alloc")
        .unwrap();
    assert_eq!(alloc["subject"], "my_alloc", "{alloc:#}");
    // --thread: only the parser's allocations.
    let parser = ebsym_json(&[
        "top", t, "--kind", "alloc", "--thread", "pars*", "-n", "1000",
    ]);
    assert_eq!(
        u(&parser["totals"]["count"]),
        u(&sites["parse_headers"]["calls"]),
        "{parser:#}"
    );
    for r in parser["rows"].as_array().unwrap() {
        assert_eq!(r["thread"], "parser", "{r:#}");
    }
}
