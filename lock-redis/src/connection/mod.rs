//! Opening connections: URL parsing, TCP options, TLS, timeouts, and the r2d2 manager that
//! keeps broken connections out of the pool.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::io::tcp::{socket2::TcpKeepalive, TcpSettings};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Client, Connection, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo,
    RedisError,
};

use dlock_core::LockError;

use crate::config::{SentinelSettings, Settings};
use crate::error::{breaks_connection, to_lock_error};
use crate::redact::redact_url;
use crate::tidying::Tidying;

mod pooled;

pub(crate) use pooled::PooledConnection;

/// Where a pool's connections go, for messages, with their timeouts and the count of
/// connection failures that tells old connections from trusted ones. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// "redis server" or "redis cluster".
    what: &'static str,
    /// `host:port` (never the credentials), for error messages.
    pub(crate) server: Arc<str>,
    /// The ACL user from the URL, for error messages.
    pub(crate) user: Option<Arc<str>>,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// What every connection to the server shares.
    shared: Arc<Shared>,
}

/// The state of an [`Endpoint`] that all its clones and connections share.
#[derive(Default)]
struct Shared {
    /// Bumped each time a connection breaks; see [`PooledConnection::epoch`].
    epoch: AtomicU64,
    /// No connection broke, nor failed to open, since the last one that opened.
    reachable: AtomicBool,
    /// Commands for the next step any connection to the server sends.
    tidying: Tidying,
}

impl Endpoint {
    pub(crate) fn new(
        what: &'static str,
        server: Arc<str>,
        user: Option<Arc<str>>,
        settings: &Settings,
    ) -> Self {
        Endpoint {
            what,
            server,
            user,
            connect_timeout: settings.connect_timeout,
            response_timeout: settings.response_timeout,
            shared: Arc::new(Shared {
                reachable: AtomicBool::new(true),
                ..Shared::default()
            }),
        }
    }

    /// Describes the server (and user) for error messages.
    pub(crate) fn describe(&self) -> String {
        match &self.user {
            Some(user) => format!("{} {} (user {user:?})", self.what, self.server),
            None => format!("{} {}", self.what, self.server),
        }
    }

    /// Marks every connection opened so far as suspect: one broke, and when a server restarts
    /// or drops its clients all of them have. They are replaced at their next checkout rather
    /// than failing one call each.
    pub(crate) fn connection_broke(&self) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        self.shared.reachable.store(false, Ordering::Release);
    }

    /// Whether the server is taken to be reachable: no connection broke, nor failed to open,
    /// since the last one that opened. A caller waiting for a pooled connection to an
    /// unreachable server waits no longer than its own time budget for the server.
    pub(crate) fn is_reachable(&self) -> bool {
        self.shared.reachable.load(Ordering::Acquire)
    }

    pub(crate) fn current_epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// Commands for the next step any connection to the server sends.
    pub(crate) fn tidying(&self) -> &Tidying {
        &self.shared.tidying
    }
}

/// A pool's connection manager: where it connects (see [`Endpoint`]).
pub(crate) trait Connect: r2d2::ManageConnection<Error = RedisError> + Clone {
    fn endpoint(&self) -> &Endpoint;
}

/// A pooled connection that can be found broken, and that remembers when it was opened.
pub(crate) trait Pooled {
    /// The endpoint's epoch when it was opened: if it has moved since, another connection
    /// broke and this one is not trusted.
    fn epoch(&self) -> u64;
    /// Whether an error left it unusable (r2d2 then discards it).
    fn broken(&mut self) -> &mut bool;

    /// Bounds what the step now using the connection may still wait for it: until `deadline`
    /// (`None`: the response timeout per reply, as before any step).
    fn set_step_deadline(&mut self, deadline: Option<Instant>) {
        let _ = deadline;
    }

    /// Records the outcome of a command: a connection-level error breaks it.
    fn note<T>(&mut self, result: &Result<T, RedisError>) {
        if let Err(error) = result {
            if breaks_connection(error) {
                *self.broken() = true;
            }
        }
    }
}

/// Opens connections to one server with the configured options. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connector {
    target: Target,
    pub(crate) endpoint: Endpoint,
}

/// What a connector connects to.
#[derive(Clone)]
enum Target {
    /// One server.
    Server(Box<Client>),
    /// Whichever server the sentinels name as the master when a connection is opened.
    Sentinel(Arc<Mutex<SentinelClient>>),
}

impl Connector {
    /// A connector for command connections from `settings`.
    pub(crate) fn commands(settings: &Settings) -> Result<Self, LockError> {
        let tcp = TcpSettings::default().set_nodelay(settings.tcp_nodelay);
        if let Some(sentinel) = &settings.sentinel {
            return Self::sentinel(settings, sentinel, RedisConnectionInfo::default(), tcp);
        }
        let info = parse_url(&settings.url)?;
        Self::new(settings, info.set_tcp_settings(tcp))
    }

    /// A connector for command connections to the server `info` names: a cluster's node.
    pub(crate) fn commands_to(
        settings: &Settings,
        info: ConnectionInfo,
    ) -> Result<Self, LockError> {
        let tcp = TcpSettings::default().set_nodelay(settings.tcp_nodelay);
        Self::new(settings, info.set_tcp_settings(tcp))
    }

    /// A connector for the pub/sub connection: RESP2 (release messages arrive as plain
    /// replies), `TCP_NODELAY` (subscriptions are confirmed to waiting threads), and TCP
    /// keepalive, because this connection reads with no timeout and must still notice a
    /// server that vanished without closing it.
    pub(crate) fn pubsub(settings: &Settings) -> Result<Self, LockError> {
        if let Some(sentinel) = &settings.sentinel {
            let redis = RedisConnectionInfo::default().set_protocol(ProtocolVersion::RESP2);
            return Self::sentinel(settings, sentinel, redis, pubsub_tcp());
        }
        Self::pubsub_to(settings, parse_url(&settings.url)?)
    }

    /// A pub/sub connector (see [`pubsub`](Self::pubsub)) to the server `info` names: a
    /// cluster's node.
    pub(crate) fn pubsub_to(settings: &Settings, info: ConnectionInfo) -> Result<Self, LockError> {
        let redis = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP2);
        let info = info
            .set_redis_settings(redis)
            .set_tcp_settings(pubsub_tcp());
        Self::new(settings, info)
    }

    /// A connector to the master the sentinels of `sentinel` name, with `redis` and `tcp`
    /// settings for the master's connections.
    fn sentinel(
        settings: &Settings,
        sentinel: &SentinelSettings,
        redis: RedisConnectionInfo,
        tcp: TcpSettings,
    ) -> Result<Self, LockError> {
        let sentinels = sentinel
            .sentinels
            .iter()
            .map(|url| parse_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        let mut redis = redis.set_db(sentinel.db);
        if let Some(username) = &sentinel.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &sentinel.password {
            redis = redis.set_password(password);
        }
        let node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(redis)
            .set_tcp_settings(tcp);
        let server: Arc<str> = format!(
            "master {:?} of sentinels {}",
            sentinel.master,
            sentinels
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into();
        let client = SentinelClient::build(
            sentinels,
            sentinel.master.clone(),
            Some(node),
            SentinelServerType::Master,
        )
        .map_err(|error| to_lock_error(error, "configuring the Sentinel client", &server))?;
        let user = sentinel.username.as_deref().map(Arc::from);
        Ok(Connector {
            target: Target::Sentinel(Arc::new(Mutex::new(client))),
            endpoint: Endpoint::new("redis server", server, user, settings),
        })
    }

    fn new(settings: &Settings, info: ConnectionInfo) -> Result<Self, LockError> {
        let server: Arc<str> = info.addr().to_string().into();
        let user = info.redis_settings().username().map(Arc::from);
        let client = build_client(settings, info)
            .map_err(|error| to_lock_error(error, "configuring the client", &server))?;
        Ok(Connector {
            target: Target::Server(Box::new(client)),
            endpoint: Endpoint::new("redis server", server, user, settings),
        })
    }

    /// Opens a connection whose connect, reads and writes are all bounded.
    pub(crate) fn open(&self) -> Result<Connection, RedisError> {
        let client = match &self.target {
            Target::Server(client) => (**client).clone(),
            // Asks the sentinels for the master now, and checks that it is one.
            Target::Sentinel(sentinel) => sentinel.lock().get_client()?,
        };
        let con = client.get_connection_with_timeout(self.endpoint.connect_timeout)?;
        con.set_read_timeout(Some(self.endpoint.response_timeout))?;
        con.set_write_timeout(Some(self.endpoint.response_timeout))?;
        Ok(con)
    }
}

impl Connect for Connector {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// A pub/sub connection's TCP options: `TCP_NODELAY` and keepalive (see
/// [`Connector::pubsub`]).
fn pubsub_tcp() -> TcpSettings {
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
}

fn parse_url(url: &str) -> Result<ConnectionInfo, LockError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("redis" | "rediss" | "redis+unix" | "unix")) {
        // Not shown: what is no Redis URL cannot be trusted to be redacted as one.
        let found = scheme
            .filter(|scheme| {
                scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            })
            .map_or_else(|| "no scheme".to_owned(), |scheme| format!("{scheme}://"));
        return Err(LockError::config(format!(
            "unsupported Redis URL ({found}): expected redis://[user:password@]host[:port][/db] \
             or rediss://... for TLS"
        )));
    }
    #[cfg(not(feature = "tls"))]
    if scheme == Some("rediss") {
        return Err(LockError::config(
            "rediss:// URLs need the `tls` feature (of `dlocks`, or of `dlock-redis`), which \
             this build leaves out",
        ));
    }
    // The `redis` crate says only that the URL did not parse; the URL parser says why (an
    // invalid port, an empty host), without repeating the URL.
    if let Err(error) = url::Url::parse(url) {
        return Err(LockError::Config {
            message: format!("invalid Redis URL {:?}: {error}", redact_url(url)),
            source: Some(Box::new(error)),
        });
    }
    url.into_connection_info().map_err(|error| {
        // `<what> - <ErrorKind>[: <detail>]`: the kind is no news to a reader.
        let text = error.to_string();
        let what = text
            .split_once(" - ")
            .map_or(text.as_str(), |(what, _)| what);
        let reason = match error.detail() {
            Some(detail) => format!("{what}: {detail}"),
            None => what.to_owned(),
        };
        LockError::Config {
            message: format!("invalid Redis URL {:?}: {reason}", redact_url(url)),
            source: Some(Box::new(error)),
        }
    })
}

#[cfg(feature = "tls")]
fn build_client(settings: &Settings, info: ConnectionInfo) -> Result<Client, RedisError> {
    if settings.tls_root_certificate.is_none() && settings.tls_client_certificate.is_none() {
        return Client::open(info);
    }
    let certificates = redis::TlsCertificates {
        client_tls: settings.tls_client_certificate.as_ref().map(|(cert, key)| {
            redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }
        }),
        root_cert: settings.tls_root_certificate.clone(),
    };
    Client::build_with_tls(info, certificates)
}

#[cfg(not(feature = "tls"))]
fn build_client(_settings: &Settings, info: ConnectionInfo) -> Result<Client, RedisError> {
    Client::open(info)
}
