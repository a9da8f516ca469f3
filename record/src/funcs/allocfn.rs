//! `--alloc-fn NAME:SIZE_ARG[:FREE_NAME[:PTR_ARG]]` parsed: a custom allocator (an arena's
//! or a pool's allocate/free pair) profiled as the system allocator is.
//!
//! NAME and FREE_NAME are `--func` names (a demangled C++ name, with or without parameters,
//! a mangled name or a C symbol, `LIB:SYMBOL`; see the module above), found in the target's
//! executable and libraries. SIZE_ARG and PTR_ARG are 0-based indexes of the integer
//! argument registers (rdi, rsi, rdx, rcx, r8, r9: 0 to 5); a member function's `this` is
//! argument 0, so `void* Arena::Allocate(size_t)` has its size at 1. PTR_ARG defaults to 0
//! (a C `pool_free(void*)`); `void Arena::Free(void*)` needs `:1`.
//!
//! ```text
//! Arena::Allocate:1                    allocations only (no frees: every block leaks)
//! Arena::Allocate:1:Arena::Free:1      the pair; the freed pointer is Free's argument 1
//! pool_alloc:0:pool_free               C functions: size and pointer are argument 0
//! ```
//!
//! The spec splits at single `:` outside brackets (`::` and `[abi:cxx11]` are parts of
//! names): the first part that is a number is SIZE_ARG, everything before it NAME; after it
//! FREE_NAME, and a last part that is a number is PTR_ARG.
use super::FuncSpec;
use anyhow::{bail, Context, Result};
use std::str::FromStr;

/// The most argument registers a probe reads (System V x86-64: six integer registers).
pub const MAX_ARG: u32 = 5;

/// One `--alloc-fn` argument, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocFnSpec {
    /// As the user wrote it.
    pub text: String,
    /// NAME as the user wrote it (what the reports call the allocator).
    pub name: String,
    /// The allocation function.
    pub alloc: FuncSpec,
    /// The index of its size argument.
    pub size_arg: u32,
    /// The free function and the index of its pointer argument.
    pub free: Option<(FuncSpec, u32)>,
}

/// The parts of `s` between single `:` outside brackets.
fn parts(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' | b'[' | b'<' => depth += 1,
            b')' | b']' | b'>' => depth -= 1,
            b':' if depth == 0
                && (i == 0 || b[i - 1] != b':')
                && b.get(i + 1).is_none_or(|&n| n != b':') =>
            {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn index(text: &str, what: &str, s: &str) -> Result<u32> {
    let n: u32 = s
        .parse()
        .ok()
        .filter(|&n| n <= MAX_ARG)
        .with_context(|| {
            format!(
                "--alloc-fn '{text}': {what} {s} is not an argument index 0 to {MAX_ARG} (0-based, in the integer argument registers; a member function's `this` is 0)"
            )
        })?;
    Ok(n)
}

fn name(text: &str, what: &str, s: &str) -> Result<FuncSpec> {
    if s.trim().is_empty() {
        bail!("--alloc-fn '{text}': no {what} (NAME:SIZE_ARG[:FREE_NAME[:PTR_ARG]])");
    }
    s.parse()
        .with_context(|| format!("--alloc-fn '{text}': {what}"))
}

impl FromStr for AllocFnSpec {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let s = text.trim();
        let p = parts(s);
        let Some(i) = p.iter().position(|x| is_number(x)).filter(|&i| i > 0) else {
            bail!("--alloc-fn '{text}': no SIZE_ARG: NAME:SIZE_ARG[:FREE_NAME[:PTR_ARG]], SIZE_ARG the 0-based index of the size argument (a member function's `this` is 0)");
        };
        let alloc_name = p[..i].join(":");
        let alloc = name(text, "NAME", &alloc_name)?;
        let size_arg = index(text, "SIZE_ARG", p[i])?;
        let rest = &p[i + 1..];
        let free = match rest {
            [] => None,
            [.., last] if rest.len() > 1 && is_number(last) => Some((
                name(text, "FREE_NAME", &rest[..rest.len() - 1].join(":"))?,
                index(text, "PTR_ARG", last)?,
            )),
            _ => Some((name(text, "FREE_NAME", &rest.join(":"))?, 0)),
        };
        Ok(AllocFnSpec {
            text: text.to_string(),
            name: alloc_name,
            alloc,
            size_arg,
            free,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::funcs::spec::What;

    #[test]
    fn the_name_of_a_spec() {
        for (text, want) in [
            (
                "pool::Arena::Allocate:1:pool::Arena::Free:1",
                "pool::Arena::Allocate",
            ),
            ("pool_alloc:0", "pool_alloc"),
            ("libpool.so:pool_alloc:0:pool_free", "libpool.so:pool_alloc"),
            (
                "Arena::Allocate(unsigned long):1",
                "Arena::Allocate(unsigned long)",
            ),
        ] {
            assert_eq!(spec(text).name, want, "{text}");
        }
    }

    fn spec(s: &str) -> AllocFnSpec {
        s.parse().unwrap()
    }
    fn err(s: &str) -> String {
        s.parse::<AllocFnSpec>().unwrap_err().to_string()
    }
    fn n(f: &FuncSpec) -> (Option<&str>, &What) {
        (f.lib.as_deref(), &f.what)
    }

    #[test]
    fn the_forms() {
        let s = spec("Arena::Allocate:1");
        assert_eq!(n(&s.alloc), (None, &What::Name("Arena::Allocate".into())));
        assert_eq!((s.size_arg, s.free.is_none()), (1, true));

        let s = spec("Arena::Allocate(unsigned long):1:Arena::Free(void*):1");
        assert_eq!(
            s.alloc.what,
            What::Name("Arena::Allocate(unsigned long)".into())
        );
        let (f, i) = s.free.unwrap();
        // `*` makes it a glob, as --func reads it (it matches the function itself).
        assert_eq!((f.what, i), (What::Glob("Arena::Free(void*)".into()), 1));

        let s = spec("pool_alloc:0:pool_free");
        let (f, i) = s.free.unwrap();
        assert_eq!((f.what, i), (What::Name("pool_free".into()), 0));

        let s = spec("libpool.so:pool_alloc:0:libpool.so:pool_free");
        assert_eq!(
            n(&s.alloc),
            (Some("libpool.so"), &What::Name("pool_alloc".into()))
        );
        let (f, i) = s.free.unwrap();
        assert_eq!((f.lib.as_deref(), i), (Some("libpool.so"), 0));

        let s = spec("_ZN5Arena8AllocateEm:1:_ZN5Arena4FreeEPv:1");
        assert_eq!(s.alloc.what, What::Name("_ZN5Arena8AllocateEm".into()));
        // a template argument's `:`-free number is not SIZE_ARG
        let s = spec("Pool<16>::get:1");
        assert_eq!(s.alloc.what, What::Name("Pool<16>::get".into()));
    }

    #[test]
    fn bad_specs_say_why_in_one_line() {
        for (s, want) in [
            ("Arena::Allocate", "no SIZE_ARG"),
            (
                "Arena::Allocate:6",
                "SIZE_ARG 6 is not an argument index 0 to 5",
            ),
            (
                "Arena::Allocate:1:Arena::Free:9",
                "PTR_ARG 9 is not an argument index",
            ),
            (":1", "no NAME"),
            ("", "no SIZE_ARG"),
        ] {
            let e = err(s);
            assert!(e.contains(want), "{s}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
