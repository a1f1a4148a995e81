//! Glob patterns (`*`, `?`, `[ab]`, `[a-z]`, `[!a]`, `\x`) matched against lock names: etcd
//! filters by prefix only, so a listing scans the names and matches them here.

/// Whether `name` matches `pattern` as a whole (Redis's glob syntax, as `dlock list` takes it).
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point (the last `*`): linear in practice, and
    // never recursive, so no pattern can exhaust the stack.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some(_) => {
                if let Some((next, hit)) = one(&pattern, p, name[n]) {
                    if hit {
                        p = next;
                        n += 1;
                        continue;
                    }
                }
            }
            None => {}
        }
        match star {
            Some((at, from)) => {
                p = at + 1;
                n = from + 1;
                star = Some((at, from + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// Matches the pattern item at `p` (not `*`) against `c`: where the next item starts, and
/// whether it matched.
fn one(pattern: &[char], p: usize, c: char) -> Option<(usize, bool)> {
    match pattern[p] {
        '?' => Some((p + 1, true)),
        '\\' => {
            let escaped = *pattern.get(p + 1)?;
            Some((p + 2, escaped == c))
        }
        '[' => class(pattern, p, c).or(Some((p + 1, c == '['))),
        other => Some((p + 1, other == c)),
    }
}

/// A `[...]` class at `p`: `None` when it never closes (then `[` is itself).
fn class(pattern: &[char], p: usize, c: char) -> Option<(usize, bool)> {
    let mut i = p + 1;
    let negated = matches!(pattern.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let item = *pattern.get(i)?;
        if item == ']' && !first {
            return Some((i + 1, hit != negated));
        }
        first = false;
        let low = if item == '\\' {
            i += 1;
            *pattern.get(i)?
        } else {
            item
        };
        if pattern.get(i + 1) == Some(&'-') && pattern.get(i + 2).is_some_and(|e| *e != ']') {
            let high = pattern[i + 2];
            hit |= low <= c && c <= high;
            i += 3;
        } else {
            hit |= low == c;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_whole_names() {
        assert!(matches("*", "anything"));
        assert!(matches("*", ""));
        assert!(matches("jobs:*", "jobs:42"));
        assert!(!matches("jobs:*", "xjobs:42"));
        assert!(matches("deploy?", "deploy1"));
        assert!(!matches("deploy?", "deploy"));
        assert!(matches("a[xy]c", "ayc"));
        assert!(!matches("a[xy]c", "azc"));
        assert!(matches("a[a-c]", "ab"));
        assert!(matches("a[!x]", "ab"));
        assert!(!matches("a[!x]", "ax"));
        assert!(matches("a\\*", "a*"));
        assert!(!matches("a\\*", "ab"));
        assert!(matches("*b*d", "abcbd"));
        assert!(matches("a[", "a["));
        assert!(!matches("a.b", "axb"));
    }
}
