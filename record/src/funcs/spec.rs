//! `--func SPEC[:MIN_US]` parsed: `LIB:`, the name, glob or address, `:MIN_US`; and the
//! globs (also those of ld.so.conf's `include` lines).
use super::norm;
use anyhow::{bail, Context, Result};
use std::fmt;
use std::str::FromStr;

/// One `--func` argument, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSpec {
    /// As the user wrote it, for messages.
    pub text: String,
    /// `LIB` of `LIB:SYMBOL` or `BINARY:0xADDR`.
    pub lib: Option<String>,
    pub what: What,
    /// The `:MIN_US` suffix.
    pub min_us: Option<u64>,
}

/// What a spec names inside the binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// A demangled name (with or without parameters), a mangled name or a C symbol.
    Name(String),
    /// A name with `*` or `?` (`\*`, `\?` for the characters themselves).
    Glob(String),
    /// An ELF virtual address in the binary `lib`.
    Address(u64),
}

impl FromStr for FuncSpec {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let s = text.trim();
        if s.is_empty() {
            bail!("empty function spec");
        }
        let (s, min_us) = split_min_us(s)?;
        if min_us.is_some_and(|us| us.checked_mul(1000).is_none()) {
            bail!("'{text}': MIN_US is too large");
        }
        let (lib, rest) = split_lib(s);
        if lib == Some("") {
            bail!("'{text}': nothing before ':' (LIB:SYMBOL or BINARY:0xADDR)");
        }
        if rest.is_empty() {
            bail!("'{text}': no function after '{}:'", lib.unwrap_or(""));
        }
        let hex = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X"));
        let what = if let Some(hex) = hex {
            let a = u64::from_str_radix(hex, 16)
                .with_context(|| format!("'{text}': bad address '{rest}'"))?;
            if lib.is_none() {
                bail!("'{text}': an address needs its binary: BINARY:0xADDR");
            }
            What::Address(a)
        } else if is_glob(rest) {
            What::Glob(rest.to_string())
        } else {
            What::Name(rest.to_string())
        };
        Ok(FuncSpec {
            text: text.to_string(),
            lib: lib.map(str::to_string),
            what,
            min_us,
        })
    }
}

impl fmt::Display for FuncSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A trailing `:digits` is MIN_US unless the colon is half of a `::`.
fn split_min_us(s: &str) -> Result<(&str, Option<u64>)> {
    if let Some(i) = s.rfind(':') {
        let (head, digits) = (&s[..i], &s[i + 1..]);
        if !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !head.is_empty()
            && !head.ends_with(':')
        {
            let us = digits
                .parse()
                .with_context(|| format!("'{s}': MIN_US is too large"))?;
            return Ok((head, Some(us)));
        }
    }
    Ok((s, None))
}

/// `LIB:REST` at the first single `:` outside brackets (`::` separates C++ scopes, and
/// `[abi:cxx11]` is part of a name).
fn split_lib(s: &str) -> (Option<&str>, &str) {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b':' if depth == 0
                && (i == 0 || b[i - 1] != b':')
                && b.get(i + 1).is_none_or(|&n| n != b':') =>
            {
                return (Some(&s[..i]), &s[i + 1..]);
            }
            _ => {}
        }
    }
    (None, s)
}

fn is_glob(s: &str) -> bool {
    let mut esc = false;
    for c in s.chars() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '*' | '?' => return true,
            _ => {}
        }
    }
    false
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    Lit(u8),
    One,
    Star,
}

/// A glob pattern, whitespace removed: `*` any bytes, `?` one byte, `\x` the byte x.
#[derive(Debug)]
pub(super) struct Glob(Vec<Tok>);

impl Glob {
    pub(super) fn new(pattern: &str) -> Self {
        let mut toks = Vec::new();
        let mut it = norm(pattern).into_bytes().into_iter();
        while let Some(c) = it.next() {
            toks.push(match c {
                b'\\' => Tok::Lit(it.next().unwrap_or(b'\\')),
                b'*' => Tok::Star,
                b'?' => Tok::One,
                c => Tok::Lit(c),
            });
        }
        toks.dedup_by(|a, b| *a == Tok::Star && *b == Tok::Star);
        Glob(toks)
    }

    /// Iterative matching with one backtrack point: linear for the usual patterns.
    pub(super) fn matches(&self, s: &[u8]) -> bool {
        let p = &self.0;
        let (mut pi, mut si) = (0, 0);
        let mut back: Option<(usize, usize)> = None;
        while si < s.len() {
            match p.get(pi) {
                Some(Tok::Star) => {
                    back = Some((pi, si));
                    pi += 1;
                }
                Some(Tok::One) => {
                    pi += 1;
                    si += 1;
                }
                Some(Tok::Lit(c)) if *c == s[si] => {
                    pi += 1;
                    si += 1;
                }
                _ => match back {
                    Some((bp, bs)) => {
                        pi = bp + 1;
                        si = bs + 1;
                        back = Some((bp, bs + 1));
                    }
                    None => return false,
                },
            }
        }
        p[pi..].iter().all(|t| *t == Tok::Star)
    }

    /// The literal text, for suggesting names close to it.
    pub(super) fn literal(&self) -> String {
        self.0
            .iter()
            .filter_map(|t| match t {
                Tok::Lit(c) => Some(*c as char),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> FuncSpec {
        s.parse().unwrap()
    }

    #[test]
    fn specs_parse_from_the_right() {
        let s = spec("shop::Catalog::slow_lookup");
        assert_eq!((s.lib, s.min_us), (None, None));
        assert_eq!(s.what, What::Name("shop::Catalog::slow_lookup".into()));

        let s = spec("shop::Catalog::slow_lookup:500");
        assert_eq!(s.min_us, Some(500));
        assert_eq!(s.what, What::Name("shop::Catalog::slow_lookup".into()));
        assert_eq!(s.text, "shop::Catalog::slow_lookup:500");

        // `::123` is no MIN_US.
        let s = spec("ns::123");
        assert_eq!((s.lib, s.min_us), (None, None));

        let s = spec("libfoo.so:_ZN3foo3barEv:500");
        assert_eq!(s.lib.as_deref(), Some("libfoo.so"));
        assert_eq!(s.what, What::Name("_ZN3foo3barEv".into()));
        assert_eq!(s.min_us, Some(500));

        let s = spec("/usr/lib/x86_64-linux-gnu/libc.so.6:malloc");
        assert_eq!(
            s.lib.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(s.what, What::Name("malloc".into()));

        let s = spec("libstdc++.so.6:std::__cxx11::basic_string<char>::_M_create");
        assert_eq!(s.lib.as_deref(), Some("libstdc++.so.6"));
        assert_eq!(
            s.what,
            What::Name("std::__cxx11::basic_string<char>::_M_create".into())
        );

        let s = spec("./server:0x4011d6:20");
        assert_eq!(s.lib.as_deref(), Some("./server"));
        assert_eq!((s.what, s.min_us), (What::Address(0x4011d6), Some(20)));

        // ABI tags and parameters hold single colons that are no LIB separator.
        let s = spec("foo::bar[abi:cxx11]");
        assert_eq!(s.lib, None);
        assert_eq!(s.what, What::Name("foo::bar[abi:cxx11]".into()));
        let s = spec("libx.so:f(std::map<int, int>::iterator)");
        assert_eq!(s.lib.as_deref(), Some("libx.so"));

        assert_eq!(spec("ns::*::get*").what, What::Glob("ns::*::get*".into()));
        assert_eq!(
            spec("x::operator\\*").what,
            What::Name("x::operator\\*".into())
        );
        assert_eq!(spec(" malloc ").what, What::Name("malloc".into()));
        let s = spec("(anonymous namespace)::helper:7");
        assert_eq!((s.lib, s.min_us), (None, Some(7)));
        assert_eq!(s.what, What::Name("(anonymous namespace)::helper".into()));
    }

    #[test]
    fn bad_specs_are_refused() {
        for (s, why) in [
            ("", "empty"),
            ("0x1234", "needs its binary"),
            ("./a:0xzz", "bad address"),
            (":foo", "nothing before"),
            ("libc.so.6:", "no function after"),
            ("f:99999999999999999999", "too large"),
            ("f:99999999999999999", "too large"),
        ] {
            let e = s.parse::<FuncSpec>().unwrap_err().to_string();
            assert!(e.contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn globs_cross_scopes() {
        let m = |p: &str, s: &str| Glob::new(p).matches(norm(s).as_bytes());
        assert!(m("ns::*::get*", "ns::A::B::get_value"));
        assert!(m("ns::*::get*", "ns::A::get"));
        assert!(!m("ns::*::get*", "ns::get"));
        assert!(!m("ns::*::get*", "other::A::get"));
        assert!(m("shop::*lookup*", "shop::Catalog::slow_lookup"));
        assert!(m("shop::*lookup*", "shop::Catalog::lookup"));
        assert!(!m("shop::*lookup*", "shop::Cart::add_item"));
        assert!(m("*", ""));
        assert!(m("m?lloc", "malloc"));
        assert!(!m("m?lloc", "mlloc"));
        assert!(m("a*b*c", "aXXbYYbZc"));
        assert!(!m("a*b*c", "aXXbYYbZ"));
        assert!(m("operator new(*)", "operator new(unsigned long)"));
        assert!(m("x::operator\\*", "x::operator*"));
        assert!(!m("x::operator\\*", "x::operator+"));
        assert!(m("*.conf", "libc.conf"));
        assert!(!m("*.conf", "libc.conf~"));
        assert_eq!(Glob::new("shop::*lookup*").literal(), "shop::lookup");
    }
}
