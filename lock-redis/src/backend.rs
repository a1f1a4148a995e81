//! [`RedisBackend`]: the [`DistributedLock`] operations as scripts on a Redis server.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    Acquire, AcquireRequest, DistributedLock, HoldRef, LockRef, LockStatus, LossReason, OwnerId,
    Release, ReleaseSubscription, Renewal,
};
use lock_core::{LockError, LockKind};

use crate::commands::{with_reload, Commands, Retry};
use crate::config::{RedisBackendBuilder, Settings};
use crate::connection::Connector;
use crate::connection::PooledConnection;
use crate::error::to_lock_error;
use crate::keys::{channel_name, unlock_latch_name, UNLOCK_MESSAGE};
use crate::pubsub::PubSub;
use crate::scripts::{self, ACQUIRE, FORCE_UNLOCK, RELEASE, RENEW, STATUS};

/// How many locks one renewal `EVALSHA` covers; bigger batches are split into several scripts
/// sent together in one pipeline (still one round trip), so no single script blocks the
/// server for long.
const RENEW_CHUNK: usize = 500;

/// The shortest time a release's latch is kept: it must outlive the retry of that release.
const MIN_LATCH_LIFETIME: Duration = Duration::from_secs(1);

/// A [`DistributedLock`] on one Redis server, compatible with Redisson's `RLock`.
///
/// Cheap to clone (clones share the pool and the pub/sub connection), `Send` and `Sync`. Hand
/// it to [`LockClient::new`](lock_core::LockClient::new); the pub/sub thread stops when the
/// last clone is dropped.
///
/// # Examples
///
/// ```no_run
/// use lock_core::LockClient;
/// use lock_redis::RedisBackend;
///
/// let client = LockClient::new(RedisBackend::connect("redis://127.0.0.1:6379")?);
/// let orders = client.lock("orders:42");
/// let guard = orders.lock()?;
/// assert!(orders.is_held_by_current_thread()?);
/// drop(guard);
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    commands: Commands,
    pubsub: PubSub,
    latch_lifetime: Duration,
    id: String,
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

    pub(crate) fn from_settings(settings: Settings) -> Result<RedisBackend, LockError> {
        let connector = Connector::commands(&settings)?;
        // Check now that the server answers and accepts the credentials, with the precise
        // error a pool checkout would blur.
        let mut con = connector
            .open()
            .map_err(|error| to_lock_error(error, "connecting", &connector.describe()))?;
        redis::cmd("PING")
            .query::<String>(&mut con)
            .map_err(|error| {
                to_lock_error(
                    error,
                    "checking the connection (PING)",
                    &connector.describe(),
                )
            })?;
        drop(con);

        let commands = Commands::new(&settings, connector);
        let id = uuid::Uuid::new_v4().to_string();
        let pubsub = PubSub::new(
            Connector::pubsub(&settings)?,
            commands.clone(),
            &id,
            settings.unsubscribe_linger,
        );
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                commands,
                pubsub,
                latch_lifetime: (settings.response_timeout * 3).max(MIN_LATCH_LIFETIME),
                id,
            }),
        })
    }

    /// The `host:port` this backend talks to.
    pub fn server(&self) -> &str {
        &self.inner.commands.connector().server
    }

    /// Releases `owner`'s hold on `name` as release request `request_id`, and wakes the lock's
    /// waiters.
    ///
    /// The result is remembered on the server under the request id (Redisson's unlock latch),
    /// so the request sent again after a lost reply (as it is, once, on a connection failure)
    /// replays the first answer instead of acting a second time. Once the answer is in hand
    /// the latch is deleted, without waiting for that to be confirmed: the `DEL`'s reply is read
    /// after the connection's next command, so it costs no round trip.
    fn release_as(
        &self,
        name: &str,
        owner: &OwnerId,
        request_id: &str,
    ) -> Result<Release, LockError> {
        let channel = channel_name(name);
        let latch = unlock_latch_name(name, request_id);
        let latch_ms = millis(self.inner.latch_lifetime).to_string();
        let cmd = scripts::evalsha(
            &RELEASE,
            &[name, channel.as_str(), latch.as_str()],
            &[UNLOCK_MESSAGE, owner.as_str(), &latch_ms],
        );
        let released: Option<i64> = self
            .inner
            .commands
            .run_with(
                RELEASE.name,
                Retry::OnAnyConnectionError,
                |con: &mut PooledConnection| {
                    let released: Option<i64> = with_reload(con, &RELEASE, |con| cmd.query(con))?;
                    if released == Some(1) {
                        con.send_unanswered(redis::cmd("DEL").arg(&latch));
                    }
                    Ok(released)
                },
            )
            .map_err(|error| error.on_lock(name))?;
        Ok(match released {
            Some(1) => Release::Released,
            _ => Release::NotHeld,
        })
    }
}

impl DistributedLock for RedisBackend {
    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Reentrant
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        let name = check_kind(request.lock)?;
        let ttl: Option<i64> = self
            .inner
            .commands
            .eval(
                &ACQUIRE,
                Retry::OnDroppedConnection,
                &[name],
                &[&millis(request.lease).to_string(), request.owner.as_str()],
            )
            .map_err(|error| error.on_lock(name))?;
        Ok(match ttl {
            None => Acquire::Acquired,
            Some(ttl) => Acquire::Held {
                remaining_lease: pttl(ttl),
            },
        })
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        let name = check_kind(lock)?;
        self.release_as(name, owner, &uuid::Uuid::new_v4().simple().to_string())
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        for hold in holds {
            check_kind(hold.lock)?;
        }
        let lease_ms = millis(lease).to_string();
        let mut pipe = redis::pipe();
        for chunk in holds.chunks(RENEW_CHUNK) {
            let keys: Vec<&str> = chunk.iter().map(|hold| hold.lock.name).collect();
            let mut cmd = scripts::evalsha(&RENEW, &keys, &[&lease_ms]);
            for hold in chunk {
                cmd.arg(hold.owner.as_str());
            }
            pipe.add_command(cmd);
        }
        // Renewing twice is harmless, so the whole pipeline is simply re-sent after NOSCRIPT.
        let found: Vec<Vec<i64>> =
            self.inner
                .commands
                .run_with("renewing leases", Retry::OnDroppedConnection, |con| {
                    with_reload(con, &RENEW, |con| pipe.query(con))
                })?;
        let found: Vec<Renewal> = found
            .into_iter()
            .flatten()
            .map(|code| match code {
                RENEWED => Renewal::Renewed,
                HELD_BY_ANOTHER => Renewal::Lost(LossReason::TakenOver),
                _ => Renewal::Lost(LossReason::Gone),
            })
            .collect();
        if found.len() != holds.len() {
            return Err(LockError::protocol(format!(
                "renewal of {} locks answered {} results",
                holds.len(),
                found.len()
            )));
        }
        Ok(found)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        let name = check_kind(lock)?;
        let (exists, mine, ttl): (i64, i64, i64) = self
            .inner
            .commands
            .eval(
                &STATUS,
                Retry::OnDroppedConnection,
                &[name],
                &[owner.as_str()],
            )
            .map_err(|error| error.on_lock(name))?;
        Ok(if exists == 1 {
            LockStatus::held(mine == 1, pttl(ttl))
        } else {
            LockStatus::FREE
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        let name = check_kind(lock)?;
        let channel = channel_name(name);
        let deleted: i64 = self
            .inner
            .commands
            .eval(
                &FORCE_UNLOCK,
                Retry::Never,
                &[name, channel.as_str()],
                &[UNLOCK_MESSAGE],
            )
            .map_err(|error| error.on_lock(name))?;
        Ok(deleted == 1)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        _owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let name = check_kind(lock)?;
        self.inner
            .pubsub
            .subscribe(channel_name(name))
            .map_err(|error| error.on_lock(name))
    }
}

/// What the renew script answers for a lock it extended.
const RENEWED: i64 = 1;
/// What it answers for a lock that another owner holds now.
const HELD_BY_ANOTHER: i64 = 2;

/// The client only sends the kinds a backend supports; anything else is a caller's mistake.
fn check_kind(lock: LockRef<'_>) -> Result<&str, LockError> {
    match lock.kind {
        LockKind::Reentrant => Ok(lock.name),
        kind => Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind,
        }),
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

/// A duration in whole milliseconds for `PEXPIRE`, at least 1 (0 would delete the key).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A `PTTL` reply as a remaining lease: `None` when the key has no expiry (-1) or is gone (-2).
fn pttl(ttl: i64) -> Option<Duration> {
    u64::try_from(ttl).ok().map(Duration::from_millis)
}
