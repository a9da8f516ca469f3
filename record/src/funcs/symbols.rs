//! A binary's function symbols and the names each is matched by: demangled with the
//! demangler ebsym prints with, without return type, parameters, qualifiers or clone suffix.
use super::norm;
use ebtrace_elf::{Elf, Segment};
use std::collections::BTreeMap;
use std::path::Path;

/// A function symbol, with the names it is matched by.
#[derive(Debug)]
pub(super) struct Func {
    /// The symbol as in the table (ELF version suffix removed).
    pub(super) raw: String,
    /// Demangled, without return type, with parameters, with the clone suffix: for people.
    pub(super) display: String,
    /// Without parameters, qualifiers, clone suffix: `shop::Catalog::lookup` (for people).
    pub(super) base: String,
    /// `norm(base)` and `norm(signature without clone suffix)`: for matching.
    pub(super) base_norm: String,
    pub(super) sig_norm: String,
    /// `norm` of the whole demangled name without clone suffix, return type included (a
    /// template function's `void foo<int>(int)`), as ebsym prints a function.
    pub(super) full_norm: String,
    /// `norm` of the whole symbol demangled, clone suffixes included (`foo(int) [clone
    /// .constprop.0]`), as ebsym prints a clone named from the symbol table; None without a
    /// clone suffix (then it is `full_norm`).
    pub(super) clone_norm: Option<String>,
    /// `.constprop.0`, `.cold`, ... (GCC clone suffixes), if any.
    pub(super) clone: Option<String>,
    pub(super) addr: u64,
    pub(super) size: u64,
    /// 0 global, 1 weak, 2 local: which alias to show.
    pub(super) bind_rank: u8,
    pub(super) ifunc: bool,
}

impl Func {
    pub(super) fn new(raw: &str, addr: u64, size: u64, bind_rank: u8, ifunc: bool) -> Self {
        let (stem, clone) = match raw.find('.') {
            Some(i) if i > 0 => (&raw[..i], Some(raw[i..].to_string())),
            _ => (raw, None),
        };
        let (full, sig, base) = demangle(stem)
            .unwrap_or_else(|| (stem.to_string(), stem.to_string(), stem.to_string()));
        let display = match &clone {
            Some(c) => format!("{sig} [clone {c}]"),
            None => sig.clone(),
        };
        let clone_norm = clone
            .as_ref()
            .and_then(|_| ebtrace_demangle::try_demangle(raw).map(|d| norm(&d)));
        Func {
            raw: raw.to_string(),
            display,
            base_norm: norm(&base),
            base,
            sig_norm: norm(&sig),
            full_norm: norm(&full),
            clone_norm,
            clone,
            addr,
            size,
            bind_rank,
            ifunc,
        }
    }

    /// Code that is not a function entry: `.cold` or `.part.N` pieces.
    pub(super) fn fragment(&self) -> bool {
        self.clone
            .as_deref()
            .is_some_and(|c| c.split('.').any(|p| p == "cold" || p == "part"))
    }
}

/// The names of a mangled symbol, as ebtrace's one demangler (`ebtrace_demangle`, the one
/// ebsym prints with) spells it: (whole, as printed; without return type; base name without
/// parameters and qualifiers). A template function's demangled name starts with its return
/// type (`void foo<int>(int)`): ebsym prints that, and `--func` takes it as well as `foo<int>(int)`.
pub(super) fn demangle(stem: &str) -> Option<(String, String, String)> {
    if !stem.starts_with("_Z") {
        return None;
    }
    let full = ebtrace_demangle::try_demangle(stem)?;
    let (sig, base) = split_signature(&full);
    Some((full.clone(), sig.to_string(), base.to_string()))
}

/// A demangled function name split into (without return type, base name): `void
/// ns::f<int>(int) const` is (`ns::f<int>(int) const`, `ns::f<int>`). A name without a
/// parameter list (a data symbol, a special name) is its own base.
fn split_signature(full: &str) -> (&str, &str) {
    // The member function's qualifiers come after the parameters.
    let mut end = full.len();
    'strip: loop {
        for q in [" const", " volatile", " &&", " &", " noexcept"] {
            if full[..end].ends_with(q) {
                end -= q.len();
                continue 'strip;
            }
        }
        break;
    }
    let b = full.as_bytes();
    if end == 0 || b[end - 1] != b')' {
        return (full, full);
    }
    // The parameter list: the `(` matching the last `)`.
    let mut depth = 0i32;
    let mut open = None;
    for i in (0..end).rev() {
        match b[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(open) = open else {
        return (full, full);
    };
    let name = &full[..open];
    let start = return_type_end(name);
    (&full[start..], &full[start..open])
}

/// Where the function name starts after a return type in `name` (the text before the
/// parameter list): past the last space outside brackets that comes before an `operator`
/// keyword (`operator new`, `operator<`, `operator unsigned long` hold spaces and brackets of
/// their own), 0 when there is no return type.
fn return_type_end(name: &str) -> usize {
    let b = name.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut depth = 0i32;
    let mut after_space = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            b' ' if depth == 0 => after_space = i + 1,
            b'o' if depth == 0
                && name[i..].starts_with("operator")
                && (i == 0 || !ident(b[i - 1]))
                && b.get(i + 8).is_none_or(|&c| !ident(c)) =>
            {
                break;
            }
            _ => {}
        }
        i += 1;
    }
    after_space
}
/// The function symbols and load segments of one ELF file.
#[derive(Debug)]
pub(super) struct Table {
    /// Sorted by address.
    pub(super) funcs: Vec<Func>,
    pub(super) segments: Vec<Segment>,
}

impl Table {
    pub(super) fn read(path: &Path) -> Result<Table, String> {
        let elf = Elf::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let syms = elf
            .text_symbols()
            .map_err(|e| format!("{}: not an ELF file ({e})", path.display()))?;
        let mut seen: BTreeMap<(u64, &str), Func> = BTreeMap::new();
        for s in syms {
            if s.name.is_empty() {
                continue;
            }
            match seen.get_mut(&(s.address, s.name)) {
                Some(f) => {
                    // The same symbol in both tables: keep the better facts.
                    f.bind_rank = f.bind_rank.min(s.bind_rank);
                    f.size = f.size.max(s.size);
                }
                None => {
                    seen.insert(
                        (s.address, s.name),
                        Func::new(s.name, s.address, s.size, s.bind_rank, s.ifunc),
                    );
                }
            }
        }
        Ok(Table {
            funcs: seen.into_values().collect(),
            segments: elf.load_segments(),
        })
    }

    /// The segment holding `vaddr`'s bytes in the file.
    pub(super) fn segment(&self, vaddr: u64) -> Option<&Segment> {
        self.segments.iter().find(|s| s.holds(vaddr))
    }

    pub(super) fn file_offset(&self, vaddr: u64) -> Option<u64> {
        Elf::file_offset(&self.segments, vaddr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangled_names_lose_params_qualifiers_and_clones() {
        let f = Func::new(
            "_ZNK4shop7Catalog11slow_lookupERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
            0x10,
            4,
            0,
            false,
        );
        assert_eq!(f.base, "shop::Catalog::slow_lookup");
        assert!(f.display.ends_with("> const&) const"), "{}", f.display);
        assert_eq!(f.clone, None);

        let f = Func::new("_ZNKR3foo3barEv", 0x10, 4, 0, false);
        assert_eq!(f.base, "foo::bar");
        assert_eq!(f.sig_norm, "foo::bar()const&");

        let f = Func::new("_ZN4shop4Cart8add_itemEmmm.cold", 0x10, 4, 0, false);
        assert_eq!(f.base, "shop::Cart::add_item");
        assert_eq!(f.clone.as_deref(), Some(".cold"));
        assert!(f.fragment());
        assert!(f.display.ends_with("[clone .cold]"), "{}", f.display);

        let f = Func::new("_ZN3foo3barEv.constprop.0.isra.0", 0x10, 4, 0, false);
        assert_eq!((f.base.as_str(), f.fragment()), ("foo::bar", false));
        assert!(Func::new("_ZN3foo3barEv.part.0", 0, 0, 0, false).fragment());
        assert!(Func::new("helper.constprop.0.cold", 0, 0, 0, false).fragment());

        // Templates: no return type in either form.
        let f = Func::new("_Z3fooIiEvT_", 0x10, 4, 0, false);
        assert_eq!(
            (f.base.as_str(), f.sig_norm.as_str()),
            ("foo<int>", "foo<int>(int)")
        );

        // C symbols are their own names.
        let f = Func::new("malloc", 0x10, 4, 0, false);
        assert_eq!((f.base.as_str(), f.display.as_str()), ("malloc", "malloc"));

        let f = Func::new("_ZZ4mainENKUlvE_clEv", 0x10, 4, 0, false);
        assert_eq!(f.base, "main::{lambda()#1}::operator()");
    }

    #[test]
    fn return_types_and_parameters_split_off() {
        let s = split_signature;
        assert_eq!(s("void foo<int>(int)"), ("foo<int>(int)", "foo<int>"));
        assert_eq!(s("foo::bar() const &"), ("foo::bar() const &", "foo::bar"));
        assert_eq!(
            s("operator new(unsigned long)"),
            ("operator new(unsigned long)", "operator new")
        );
        assert_eq!(
            s("bool operator< <int>(A<int> const&, A<int> const&)"),
            (
                "operator< <int>(A<int> const&, A<int> const&)",
                "operator< <int>"
            )
        );
        assert_eq!(
            s("main::{lambda()#1}::operator()() const"),
            (
                "main::{lambda()#1}::operator()() const",
                "main::{lambda()#1}::operator()"
            )
        );
        assert_eq!(
            s("std::vector<int, std::allocator<int> > make<int>(unsigned long)"),
            ("make<int>(unsigned long)", "make<int>")
        );
        assert_eq!(
            s("(anonymous namespace)::oom(char const*)"),
            (
                "(anonymous namespace)::oom(char const*)",
                "(anonymous namespace)::oom"
            )
        );
        assert_eq!(
            s("X::operator unsigned long() const"),
            (
                "X::operator unsigned long() const",
                "X::operator unsigned long"
            )
        );
        assert_eq!(
            s("guard variable for x"),
            ("guard variable for x", "guard variable for x")
        );
    }

    #[test]
    fn names_as_ebsym_prints_them() {
        // A template function: ebsym prints the return type.
        let f = Func::new("_Z3fooIiEvT_", 0x10, 4, 0, false);
        assert_eq!(f.full_norm, "voidfoo<int>(int)");
        let f = Func::new("_ZN3foo3barEm.constprop.0", 0x10, 4, 0, false);
        assert_eq!(
            f.clone_norm.as_deref(),
            Some("foo::bar(unsignedlong)[clone.constprop.0]")
        );
    }
}
