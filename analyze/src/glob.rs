//! Globs: `*` any run of characters, `?` any one; what every pattern a user gives a report
//! is (`--suppress`, `--idle`, `--wrapper`, `--thread`). A leaf: it uses no other module.

/// Whether `text` matches the glob `pattern` (`*` any run, `?` any one character).
/// ASCII text (nearly every name) is matched in place, byte by byte; other text by its
/// characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    if pattern.is_ascii() && text.is_ascii() {
        return matches(pattern.as_bytes(), text.as_bytes(), b'*', b'?');
    }
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    matches(&p, &t, '*', '?')
}

/// [`glob`] on units (bytes of ASCII, or characters) with the wildcards `star` and `one`.
fn matches<T: Copy + PartialEq>(p: &[T], t: &[T], star_c: T, one: T) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == one || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == star_c {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == star_c)
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn ascii_and_other_text_match_alike() {
        assert!(glob("a?c*", "abcdef"));
        assert!(glob("a?c", "aéc"));
        assert!(!glob("a??c", "aéc"));
        assert!(glob("*né*", "café::né()"));
        assert!(!glob("*x", "abc"));
        assert!(glob("*", ""));
    }
}
