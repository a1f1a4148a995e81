//! Services of several Redis servers named by one URL, as configuration files and the command
//! line carry them:
//! - a master behind Redis Sentinel,
//!   `redis-sentinel://[user:password@]host:port[,host:port...]/<master name>`: the credentials
//!   are the master's, the sentinels are reached without;
//! - a Redis Cluster, `redis-cluster://[user:password@]host:port[,host:port...]`: some of its
//!   nodes, each reached with the credentials.

/// The scheme of a Sentinel URL.
pub(crate) const SENTINEL_SCHEME: &str = "redis-sentinel://";

/// The scheme of a Cluster URL.
pub(crate) const CLUSTER_SCHEME: &str = "redis-cluster://";

/// What such a URL names.
pub(crate) struct HostsUrl {
    /// The hosts, as `redis://host:port` URLs, without credentials.
    pub(crate) hosts: Vec<String>,
    /// What follows the hosts' `/`, decoded (empty when the URL has none).
    pub(crate) path: String,
    /// The user (`None`: the default user) and password, if the URL has them.
    pub(crate) credentials: Option<(Option<String>, String)>,
}

impl HostsUrl {
    /// The hosts as `redis://[user:password@]host:port` URLs, with the credentials encoded.
    pub(crate) fn hosts_with_credentials(&self) -> Vec<String> {
        let Some((user, password)) = &self.credentials else {
            return self.hosts.clone();
        };
        let encode = |text: &str| {
            percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        };
        let userinfo = format!(
            "{}:{}@",
            encode(user.as_deref().unwrap_or("")),
            encode(password)
        );
        self.hosts
            .iter()
            .map(|host| host.replacen("redis://", &format!("redis://{userinfo}"), 1))
            .collect()
    }
}

/// Parses `rest`, what follows the scheme.
pub(crate) fn parse(rest: &str) -> HostsUrl {
    // The userinfo runs to the last `@`: a password may hold raw `/`, `@` or `:`.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, path) = after.split_once('/').unwrap_or((after, ""));
    let hosts = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("redis://{host}"))
        .collect();
    let credentials = userinfo.map(|userinfo| {
        let (user, password) = userinfo.split_once(':').unwrap_or(("", userinfo));
        let user = decoded(user);
        ((!user.is_empty()).then_some(user), decoded(password))
    });
    HostsUrl {
        hosts,
        path: decoded(path),
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
    fn hosts_path_and_credentials() {
        let url = parse("app:Alpha7/Bra%40vo@h1:26379,h2:26379/main");
        assert_eq!(url.path, "main");
        assert_eq!(url.hosts, ["redis://h1:26379", "redis://h2:26379"]);
        assert_eq!(
            url.credentials,
            Some((Some("app".to_owned()), "Alpha7/Bra@vo".to_owned()))
        );
        let url = parse(":secret@h1:26379/main");
        assert_eq!(url.credentials, Some((None, "secret".to_owned())));
        let url = parse("h1:26379");
        assert!(url.path.is_empty() && url.credentials.is_none());
        assert!(parse("/main").hosts.is_empty());
    }

    #[test]
    fn cluster_nodes_carry_the_credentials_encoded() {
        let url = parse("app:Alpha7/Bra%40vo@h1:7000,h2:7001");
        assert_eq!(
            url.hosts_with_credentials(),
            [
                "redis://app:Alpha7%2FBra%40vo@h1:7000",
                "redis://app:Alpha7%2FBra%40vo@h2:7001"
            ]
        );
        assert_eq!(
            parse(":s@h1:7000").hosts_with_credentials(),
            ["redis://:s@h1:7000"]
        );
        assert_eq!(
            parse("h1:7000").hosts_with_credentials(),
            ["redis://h1:7000"]
        );
    }
}
