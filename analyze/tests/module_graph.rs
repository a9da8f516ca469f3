//! analyze's modules import each other without a cycle: every module can be read, and
//! changed, after the modules it uses. The test reads the sources of `analyze/src`, takes
//! each module's paths into the crate (`use crate::…`, `use super::…`, `self::…`, a child
//! module's `child::…`, and the same paths written inline in code), resolves each one to
//! the module that defines the item (through `use` and `pub use` re-exports, so that
//! `super::EventKind` is an edge to `reports::kind`, where it is defined, not to
//! `reports`), and fails on every strongly connected set of two or more modules, naming
//! the imports that close it. `#[cfg(test)]` items, comments and string literals are left
//! out; a module's `mod child;` is not an import, its `pub use child::X` is.
//! `EBTRACE_MODULE_GRAPH=1 cargo test -p ebtrace-analyze --test module_graph -- --nocapture`
//! prints the graph.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path ("crate", "crate::reports::top") -> source text.
type Sources = BTreeMap<String, String>;

/// One module's imports: (the path as written, made absolute, its line).
#[derive(Debug, Default)]
struct Module {
    /// Names a `use` brings into the module (`use a::b::C as D;`: "D" -> "crate::a::b::C").
    imports: BTreeMap<String, String>,
    /// Every path into the crate the module uses (imports included), absolute, with the
    /// line it is written on.
    paths: Vec<(String, usize)>,
}

fn read_sources(src: &Path) -> Sources {
    fn walk(dir: &Path, prefix: &str, out: &mut Sources) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                walk(&p, &format!("{prefix}::{name}"), out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let module = match stem {
                    "lib" | "mod" => prefix.to_string(),
                    s => format!("{prefix}::{s}"),
                };
                out.insert(module, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = Sources::new();
    walk(src, "crate", &mut out);
    out
}

/// The source with comments and the contents of string and char literals blanked out
/// (newlines kept, so that lines still count).
fn strip(s: &str) -> String {
    let b: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&b, i) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                out.push(blank(b[j]));
                j += 1;
            }
            out.push('"');
            i = j;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), or a lifetime ('a).
            let close = if next == Some('\\') {
                (i + 2..b.len().min(i + 12)).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(j) => {
                    out.push_str("' '");
                    out.extend((i + 3..=j).map(|_| ' '));
                    i = j + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// The source without its `#[cfg(test)]` items (a test module, a test-only `use`, a
/// test-only field of a struct or statement of a function).
fn without_tests(s: &str) -> String {
    let mut out = s.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let b = out.as_bytes();
        let mut j = at + "#[cfg(test)]".len();
        // Braces, and parentheses and brackets (a field's type may hold commas).
        let (mut depth, mut parens) = (0usize, 0usize);
        let end = loop {
            if j >= b.len() {
                break b.len();
            }
            match b[j] {
                b'{' => depth += 1,
                // The end of the enclosing item: a field that was its last one.
                b'}' if depth == 0 => break j,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break j + 1;
                    }
                }
                b'(' | b'[' => parens += 1,
                b')' | b']' => parens = parens.saturating_sub(1),
                b';' if depth == 0 => break j + 1,
                b',' if depth == 0 && parens == 0 => break j + 1,
                _ => {}
            }
            j += 1;
        };
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Sep, // ::
    Punct(char),
}

fn tokens(s: &str) -> Vec<(Tok, usize)> {
    let b: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(b[start..i].iter().collect()), line));
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push((Tok::Sep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// The parent of module path `m` ("crate::a::b" -> "crate::a").
fn parent(m: &str) -> &str {
    m.rsplit_once("::").map_or("crate", |(p, _)| p)
}

/// `segments` written in module `m`, made absolute: `crate::…`, `super::…` (any number),
/// `self::…`, or a child module of `m`. None for other paths (another crate, a local
/// name).
fn absolute(m: &str, segments: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let mut base = m.to_string();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base = "crate".into();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base = parent(&base).to_string();
                rest = &rest[1..];
            }
        }
        Some(first) if modules.contains(&format!("{m}::{first}")) => {}
        _ => return None,
    }
    let mut p = base;
    for s in rest {
        p.push_str("::");
        p.push_str(s);
    }
    Some(p)
}

/// Parses a use tree starting at `toks[*i]` (after `use`) into (full path, bound name).
fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path: Vec<String> = prefix.to_vec();
    loop {
        match toks.get(*i).map(|t| &t.0) {
            Some(Tok::Ident(id)) if id == "as" => {
                *i += 1;
                if let Some((Tok::Ident(alias), _)) = toks.get(*i) {
                    let name = alias.clone();
                    *i += 1;
                    out.push((path.clone(), name));
                }
                return;
            }
            Some(Tok::Ident(id)) => {
                path.push(id.clone());
                *i += 1;
            }
            Some(Tok::Sep) => *i += 1,
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((path.clone(), "*".into()));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.0) {
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        None => return,
                        _ => use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => {
                // `…::self` binds the module itself.
                if path.last().map(String::as_str) == Some("self") {
                    path.pop();
                }
                if let Some(name) = path.last().cloned() {
                    out.push((path, name));
                }
                return;
            }
        }
    }
}

fn parse(sources: &Sources) -> BTreeMap<String, Module> {
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    let mut out = BTreeMap::new();
    for (m, text) in sources {
        let toks = tokens(&without_tests(&strip(text)));
        let mut module = Module::default();
        let mut i = 0;
        while i < toks.len() {
            let (tok, line) = &toks[i];
            // Not a path's start: after `::`, a method call's `.`, a lifetime's `'`.
            let after_sep_or_dot =
                i > 0 && matches!(toks[i - 1].0, Tok::Sep | Tok::Punct('.') | Tok::Punct('\''));
            match tok {
                Tok::Ident(id) if id == "use" && !after_sep_or_dot => {
                    i += 1;
                    let mut trees = Vec::new();
                    use_tree(&toks, &mut i, &[], &mut trees);
                    for (segments, name) in trees {
                        if let Some(p) = absolute(m, &segments, &modules) {
                            module.paths.push((p.clone(), *line));
                            if name != "*" {
                                module.imports.insert(name, p);
                            }
                        }
                    }
                }
                Tok::Ident(first)
                    if !after_sep_or_dot && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Sep) =>
                {
                    let mut segments = vec![first.clone()];
                    let mut j = i + 1;
                    while toks.get(j).map(|t| &t.0) == Some(&Tok::Sep) {
                        match toks.get(j + 1).map(|t| &t.0) {
                            Some(Tok::Ident(s)) => segments.push(s.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    if let Some(p) = absolute(m, &segments, &modules) {
                        module.paths.push((p, *line));
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        out.insert(m.clone(), module);
    }
    out
}

/// The module that defines what absolute path `p` names: the longest module prefix, then
/// through that module's imports (re-exports) while the next segment is one.
fn defining_module(p: &str, parsed: &BTreeMap<String, Module>, depth: usize) -> String {
    let segments: Vec<&str> = p.split("::").collect();
    let mut m = "crate".to_string();
    let mut k = 1;
    while k < segments.len() && parsed.contains_key(&format!("{m}::{}", segments[k])) {
        m = format!("{m}::{}", segments[k]);
        k += 1;
    }
    if k < segments.len() && depth < 16 {
        if let Some(target) = parsed[&m].imports.get(segments[k]) {
            let mut t = target.clone();
            for s in &segments[k + 1..] {
                t.push_str("::");
                t.push_str(s);
            }
            return defining_module(&t, parsed, depth + 1);
        }
    }
    m
}

/// Module -> the modules it imports, with the line of the first import of each.
fn graph(sources: &Sources) -> BTreeMap<String, BTreeMap<String, usize>> {
    let parsed = parse(sources);
    let mut g: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for (m, module) in &parsed {
        let edges = g.entry(m.clone()).or_default();
        for (p, line) in &module.paths {
            let to = defining_module(p, &parsed, 0);
            if to != *m {
                edges.entry(to).or_insert(*line);
            }
        }
    }
    g
}

/// The strongly connected sets of two or more modules (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeMap<String, usize>>) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, usize>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.g.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The cycles, each with the imports inside it ("a -> b (line 12)").
fn explain(sources: &Sources) -> Vec<String> {
    let g = graph(sources);
    cycles(&g)
        .into_iter()
        .map(|scc| {
            let mut s = format!("cycle among {}:", scc.join(", "));
            for m in &scc {
                for (to, line) in &g[m] {
                    if scc.contains(to) {
                        s.push_str(&format!("\n    {m} -> {to} (line {line})"));
                    }
                }
            }
            s
        })
        .collect()
}

#[test]
fn analyze_has_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = read_sources(&src);
    assert!(
        sources.contains_key("crate::reports::html"),
        "{:?}",
        sources.keys()
    );
    let g = graph(&sources);
    if std::env::var_os("EBTRACE_MODULE_GRAPH").is_some() {
        for (m, edges) in &g {
            let to: Vec<&str> = edges
                .keys()
                .map(|t| t.trim_start_matches("crate::"))
                .collect();
            eprintln!("{} -> {}", m.trim_start_matches("crate::"), to.join(", "));
        }
    }
    // The checker sees the imports it should: a re-export resolved to its module, an
    // inline path, a child module's path.
    assert!(
        g["crate::reports"].contains_key("crate::reports::kind"),
        "{g:#?}"
    );
    assert!(!g["crate::pprof"].contains_key("crate::reports"), "{g:#?}");
    let found = explain(&sources);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The checker finds the cycles it is for: siblings through `super::`, a re-export, an
/// inline `crate::` path, a parent and its child; and not a `#[cfg(test)]` import, a
/// comment or a string.
#[test]
fn the_checker_finds_cycles() {
    let src = |pairs: &[(&str, &str)]| -> Sources {
        pairs
            .iter()
            .map(|(m, t)| (m.to_string(), t.to_string()))
            .collect()
    };
    let found = explain(&src(&[
        ("crate", "pub mod r; pub mod m;"),
        ("crate::r", "mod a; mod b; pub use a::A;"),
        ("crate::r::a", "use super::b::helper; pub struct A;"),
        (
            "crate::r::b",
            "pub fn helper() -> super::A { crate::m::f(); todo!() }",
        ),
        ("crate::m", "pub fn f() {}"),
    ]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("cycle among crate::r::a, crate::r::b:"),
        "{found:?}"
    );
    let found = explain(&src(&[
        ("crate", "pub mod e;"),
        (
            "crate::e",
            "mod p; pub fn run() { p::write() } pub struct C;",
        ),
        ("crate::e::p", "use super::C; pub fn write() {}"),
    ]));
    assert_eq!(found.len(), 1, "{found:?}");
    let found = explain(&src(&[
        ("crate", "pub mod r;"),
        ("crate::r", "mod a; mod b;"),
        (
            "crate::r::a",
            "pub fn f() {} // super::b::g\n const S: &str = \"super::b::g\"; \
             #[cfg(test)]\nmod tests { use super::super::b::g; }",
        ),
        ("crate::r::b", "use super::a::f; pub fn g() { f() }"),
    ]));
    assert!(found.is_empty(), "{found:?}");
}

/// The same check on every other crate of the workspace that has modules (issue 29: the
/// recorder had a 13-module ring before its split). Here a module and the modules under it
/// count as one unit: a parent that re-exports its children's items while they use its
/// types (`session` and its `impl Session` files, `push` and its backends, a crate root and
/// its modules) is Rust's encapsulation, not a ring between parts; what is checked is that
/// no two subtrees import each other. (analyze, above, has neither kind.)
#[test]
fn no_crate_has_an_import_cycle_between_subtrees() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut found = Vec::new();
    let related = |a: &str, b: &str| {
        a == "crate"
            || b == "crate"
            || a.starts_with(&format!("{b}::"))
            || b.starts_with(&format!("{a}::"))
    };
    for krate in [
        "record",
        "agent",
        "ebrec",
        "symbolize",
        "ebsym",
        "format",
        "elf",
        "proto",
        "demangle",
        "testdata",
        "crates/bpf",
        "crates/manpages",
    ] {
        let src = root.join(krate).join("src");
        assert!(src.is_dir(), "{} is not a directory", src.display());
        let mut sources = read_sources(&src);
        // A binary crate's root is main.rs.
        if let Some(main) = sources.remove("crate::main") {
            sources.insert("crate".to_string(), main);
        }
        checked += sources.len();
        let mut g = graph(&sources);
        for (m, edges) in g.iter_mut() {
            edges.retain(|to, _| !related(m, to));
        }
        for scc in cycles(&g) {
            let mut s = format!("{krate}: cycle among {}:", scc.join(", "));
            for m in &scc {
                for (to, line) in &g[m] {
                    if scc.contains(to) {
                        s.push_str(&format!("\n    {m} -> {to} (line {line})"));
                    }
                }
            }
            found.push(s);
        }
    }
    assert!(checked > 60, "only {checked} modules read");
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The check itself: two sibling subtrees that import each other are a cycle, a parent
    // and its child are not.
    let mut g = graph(
        &[
            ("crate", "pub mod a; pub mod b;"),
            ("crate::a", "mod c; pub use c::C; pub struct A;"),
            (
                "crate::a::c",
                "pub struct C(super::A); pub fn f() { crate::b::g() }",
            ),
            (
                "crate::b",
                "pub fn g() {} pub fn h() -> crate::a::C { todo!() }",
            ),
        ]
        .iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect(),
    );
    for (m, edges) in g.iter_mut() {
        edges.retain(|to, _| !related(m, to));
    }
    let c = cycles(&g);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains(&"crate::b".to_string()), "{c:?}");
}
