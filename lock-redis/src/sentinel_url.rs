//! A master behind Redis Sentinel named by one URL,
//! `redis-sentinel://[user:password@]host:port[,host:port...]/<master name>`, as configuration
//! files and the command line carry it: the credentials are the master's, the sentinels are
//! reached without.

/// The scheme of such a URL.
pub(crate) const SCHEME: &str = "redis-sentinel://";

/// What such a URL names.
pub(crate) struct SentinelUrl {
    /// The name the sentinels know the master by (empty when the URL has none).
    pub(crate) master: String,
    /// The sentinels, as `redis://host:port` URLs.
    pub(crate) sentinels: Vec<String>,
    /// The master's user (`None`: the default user) and password, if the URL has them.
    pub(crate) credentials: Option<(Option<String>, String)>,
}

/// Parses `rest`, what follows the scheme.
pub(crate) fn parse(rest: &str) -> SentinelUrl {
    // The userinfo runs to the last `@`: a password may hold raw `/`, `@` or `:`.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, master) = after.split_once('/').unwrap_or((after, ""));
    let sentinels = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("redis://{host}"))
        .collect();
    let credentials = userinfo.map(|userinfo| {
        let (user, password) = userinfo.split_once(':').unwrap_or(("", userinfo));
        let user = decoded(user);
        ((!user.is_empty()).then_some(user), decoded(password))
    });
    SentinelUrl {
        master: decoded(master),
        sentinels,
        credentials,
    }
}

/// `text` with its `%XX` escapes decoded (as URLs carry user names and passwords).
fn decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn hosts_master_and_credentials() {
        let url = parse("app:Alpha7/Bra%40vo@h1:26379,h2:26379/main");
        assert_eq!(url.master, "main");
        assert_eq!(url.sentinels, ["redis://h1:26379", "redis://h2:26379"]);
        assert_eq!(
            url.credentials,
            Some((Some("app".to_owned()), "Alpha7/Bra@vo".to_owned()))
        );
        let url = parse(":secret@h1:26379/main");
        assert_eq!(url.credentials, Some((None, "secret".to_owned())));
        let url = parse("h1:26379");
        assert!(url.master.is_empty() && url.credentials.is_none());
        assert!(parse("/main").sentinels.is_empty());
    }
}
