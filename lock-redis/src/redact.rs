//! Redis URLs without their passwords, for messages, `Debug` output and screens.

/// `url` (a `redis://`, `rediss://`, `redis+unix://` or `unix://` URL, or a Sentinel or
/// Cluster node's) with its password replaced by `***`, for messages, `Debug` output and
/// screens: the userinfo up to the last `@` (a password may hold raw `/`, `@`, `:`, `?` or
/// `#`), and the `pass` and `password` query parameters of socket URLs.
///
/// ```
/// use dlocks::redis::redact_url;
///
/// assert_eq!(redact_url("redis://app:s3/cr@t@db:6379/2"), "redis://app:***@db:6379/2");
/// assert_eq!(redact_url("redis+unix:///run/redis.sock?db=2&pass=s3cr%2Ft"), "redis+unix:///run/redis.sock?db=2&pass=***");
/// ```
pub fn redact_url(url: &str) -> String {
    dlock_core::backend::redact_url(url, &["pass", "password"])
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn no_spelling_of_a_password_is_shown() {
        for (url, shown) in [
            ("redis://u:p@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:p@h", "redis://:***@h"),
            ("redis://h:1/0", "redis://h:1/0"),
            ("redis://u@h:1/0", "redis://u@h:1/0"),
            ("rediss://u:c2Vj/cmV0@h:6380", "rediss://u:***@h:6380"),
            ("redis://u:c2Vj%2FcmV0@h", "redis://u:***@h"),
            ("redis://u:se@cr@et@h:1", "redis://u:***@h:1"),
            ("redis://u:se:cr:et@h", "redis://u:***@h"),
            ("redis://u:se?cr#et@h/0", "redis://u:***@h/0"),
            ("redis://:se/cret@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
            ("redis://u:secret@", "redis://u:***@"),
            (
                "redis+unix:///s.sock?db=1&pass=secret",
                "redis+unix:///s.sock?db=1&pass=***",
            ),
            (
                "unix:///s.sock?PASSWORD=se&cret",
                "unix:///s.sock?PASSWORD=***",
            ),
            (
                "redis-sentinel://u:se/cret@h1:26379,h2:26379/main",
                "redis-sentinel://u:***@h1:26379,h2:26379/main",
            ),
            ("u:secret@h:6379", "u:***@h:6379"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("secret"), "{url}");
        }
    }
}
