//! The one demangler of ebtrace.
//!
//! ebsym prints function names with it and ebrec matches `--func` patterns against it, so a
//! name copied from a report is a name `--func` accepts. C++ names go through the C++
//! runtime's own demangler, `__cxa_demangle` (libiberty's cp-demangle, the code behind c++filt,
//! binutils, gdb and perf), so names read as those tools print them. Only a name it refuses
//! goes to the `cpp_demangle` crate (it refuses some very long legacy Rust symbols that
//! llvm-symbolizer demangles; `cpp_demangle` is not first because it gets some pack
//! expansions wrong: `void (S::*&&)(long)` comes out as `void (S&&::*)(long)`). Before this
//! crate, ebrec matched `--func` names with cpp_demangle 0.4 alone while ebsym printed
//! libstdc++'s, so a name copied from a report could fail to match. Rust v0 names (`_R…`) go
//! through `rustc-demangle`.

/// Demangles `name` if it is an Itanium C++ name (`_Z…`) or a Rust v0 one (`_R…`); else, or
/// when it does not demangle, returns it as is.
pub fn demangle(name: &str) -> String {
    try_demangle(name).unwrap_or_else(|| name.to_string())
}

/// The demangled form of `name`, or None when it is not a mangled name this demangler reads.
pub fn try_demangle(name: &str) -> Option<String> {
    if name.starts_with("_R") {
        // `{:#}`: without the crate disambiguators, as llvm-symbolizer prints them.
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return Some(format!("{d:#}"));
        }
    }
    if name.starts_with("_Z") {
        return cxa_demangle(name).or_else(|| {
            cpp_demangle::Symbol::new(name)
                .ok()
                .and_then(|sym| sym.demangle().ok())
        });
    }
    None
}

/// Whether `name` looks mangled (and so is worth demangling).
pub fn is_mangled(name: &str) -> bool {
    name.starts_with("_Z") || name.starts_with("_R")
}

extern "C" {
    fn __cxa_demangle(
        mangled: *const std::ffi::c_char,
        buf: *mut std::ffi::c_char,
        len: *mut usize,
        status: *mut std::ffi::c_int,
    ) -> *mut std::ffi::c_char;
    fn free(p: *mut std::ffi::c_void);
}

fn cxa_demangle(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut status: std::ffi::c_int = 0;
    // SAFETY: `c` is a valid NUL-terminated string; a null buffer asks __cxa_demangle to
    // malloc the result, which we copy and then free exactly once.
    unsafe {
        let p = __cxa_demangle(
            c.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut status,
        );
        if p.is_null() {
            return None;
        }
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        free(p.cast());
        (status == 0).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cxx_names_read_as_cxxfilt_prints_them() {
        assert_eq!(
            demangle("_ZN4shop7Catalog11slow_lookupERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"),
            "shop::Catalog::slow_lookup(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)"
        );
        // A pack expansion cpp_demangle 0.4/0.5 got wrong.
        assert_eq!(
            demangle("_Z1fIJM1SFvlEEEvDpOT_"),
            "void f<void (S::*)(long)>(void (S::*&&)(long))"
        );
    }

    #[test]
    fn a_name_libstdcxx_refuses_falls_back() {
        // A legacy Rust symbol with an identifier of 2,018 characters (ebsym's own
        // drop_in_place of a rayon job) that __cxa_demangle refuses; llvm-symbolizer prints it
        // as below.
        let id = format!("drop_in_place$LT${}$GT$", "x".repeat(2018 - 21));
        assert_eq!(id.len(), 2018);
        let mangled = format!("_ZN4core3ptr{}{id}17h69177438a41cf974E", id.len());
        assert_eq!(
            cxa_demangle(&mangled),
            None,
            "libstdc++ now reads it: drop the fallback?"
        );
        assert_eq!(
            demangle(&mangled),
            format!("core::ptr::{id}::h69177438a41cf974")
        );
    }

    #[test]
    fn other_names_pass_through() {
        assert_eq!(demangle("malloc"), "malloc");
        assert_eq!(demangle("_Znot a name"), "_Znot a name");
        assert_eq!(try_demangle("main"), None);
        assert!(is_mangled("_ZN1a1bEv") && !is_mangled("main"));
    }

    #[test]
    fn rust_v0_names() {
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
    }
}
