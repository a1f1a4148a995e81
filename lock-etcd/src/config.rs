//! How a backend reaches etcd: endpoints, credentials, TLS, timeouts and a key namespace.

use std::fmt;
use std::time::Duration;

use dlock_core::backend::validate_setting;
use dlock_core::LockError;

use crate::http::Endpoint;
use crate::EtcdBackend;

/// Builds an [`EtcdBackend`]: `EtcdBackend::builder(endpoints)...build()`.
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_etcd::EtcdBackend;
///
/// let backend = EtcdBackend::builder("http://10.0.0.1:2379,http://10.0.0.2:2379")
///     .user("locker", "secret")
///     .request_timeout(Duration::from_secs(2))
///     .namespace("app/locks/")
///     .build()?;
/// # Ok::<(), dlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct EtcdBackendBuilder {
    pub(crate) endpoints: String,
    pub(crate) user: Option<(String, String)>,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) namespace: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) root_certificates: Vec<Vec<u8>>,
    pub(crate) client_certificate: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for EtcdBackendBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password never prints.
        f.debug_struct("EtcdBackendBuilder")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("namespace", &self.namespace)
            .field("watchdog_lease", &self.watchdog_lease)
            .finish_non_exhaustive()
    }
}

impl EtcdBackendBuilder {
    pub(crate) fn new(endpoints: &str) -> Self {
        EtcdBackendBuilder {
            endpoints: endpoints.to_owned(),
            user: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            namespace: String::new(),
            watchdog_lease: Duration::from_secs(30),
            root_certificates: Vec::new(),
            client_certificate: None,
        }
    }

    /// Authenticates as `user` with `password` (etcd's `--user`); the token etcd hands out is
    /// renewed when it expires.
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// How long a connection may take to open (2 s by default).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a request may wait for its answer (5 s by default): every lock step returns
    /// within it, answered or with [`LockError::Unavailable`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// A prefix put before every key this backend writes (empty by default), as etcdctl's
    /// `--prefix` namespaces; two backends share a lock only with the same namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The watchdog lease of the clients built on this backend, when it is not the
    /// `LockClient` default of 30 s: a hold taken on it goes on its client's session lease at
    /// once (one keep-alive renews them all), where another lease gets a lease of its own
    /// until the watchdog first renews it. A backend also learns it from the first renewal.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// Trusts the CA certificate(s) in `pem` for `https://` endpoints.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates.push(pem.into());
        self
    }

    /// Presents the client certificate `cert_pem` with its private key `key_pem` (etcd's
    /// `--client-cert-auth`).
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_certificate = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Checks the settings, connects to an endpoint (authenticating if a user is set) and
    /// returns the backend.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] for endpoints that do not parse, settings out of range, TLS
    /// settings without the `tls` feature or that do not parse, and refused credentials;
    /// [`LockError::Unavailable`] when no endpoint answers.
    pub fn build(self) -> Result<EtcdBackend, LockError> {
        let ms = Duration::from_millis(1);
        validate_setting("connect_timeout", self.connect_timeout, ms)?;
        validate_setting("request_timeout", self.request_timeout, ms)?;
        validate_setting("watchdog_lease", self.watchdog_lease, ms)?;
        let (endpoints, credentials) = parse_target(&self.endpoints)?;
        let mut builder = self;
        if let Some(credentials) = credentials {
            if builder.user.is_some() {
                return Err(LockError::config(
                    "etcd credentials given twice: in the URL and with `user`",
                ));
            }
            builder.user = Some(credentials);
        }
        EtcdBackend::from_builder(builder, endpoints)
    }
}

/// A user and its password, from an `etcd://` URL.
type Credentials = (String, String);

/// What the backend is given: etcdctl's endpoints (`http://host:port[,http://host:port...]`,
/// a bare `host:port` being `http`), or one URL as the `dlock` command takes it,
/// `etcd://[user:password@]host:port[,host:port...]` (`etcds://` for HTTPS), whose user and
/// password (with `%XX` escapes) are the credentials.
pub(crate) fn parse_target(
    target: &str,
) -> Result<(Vec<Endpoint>, Option<Credentials>), LockError> {
    let trimmed = target.trim();
    let lower = trimmed.to_ascii_lowercase();
    let (http, rest) = if lower.starts_with("etcd://") {
        ("http", &trimmed["etcd://".len()..])
    } else if lower.starts_with("etcds://") {
        ("https", &trimmed["etcds://".len()..])
    } else {
        return Ok((parse_endpoints(target)?, None));
    };
    // The user information runs to the last `@`: a password may hold raw `/`, `@` or `:`.
    let (userinfo, hosts) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let endpoints: Vec<String> = hosts
        .trim_end_matches('/')
        .split(',')
        .filter(|host| !host.trim().is_empty())
        .map(|host| format!("{http}://{}", host.trim()))
        .collect();
    let endpoints = parse_endpoints(&endpoints.join(",")).map_err(|_| {
        LockError::config(format!(
            "an etcd URL is etcd://[user:password@]host:port[,host:port...], got {:?}",
            dlock_core::backend::redact_url(target, &["password"])
        ))
    })?;
    let credentials = userinfo.map(|userinfo| {
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        let decoded = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        (decoded(user), decoded(password))
    });
    Ok((endpoints, credentials))
}

/// `http://host:port[,http://host:port...]`; a bare `host:port` is `http`.
pub(crate) fn parse_endpoints(list: &str) -> Result<Vec<Endpoint>, LockError> {
    let mut endpoints = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        // Messages show the endpoint as given but for a password in it (credentials go to
        // `user`, never into an endpoint).
        let shown = dlock_core::backend::redact_url(item, &["password"]);
        let (tls, rest) = if let Some(rest) = item.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = item.strip_prefix("http://") {
            (false, rest)
        } else if item.contains("://") {
            return Err(LockError::config(format!(
                "etcd endpoint {shown:?}: the scheme must be http:// or https://"
            )));
        } else {
            (false, item)
        };
        if rest.contains('@') {
            return Err(LockError::config(format!(
                "etcd endpoint {shown:?}: credentials go in an etcd://user:password@host URL or \
                 to the builder's `user`, not in an http:// endpoint"
            )));
        }
        let rest = rest.trim_end_matches('/');
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
                let port = port.parse::<u16>().map_err(|_| {
                    LockError::config(format!("etcd endpoint {shown:?}: bad port {port:?}"))
                })?;
                (host, port)
            }
            _ => (rest, 2379),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
        if host.is_empty() || !host.chars().all(host_chars) {
            return Err(LockError::config(format!(
                "etcd endpoint {shown:?}: expected http://host:port"
            )));
        }
        endpoints.push(Endpoint {
            host: host.to_owned(),
            port,
            tls,
        });
    }
    if endpoints.is_empty() {
        return Err(LockError::config("no etcd endpoint given"));
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_as_etcdctl_takes_them() {
        let parsed = parse_endpoints("http://a:1, https://b:2,c:3,d").expect("parse");
        let seen: Vec<_> = parsed
            .iter()
            .map(|e| (e.host.as_str(), e.port, e.tls))
            .collect();
        assert_eq!(
            seen,
            [
                ("a", 1, false),
                ("b", 2, true),
                ("c", 3, false),
                ("d", 2379, false)
            ]
        );
        assert!(parse_endpoints("").is_err());
        assert!(parse_endpoints("redis://a:1").is_err());
        assert!(parse_endpoints("not a url").is_err());
        for bad in [
            "http://app:hunter2@a:1",
            "http://app:hunter2@a:port",
            "a b:hunter2@c",
        ] {
            let error = parse_endpoints(bad).expect_err(bad).to_string();
            assert!(!error.contains("hunter2"), "{error}");
        }
        assert!(parse_endpoints("http://a:x").is_err());
        assert!(parse_endpoints("http://u@a:1").is_err());
    }

    #[test]
    fn an_etcd_url_carries_its_endpoints_and_credentials() {
        let (endpoints, user) = parse_target("etcd://app:p%40ss:w@a:1,b:2/").expect("parse");
        let seen: Vec<_> = endpoints
            .iter()
            .map(|e| (e.host.as_str(), e.port, e.tls))
            .collect();
        assert_eq!(seen, [("a", 1, false), ("b", 2, false)]);
        assert_eq!(user, Some(("app".into(), "p@ss:w".into())));
        let (endpoints, user) = parse_target("ETCDS://c:3").expect("parse");
        assert!(endpoints[0].tls && user.is_none());
        let (_, user) = parse_target("http://a:1").expect("parse");
        assert!(user.is_none());
        let error = parse_target("etcd://app:hunter2@")
            .expect_err("no host")
            .to_string();
        assert!(!error.contains("hunter2"), "{error}");
    }
}
