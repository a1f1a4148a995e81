//! The backend's settings and their builder.

use std::fmt;
use std::time::Duration;

use dlock_core::LockError;

/// Default number of pooled command connections.
pub(crate) const DEFAULT_POOL_SIZE: u32 = 10;
/// Default bound on opening a connection (TCP connect, TLS handshake, AUTH, SELECT).
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on each read and each write on a connection (Redisson's `timeout`).
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on waiting for a pooled connection.
pub(crate) const DEFAULT_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default bound on waiting for replicas to acknowledge a step (Redisson's `slavesSyncTimeout`).
pub(crate) const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time a channel stays subscribed after its last local waiter left.
pub(crate) const DEFAULT_UNSUBSCRIBE_LINGER: Duration = Duration::from_millis(200);

/// The settings a [`RedisBackend`](crate::RedisBackend) runs with.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The server's URL; with Sentinel, the first sentinel's (for messages).
    pub(crate) url: String,
    /// Where the master is found, when Redis Sentinel decides it.
    pub(crate) sentinel: Option<SentinelSettings>,
    /// The URLs of some nodes of a Redis Cluster, when the locks live on one.
    pub(crate) cluster: Option<Vec<String>>,
    pub(crate) pool_size: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) checkout_timeout: Duration,
    pub(crate) tcp_nodelay: bool,
    pub(crate) unsubscribe_linger: Duration,
    pub(crate) replica_sync: bool,
    pub(crate) replica_sync_timeout: Duration,
    #[cfg(feature = "tls")]
    pub(crate) tls_root_certificate: Option<Vec<u8>>,
    #[cfg(feature = "tls")]
    pub(crate) tls_client_certificate: Option<(Vec<u8>, Vec<u8>)>,
}

/// A master monitored by Redis Sentinel: its name and the sentinels' URLs.
#[derive(Clone)]
pub(crate) struct SentinelSettings {
    pub(crate) master: String,
    pub(crate) sentinels: Vec<String>,
    /// The ACL user and password of the master and its replicas (not of the sentinels, whose
    /// own credentials go in their URLs).
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

/// Configures and connects a [`RedisBackend`](crate::RedisBackend), from [`RedisBackend::builder`](crate::RedisBackend::builder),
/// [`RedisBackend::sentinel_builder`](crate::RedisBackend::sentinel_builder) or [`RedisBackend::cluster_builder`](crate::RedisBackend::cluster_builder).
///
/// Every network operation of the backend is bounded by these timeouts, so no lock call can
/// hang on an unreachable or stalled server: it fails with
/// [`LockError::Unavailable`] instead.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use dlocks::redis::RedisBackend;
///
/// let backend = RedisBackend::builder("redis://locker:secret@10.0.0.5:6379/2")
///     .pool_size(16)
///     .connect_timeout(Duration::from_secs(1))
///     .response_timeout(Duration::from_millis(500))
///     .checkout_timeout(Duration::from_secs(2))
///     .build()?;
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedisBackendBuilder {
    pub(crate) settings: Settings,
    /// What is wrong with the URL it was made from, if anything (said by `build`).
    problem: Option<&'static str>,
}

impl RedisBackendBuilder {
    pub(crate) fn new(url: &str) -> Self {
        use crate::hosts_url::{parse, CLUSTER_SCHEME, SENTINEL_SCHEME};
        if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            let named = parse(rest);
            let builder = RedisBackendBuilder::sentinel(&named.path, named.hosts);
            return match named.credentials {
                Some((user, password)) => builder.master_credentials(user.as_deref(), &password),
                None => builder,
            };
        }
        if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            let named = parse(rest);
            let mut builder = RedisBackendBuilder::cluster(named.hosts_with_credentials());
            if !named.path.is_empty() {
                builder.problem = Some(
                    "a Redis Cluster has one database: its URL names no other \
                     (redis-cluster://[user:password@]host:port[,host:port...])",
                );
            }
            return builder;
        }
        Self::plain(url)
    }

    fn plain(url: &str) -> Self {
        RedisBackendBuilder {
            problem: None,
            settings: Settings {
                url: url.to_owned(),
                sentinel: None,
                cluster: None,
                pool_size: DEFAULT_POOL_SIZE,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                response_timeout: DEFAULT_RESPONSE_TIMEOUT,
                checkout_timeout: DEFAULT_CHECKOUT_TIMEOUT,
                tcp_nodelay: true,
                unsubscribe_linger: DEFAULT_UNSUBSCRIBE_LINGER,
                replica_sync: true,
                replica_sync_timeout: DEFAULT_REPLICA_SYNC_TIMEOUT,
                #[cfg(feature = "tls")]
                tls_root_certificate: None,
                #[cfg(feature = "tls")]
                tls_client_certificate: None,
            },
        }
    }

    /// A builder for the master named `master` that the sentinels at `sentinels`
    /// (`redis://host:port` URLs) monitor.
    pub(crate) fn sentinel(master: &str, sentinels: Vec<String>) -> Self {
        let mut builder = RedisBackendBuilder::plain(sentinels.first().map_or("", String::as_str));
        builder.settings.sentinel = Some(SentinelSettings {
            master: master.to_owned(),
            sentinels,
            username: None,
            password: None,
            db: 0,
        });
        builder
    }

    /// A builder for the Redis Cluster that `nodes` (`redis://[user:password@]host:port` URLs)
    /// belong to.
    pub(crate) fn cluster(nodes: Vec<String>) -> Self {
        let mut builder = RedisBackendBuilder::plain(nodes.first().map_or("", String::as_str));
        builder.settings.cluster = Some(nodes);
        builder
    }

    /// With Sentinel: the credentials of the master (and so of whichever replica is promoted):
    /// an ACL `username` (`None` for the default user) and `password`. The sentinels' own
    /// credentials, if they have any, go in their URLs. Ignored without Sentinel, where the
    /// URL carries them.
    pub fn master_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        if let Some(sentinel) = &mut self.settings.sentinel {
            sentinel.username = username.map(str::to_owned);
            sentinel.password = Some(password.to_owned());
        }
        self
    }

    /// With Sentinel: the database number on the master (default 0). Ignored without
    /// Sentinel, where the URL's path gives it.
    pub fn master_db(mut self, db: i64) -> Self {
        if let Some(sentinel) = &mut self.settings.sentinel {
            sentinel.db = db;
        }
        self
    }

    /// The most command connections kept open at once (default 10). Threads that find all of
    /// them busy wait up to the [checkout timeout](Self::checkout_timeout). Waiting for a lock
    /// holds no connection, and the pub/sub connection is not counted.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.settings.pool_size = size;
        self
    }

    /// How long opening a connection may take, handshakes included (default 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long one read or one write on a connection may block (default 3 s, Redisson's
    /// `timeout`). A server that stops answering (paused, overloaded, partitioned) makes lock
    /// calls fail after this long instead of hanging.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// How long a call waits for a free pooled connection, including opening a new one when
    /// the pool has none (default 5 s).
    pub fn checkout_timeout(mut self, timeout: Duration) -> Self {
        self.settings.checkout_timeout = timeout;
        self
    }

    /// Whether command connections set `TCP_NODELAY` (default on). Every lock operation is one
    /// small request answered by one small reply, which Nagle's algorithm can only delay.
    pub fn tcp_nodelay(mut self, nodelay: bool) -> Self {
        self.settings.tcp_nodelay = nodelay;
        self
    }

    /// How long a lock's release channel stays subscribed after the last local waiter left
    /// (default 200 ms), so a thread that waits on the same lock again soon finds it ready.
    pub fn unsubscribe_linger(mut self, linger: Duration) -> Self {
        self.settings.unsubscribe_linger = linger;
        self
    }

    /// Whether lock-changing steps wait for the master's replicas (default on; Redisson's
    /// `checkLockSyncedSlaves`).
    ///
    /// A lock written on the master but not yet on a replica is lost if that replica takes
    /// over, and two owners may then hold it. When on and the master has replicas, every
    /// acquire, renewal, release and force unlock is followed, in the same pipeline, by `WAIT`
    /// for them: that adds the replication delay to the step, not a round trip (nothing at all
    /// without replicas). An acquire that no replica acknowledged within the
    /// [sync timeout](Self::replica_sync_timeout) is undone and fails with
    /// [`LockError::NotReplicated`]; a renewal that none acknowledged counts as failed and is
    /// retried until the lease runs out. The lock user then needs the `ROLE` and `WAIT`
    /// commands (docs/redis.md lists the ACL).
    ///
    /// Off: steps are acknowledged by the master alone, as with a server without replicas.
    pub fn replica_sync(mut self, on: bool) -> Self {
        self.settings.replica_sync = on;
        self
    }

    /// How long a step waits for a replica's acknowledgement (default 1 s, Redisson's
    /// `slavesSyncTimeout`). Replicas on a healthy network answer within a millisecond; this
    /// bounds how long an acquire takes to fail when none does.
    pub fn replica_sync_timeout(mut self, timeout: Duration) -> Self {
        self.settings.replica_sync_timeout = timeout;
        self
    }

    /// Trusts the CA certificate in `pem` (instead of the system's roots) for `rediss://`
    /// servers: the way to reach a server whose certificate a private CA signed.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.tls_root_certificate = Some(pem.into());
        self
    }

    /// Presents this client certificate and private key (both PEM) to `rediss://` servers
    /// that require one (`tls-auth-clients yes`, Redis's default).
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.settings.tls_client_certificate = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Checks the settings (what [`build`](Self::build) does first).
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        if let Some(problem) = self.problem {
            return Err(LockError::config(problem));
        }
        let s = &self.settings;
        if let Some(sentinel) = &s.sentinel {
            if sentinel.master.is_empty() {
                return Err(LockError::config(
                    "the Sentinel master name must not be empty \
                     (redis-sentinel://[user:password@]host:port[,host:port...]/<master name>)",
                ));
            }
            if sentinel.sentinels.is_empty() {
                return Err(LockError::config(
                    "at least one sentinel URL is needed \
                     (redis-sentinel://[user:password@]host:port[,host:port...]/<master name>)",
                ));
            }
        }
        if s.cluster.as_ref().is_some_and(Vec::is_empty) {
            return Err(LockError::config(
                "at least one Redis Cluster node URL is needed \
                 (redis-cluster://[user:password@]host:port[,host:port...])",
            ));
        }
        if s.pool_size == 0 {
            return Err(LockError::config("pool_size must be at least 1"));
        }
        for (name, value) in [
            ("connect_timeout", s.connect_timeout),
            ("response_timeout", s.response_timeout),
            ("checkout_timeout", s.checkout_timeout),
            ("replica_sync_timeout", s.replica_sync_timeout),
        ] {
            dlock_core::backend::validate_setting(name, value, Duration::ZERO)?;
        }
        if s.unsubscribe_linger > dlock_core::backend::MAX_DURATION {
            return Err(LockError::config(
                "unsubscribe_linger must be at most one year",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackendBuilder")
            .field("url", &crate::redact::redact_url(&self.settings.url))
            .field(
                "sentinel_master",
                &self.settings.sentinel.as_ref().map(|s| s.master.as_str()),
            )
            .field(
                "cluster_nodes",
                &self.settings.cluster.as_ref().map(|nodes| {
                    nodes
                        .iter()
                        .map(|url| crate::redact::redact_url(url))
                        .collect::<Vec<_>>()
                }),
            )
            .field("pool_size", &self.settings.pool_size)
            .field("connect_timeout", &self.settings.connect_timeout)
            .field("response_timeout", &self.settings.response_timeout)
            .field("checkout_timeout", &self.settings.checkout_timeout)
            .field("tcp_nodelay", &self.settings.tcp_nodelay)
            .field("unsubscribe_linger", &self.settings.unsubscribe_linger)
            .field("replica_sync", &self.settings.replica_sync)
            .field("replica_sync_timeout", &self.settings.replica_sync_timeout)
            .finish_non_exhaustive()
    }
}
