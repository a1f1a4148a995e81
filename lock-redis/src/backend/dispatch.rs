//! How a step's scripts reach the store: one pipeline (one per master on a cluster), the
//! replicas' acknowledgement after it, and the undoing of acquires no replica took.

use dlock_core::backend::{AcquireRequest, LockRef, OwnerId};
use dlock_core::LockError;
use redis::{FromRedisValue, RedisError, Value};

use super::{Durability, RedisBackend, Store};
use crate::batch::{self, BatchReply};
use crate::commands::Retry;
use crate::layout::{self, ScriptCall};
use crate::replica_sync::{Ack, ReplicaSync};
use crate::request_id;
use crate::scripts::Announce;

impl RedisBackend {
    /// Runs `calls` as one pipeline (see [`batch::run_batch`]; on a cluster, one per master),
    /// followed by the replicas' acknowledgement when `durability` asks for it.
    pub(super) fn run_batch(
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
    pub(super) fn run_one<T: FromRedisValue>(
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

    pub(super) fn script_error(
        &self,
        error: RedisError,
        lock: LockRef<'_>,
        what: &str,
    ) -> LockError {
        super::replies::script_error(error, lock, what, &self.endpoint().describe())
    }

    /// Undoes the acquires of `acquired` when the replicas did not acknowledge them, and says
    /// why; does nothing when they did (or none were asked). A re-entry
    /// ([`AcquireRequest::reentry`]) is not undone: releasing would end the hold its owner
    /// already had and still relies on; what it changed on the master (one count more, a lease
    /// never shorter) is harmless, and the client keeps the hold's earlier deadline.
    pub(super) fn check_replicated(
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
    pub(super) fn note_release_ack(&self, what: &str, ack: &Ack) {
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
    /// replays the first answer instead of acting a second time. Once the answer to a request
    /// sent once is in hand the latch is deleted by a `DEL` written in front of the
    /// connection's next command, so it costs neither a round trip nor a write of its own; the
    /// latch of a request sent twice (whose first copy may still land), or whose connection is
    /// closed first, expires (it is set with the latch lifetime).
    pub(super) fn release_call(&self, lock: LockRef<'_>, owner: &OwnerId) -> ScriptCall {
        let request = request_id::next();
        let listening = |channel: &str| match &self.inner.store {
            Store::Server { pubsub, .. } => pubsub.is_listening(channel),
            Store::Cluster(cluster) => cluster.pubsub.is_listening(channel),
        };
        layout::release(lock, owner, &request, self.inner.latch_lifetime, &listening)
    }
}
