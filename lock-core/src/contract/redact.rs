//! Connection URLs shown without their secrets: in error messages, `Debug` output and screens.
//!
//! A URL is taken apart as a parser could read it, never cut at the first `/` or `:`: users
//! write passwords with raw `/`, `@`, `:`, `?` or `#` in them (base64, generated passwords),
//! and whatever any reading of the text could take for a password is hidden.

/// What replaces a hidden secret.
const HIDDEN: &str = "***";

/// `url` with its password and its secret query parameters replaced by `***`, for messages,
/// `Debug` output and screens. Each backend's URL family calls it with its own parameter names
/// (`dlock_redis::redact_url`, `dlock_postgres::redact_url`).
///
/// - The userinfo runs from after `scheme://` to the **last** `@` of the text, so a password
///   with a raw `@`, `/`, `?` or `#` in it is hidden whole; the user name (up to the first
///   `:`) stays. An `@` elsewhere (in a query value) only hides more than needed, never less.
/// - The value of each query parameter named in `secret_params` (any case) is hidden up to the
///   next `&name=` or the end.
/// - Text without `scheme://` is hidden from its first `:` to its last `@`.
///
/// # Examples
///
/// ```
/// use dlocks::backend::redact_url;
///
/// assert_eq!(redact_url("redis://app:s3/cr@t@db:6379/0", &["password"]), "redis://app:***@db:6379/0");
/// assert_eq!(redact_url("postgres://db/app?password=s3cr%26t", &["password"]), "postgres://db/app?password=***");
/// assert_eq!(redact_url("redis://db:6379", &["password"]), "redis://db:6379");
/// ```
pub fn redact_url(url: &str, secret_params: &[&str]) -> String {
    let mut hidden: Vec<(usize, usize)> = secret_values(url, secret_params);
    let start = url.find("://").map_or(0, |at| at + 3);
    if let Some(at) = url.rfind('@').filter(|&at| at >= start) {
        if let Some(colon) = url[start..at].find(':') {
            hidden.push((start + colon + 1, at));
        }
    }
    mask(url, hidden)
}

/// Where the values of `url`'s query parameters named in `names` are: after `?name=` or
/// `&name=`, up to the next `&other=` or the end.
fn secret_values(url: &str, names: &[&str]) -> Vec<(usize, usize)> {
    let lower = url.to_ascii_lowercase();
    let mut found = Vec::new();
    for name in names {
        let name = name.to_ascii_lowercase();
        for (at, _) in lower.match_indices(&format!("{name}=")) {
            let preceded = at > 0 && matches!(lower.as_bytes()[at - 1], b'?' | b'&');
            if !preceded {
                continue;
            }
            let value = at + name.len() + 1;
            found.push((value, value + next_parameter(&url[value..])));
        }
    }
    found
}

/// The length of a query value: up to the next `&` that starts a `name=`, or the end.
fn next_parameter(rest: &str) -> usize {
    let bytes = rest.as_bytes();
    for (at, _) in rest.match_indices('&') {
        let name_len = bytes[at + 1..]
            .iter()
            .take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            .count();
        if name_len > 0 && bytes.get(at + 1 + name_len) == Some(&b'=') {
            return at;
        }
    }
    rest.len()
}

/// `text` with each of the byte ranges `hidden` (on character boundaries, possibly
/// overlapping) replaced by [`HIDDEN`]; overlapping or touching ranges become one.
fn mask(text: &str, mut hidden: Vec<(usize, usize)>) -> String {
    hidden.retain(|(start, end)| start < end);
    hidden.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(hidden.len());
    for (start, end) in hidden {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut shown = String::with_capacity(text.len());
    let mut next = 0;
    for (start, end) in merged {
        shown.push_str(&text[next..start]);
        shown.push_str(HIDDEN);
        next = end;
    }
    shown.push_str(&text[next..]);
    shown
}

#[cfg(test)]
mod tests {
    use super::{mask, redact_url};

    #[test]
    fn ranges_are_merged() {
        assert_eq!(mask("abcdef", vec![(1, 3), (2, 4)]), "a***ef");
        assert_eq!(mask("abcdef", vec![(1, 3), (3, 4)]), "a***ef");
        assert_eq!(mask("abcdef", vec![(0, 6)]), "***");
        assert_eq!(mask("abcdef", vec![]), "abcdef");
    }

    #[test]
    fn no_spelling_of_a_password_is_shown() {
        let secret = &["password", "pass"];
        for (url, shown) in [
            ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:pw@h", "redis://:***@h"),
            ("redis://u@h/0", "redis://u@h/0"),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("redis://u:p/w@h:1/0", "redis://u:***@h:1/0"),
            ("redis://u:p@w@h", "redis://u:***@h"),
            ("redis://u:p:w@h", "redis://u:***@h"),
            ("redis://u:p?w@h", "redis://u:***@h"),
            ("redis://u:p#w@h", "redis://u:***@h"),
            ("redis://u:p%2Fw@h", "redis://u:***@h"),
            ("redis://u:a://b@h", "redis://u:***@h"),
            (
                "unix:///tmp/r.sock?db=1&pass=pw",
                "unix:///tmp/r.sock?db=1&pass=***",
            ),
            (
                "postgres://h/d?PASSWORD=p@w&sslmode=require",
                "postgres://h/d?PASSWORD=***&sslmode=require",
            ),
            ("postgres://h:5432/d?password=p@w", "postgres://h:***"),
            ("redis://u:a?pass=b@h/0", "redis://u:***"),
            ("u:pw@h:6379", "u:***@h:6379"),
        ] {
            assert_eq!(redact_url(url, secret), shown, "{url}");
        }
    }
}
