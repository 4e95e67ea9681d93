//! The small glob(3) subset keepalived's `include` relies on: `*`, `?` and
//! `[...]` classes (with ranges and `!`/`^` negation) in any path component.
//! Results are sorted, like glob(3) without `GLOB_NOSORT`; hidden entries
//! only match a pattern that itself starts with `.`.

use std::path::{Component, Path, PathBuf};

use crate::source::Resolver;

/// True when the text contains a glob metacharacter.
pub(crate) fn has_magic(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Match one path component against a pattern.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> bool {
    // Iterative matcher with single-star backtracking (linear in practice).
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => {
                    if let Some((ok, len)) = class(&p[pi..], n[ni]) {
                        if ok {
                            pi += len;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == '[' {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                c => {
                    if c == n[ni] {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Evaluate a `[...]` class at the start of `p` against `c`: (matched, length
/// of the class in the pattern), or `None` when the class is unterminated.
fn class(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    while i < p.len() {
        let ch = p[i];
        if ch == ']' && !first {
            return Some((found != negate, i + 1));
        }
        first = false;
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&e| e != ']') {
            let end = p[i + 2];
            if ch <= c && c <= end {
                found = true;
            }
            i += 3;
        } else {
            if ch == c {
                found = true;
            }
            i += 1;
        }
    }
    None
}

/// Expand a pattern into the sorted list of existing paths it names.
/// A pattern without metacharacters is returned as is (existence is checked
/// when it is read).
pub(crate) fn expand(pattern: &Path, resolver: &dyn Resolver) -> Vec<PathBuf> {
    if !has_magic(&pattern.to_string_lossy()) {
        return vec![pattern.to_path_buf()];
    }
    let mut current: Vec<PathBuf> = vec![PathBuf::new()];
    for comp in pattern.components() {
        let mut next = Vec::new();
        match comp {
            Component::Normal(os) => {
                let s = os.to_string_lossy();
                if has_magic(&s) {
                    for base in &current {
                        let dir = if base.as_os_str().is_empty() {
                            Path::new(".")
                        } else {
                            base.as_path()
                        };
                        let Ok(mut names) = resolver.list_dir(dir) else {
                            continue;
                        };
                        names.sort();
                        for name in names {
                            if matches(&s, &name) {
                                next.push(base.join(&name));
                            }
                        }
                    }
                } else {
                    next = current.iter().map(|b| b.join(os)).collect();
                }
            }
            other => {
                next = current.iter().map(|b| b.join(other.as_os_str())).collect();
            }
        }
        current = next;
        if current.is_empty() {
            break;
        }
    }
    current.sort();
    current
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns() {
        assert!(matches("*.conf", "a.conf"));
        assert!(!matches("*.conf", "a.conf.bak"));
        assert!(matches("vs-?.conf", "vs-1.conf"));
        assert!(matches("vs-[0-9].conf", "vs-7.conf"));
        assert!(!matches("vs-[!0-9].conf", "vs-7.conf"));
        assert!(!matches("*", ".hidden"));
        assert!(matches(".*", ".hidden"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
    }
}
