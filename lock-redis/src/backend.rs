//! [`RedisBackend`]: the [`DistributedLock`] operations as scripts on a Redis server.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dlock_core::backend::{
    Acquire, AcquireRequest, CounterStep, DistributedLock, Grant, Handover, HoldRef, Leader,
    LockRef, LockStatus, LossReason, OwnerId, Release, ReleaseSubscription, Renewal,
};
use dlock_core::{LockError, LockKind};
use redis::{FromRedisValue, RedisError, Value};

use crate::batch::{self, BatchReply};
use crate::cluster::{key_slot, Cluster};
use crate::commands::{Commands, Retry};
use crate::config::{RedisBackendBuilder, Settings};
use crate::connection::{Connector, Endpoint};
use crate::error::to_lock_error;
use crate::inspect;
use crate::keys;
use crate::layout::{self, ScriptCall};
use crate::pubsub::PubSub;
use crate::replica_sync::{Ack, ReplicaSync};
use crate::request_id;
use crate::scripts::{self, Announce, LuaScript, FAIR_RENEW, READ_RENEW, RENEW, SEMAPHORE_RENEW};
use crate::synchronizer_info::{self, SynchronizerInfo};
use dlock_core::backend::LockInfo;

/// How many locks one renewal `EVALSHA` covers; bigger batches are split into several scripts
/// sent together in one pipeline (still one round trip), so no single script blocks the
/// server for long.
pub(crate) const RENEW_CHUNK: usize = 500;

/// The shortest time a release's latch is kept: it must outlive the retry of that release.
const MIN_LATCH_LIFETIME: Duration = Duration::from_secs(1);

/// A [`DistributedLock`] on one Redis server, compatible with Redisson's `RLock`.
///
/// Cheap to clone (clones share the pool and the pub/sub connection), `Send` and `Sync`. Hand
/// it to [`LockClient::new`](dlock_core::LockClient::new); the pub/sub thread stops when the
/// last clone is dropped.
///
/// # Examples
///
/// ```no_run
/// use dlock_core::LockClient;
/// use dlock_redis::RedisBackend;
///
/// let client = LockClient::new(RedisBackend::connect("redis://127.0.0.1:6379")?);
/// let orders = client.lock("orders:42");
/// let guard = orders.lock()?;
/// assert!(orders.is_held_by_current_thread()?);
/// drop(guard);
/// # Ok::<(), dlock_core::LockError>(())
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
    /// use dlock_redis::RedisBackend;
    ///
    /// let backend = RedisBackend::sentinel_builder(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    /// )
    /// .build()?;
    /// # Ok::<(), dlock_core::LockError>(())
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
    /// use dlock_redis::RedisBackend;
    ///
    /// let backend = RedisBackend::cluster_builder([
    ///     "redis://10.0.0.1:7000",
    ///     "redis://10.0.0.2:7000",
    ///     "redis://10.0.0.3:7000",
    /// ])
    /// .build()?;
    /// # Ok::<(), dlock_core::LockError>(())
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

    /// What the server holds for lock `name` now: holders, remaining lease, queued fair
    /// waiters, the last fencing token (one round trip, nothing taken). A key of that name that
    /// is not a lock is `LockError::InvalidArgument`.
    ///
    /// The answer is for people and tools (`dlock status`); it is stale once read, so a program
    /// that needs the lock should ask for it instead.
    pub fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        dlock_core::backend::validate_name(name)?;
        let names = [name.to_owned()];
        let replies = self.inspect_names(&names)?;
        inspect::parse(&names, replies)?
            .pop()
            .unwrap_or_else(|| Err(LockError::protocol("no reply to a lock inspection")))
            .map_err(|error| error.on_lock(name))
    }

    /// The locks held now whose names match `pattern` (Redis glob syntax: `*`, `?`, `[ab]`),
    /// sorted by name, at most `limit` of them. Found with `SCAN ... TYPE hash`, never `KEYS`,
    /// so a large keyspace costs several round trips but never blocks the server; hashes that
    /// are not locks are left out.
    pub fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        if pattern.is_empty() {
            return Err(LockError::invalid(
                "pattern",
                "a pattern must not be empty (use `*` for all)",
            ));
        }
        if limit == 0 {
            return Err(LockError::invalid("limit", "the limit must be at least 1"));
        }
        let names = match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with("a lock scan", Retry::OnDroppedConnection, |con| {
                    inspect::scan(|cmd| cmd.query(con), pattern, limit)
                })?
            }
            Store::Cluster(cluster) => {
                let mut names = cluster.scan_keys(pattern, "hash", limit)?;
                names.retain(|key| !inspect::is_derived_key(key));
                names
            }
        };
        let mut locks = Vec::with_capacity(names.len());
        for chunk in names.chunks(RENEW_CHUNK) {
            let replies = self.inspect_names(chunk)?;
            // A hash that is not a lock, or a lock released since the scan, is not listed.
            locks.extend(
                inspect::parse(chunk, replies)?
                    .into_iter()
                    .filter_map(Result::ok)
                    .filter(LockInfo::is_held),
            );
        }
        Ok(locks)
    }

    /// What the server holds for `name` as a semaphore (its available permits and the permits
    /// held), a latch (its count) and a leader election (its leader), in one round trip,
    /// nothing taken. For people and tools (`dlock status`); stale once read.
    pub fn inspect_synchronizer(&self, name: &str) -> Result<SynchronizerInfo, LockError> {
        dlock_core::backend::validate_name(name)?;
        let what = "a synchronizer inspection";
        let replies = match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with(what, Retry::OnDroppedConnection, |con| {
                    synchronizer_info::inspect(con, name)
                })
            }
            Store::Cluster(cluster) => {
                cluster
                    .commands
                    .run_with(what, Retry::OnDroppedConnection, |con| {
                        synchronizer_info::inspect(&mut con.con, name)
                    })
            }
        }?;
        synchronizer_info::parse(name, replies).map_err(|error| error.on_lock(name))
    }

    /// The semaphores with permits held and the elections with a leader now, whose names match
    /// `pattern` (Redis glob syntax), sorted by name, at most `limit` of them; found with `SCAN`.
    pub fn list_synchronizers(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<SynchronizerInfo>, LockError> {
        if pattern.is_empty() {
            return Err(LockError::invalid(
                "pattern",
                "a pattern must not be empty (use `*` for all)",
            ));
        }
        if limit == 0 {
            return Err(LockError::invalid("limit", "the limit must be at least 1"));
        }
        // Semaphores by their permits held, elections among the hashes of matching names.
        let scans: [(String, &str, Option<&str>); 2] = [
            (keys::suffixed(pattern, "timeout"), "zset", Some("timeout")),
            (pattern.to_owned(), "hash", None),
        ];
        let mut names = Vec::new();
        for (matching, kind, suffix) in scans {
            let found = match &self.inner.store {
                Store::Server { commands, .. } => {
                    commands.run_with("a synchronizer scan", Retry::OnDroppedConnection, |con| {
                        inspect::scan_keys(|cmd| cmd.query(con), &matching, kind, limit)
                    })?
                }
                Store::Cluster(cluster) => cluster.scan_keys(&matching, kind, limit)?,
            };
            names.extend(found.iter().filter_map(|key| match suffix {
                Some(suffix) => keys::base_name(key, None, Some(suffix)),
                None => (!inspect::is_derived_key(key)).then(|| key.clone()),
            }));
        }
        names.sort();
        names.dedup();
        names.truncate(limit);
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            let info = self.inspect_synchronizer(&name)?;
            if info.is_in_use() {
                found.push(info);
            }
        }
        Ok(found)
    }

    /// Reads `names` for [`inspect::parse`]: one pipeline (on a cluster, one per name).
    fn inspect_names(&self, names: &[String]) -> Result<Vec<Value>, LockError> {
        let what = "a lock inspection";
        match &self.inner.store {
            Store::Server { commands, .. } => {
                commands.run_with(what, Retry::OnDroppedConnection, |con| {
                    inspect::inspect(con, names)
                })
            }
            Store::Cluster(cluster) => {
                let mut replies = Vec::with_capacity(names.len() * 5);
                for name in names {
                    replies.extend(cluster.commands.run_with(
                        what,
                        Retry::OnDroppedConnection,
                        |con| inspect::inspect(&mut con.con, std::slice::from_ref(name)),
                    )?);
                }
                Ok(replies)
            }
        }
    }

    /// Runs `calls` as one pipeline (see [`batch::run_batch`]; on a cluster, one per master),
    /// followed by the replicas' acknowledgement when `durability` asks for it.
    fn run_batch(
        &self,
        what: &str,
        calls: &[ScriptCall],
        retry: Retry,
        durability: Durability,
    ) -> Result<BatchReply, LockError> {
        let replicated = durability == Durability::Replicated;
        match &self.inner.store {
            Store::Server {
                commands,
                replica_sync,
                ..
            } => {
                let plan = if replicated {
                    replica_sync.plan()
                } else {
                    ReplicaSync::off().plan()
                };
                let calls: Vec<&ScriptCall> = calls.iter().collect();
                commands.run_with(what, retry, |con| {
                    batch::run_batch(
                        con,
                        &calls,
                        replica_sync,
                        plan,
                        self.inner.response_timeout,
                        Announce::Publish,
                    )
                })
            }
            Store::Cluster(cluster) => {
                cluster.run_batch(what, calls, retry, replicated, self.inner.response_timeout)
            }
        }
    }

    /// Runs one script about `lock`: its reply, typed, and the replicas' acknowledgement. The
    /// server's errors name the lock (and a name used by another kind of lock is
    /// `LockError::WrongKind`).
    fn run_one<T: FromRedisValue>(
        &self,
        lock: LockRef<'_>,
        call: &ScriptCall,
        retry: Retry,
        durability: Durability,
    ) -> Result<(T, Ack), LockError> {
        let name = call.script.name;
        let BatchReply { replies, ack } = self
            .run_batch(name, std::slice::from_ref(call), retry, durability)
            .map_err(|error| error.on_lock(lock.name))?;
        let reply = replies.into_iter().next().unwrap_or(Value::Nil);
        if let Value::ServerError(error) = reply {
            return Err(self.script_error(RedisError::from(error), lock, name));
        }
        let typed = T::from_redis_value(reply).map_err(|error| {
            LockError::protocol(format!("unexpected reply to {name}: {error}")).on_lock(lock.name)
        })?;
        Ok((typed, ack))
    }

    fn script_error(&self, error: RedisError, lock: LockRef<'_>, what: &str) -> LockError {
        script_error(error, lock, what, &self.endpoint().describe())
    }

    /// Undoes the acquires of `acquired` when the replicas did not acknowledge them, and says
    /// why; does nothing when they did (or none were asked). A re-entry
    /// ([`AcquireRequest::reentry`]) is not undone: releasing would end the hold its owner
    /// already had and still relies on; what it changed on the master (one count more, a lease
    /// never shorter) is harmless, and the client keeps the hold's earlier deadline.
    fn check_replicated(
        &self,
        acquired: &[&AcquireRequest<'_>],
        ack: Ack,
    ) -> Result<(), LockError> {
        let lock = match acquired {
            [one] => Some(one.lock.name.to_owned()),
            _ => None,
        };
        let error = match ack {
            Ack::NotNeeded | Ack::Acknowledged => return Ok(()),
            Ack::Missing { replicas, timeout } => LockError::NotReplicated {
                lock,
                replicas,
                timeout,
            },
            Ack::Refused(problem) => LockError::Protocol {
                message: problem,
                lock,
                source: None,
            },
        };
        let acquired: Vec<&&AcquireRequest<'_>> =
            acquired.iter().filter(|request| !request.reentry).collect();
        if acquired.is_empty() {
            return Err(error);
        }
        // Each new hold is released. Sent to the master alone: waiting again could only add
        // time.
        let calls: Vec<ScriptCall> = acquired
            .iter()
            .map(|request| self.release_call(request.lock, request.owner))
            .collect();
        match self.run_batch(
            "undoing an acquire the replicas did not acknowledge",
            &calls,
            Retry::OnAnyConnectionError,
            Durability::MasterOnly,
        ) {
            Ok(batch) => {
                for (request, reply) in acquired.iter().zip(batch.replies) {
                    if let Value::ServerError(problem) = reply {
                        tracing::warn!(lock = request.lock.name, %problem, "could not undo an unreplicated acquire; it stays until its lease runs out");
                    }
                }
            }
            Err(problem) => {
                tracing::warn!(%problem, "could not undo unreplicated acquires; they stay until their leases run out");
            }
        }
        Err(error)
    }

    /// A release the replicas did not acknowledge has still happened on the master; a
    /// failover before it reaches them brings the hold back until its lease runs out.
    fn note_release_ack(&self, what: &str, ack: &Ack) {
        match ack {
            Ack::Missing { replicas, timeout } => tracing::warn!(
                replicas,
                ?timeout,
                "{what} done on the master, but no replica acknowledged it"
            ),
            Ack::Refused(problem) => tracing::warn!(%problem, "{what}: the server refused WAIT"),
            Ack::NotNeeded | Ack::Acknowledged => {}
        }
    }

    /// The latched release of `owner`'s hold on `lock`, under a fresh request id.
    ///
    /// The result is remembered on the server under the request id (Redisson's unlock latch),
    /// so the request sent again after a lost reply (as it is, once, on a connection failure)
    /// replays the first answer instead of acting a second time. Once the answer is in hand
    /// the latch is deleted by a `DEL` written in front of the connection's next command, so it
    /// costs neither a round trip nor a write of its own; a latch whose connection is closed
    /// first expires (it is set with the latch lifetime).
    fn release_call(&self, lock: LockRef<'_>, owner: &OwnerId) -> ScriptCall {
        let request = request_id::next();
        let listening = |channel: &str| match &self.inner.store {
            Store::Server { pubsub, .. } => pubsub.is_listening(channel),
            Store::Cluster(cluster) => cluster.pubsub.is_listening(channel),
        };
        layout::release(lock, owner, &request, self.inner.latch_lifetime, &listening)
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

impl DistributedLock for RedisBackend {
    fn supports(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Reentrant
                | LockKind::Fair
                | LockKind::Read
                | LockKind::Write
                | LockKind::Fenced
                | LockKind::Semaphore
                | LockKind::Latch
                | LockKind::Election
        )
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        check_kind(self, request.lock)?;
        let call = layout::acquire(request);
        let (reply, ack): (Value, Ack) = self.run_one(
            request.lock,
            &call,
            Retry::OnDroppedConnection,
            Durability::Replicated,
        )?;
        let acquire = acquire_reply(reply).map_err(|error| error.on_lock(request.lock.name))?;
        if acquire.is_acquired() {
            self.check_replicated(&[request], ack)?;
        }
        Ok(acquire)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        check_kind(self, lock)?;
        if lock.kind == LockKind::Latch {
            // Nothing is ever held on a latch.
            return Ok(Release::NotHeld);
        }
        let call = self.release_call(lock, owner);
        let (released, ack): (Value, Ack) = self.run_one(
            lock,
            &call,
            Retry::OnAnyConnectionError,
            Durability::Replicated,
        )?;
        let release = layout::release_outcome(&released);
        if release.is_released() {
            self.note_release_ack("a release", &ack);
        }
        Ok(release)
    }

    fn hands_over(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Reentrant | LockKind::Fair | LockKind::Semaphore
        )
    }

    fn release_to(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        successor: &AcquireRequest<'_>,
    ) -> Result<Handover, LockError> {
        if !matches!(lock.kind, LockKind::Reentrant | LockKind::Semaphore) {
            return self.release(lock, owner).map(Handover::from);
        }
        let request = request_id::next();
        let call = layout::hand_over(lock, owner, successor, &request, self.inner.latch_lifetime);
        // Retried on any connection error: the latch makes a second attempt replay the first.
        let (handed, ack): (Option<i64>, Ack) = self.run_one(
            lock,
            &call,
            Retry::OnAnyConnectionError,
            Durability::Replicated,
        )?;
        Ok(match handed {
            // The successor's hold is an acquire: one no replica acknowledged is undone (the
            // undo announces the lock free) and the successor tries again as usual.
            Some(HANDED_OVER) => match self.check_replicated(&[successor], ack) {
                Ok(()) => Handover::Granted(Grant::PLAIN),
                Err(error) => {
                    tracing::warn!(lock = lock.name, %error, "a hand-off was not replicated and was undone");
                    Handover::Released
                }
            },
            Some(1) => Handover::Released,
            _ => Handover::NotHeld,
        })
    }

    fn try_acquire_many(&self, requests: &[AcquireRequest<'_>]) -> Result<Vec<Acquire>, LockError> {
        for request in requests {
            check_kind(self, request.lock)?;
        }
        if requests.len() < 2 {
            return requests
                .iter()
                .map(|request| self.try_acquire(request))
                .collect();
        }
        // Every attempt in one pipeline: one round trip, whatever their number. Attempting twice
        // after a dropped connection is harmless (an acquire is retried the same way).
        let calls: Vec<ScriptCall> = requests.iter().map(layout::acquire).collect();
        let batch = self.run_batch(
            "a batch of acquires",
            &calls,
            Retry::OnDroppedConnection,
            Durability::Replicated,
        )?;
        let mut outcomes = Vec::with_capacity(requests.len());
        let mut first_error = None;
        for (request, reply) in requests.iter().zip(batch.replies) {
            let outcome = match reply {
                Value::ServerError(error) => {
                    Err(self.script_error(RedisError::from(error), request.lock, "acquire"))
                }
                reply => acquire_reply(reply).map_err(|error| error.on_lock(request.lock.name)),
            };
            match outcome {
                Ok(acquire) => outcomes.push((request, acquire)),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        let acquired: Vec<&AcquireRequest<'_>> = outcomes
            .iter()
            .filter(|(_, acquire)| acquire.is_acquired())
            .map(|(request, _)| *request)
            .collect();
        if let Some(error) = first_error {
            // All or nothing: what this batch took is given back before the error is told.
            let _ = self.check_replicated(
                &acquired,
                Ack::Refused("another acquire of the batch failed".into()),
            );
            return Err(error);
        }
        self.check_replicated(&acquired, batch.ack)?;
        Ok(outcomes.into_iter().map(|(_, acquire)| acquire).collect())
    }

    fn release_many(&self, holds: &[HoldRef<'_>]) -> Vec<Result<Release, LockError>> {
        if holds.len() < 2 {
            return holds
                .iter()
                .map(|hold| self.release(hold.lock, hold.owner))
                .collect();
        }
        if let Some(hold) = holds.iter().find(|hold| !self.supports(hold.lock.kind)) {
            let error = || LockError::Unsupported {
                name: hold.lock.name.to_owned(),
                kind: hold.lock.kind,
            };
            return holds.iter().map(|_| Err(error())).collect();
        }
        // One pipeline of latched releases: a retry after a lost reply replays each one.
        let calls: Vec<ScriptCall> = holds
            .iter()
            .map(|hold| self.release_call(hold.lock, hold.owner))
            .collect();
        let batch = match self.run_batch(
            "a batch of releases",
            &calls,
            Retry::OnAnyConnectionError,
            Durability::Replicated,
        ) {
            Ok(batch) => batch,
            Err(error) => {
                // Every hold gets the batch's error, typed as it is (a `Config`, `Protocol` or
                // `NotReplicated` stays one): the first the error itself, the others copies.
                let Some((first, others)) = holds.split_first() else {
                    return Vec::new();
                };
                let copies: Vec<Result<Release, LockError>> = others
                    .iter()
                    .map(|hold| Err(crate::error::copy_for_lock(&error, hold.lock.name)))
                    .collect();
                return std::iter::once(Err(error.on_lock(first.lock.name)))
                    .chain(copies)
                    .collect();
            }
        };
        self.note_release_ack("a batch of releases", &batch.ack);
        holds
            .iter()
            .zip(batch.replies)
            .map(|(hold, reply)| match reply {
                Value::ServerError(error) => {
                    Err(self.script_error(RedisError::from(error), hold.lock, "release"))
                }
                reply => Ok(layout::release_outcome(&reply)),
            })
            .collect()
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        for hold in holds {
            check_kind(self, hold.lock)?;
        }
        let lease_ms = layout::millis(lease);
        // Exclusive holds (one holder field), fair holds and read holds each go to their own
        // script, in chunks; all of it in one pipeline: one round trip.
        let mut exclusive = Vec::new();
        let mut fair = Vec::new();
        let mut read = Vec::new();
        let mut permits = Vec::new();
        for (index, hold) in holds.iter().enumerate() {
            match layout::renewal(hold) {
                layout::Renewal::Exclusive { key, field } => {
                    exclusive.push((index, vec![key], field))
                }
                layout::Renewal::Fair {
                    key,
                    queue,
                    timeouts,
                    owner,
                } => fair.push((index, vec![key, queue, timeouts], owner)),
                layout::Renewal::Read { key, prefix, owner } => {
                    read.push((index, vec![key, prefix], owner))
                }
                layout::Renewal::Permit { key, id } => permits.push((index, vec![key], id)),
            }
        }
        let mut calls = Vec::new();
        let mut order = Vec::with_capacity(holds.len());
        for (script, mut holds) in [
            (&RENEW, exclusive),
            (&FAIR_RENEW, fair),
            (&READ_RENEW, read),
            (&SEMAPHORE_RENEW, permits),
        ] {
            // On a cluster one script's keys must share a slot: one script per slot.
            let slot_of = |keys: &Vec<String>| keys.first().map_or(0, |key| key_slot(key));
            if self.is_cluster() {
                holds.sort_by_key(|(_, keys, _)| slot_of(keys));
            }
            let same_store = |a: &(usize, Vec<String>, String),
                              b: &(usize, Vec<String>, String)| {
                !self.is_cluster() || slot_of(&a.1) == slot_of(&b.1)
            };
            for chunk in holds
                .chunk_by(same_store)
                .flat_map(|group| group.chunks(RENEW_CHUNK))
            {
                calls.push(renew_call(script, chunk, &lease_ms));
                order.extend(chunk.iter().map(|(index, _, _)| *index));
            }
        }
        // Renewing twice is harmless, so a dropped connection's renewal is simply sent again.
        // On a cluster each master answers for its own holds: one that fails leaves the
        // others' answers standing.
        let (replies, ack) = match &self.inner.store {
            Store::Cluster(cluster) => {
                let parts = cluster.run_batch_parts(
                    "renewing leases",
                    &calls,
                    Retry::OnDroppedConnection,
                    true,
                    self.inner.response_timeout,
                )?;
                match parts.failed {
                    Some(error) if parts.replies.iter().all(Option::is_none) => return Err(error),
                    _ => (parts.replies, parts.ack),
                }
            }
            Store::Server { .. } => {
                let batch = self.run_batch(
                    "renewing leases",
                    &calls,
                    Retry::OnDroppedConnection,
                    Durability::Replicated,
                )?;
                (batch.replies.into_iter().map(Some).collect(), batch.ack)
            }
        };
        let mut found: Vec<Option<i64>> = Vec::with_capacity(holds.len());
        for (call, reply) in calls.iter().zip(replies) {
            let Some(reply) = reply else {
                // Its master did not answer: the holds it covers are unanswered.
                found.extend(std::iter::repeat_n(None, call.args.len() - 1));
                continue;
            };
            let codes = match reply {
                Value::ServerError(error) => Err(to_lock_error(
                    RedisError::from(error),
                    "renewing leases",
                    &self.endpoint().describe(),
                )),
                reply => Vec::<i64>::from_redis_value(reply).map_err(|error| {
                    LockError::protocol(format!("unexpected reply to a renewal: {error}"))
                }),
            }?;
            found.extend(codes.into_iter().map(Some));
        }
        if found.len() != holds.len() {
            return Err(LockError::protocol(format!(
                "renewal of {} locks answered {} results",
                holds.len(),
                found.len()
            )));
        }
        // A renewal no replica has would be undone by a failover: the lease is only known to
        // last as long as its last acknowledged renewal, so this one counts as failed.
        self.check_replicated(&[], ack)?;
        let mut renewals = vec![Renewal::Lost(LossReason::Gone); holds.len()];
        for (index, code) in order.into_iter().zip(found) {
            renewals[index] = match code {
                None => Renewal::Unanswered,
                Some(RENEWED) => Renewal::Renewed,
                Some(HELD_BY_ANOTHER) => Renewal::Lost(LossReason::TakenOver),
                Some(_) => Renewal::Lost(LossReason::Gone),
            };
        }
        Ok(renewals)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        check_kind(self, lock)?;
        let call = layout::status(lock, owner);
        let ((held, mine, ttl), _): ((i64, i64, i64), Ack) = self.run_one(
            lock,
            &call,
            Retry::OnDroppedConnection,
            Durability::MasterOnly,
        )?;
        Ok(if held == 1 {
            LockStatus::held(mine == 1, pttl(ttl))
        } else {
            LockStatus::FREE
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        check_kind(self, lock)?;
        if matches!(lock.kind, LockKind::Semaphore | LockKind::Latch) {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            });
        }
        let (deleted, ack): (i64, Ack) = self.run_one(
            lock,
            &layout::force_unlock(lock),
            Retry::Never,
            Durability::Replicated,
        )?;
        if deleted == 1 {
            self.note_release_ack("a force unlock", &ack);
        }
        Ok(deleted == 1)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        check_kind(self, lock)?;
        let channel = layout::channel(lock, owner);
        match &self.inner.store {
            Store::Server { pubsub, .. } => pubsub.subscribe(channel),
            Store::Cluster(cluster) => cluster.pubsub.subscribe(channel),
        }
        .map_err(|error| error.on_lock(lock.name))
    }

    fn cancel_wait(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        queue_slot: Duration,
    ) -> Result<(), LockError> {
        check_kind(self, lock)?;
        match layout::cancel_wait(lock, owner, queue_slot) {
            Some(call) => self
                .run_one::<i64>(
                    lock,
                    &call,
                    Retry::OnDroppedConnection,
                    Durability::MasterOnly,
                )
                .map(drop),
            None => Ok(()),
        }
    }

    fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        let lock = LockRef::new(step.name(), step.kind());
        check_kind(self, lock)?;
        let call = layout::counter(step).ok_or_else(|| LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        })?;
        // Reads and "set if unset" are harmless to repeat after a dropped connection; adding
        // and counting down are not. Changes wait for the replicas as a lock step does.
        let (retry, durability) = match step {
            CounterStep::AvailablePermits { .. } | CounterStep::Count { .. } => {
                (Retry::OnDroppedConnection, Durability::MasterOnly)
            }
            CounterStep::TrySetPermits { .. } | CounterStep::TrySetCount { .. } => {
                (Retry::OnDroppedConnection, Durability::Replicated)
            }
            _ => (Retry::Never, Durability::Replicated),
        };
        let (answer, ack): (i64, Ack) = self.run_one(lock, &call, retry, durability)?;
        self.note_release_ack(call.script.name, &ack);
        Ok(u64::try_from(answer).unwrap_or(0))
    }

    fn leader(&self, lock: LockRef<'_>) -> Result<Option<Leader>, LockError> {
        check_kind(self, lock)?;
        if lock.kind != LockKind::Election {
            return Err(LockError::Unsupported {
                name: lock.name.to_owned(),
                kind: lock.kind,
            });
        }
        let (reply, _): (Option<(String, i64, i64)>, Ack) = self.run_one(
            lock,
            &layout::leader(lock.name),
            Retry::OnDroppedConnection,
            Durability::MasterOnly,
        )?;
        Ok(reply.map(|(candidate, token, ttl)| {
            Leader::new(candidate, u64::try_from(token).unwrap_or(0), pttl(ttl))
        }))
    }
}

/// An acquire script's answer: nil (taken), a `PTTL` (held), or the fenced form: `{-1, token}`
/// (taken) or `{PTTL, -1}` (held).
pub(crate) fn acquire_reply(reply: Value) -> Result<Acquire, LockError> {
    match reply {
        Value::Nil => Ok(Acquire::ACQUIRED),
        Value::Int(ttl) => Ok(Acquire::Held {
            remaining_lease: pttl(ttl),
        }),
        Value::Array(items) => match items[..] {
            [Value::Int(-1), Value::Int(token)] => Ok(Acquire::Acquired(
                Grant::PLAIN.with_fencing_token(u64::try_from(token).unwrap_or_default()),
            )),
            [Value::Int(ttl), Value::Int(-1)] => Ok(Acquire::Held {
                remaining_lease: pttl(ttl),
            }),
            _ => Err(LockError::protocol(format!(
                "unexpected reply to an acquire: {items:?}"
            ))),
        },
        other => Err(LockError::protocol(format!(
            "unexpected reply to an acquire: {other:?}"
        ))),
    }
}

/// One renewal script over a chunk of holds: every hold's keys, then the lease and every
/// hold's field.
fn renew_call(
    script: &'static LuaScript,
    chunk: &[(usize, Vec<String>, String)],
    lease_ms: &str,
) -> ScriptCall {
    let keys = chunk.iter().flat_map(|(_, keys, _)| keys.clone()).collect();
    let args = std::iter::once(lease_ms.to_owned())
        .chain(chunk.iter().map(|(_, _, field)| field.clone()))
        .collect();
    ScriptCall::new(script, keys, args)
}

/// What the renew scripts answer for a lock they extended.
pub(crate) const RENEWED: i64 = 1;
/// What the hand-over release returns when the lock went to the successor.
const HANDED_OVER: i64 = 2;
/// What they answer for a lock that another owner holds now.
pub(crate) const HELD_BY_ANOTHER: i64 = 2;

/// The client only sends the kinds a backend supports; anything else is a caller's mistake.
fn check_kind(backend: &RedisBackend, lock: LockRef<'_>) -> Result<(), LockError> {
    if backend.supports(lock.kind) {
        Ok(())
    } else {
        Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        })
    }
}

/// A script's error as a `LockError` about `lock`: the name used by another kind of lock (our
/// scripts' `DLOCK_WRONGKIND`, or Redis's `WRONGTYPE` for a key that is no lock at all) is a
/// `WrongKind`, never the server's text; the rest as any command's errors.
pub(crate) fn script_error(
    error: RedisError,
    lock: LockRef<'_>,
    what: &str,
    server: &str,
) -> LockError {
    if error.code() == Some(scripts::INVALID) {
        return LockError::invalid(
            "permits",
            error.detail().unwrap_or("a count Redis cannot keep"),
        )
        .on_lock(lock.name);
    }
    let found = match error.code() {
        Some(scripts::WRONG_KIND) => {
            Some(error.detail().unwrap_or("another kind of lock").to_owned())
        }
        Some("WRONGTYPE") => Some("a Redis key of another type, not a lock".to_owned()),
        _ => None,
    };
    match found {
        Some(found) => LockError::WrongKind {
            name: lock.name.to_owned(),
            expected: lock.kind,
            found,
        },
        None => to_lock_error(error, what, server).on_lock(lock.name),
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.server())
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

/// A `PTTL` reply as a remaining lease: `None` when the key has no expiry (-1) or is gone (-2).
pub(crate) fn pttl(ttl: i64) -> Option<Duration> {
    u64::try_from(ttl).ok().map(Duration::from_millis)
}
