//! Leaks a user should not act on: blocks the C and C++ runtimes allocate once and keep by
//! design (libstdc++'s emergency exception pool, the stdio buffers, the dynamic loader's
//! TLS and link maps, locale and iconv tables), which valgrind sets apart with its default
//! suppressions and heaptrack by calling `__gnu_cxx::__freeres` at exit; and the user's own
//! suppressions (`ebsym leaks --suppress FILE`). A leak row whose stack matches is shown
//! apart, "held by" the rule that matched, and left out of the leak totals.
//!
//! A suppressions file has one pattern a line (`#` starts a comment): `PATTERN`, or
//! `leak:PATTERN` as LeakSanitizer writes them. A pattern is a glob (`*` any run of
//! characters, `?` one) matched against each frame's function name (demangled, as the
//! reports show it), its source file and its module path; a stack matches when any of its
//! frames does. `leak:*Cache::Insert*` sets apart what was allocated under
//! `Cache::Insert`; `leak:libfoo.so*` everything allocated inside libfoo.
use super::places::runtime;
use crate::error::{Error, ErrorKind};
use crate::interned::FrameView;
#[cfg(test)]
use crate::model::Frame;
use std::path::Path;

/// One rule: what it matches and what the report says of the blocks it holds.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The glob, against a frame's function, file and module.
    pattern: String,
    /// Only frames whose file matches this too (the built-in rules pin a function name to
    /// its source file).
    file: Option<&'static str>,
    /// "runtime: …" for the built-in rules, "suppressed: FILE:LINE leak:PATTERN" for the
    /// user's.
    pub held_by: String,
}

/// The rules a leak report applies: the runtime's, then the user's.
#[derive(Debug, Clone)]
pub struct Suppressions {
    rules: Vec<Rule>,
    /// Whether allocations by a runtime library's own initializer count as held.
    runtime: bool,
    /// Per frame (function, file, module), the rules it matches, a bit per rule (up to 64
    /// rules): a program's distinct stacks share most of their frames, and each frame is
    /// matched against every rule once, not once per stack it is in (on a compiler's trace
    /// the globs were a quarter of `ebsym heap`'s time).
    matched: std::sync::Arc<std::sync::Mutex<FrameMatches>>,
}

/// By function, then (file, module): looked up without copying the frame's names; they are
/// copied only for a frame not seen before.
type FrameMatches = std::collections::HashMap<String, Vec<(Option<String>, String, u64)>>;

/// The rules each frame matches by its names' (function, file, module) ids, for frames of
/// one trace's names ([`Suppressions::held_by_with`]).
pub type FrameMasks = crate::hash::FastMap<(u32, u32, u32), u64>;

/// (function glob, file glob, what holds the block) of what the runtimes keep by design.
/// glibc's functions start with `*`: its debug info names many by their internal aliases
/// (`__GI__IO_doallocbuf`).
const RUNTIME_RULES: &[(&str, Option<&str>, &str)] = &[
    (
        "*pool::pool*",
        Some("*eh_alloc.cc"),
        "libstdc++'s emergency exception-handling pool (freed only by __gnu_cxx::__freeres)",
    ),
    ("*_IO_file_doallocate", None, "a stdio buffer (glibc)"),
    ("*_IO_doallocbuf", None, "a stdio buffer (glibc)"),
    (
        "*_dl_allocate_tls*",
        None,
        "thread-local storage of the dynamic loader",
    ),
    (
        "*allocate_dtv*",
        None,
        "thread-local storage of the dynamic loader",
    ),
    (
        "*_dl_resize_dtv",
        None,
        "thread-local storage of the dynamic loader",
    ),
    (
        "*tls_get_addr_tail",
        None,
        "thread-local storage of the dynamic loader",
    ),
    (
        "*_dl_update_slotinfo",
        None,
        "thread-local storage of the dynamic loader",
    ),
    (
        "*_dl_new_object",
        None,
        "a loaded library's link map (dynamic loader)",
    ),
    (
        "*_dl_map_object*",
        None,
        "a loaded library's link map (dynamic loader)",
    ),
    (
        "*_dl_check_map_versions",
        None,
        "a loaded library's link map (dynamic loader)",
    ),
    ("*__new_exitfn", None, "atexit handlers (glibc)"),
    ("*_nl_*locale*", None, "locale data (glibc)"),
    ("*_nl_make_l10nflist", None, "locale data (glibc)"),
    ("*__gconv_*", None, "iconv conversion tables (glibc)"),
    ("*__tzfile_read", None, "the time zone cache (glibc)"),
    ("*tzset_internal", None, "the time zone cache (glibc)"),
    ("*__tzstring*", None, "the time zone cache (glibc)"),
    ("*__nss_*", None, "name-service modules (glibc)"),
];

/// A held-by description of allocations made by a runtime library's initializer.
const RUNTIME_INIT: &str = "a runtime library's initializer (allocated at load, kept by design)";

impl Default for Suppressions {
    fn default() -> Self {
        Suppressions::runtime()
    }
}

impl Suppressions {
    /// The runtime's rules only.
    pub fn runtime() -> Suppressions {
        Suppressions {
            rules: RUNTIME_RULES
                .iter()
                .map(|&(pattern, file, what)| Rule {
                    pattern: pattern.to_string(),
                    file,
                    held_by: format!("runtime: {what}"),
                })
                .collect(),
            runtime: true,
            matched: Default::default(),
        }
    }

    /// No rule at all: every outstanding block is a leak.
    pub fn none() -> Suppressions {
        Suppressions {
            rules: Vec::new(),
            runtime: false,
            matched: Default::default(),
        }
    }

    /// Adds the rules of a suppressions file's text (`name` says where they came from).
    pub fn add_text(&mut self, name: &str, text: &str) -> Result<(), Error> {
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let pattern = match line.split_once(':') {
                Some(("leak", p)) => p.trim(),
                // A C++ name has "::" in it; any other `kind:` is not ours to guess.
                Some((kind, p)) if !kind.is_empty() && !p.starts_with(':') && !kind.contains('*') => {
                    return Err(Error::new(ErrorKind::NotALeakRule, format!(
                        "{name}:{}: '{kind}:' is not a leak suppression (write PATTERN or leak:PATTERN)",
                        i + 1
                    )))
                }
                _ => line,
            };
            if pattern.is_empty() {
                return Err(Error::new(
                    ErrorKind::EmptyPattern,
                    format!("{name}:{}: an empty pattern", i + 1),
                ));
            }
            self.rules.push(Rule {
                pattern: pattern.to_string(),
                file: None,
                held_by: format!("suppressed: {name}:{} leak:{pattern}", i + 1),
            });
            self.matched.lock().unwrap().clear();
        }
        Ok(())
    }

    /// Adds the rules of the suppressions file at `path`.
    pub fn add_file(&mut self, path: &Path) -> Result<(), Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::io(
                format!("cannot read the suppressions file {}", path.display()),
                e,
            )
        })?;
        self.add_text(&path.display().to_string(), &text)
    }

    /// What holds a block allocated under `frames` (leaf first), if a rule matches.
    pub fn held_by<F: FrameView>(&self, frames: &[F]) -> Option<String> {
        self.held_by_with(frames, &mut FrameMasks::default())
    }

    /// [`Suppressions::held_by`], the rules each frame matches kept in `masks` by its
    /// names' ids ([`FrameView::ids`]) as well: for frames of one trace's names, looked up
    /// without hashing a name (a compiler's leak rows, a hundred frames of long C++ names
    /// each, spent most of `ebsym leaks` hashing them).
    pub fn held_by_with<F: FrameView>(
        &self,
        frames: &[F],
        masks: &mut FrameMasks,
    ) -> Option<String> {
        // The user's rules first: their words are the more specific.
        if self.rules.len() <= 64 {
            let mut mask = 0u64;
            for f in frames {
                let ids = f.ids();
                if let Some(m) = ids.and_then(|k| masks.get(&k)) {
                    mask |= m;
                    continue;
                }
                let m = self.mask_of(f);
                if let Some(k) = ids {
                    masks.insert(k, m);
                }
                mask |= m;
            }
            if mask != 0 {
                let last = 63 - mask.leading_zeros() as usize;
                return Some(self.rules[last].held_by.clone());
            }
        } else {
            for r in self.rules.iter().rev() {
                if frames.iter().any(|f| r.matches(f)) {
                    return Some(r.held_by.clone());
                }
            }
        }
        if self.runtime && by_runtime_initializer(frames) {
            return Some(format!("runtime: {RUNTIME_INIT}"));
        }
        None
    }

    /// The rules (up to 64) frame `f` matches, a bit each: matched once per frame, cached by
    /// its names.
    fn mask_of<F: FrameView>(&self, f: &F) -> u64 {
        let mut cache = self.matched.lock().unwrap();
        let seen = cache.get(f.function()).and_then(|v| {
            v.iter()
                .find(|(file, module, _)| file.as_deref() == f.file() && module == f.module())
                .map(|e| e.2)
        });
        seen.unwrap_or_else(|| {
            let m = self
                .rules
                .iter()
                .enumerate()
                .filter(|(_, r)| r.matches(f))
                .fold(0u64, |m, (i, _)| m | 1 << i);
            cache.entry(f.function().to_string()).or_default().push((
                f.file().map(String::from),
                f.module().to_string(),
                m,
            ));
            m
        })
    }
}

impl Rule {
    /// Whether the rule matches the frame: its function, or (a rule without a file glob)
    /// its file or module by path or by last component.
    fn matches<F: FrameView>(&self, f: &F) -> bool {
        let file_ok = self
            .file
            .is_none_or(|g| f.file().is_some_and(|file| glob(g, file)));
        file_ok
            && (glob(&self.pattern, f.function())
                || (self.file.is_none()
                    && (f.file().is_some_and(|file| glob_path(&self.pattern, file))
                        || glob_path(&self.pattern, f.module()))))
    }
}

/// Whether every frame from the allocation up to the dynamic loader's `_dl_init` (or
/// `call_init`) is in a runtime library: a block a runtime library allocated for itself while
/// it was loaded (libstdc++'s exception pool, when libstdc++ has no symbols to name it).
fn by_runtime_initializer<F: FrameView>(frames: &[F]) -> bool {
    let Some(init) = frames
        .iter()
        .position(|f| f.function() == "_dl_init" || f.function() == "call_init")
    else {
        return false;
    };
    init > 0 && frames[..init].iter().all(|f| runtime(f.module()))
}

/// [`glob`] of a path or of its last component.
fn glob_path(pattern: &str, path: &str) -> bool {
    glob(pattern, path)
        || path
            .rsplit_once('/')
            .is_some_and(|(_, base)| glob(pattern, base))
}

pub use crate::glob::glob;

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: Option<&str>, module: &str) -> Frame {
        Frame {
            function: function.into(),
            file: file.map(Into::into),
            line: None,
            inlined: false,
            module: module.into(),
            address: "0x1".into(),
        }
    }

    #[test]
    fn globs() {
        assert!(glob("*pool::pool*", "(anonymous namespace)::pool::pool()"));
        assert!(glob("_IO_doallocbuf", "_IO_doallocbuf"));
        assert!(!glob("_IO_doallocbuf", "_IO_doallocbuf2"));
        assert!(glob("a?c*", "abcdef"));
        assert!(!glob("*x", "abc"));
        assert!(glob("*", ""));
    }

    #[test]
    fn the_exception_pool_and_stdio_are_the_runtimes_a_users_block_is_not() {
        let s = Suppressions::runtime();
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let cxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30";
        let ld = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
        let pool = [
            frame("malloc", None, libc),
            frame(
                "(anonymous namespace)::pool::pool()",
                Some("../../../../src/libstdc++-v3/libsupc++/eh_alloc.cc"),
                cxx,
            ),
            frame("call_init", None, ld),
        ];
        assert!(s.held_by(&pool).unwrap().contains("emergency exception"));
        // The same, with libstdc++ unnamed: its initializer's.
        let unnamed = [
            frame("malloc", None, libc),
            frame("0x2a3f0", None, cxx),
            frame("call_init", None, ld),
            frame("_dl_init", None, ld),
        ];
        assert!(s.held_by(&unnamed).unwrap().contains("initializer"));
        // A user's static constructor is the user's.
        let user_static = [
            frame("malloc", None, libc),
            frame("Registry::Registry()", Some("reg.cc"), "/srv/app"),
            frame("call_init", None, ld),
        ];
        assert_eq!(s.held_by(&user_static), None);
        let stdio = [
            frame("malloc", None, libc),
            frame("__GI__IO_file_doallocate", None, libc),
            frame("_IO_doallocbuf", None, libc),
            frame("puts", None, libc),
            frame("main", Some("m.cc"), "/srv/app"),
        ];
        assert!(s.held_by(&stdio).unwrap().contains("stdio"));
        let leak = [
            frame("malloc", None, libc),
            frame("leak_some()", Some("m.cc"), "/srv/app"),
        ];
        assert_eq!(s.held_by(&leak), None);
        assert_eq!(Suppressions::none().held_by(&stdio), None);
    }

    #[test]
    fn a_users_file() {
        let mut s = Suppressions::runtime();
        s.add_text(
            "supp.txt",
            "# mine\nleak:*Cache::Insert*\n\nlibfoo.so*  # all of libfoo\n",
        )
        .unwrap();
        let f = [
            frame("malloc", None, "libc.so.6"),
            frame("leveldb::Cache::Insert(int)", None, "/a"),
        ];
        assert_eq!(
            s.held_by(&f).unwrap(),
            "suppressed: supp.txt:2 leak:*Cache::Insert*"
        );
        let g = [
            frame("malloc", None, "libc.so.6"),
            frame("foo_init", None, "/opt/lib/libfoo.so.1"),
        ];
        assert_eq!(
            s.held_by(&g).unwrap(),
            "suppressed: supp.txt:4 leak:libfoo.so*"
        );
        let err = Suppressions::none()
            .add_text("x", "race:foo\n")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotALeakRule);
        assert_eq!(
            err.to_string(),
            "x:1: 'race:' is not a leak suppression (write PATTERN or leak:PATTERN)"
        );
        let err = Suppressions::none()
            .add_file(Path::new("/nonexistent/supp.txt"))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(
            err.to_string()
                .starts_with("cannot read the suppressions file /nonexistent/supp.txt: "),
            "{err}"
        );
        // A C++ name with a scope is a pattern, not a kind.
        Suppressions::none().add_text("x", "ns::f\n").unwrap();
    }
}
