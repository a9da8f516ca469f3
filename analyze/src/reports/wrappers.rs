//! Allocator wrappers, and the allocation site they hide: the function that asked for the
//! memory. A stack of an allocation is leaf first: the allocator (`malloc`), then whatever
//! only passed the request on (`operator new`, `std::allocator<T>::allocate`, the
//! program's own `xmalloc`), then the caller that wanted the memory. [`WrapperRules::site`]
//! finds that caller: the first frame, leaf first, that is none of
//!
//! 1. the C/C++ runtime's code: a frame in libc, libstdc++, the loader, … or inlined from
//!    a system header (`/usr/include/…`), as the summary's places skip it;
//! 2. a default allocator wrapper by name ([`DEFAULT_WRAPPERS`]: the malloc family and its
//!    aliases, `operator new`/`new[]`, the `std::allocator`/`__gnu_cxx::new_allocator`
//!    chains, other allocators' entry points);
//! 3. a user's `--wrapper PATTERN` (a glob, `*` any run and `?` one character, matched
//!    against the demangled function name with and without its parameters, as `--idle`);
//! 4. the program's own wrapper, recognised by its shape ([`WrapperRules::learn`]): a
//!    function that, in every allocation stack it is in, is the site rules 1 to 3 give and
//!    calls an allocator by name itself (the frame below it is one of rules 2 and 3:
//!    `malloc`, `operator new`, an inlined `std::allocator<T>::allocate`; not a libstdc++
//!    string or container growing) from one place (one line: it passes the request on,
//!    it does not allocate here and there), and that is called there from at least two
//!    distinct functions. A function that allocates for one caller only is that caller's helper
//!    and stays the site; one that also appears further up some stack does more than pass
//!    a size on, and stays too.
//!
//! `--no-wrapper-rules` turns off rules 2 and 4: only the runtime and the user's patterns
//! are skipped. The rules decide from the stacks of the report they fold (every stack,
//! not only the rows shown).
use super::idle::name_matches;
use super::places::runtime;
use crate::error::{Error, ErrorKind};
use crate::hash::FastMap;
use crate::interned::FrameView;
#[cfg(test)]
use crate::model::Frame;
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Allocator entry points and wrappers, by demangled name (globs, as `--wrapper`).
pub const DEFAULT_WRAPPERS: &[&str] = &[
    // The C allocator and glibc's aliases of it.
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "aligned_alloc",
    "posix_memalign",
    "memalign",
    "valloc",
    "pvalloc",
    "__libc_*alloc*",
    "__libc_memalign",
    "*_int_malloc",
    "*_int_realloc",
    "*_int_memalign",
    "__GI___libc_*",
    "tcache_*",
    "__malloc_*",
    "strdup",
    "strndup",
    "__strdup",
    "__strndup",
    // C++: the global allocation functions and the standard allocator chains.
    "operator new*",
    "operator delete*",
    "std::allocator<*>::allocate*",
    "std::allocator_traits<*>::allocate*",
    "std::__new_allocator<*>::allocate*",
    "__gnu_cxx::new_allocator<*>::allocate*",
    "__gnu_cxx::__pool_alloc<*>::allocate*",
    "std::_Vector_base<*>::_M_allocate*",
    "std::__allocate_guarded*",
    "std::_Sp_counted_ptr_inplace<*",
    "std::__shared_count<*>::__shared_count<*",
    // Other allocators' entry points (jemalloc, tcmalloc, mimalloc), as preloaded.
    "je_*alloc*",
    "tc_*alloc*",
    "tc_new*",
    "tcmalloc::*",
    "mi_*alloc*",
    "mi_new*",
    // Well-known programs' and libraries' own allocators: the xmalloc family (GNU),
    // GLib, OpenSSL, PostgreSQL's memory contexts, MySQL/MariaDB, SQLite, Redis, nginx.
    "xmalloc",
    "xcalloc",
    "xrealloc",
    "xstrdup",
    "xzalloc",
    "g_malloc*",
    "g_try_malloc*",
    "g_realloc*",
    "g_try_realloc*",
    "g_slice_alloc*",
    "g_strdup",
    "g_memdup*",
    "CRYPTO_malloc",
    "CRYPTO_zalloc",
    "CRYPTO_realloc",
    "CRYPTO_strdup",
    "palloc",
    "palloc0",
    "palloc_extended",
    "repalloc*",
    "MemoryContextAlloc*",
    "AllocSetAlloc*",
    "AllocSetRealloc",
    "GenerationAlloc*",
    "SlabAlloc*",
    "BumpAlloc*",
    "pstrdup",
    "my_malloc",
    "my_realloc",
    "my_strdup",
    "my_strndup",
    "my_memdup",
    "my_multi_malloc*",
    "alloc_root",
    "sqlite3Malloc*",
    "sqlite3DbMalloc*",
    "sqlite3Realloc",
    "zmalloc*",
    "zcalloc*",
    "zrealloc*",
    "ztrymalloc*",
    "ngx_alloc",
    "ngx_calloc",
    "ngx_palloc*",
    "ngx_pnalloc",
    "ngx_pcalloc",
    // ebrec's preloaded allocation sampler (--alloc-sampler preload).
    "ebtrace_*",
];

/// Which frames are wrappers: the defaults (unless `--no-wrapper-rules`), the user's
/// patterns, and the program's own wrappers found by [`WrapperRules::learn`].
#[derive(Debug, Clone)]
pub struct WrapperRules {
    /// `--wrapper` patterns, in the order given.
    patterns: Vec<String>,
    /// The default names and the shape rule.
    defaults: bool,
    /// Functions recognised as wrappers by their shape in the stacks learnt from.
    learnt: BTreeSet<String>,
    /// [`WrapperRules::named`]'s answer per function name, each name matched once against
    /// the patterns (on a compiler's trace the same names come in every stack); a fresh
    /// one when a pattern is added.
    named: NamedCache,
}

type NamedCache = Arc<Mutex<FastMap<Box<str>, bool>>>;

impl Default for WrapperRules {
    fn default() -> Self {
        WrapperRules {
            patterns: Vec::new(),
            defaults: true,
            learnt: BTreeSet::new(),
            named: NamedCache::default(),
        }
    }
}

/// An allocation site: the frame of the function that asked for the memory, what was
/// folded into it, and how many stacks were merged under it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Site {
    pub file: Option<String>,
    pub function: String,
    pub line: Option<u32>,
    pub module: String,
    /// The distinct stacks merged into the row.
    pub stacks: u64,
    /// The wrappers folded into the site (their functions, leaf first, each once): the
    /// allocator and everything that only passed the request on.
    pub wrappers: Vec<String>,
}

/// Why a frame was skipped on the way to the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// Not skipped: a site.
    No,
    /// The C/C++ runtime's code (rule 1).
    Runtime,
    /// A wrapper by name (rules 2, 3) or by shape (rule 4).
    Wrapper,
}

fn system_header<F: FrameView>(f: &F) -> bool {
    f.file().is_some_and(|p| p.starts_with("/usr/include/"))
}

/// What [`WrapperRules::learn`] has seen of each function so far.
#[derive(Default)]
pub(crate) struct Learner {
    seen: FastMap<Box<str>, Seen>,
    /// Each interned frame's skip ([`FrameView::ids`]): the names' rules matched once.
    skips: FastMap<(u32, u32, u32), Skip>,
    /// The function ids seen elsewhere than directly above an allocator: another such
    /// frame of one changes nothing (its name is not looked up again).
    elsewhere: crate::hash::FastSet<u32>,
}

#[derive(Default)]
struct Seen {
    callers: BTreeSet<String>,
    /// The places (file, line) it calls the allocator from.
    calls: BTreeSet<(Option<String>, Option<u32>)>,
    elsewhere: bool,
}

/// Whether the frame is the kernel's.
fn kernel<F: FrameView>(f: &F) -> bool {
    f.module().starts_with("[kernel")
}

impl WrapperRules {
    /// The default rules only.
    pub fn defaults() -> WrapperRules {
        WrapperRules::default()
    }

    /// No default rule (`--no-wrapper-rules`): only the runtime's frames and the user's
    /// patterns are skipped, and nothing is learnt from shape.
    pub fn none() -> WrapperRules {
        WrapperRules {
            defaults: false,
            ..WrapperRules::default()
        }
    }

    /// Adds a user's pattern (`--wrapper PATTERN`).
    pub fn add_pattern(&mut self, pattern: &str) -> Result<(), Error> {
        if pattern.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::EmptyPattern,
                "--wrapper: an empty pattern",
            ));
        }
        self.patterns.push(pattern.to_string());
        self.named = NamedCache::default();
        Ok(())
    }

    /// The functions recognised as wrappers by their shape (after [`WrapperRules::learn`]).
    pub fn learnt(&self) -> impl Iterator<Item = &str> {
        self.learnt.iter().map(String::as_str)
    }

    /// Whether `name` is a wrapper by name: a user's pattern, or a default one.
    fn named(&self, name: &str) -> bool {
        let mut cache = self.named.lock().unwrap();
        if let Some(&n) = cache.get(name) {
            return n;
        }
        let n = self.named_uncached(name);
        cache.insert(name.into(), n);
        n
    }

    fn named_uncached(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| name_matches(p, name))
            || (self.defaults && DEFAULT_WRAPPERS.iter().any(|p| name_matches(p, name)))
    }

    fn skip<F: FrameView>(&self, f: &F, learnt: bool) -> Skip {
        if runtime(f.module()) || system_header(f) {
            Skip::Runtime
        } else if self.named(f.function()) || (learnt && self.learnt.contains(f.function())) {
            Skip::Wrapper
        } else {
            Skip::No
        }
    }

    /// The index in `frames` (leaf first) of the allocation site, with the rules learnt
    /// so far: the first user frame that is neither the runtime's nor a wrapper; else
    /// (every frame is) the first user frame that is no wrapper by name or shape (say the
    /// loader's own allocation at start-up); else the first user frame; else the first.
    pub fn site_index<F: FrameView>(&self, frames: &[F]) -> Option<usize> {
        self.site_with(frames, true)
    }

    fn site_with<F: FrameView>(&self, frames: &[F], learnt: bool) -> Option<usize> {
        let user = || frames.iter().enumerate().filter(|(_, f)| !kernel(*f));
        user()
            .find(|(_, f)| self.skip(*f, learnt) == Skip::No)
            .or_else(|| {
                user().find(|(_, f)| {
                    !(self.named(f.function()) || (learnt && self.learnt.contains(f.function())))
                })
            })
            .or_else(|| user().next())
            .map(|(i, _)| i)
            .or((!frames.is_empty()).then_some(0))
    }

    /// Learns the program's own wrappers from `stacks` (the allocation stacks of a report,
    /// leaf first): a function is one when, in every stack it is in, it is the site the
    /// other rules give and its frame is directly above an allocator by name (it calls the
    /// allocator itself), always from the same line, and its callers there are at least
    /// two distinct functions.
    /// Nothing is learnt without the default rules.
    pub fn learn<'a, F: FrameView + 'a>(&mut self, stacks: impl IntoIterator<Item = &'a [F]>) {
        let mut seen = Learner::default();
        for frames in stacks {
            let _ = self.learn_one(&mut seen, frames);
        }
        self.learn_from(seen);
    }

    /// What [`WrapperRules::learn`] takes of one stack, into `seen`: stacks given one at a
    /// time (a report that holds stack ids, not frames). Returns the stack's
    /// [`SiteParts`] when its frames are interned.
    pub(crate) fn learn_one<F: FrameView>(&self, seen: &mut Learner, frames: &[F]) -> SiteParts {
        if !self.defaults {
            return None;
        }
        // Each frame's skip, decided once per distinct interned frame.
        let skips: Vec<Skip> = frames
            .iter()
            .map(|f| match f.ids() {
                Some(id) => *seen.skips.entry(id).or_insert_with(|| self.skip(f, false)),
                None => self.skip(f, false),
            })
            .collect();
        let user = |i: usize| !kernel(&frames[i]);
        // The site the other rules give ([`WrapperRules::site_with`] without the learnt).
        let site = (0..frames.len()).find(|&i| user(i) && skips[i] == Skip::No);
        let parts = site.and_then(|i| {
            let second = (i + 1..frames.len()).find(|&j| user(j) && skips[j] == Skip::No);
            let function = |i: usize| frames[i].ids().map(|(f, ..)| f);
            Some((function(i)?, second.and_then(function)))
        });
        // Directly above an allocator by name: the user frame below the site.
        let direct = site.filter(|&i| {
            frames[..i]
                .iter()
                .rev()
                .find(|f| !kernel(*f))
                .is_some_and(|f| self.named(f.function()))
        });
        let elsewhere = &mut seen.elsewhere;
        let seen = &mut seen.seen;
        for (i, f) in frames.iter().enumerate() {
            if !user(i) || skips[i] != Skip::No {
                continue;
            }
            if Some(i) != direct {
                if let Some((function, ..)) = f.ids() {
                    if !elsewhere.insert(function) {
                        continue;
                    }
                }
            }
            // Looked up by the name first: a String is made once per function.
            let s = match seen.get_mut(f.function()) {
                Some(s) => s,
                None => seen.entry(f.function().into()).or_default(),
            };
            if Some(i) == direct {
                if !s
                    .calls
                    .iter()
                    .any(|(file, line)| file.as_deref() == f.file() && *line == f.line())
                {
                    s.calls.insert((f.file().map(String::from), f.line()));
                }
                if let Some(c) = frames[i + 1..].iter().find(|c| !kernel(*c)) {
                    if !s.callers.contains(c.function()) {
                        s.callers.insert(c.function().to_string());
                    }
                }
            } else {
                s.elsewhere = true;
            }
        }
        parts
    }

    /// The wrappers learnt from what `seen` took of every stack.
    pub(crate) fn learn_from(&mut self, seen: Learner) {
        if !self.defaults {
            return;
        }
        self.learnt = seen
            .seen
            .into_iter()
            .filter(|(_, s)| !s.elsewhere && s.calls.len() == 1 && s.callers.len() >= 2)
            .map(|(f, _)| f.into())
            .collect();
    }

    /// The site of `frames` ([`WrapperRules::site_index`]) and the wrappers folded into
    /// it (each function once, leaf first; the kernel's frames left out).
    pub fn site<F: FrameView>(&self, frames: &[F]) -> Option<(usize, Vec<String>)> {
        let i = self.site_index(frames)?;
        let mut wrappers: Vec<String> = Vec::new();
        for f in frames[..i].iter().filter(|f| !kernel(*f)) {
            if !wrappers.iter().any(|w| w == f.function()) {
                wrappers.push(f.function().to_string());
            }
        }
        Some((i, wrappers))
    }
}

/// What the site of a stack needs from its frames once the wrappers are learnt: the
/// function ids of its first two user frames that are no wrapper nor the runtime's by the
/// rules before learning. With the learnt, its site is the first unless that one was
/// learnt, else the second: a function learnt was the first of every stack it is in, so it
/// is never a second ([`WrapperRules::learn`]). None: the frames were not interned, or no
/// such frame (the site is then the fallbacks' of [`WrapperRules::site_index`]).
pub(crate) type SiteParts = Option<(u32, Option<u32>)>;

/// [`site_place`] from a stack's [`SiteParts`] with `rules` (learnt from the same stacks),
/// None when its frames are needed.
pub(crate) fn site_place_of_parts(
    rules: &WrapperRules,
    names: &crate::interned::Names,
    (first, second): (u32, Option<u32>),
) -> Option<String> {
    let function = if rules.learnt.contains(names.get(first)) {
        second?
    } else {
        first
    };
    Some(super::places::short(names.get(function)).to_string())
}

/// The site's function without its parameters, for a summary's sentence ("(no stack)"
/// without frames).
pub(crate) fn site_place<F: FrameView>(rules: &WrapperRules, frames: &[F]) -> String {
    match rules.site_index(frames) {
        Some(i) => super::places::short(frames[i].function()).to_string(),
        None => "(no stack)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(function: &str, module: &str) -> Frame {
        Frame {
            function: function.into(),
            file: Some("app.cpp".into()),
            line: Some(1),
            inlined: false,
            module: module.into(),
            address: "0x1".into(),
        }
    }

    fn libc(function: &str) -> Frame {
        Frame {
            file: None,
            line: None,
            ..f(function, "/usr/lib/x86_64-linux-gnu/libc.so.6")
        }
    }

    fn app(function: &str) -> Frame {
        f(function, "/srv/app")
    }

    fn site(r: &WrapperRules, frames: &[Frame]) -> String {
        frames[r.site_index(frames).unwrap()].function.clone()
    }

    #[test]
    fn the_runtime_and_the_allocator_chains_are_skipped() {
        let r = WrapperRules::defaults();
        let stack = [
            libc("malloc"),
            f("operator new(unsigned long)", "/usr/lib/libstdc++.so.6"),
            Frame {
                inlined: true,
                file: Some("/usr/include/c++/12/bits/new_allocator.h".into()),
                ..app("std::__new_allocator<int>::allocate(unsigned long, void const*)")
            },
            app("std::vector<int, std::allocator<int> >::_M_realloc_insert(int&&)"),
            app("fill(int)"),
            app("main"),
        ];
        // The vector's own code, not inlined from a header here, is a site by these rules;
        // --wrapper 'std::vector*' folds it.
        assert_eq!(
            site(&r, &stack),
            "std::vector<int, std::allocator<int> >::_M_realloc_insert(int&&)"
        );
        let mut r = WrapperRules::defaults();
        r.add_pattern("std::vector*").unwrap();
        assert_eq!(site(&r, &stack), "fill(int)");
        let (i, wrappers) = r.site(&stack).unwrap();
        assert_eq!(i, 4);
        assert_eq!(wrappers.len(), 4);
        assert_eq!(wrappers[0], "malloc");
        // A static binary: malloc in the program itself is still the allocator.
        let stack = [app("malloc"), app("make_buf(int)"), app("main")];
        assert_eq!(site(&WrapperRules::defaults(), &stack), "make_buf(int)");
        // Without the default names, the program's malloc is the site.
        assert_eq!(site(&WrapperRules::none(), &stack), "malloc");
        // Only the runtime: the first user frame no name calls a wrapper.
        let stack = [libc("malloc"), libc("_IO_file_doallocate"), libc("puts")];
        assert_eq!(site(&r, &stack), "_IO_file_doallocate");
    }

    #[test]
    fn a_function_that_only_passes_a_size_on_for_several_callers_is_a_wrapper() {
        let my = |caller: &str| {
            vec![
                libc("malloc"),
                app("my_alloc(unsigned long)"),
                app(caller),
                app("main"),
            ]
        };
        let one_caller = [libc("malloc"), app("helper()"), app("parse()"), app("main")];
        let also_above = [libc("malloc"), app("builder()"), app("make()"), app("main")];
        let builder_calls = [libc("malloc"), app("grow()"), app("builder()"), app("main")];
        let builder_other = [
            libc("malloc"),
            app("builder()"),
            app("other()"),
            app("main"),
        ];
        // Json::quote grows a string (libstdc++'s code below it, no allocator by name
        // directly): not a wrapper, whatever its callers.
        let quote = |caller: &str| {
            vec![
                libc("malloc"),
                f("operator new(unsigned long)", "/usr/lib/libstdc++.so.6"),
                f("std::string::_M_mutate()", "/usr/lib/libstdc++.so.6"),
                app("Json::quote(char const*)"),
                app(caller),
                app("main"),
            ]
        };
        // list_push allocates at two places (the node, its data): not only a wrapper.
        let at = |line: u32, caller: &str| {
            vec![
                libc("malloc"),
                Frame {
                    line: Some(line),
                    ..app("list_push(List*, void*)")
                },
                app(caller),
                app("main"),
            ]
        };
        let stacks = [
            at(10, "a()"),
            at(12, "b()"),
            quote("Json::str()"),
            quote("Json::prefix()"),
            my("parse_headers()"),
            my("read_body()"),
            my("read_body()"),
            one_caller.to_vec(),
            also_above.to_vec(),
            builder_calls.to_vec(),
            builder_other.to_vec(),
        ];
        let mut r = WrapperRules::defaults();
        r.learn(stacks.iter().map(|s| s.as_slice()));
        assert_eq!(r.learnt().collect::<Vec<_>>(), ["my_alloc(unsigned long)"]);
        assert_eq!(site(&r, &stacks[0]), "list_push(List*, void*)");
        assert_eq!(site(&r, &stacks[2]), "Json::quote(char const*)");
        assert_eq!(site(&r, &stacks[4]), "parse_headers()");
        assert_eq!(site(&r, &stacks[5]), "read_body()");
        // helper has one caller: it is the site. builder is also above grow: it is not
        // only a wrapper.
        assert_eq!(site(&r, &one_caller), "helper()");
        assert_eq!(site(&r, &also_above), "builder()");
        assert_eq!(
            r.site(&stacks[4]).unwrap().1,
            ["malloc", "my_alloc(unsigned long)"]
        );
        // --no-wrapper-rules: nothing learnt.
        let mut r = WrapperRules::none();
        r.learn(stacks.iter().map(|s| s.as_slice()));
        assert_eq!(r.learnt().count(), 0);
        assert_eq!(site(&r, &stacks[4]), "my_alloc(unsigned long)");
        assert_eq!(site_place(&r, &stacks[4]), "my_alloc");
    }
}
