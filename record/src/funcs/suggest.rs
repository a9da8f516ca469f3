//! The names closest to an unknown one, for the refusal's `(closest: …)`.
use super::norm;
use super::symbols::Table;
use std::collections::HashSet;

/// The `n` names closest to `query` by edit distance, comparing with the whole name and
/// with each of its trailing scopes (`slow_lokup` is close to `shop::Catalog::slow_lookup`).
pub(super) fn closest(query: &str, by_sig: bool, tables: &[&Table], n: usize) -> Vec<String> {
    let q = norm(query);
    let q = q.as_bytes();
    let mut names: HashSet<&str> = HashSet::new();
    for t in tables {
        for f in t.funcs.iter().filter(|f| !f.fragment()) {
            names.insert(if by_sig {
                f.display.as_str()
            } else {
                f.base.as_str()
            });
        }
    }
    let mut scored: Vec<(usize, usize, &str)> = names
        .into_iter()
        .map(|name| {
            let full = norm(name);
            let whole = levenshtein(q, full.as_bytes());
            let mut best = whole;
            let mut rest = full.as_str();
            while let Some(i) = rest.find("::") {
                rest = &rest[i + 2..];
                best = best.min(levenshtein(q, rest.as_bytes()));
            }
            (best, whole, name)
        })
        .collect();
    scored.sort();
    let picked: Vec<String> = scored
        .into_iter()
        .take(n)
        .map(|s| s.2.to_string())
        .collect();
    if picked.is_empty() {
        vec!["no function symbols found".into()]
    } else {
        picked
    }
}

pub(super) fn levenshtein(a: &[u8], b: &[u8]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein(b"kitten", b"sitting"), 3);
        assert_eq!(levenshtein(b"", b"abc"), 3);
        assert_eq!(levenshtein(b"same", b"same"), 0);
    }
}
