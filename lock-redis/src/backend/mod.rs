//! [`RedisBackend`]: the [`DistributedLock`] operations as scripts on a Redis server. This file
//! holds the type, where its locks live and how it connects; the steps, the inspection calls,
//! the renewals and the reading of replies each have a file of their own.
//!
//! [`DistributedLock`]: dlock_core::backend::DistributedLock

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dlock_core::LockError;
use redis::Value;

use crate::cluster::Cluster;
use crate::commands::Commands;
use crate::config::{RedisBackendBuilder, Settings};
use crate::connection::{Connector, Endpoint};
use crate::error::to_lock_error;
use crate::pubsub::PubSub;
use crate::replica_sync::ReplicaSync;

mod client_records;
mod dispatch;
mod inspection;
mod places;
mod renewal;
mod replies;
mod steps;

pub(crate) use renewal::RENEW_CHUNK;
pub(crate) use replies::{pttl, script_error, GONE, HELD_BY_ANOTHER, RENEWED};

/// The shortest time a release's latch is kept: it must outlive the retry of that release.
const MIN_LATCH_LIFETIME: Duration = Duration::from_secs(1);

/// A [`DistributedLock`](dlock_core::backend::DistributedLock) on one Redis server, compatible
/// with Redisson's `RLock`.
///
/// Cheap to clone (clones share the pool and the pub/sub connection), `Send` and `Sync`. Hand
/// it to [`LockClient::new`](dlock_core::LockClient::new); the pub/sub thread stops when the
/// last clone is dropped.
///
/// # Examples
///
/// ```no_run
/// use dlocks::LockClient;
/// use dlocks::redis::RedisBackend;
///
/// let client = LockClient::new(RedisBackend::connect("redis://127.0.0.1:6379")?);
/// let orders = client.lock("orders:42");
/// let guard = orders.lock()?;
/// assert!(orders.is_held_by_current_thread()?);
/// drop(guard);
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    response_timeout: Duration,
    latch_lifetime: Duration,
    id: String,
    /// The plain lock's waiters' places in turn.
    places: places::Places,
}

/// Where the locks live.
enum Store {
    /// One server (or the master Sentinel names): its pool, its pub/sub connection and the
    /// replica acknowledgement of its master.
    Server {
        commands: Commands,
        pubsub: PubSub,
        replica_sync: ReplicaSync,
    },
    /// A Redis Cluster.
    Cluster(Box<Cluster>),
}

/// Whether a step waits for the master's replicas to acknowledge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// It changes a lock: `WAIT` for the replicas (when there are any and sync is on).
    Replicated,
    /// It only reads, or undoes: the master's answer is enough.
    MasterOnly,
}

/// Connecting is the backend's: the builder only holds settings (so `config` needs nothing
/// of the backend).
impl RedisBackendBuilder {
    /// Checks the settings, connects, and makes sure the server answers (`PING`).
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`]: the URL cannot be parsed or uses an unsupported scheme, a
    ///   setting is out of range, the TLS configuration is unusable, the server refused the
    ///   credentials (wrong password, unknown or disabled ACL user), or it refused `ROLE` or
    ///   `WAIT` while [replica sync](Self::replica_sync) is on: retrying cannot help.
    /// - [`LockError::Unavailable`]: nothing answered within the connect timeout.
    /// - [`LockError::Protocol`]: the server answered, but not as Redis does.
    pub fn build(self) -> Result<RedisBackend, LockError> {
        self.validate()?;
        RedisBackend::from_settings(self.settings)
    }
}

impl RedisBackend {
    /// Connects with the default settings and checks that the server answers.
    ///
    /// `url` is `redis://[user[:password]@]host[:port][/db]`, or `rediss://...` for TLS
    /// (see [`RedisBackendBuilder`] for custom CAs and timeouts).
    ///
    /// # Errors
    ///
    /// As [`RedisBackendBuilder::build`]: [`LockError::Config`] for a bad URL or refused
    /// credentials, [`LockError::Unavailable`] when nothing answers within the connect
    /// timeout.
    pub fn connect(url: &str) -> Result<RedisBackend, LockError> {
        Self::builder(url).build()
    }

    /// A builder to set the pool size, timeouts and TLS options before connecting.
    ///
    /// `url` may also name a master behind Redis Sentinel:
    /// `redis-sentinel://[user:password@]host:port[,host:port...]/<master name>`, the
    /// credentials the master's (as [`sentinel_builder`](Self::sentinel_builder) with
    /// [`master_credentials`](RedisBackendBuilder::master_credentials)), or some nodes of a
    /// Redis Cluster: `redis-cluster://[user:password@]host:port[,host:port...]`, each node
    /// reached with the credentials (as [`cluster_builder`](Self::cluster_builder)).
    pub fn builder(url: &str) -> RedisBackendBuilder {
        RedisBackendBuilder::new(url)
    }

    /// A builder for a master monitored by Redis Sentinel: `master` is the name the sentinels
    /// know it by, `sentinels` their `redis://host:port` URLs (one is enough; more survive the
    /// loss of some). Every connection, the pub/sub one included, is opened to the master the
    /// sentinels name at that moment, and checked to be a master: after a failover, the
    /// connections to the old master break and their replacements reach the new one.
    ///
    /// ```no_run
    /// use dlocks::redis::RedisBackend;
    ///
    /// let backend = RedisBackend::sentinel_builder(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    /// )
    /// .build()?;
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn sentinel_builder(
        master: &str,
        sentinels: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> RedisBackendBuilder {
        let sentinels = sentinels
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        RedisBackendBuilder::sentinel(master, sentinels)
    }

    /// A builder for a Redis Cluster: `nodes` are `redis://host:port` URLs of some of its
    /// nodes (one is enough to start; more survive the loss of some). Commands go to the master
    /// of each lock's slot (a lock's keys and channel share its slot, as Redisson lays them
    /// out), following `MOVED` and `ASK` while slots migrate; waiters listen with sharded
    /// pub/sub on that master; the watchdog renews each master's locks in one round trip, all
    /// masters at once.
    ///
    /// ```no_run
    /// use dlocks::redis::RedisBackend;
    ///
    /// let backend = RedisBackend::cluster_builder([
    ///     "redis://10.0.0.1:7000",
    ///     "redis://10.0.0.2:7000",
    ///     "redis://10.0.0.3:7000",
    /// ])
    /// .build()?;
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn cluster_builder(
        nodes: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> RedisBackendBuilder {
        let nodes = nodes
            .into_iter()
            .map(|url| url.as_ref().to_owned())
            .collect();
        RedisBackendBuilder::cluster(nodes)
    }

    pub(crate) fn from_settings(settings: Settings) -> Result<RedisBackend, LockError> {
        let id = uuid::Uuid::new_v4().to_string();
        let store = match &settings.cluster {
            Some(nodes) => Store::Cluster(Box::new(Cluster::connect(&settings, nodes, &id)?)),
            None => Self::connect_server(&settings, &id)?,
        };
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                store,
                response_timeout: settings.response_timeout,
                latch_lifetime: (settings.response_timeout * 3).max(MIN_LATCH_LIFETIME),
                places: places::Places::default(),
                id,
            }),
        })
    }

    fn connect_server(settings: &Settings, id: &str) -> Result<Store, LockError> {
        let settings = settings.clone();
        let connector = Connector::commands(&settings)?;
        // Check now that the server answers and accepts the credentials, with the precise
        // error a pool checkout would blur.
        let mut con = connector
            .open()
            .map_err(|error| to_lock_error(error, "connecting", &connector.endpoint.describe()))?;
        redis::cmd("PING")
            .query::<String>(&mut con)
            .map_err(|error| {
                to_lock_error(
                    error,
                    "checking the connection (PING)",
                    &connector.endpoint.describe(),
                )
            })?;
        let replica_sync = if settings.replica_sync {
            probe_replica_sync(&mut con, &connector, settings.replica_sync_timeout)?
        } else {
            ReplicaSync::off()
        };
        drop(con);

        let commands = Commands::new(&settings, connector);
        let pubsub = PubSub::new(
            Connector::pubsub(&settings)?,
            commands.clone(),
            id,
            settings.unsubscribe_linger,
        );
        Ok(Store::Server {
            commands,
            pubsub,
            replica_sync,
        })
    }

    /// The `host:port` this backend talks to (a cluster's seed nodes', comma-separated).
    pub fn server(&self) -> &str {
        &self.endpoint().server
    }

    /// Whether this backend talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.store, Store::Cluster(_))
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        match &self.inner.store {
            Store::Server { commands, .. } => commands.endpoint(),
            Store::Cluster(cluster) => cluster.commands.endpoint(),
        }
    }

    /// The pool and pub/sub connection of a single-server backend (a RedLock's node); a
    /// cluster has neither.
    pub(crate) fn server_parts(&self) -> Result<(&Commands, &PubSub), LockError> {
        match &self.inner.store {
            Store::Server {
                commands, pubsub, ..
            } => Ok((commands, pubsub)),
            Store::Cluster(_) => Err(LockError::config(format!(
                "{} is a Redis Cluster; this needs a single server",
                self.endpoint().describe()
            ))),
        }
    }

    pub(crate) fn latch_lifetime(&self) -> Duration {
        self.inner.latch_lifetime
    }

    /// The number of online replicas of the master, as last read (0 when
    /// [replica sync](RedisBackendBuilder::replica_sync) is off: they are not counted then).
    ///
    /// On a cluster: the fewest replicas a master has, from the slot map as last read.
    pub fn replicas(&self) -> u32 {
        match &self.inner.store {
            Store::Server { replica_sync, .. } => replica_sync.replicas(),
            Store::Cluster(cluster) => cluster.fewest_replicas(),
        }
    }
}

/// Asks the server how many replicas it has (`ROLE`) and whether it takes `WAIT`, when the
/// backend connects: a user whose ACL forbids either hears it now, not at the first lock.
fn probe_replica_sync(
    con: &mut redis::Connection,
    connector: &Connector,
    timeout: Duration,
) -> Result<ReplicaSync, LockError> {
    let replies: Vec<Value> = redis::pipe()
        .cmd("ROLE")
        .cmd("WAIT")
        .arg(0)
        .arg(0)
        .ignore_errors()
        .query(con)
        .map_err(|error| {
            to_lock_error(
                error,
                "reading the replica count (ROLE)",
                &connector.endpoint.describe(),
            )
        })?;
    let sync = ReplicaSync::waiting(timeout);
    for (command, reply) in ["ROLE", "WAIT"].into_iter().zip(&replies) {
        let Value::ServerError(error) = reply else {
            continue;
        };
        if error.code() == "ERR"
            && error
                .details()
                .is_some_and(|d| d.contains("unknown command"))
        {
            tracing::warn!(
                server = %connector.endpoint.server,
                "the server has no {command} command: lock steps are acknowledged by the master alone"
            );
            return Ok(ReplicaSync::off());
        }
        return Err(LockError::config(format!(
            "{} refused {command}, which replica sync needs: {error}; grant the lock user \
             +role and +wait, or turn replica sync off (RedisBackendBuilder::replica_sync)",
            connector.endpoint.describe()
        )));
    }
    let role = replies.first().unwrap_or(&Value::Nil);
    sync.record_role(role).map_err(LockError::protocol)?;
    Ok(sync)
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.server())
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}
