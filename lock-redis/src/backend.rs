//! [`RedisBackend`]: the [`DistributedLock`] operations as scripts on a Redis server.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    Acquire, AcquireRequest, DistributedLock, Grant, HoldRef, LockRef, LockStatus, LossReason,
    OwnerId, Release, ReleaseSubscription, Renewal,
};
use lock_core::{LockError, LockKind};
use redis::{FromRedisValue, RedisError, Value};

use crate::commands::{with_reload, Commands, Retry};
use crate::config::{RedisBackendBuilder, Settings};
use crate::connection::Connector;
use crate::connection::PooledConnection;
use crate::error::to_lock_error;
use crate::keys::UNLOCK_LATCH_PREFIX;
use crate::layout::{self, ScriptCall};
use crate::pubsub::PubSub;
use crate::scripts::{self, LuaScript, FAIR_RENEW, READ_RENEW, RENEW};

/// How many locks one renewal `EVALSHA` covers; bigger batches are split into several scripts
/// sent together in one pipeline (still one round trip), so no single script blocks the
/// server for long.
pub(crate) const RENEW_CHUNK: usize = 500;

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

    pub(crate) fn commands(&self) -> &Commands {
        &self.inner.commands
    }

    pub(crate) fn pubsub(&self) -> &PubSub {
        &self.inner.pubsub
    }

    pub(crate) fn latch_lifetime(&self) -> Duration {
        self.inner.latch_lifetime
    }

    /// Runs one script about `lock`, turning the server's errors into `LockError`s that name
    /// the lock (and a name used by another kind of lock into `LockError::WrongKind`).
    fn run<T: FromRedisValue>(
        &self,
        lock: LockRef<'_>,
        call: &ScriptCall,
        retry: Retry,
    ) -> Result<T, LockError> {
        self.run_then(lock, call, retry, |_, _| {})
    }

    /// As [`run`](Self::run), then `after` with the connection and the reply, before the
    /// connection goes back to the pool.
    fn run_then<T: FromRedisValue>(
        &self,
        lock: LockRef<'_>,
        call: &ScriptCall,
        retry: Retry,
        mut after: impl FnMut(&mut PooledConnection, &T),
    ) -> Result<T, LockError> {
        let cmd = call.cmd();
        let script = call.script;
        self.inner.commands.run_mapped(
            script.name,
            retry,
            |con| {
                let reply: T = with_reload(con, script, |con| cmd.query(con))?;
                after(con, &reply);
                Ok(reply)
            },
            |error, server| script_error(error, lock, script.name, server),
        )
    }

    /// Runs `calls` as one pipeline, each script loaded first if the server lost it, and
    /// returns each reply as it came (a script's error as `Value::ServerError`, not failing
    /// the rest). Replies of latched releases get their latch deleted after, unanswered.
    fn run_pipeline(
        &self,
        calls: &[ScriptCall],
        retry: Retry,
    ) -> Result<Vec<redis::Value>, LockError> {
        let mut pipe = redis::pipe();
        for call in calls {
            pipe.add_command(call.cmd());
        }
        pipe.ignore_errors();
        let mut scripts: Vec<&LuaScript> = calls.iter().map(|call| call.script).collect();
        scripts.sort_by_key(|script| script.sha());
        scripts.dedup_by_key(|script| script.sha());
        self.inner
            .commands
            .run_with("a batch of lock steps", retry, |con| {
                let replies: Vec<redis::Value> = pipe.query(con)?;
                let missing = replies.iter().any(
                    |reply| matches!(reply, redis::Value::ServerError(e) if e.code() == "NOSCRIPT"),
                );
                let replies = if missing {
                    for script in &scripts {
                        script.load(con)?;
                    }
                    pipe.query(con)?
                } else {
                    replies
                };
                for (call, reply) in calls.iter().zip(&replies) {
                    let latched = call
                        .keys
                        .last()
                        .filter(|key| key.starts_with(UNLOCK_LATCH_PREFIX));
                    if let (Some(latch), redis::Value::Int(1)) = (latched, reply) {
                        con.send_unanswered(redis::cmd("DEL").arg(latch));
                    }
                }
                Ok(replies)
            })
    }

    /// Releases `owner`'s hold on `lock` as release request `request_id`, and wakes the lock's
    /// waiters.
    ///
    /// The result is remembered on the server under the request id (Redisson's unlock latch),
    /// so the request sent again after a lost reply (as it is, once, on a connection failure)
    /// replays the first answer instead of acting a second time. Once the answer is in hand
    /// the latch is deleted, without waiting for that to be confirmed: the `DEL`'s reply is read
    /// after the connection's next command, so it costs no round trip.
    fn release_as(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
        request_id: &str,
    ) -> Result<Release, LockError> {
        let call = layout::release(lock, owner, request_id, self.inner.latch_lifetime);
        let latch = call.keys.last().cloned().unwrap_or_default();
        let released: Option<i64> = self.run_then(
            lock,
            &call,
            Retry::OnAnyConnectionError,
            |con, released: &Option<i64>| {
                if *released == Some(1) {
                    con.send_unanswered(redis::cmd("DEL").arg(&latch));
                }
            },
        )?;
        Ok(match released {
            Some(1) => Release::Released,
            _ => Release::NotHeld,
        })
    }
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
        )
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        check_kind(self, request.lock)?;
        let call = layout::acquire(request);
        let reply: Value = self.run(request.lock, &call, Retry::OnDroppedConnection)?;
        acquire_reply(reply).map_err(|error| error.on_lock(request.lock.name))
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        check_kind(self, lock)?;
        self.release_as(lock, owner, &uuid::Uuid::new_v4().simple().to_string())
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
        let replies: Vec<redis::Value> = self.run_pipeline(&calls, Retry::OnDroppedConnection)?;
        requests
            .iter()
            .zip(replies)
            .map(|(request, reply)| match reply {
                Value::ServerError(error) => Err(script_error(
                    RedisError::from(error),
                    request.lock,
                    "acquire",
                    &self.inner.commands.connector().describe(),
                )),
                reply => acquire_reply(reply).map_err(|error| error.on_lock(request.lock.name)),
            })
            .collect()
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
            .map(|hold| {
                let request = uuid::Uuid::new_v4().simple().to_string();
                layout::release(hold.lock, hold.owner, &request, self.inner.latch_lifetime)
            })
            .collect();
        let replies = match self.run_pipeline(&calls, Retry::OnAnyConnectionError) {
            Ok(replies) => replies,
            Err(error) => {
                let text = error.to_string();
                return holds
                    .iter()
                    .map(|hold| {
                        Err(
                            LockError::unavailable(text.clone(), "a batch of releases failed")
                                .on_lock(hold.lock.name),
                        )
                    })
                    .collect();
            }
        };
        holds
            .iter()
            .zip(replies)
            .map(|(hold, reply)| match reply {
                redis::Value::Int(1) => Ok(Release::Released),
                redis::Value::ServerError(error) => Err(script_error(
                    RedisError::from(error),
                    hold.lock,
                    "release",
                    &self.inner.commands.connector().describe(),
                )),
                _ => Ok(Release::NotHeld),
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
        // Exclusive holds (one holder field) and read holds each go to their own script, in
        // chunks; all of it in one pipeline: one round trip.
        let mut exclusive = Vec::new();
        let mut fair = Vec::new();
        let mut read = Vec::new();
        for (index, hold) in holds.iter().enumerate() {
            match layout::renewal(hold) {
                layout::Renewal::Exclusive { key, field } => exclusive.push((index, key, field)),
                layout::Renewal::Fair {
                    key,
                    queue,
                    timeouts,
                    owner,
                } => fair.push((index, [key, queue, timeouts], owner)),
                layout::Renewal::Read { key, prefix, owner } => {
                    read.push((index, [key, prefix], owner))
                }
            }
        }
        let mut pipe = redis::pipe();
        let mut order = Vec::with_capacity(holds.len());
        for chunk in exclusive.chunks(RENEW_CHUNK) {
            let keys: Vec<&str> = chunk.iter().map(|(_, key, _)| key.as_str()).collect();
            let mut cmd = scripts::evalsha(&RENEW, &keys, &[&lease_ms]);
            for (index, _, field) in chunk {
                cmd.arg(field);
                order.push(*index);
            }
            pipe.add_command(cmd);
        }
        let mut by_keys = |script: &LuaScript, chunk: &[(usize, Vec<&str>, &str)]| {
            let keys: Vec<&str> = chunk
                .iter()
                .flat_map(|(_, keys, _)| keys.iter().copied())
                .collect();
            let mut cmd = scripts::evalsha(script, &keys, &[&lease_ms]);
            for (index, _, owner) in chunk {
                cmd.arg(*owner);
                order.push(*index);
            }
            pipe.add_command(cmd);
        };
        let fair: Vec<(usize, Vec<&str>, &str)> = fair
            .iter()
            .map(|(index, keys, owner)| {
                (
                    *index,
                    keys.iter().map(String::as_str).collect(),
                    owner.as_str(),
                )
            })
            .collect();
        for chunk in fair.chunks(RENEW_CHUNK) {
            by_keys(&FAIR_RENEW, chunk);
        }
        let read: Vec<(usize, Vec<&str>, &str)> = read
            .iter()
            .map(|(index, keys, owner)| {
                (
                    *index,
                    keys.iter().map(String::as_str).collect(),
                    owner.as_str(),
                )
            })
            .collect();
        for chunk in read.chunks(RENEW_CHUNK) {
            by_keys(&READ_RENEW, chunk);
        }
        // Renewing twice is harmless, so the whole pipeline is simply re-sent after NOSCRIPT.
        let found: Vec<Vec<i64>> =
            self.inner
                .commands
                .run_with("renewing leases", Retry::OnDroppedConnection, |con| {
                    with_reload(con, &RENEW, |con| {
                        with_reload(con, &FAIR_RENEW, |con| {
                            with_reload(con, &READ_RENEW, |con| pipe.query(con))
                        })
                    })
                })?;
        let found: Vec<i64> = found.into_iter().flatten().collect();
        if found.len() != holds.len() {
            return Err(LockError::protocol(format!(
                "renewal of {} locks answered {} results",
                holds.len(),
                found.len()
            )));
        }
        let mut renewals = vec![Renewal::Lost(LossReason::Gone); holds.len()];
        for (index, code) in order.into_iter().zip(found) {
            renewals[index] = match code {
                RENEWED => Renewal::Renewed,
                HELD_BY_ANOTHER => Renewal::Lost(LossReason::TakenOver),
                _ => Renewal::Lost(LossReason::Gone),
            };
        }
        Ok(renewals)
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        check_kind(self, lock)?;
        let call = layout::status(lock, owner);
        let (held, mine, ttl): (i64, i64, i64) =
            self.run(lock, &call, Retry::OnDroppedConnection)?;
        Ok(if held == 1 {
            LockStatus::held(mine == 1, pttl(ttl))
        } else {
            LockStatus::FREE
        })
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        check_kind(self, lock)?;
        let deleted: i64 = self.run(lock, &layout::force_unlock(lock), Retry::Never)?;
        Ok(deleted == 1)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        check_kind(self, lock)?;
        self.inner
            .pubsub
            .subscribe(layout::channel(lock, owner))
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
                .run::<i64>(lock, &call, Retry::OnDroppedConnection)
                .map(drop),
            None => Ok(()),
        }
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

/// What the renew scripts answer for a lock they extended.
pub(crate) const RENEWED: i64 = 1;
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
