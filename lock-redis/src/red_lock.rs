//! [`RedLockBackend`]: one lock held on a majority of independent Redis masters (the Redlock
//! algorithm), as a backend the client's reentrancy, waiting and watchdog run on unchanged.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::{
    Acquire, AcquireRequest, Clock, ClockDrift, DistributedLock, Grant, HoldRef, Lease, LockRef,
    LockStatus, LossReason, OwnerId, Release, ReleaseSubscription, Renewal, Signal, SystemClock,
};
use dlock_core::{LockError, LockKind};
use redis::Value;

use crate::backend::{pttl, script_error, RedisBackend, HELD_BY_ANOTHER, RENEWED, RENEW_CHUNK};
use crate::commands::InFlight;
use crate::error::breaks_connection;
use crate::layout::{self, ScriptCall};
use crate::request_id;
use crate::scripts::{Announce, RENEW};

/// Default bound on one step's wait for the nodes' replies.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default clock drift allowance, as a fraction of the lease (the Redlock description's 1 %).
pub const DEFAULT_CLOCK_DRIFT_FACTOR: f64 = 0.01;
/// The fixed part of the drift allowance (the Redlock description's 2 ms).
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// A lock held on a majority of N independent Redis masters (Redlock), as a backend.
///
/// Hand it to [`LockClient::new`](dlock_core::LockClient::new) like any backend: reentrancy,
/// waiting, the watchdog and lease events work on it unchanged. Each step goes to every node
/// at once (written to every node, then every reply read, each node's within the node timeout
/// from when its step was written, so a step costs about one round trip, not N):
///
/// - **acquire** succeeds when at least `N/2 + 1` nodes granted it and the lease, counted from
///   when the step started, less the drift margin (`lease × drift factor + 2 ms`), has not run
///   out by the time the last reply is in. The client's hold is valid until that instant, and
///   every renewal moves it to the renewal's start + lease − the same margin. Otherwise what was
///   taken is given back on every node (but a re-entry's is not: the owner still relies on the
///   hold it had). A node that did not answer within the node timeout gets the give-back
///   written on the same connection, so if it was only stalled it runs the give-back right
///   after the acquire.
/// - **release, renew and force unlock** go to every node; they count as done on a majority.
/// - **status and the remaining lease** are what a majority says.
/// - **waiters** are woken by a release seen on any node.
///
/// Only the reentrant lock ([`LockKind::Reentrant`]) is kept: a fair queue or a read-write lock
/// split over independent servers has no majority meaning.
///
/// # Examples
///
/// ```no_run
/// use dlock_core::LockClient;
/// use dlock_redis::{RedLockBackend, RedisBackend};
///
/// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
///     .iter()
///     .map(|url| RedisBackend::connect(url))
///     .collect::<Result<Vec<_>, _>>()?;
/// let client = LockClient::new(RedLockBackend::new(nodes)?);
/// let guard = client.lock("orders").lock()?;      // held on at least 2 of the 3
/// guard.unlock()?;
/// # Ok::<(), dlock_core::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedLockBackend {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<RedisBackend>,
    quorum: usize,
    node_timeout: Duration,
    drift_factor: f64,
}

/// Settings for a [`RedLockBackend`], from [`RedLockBackend::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedLockBuilder {
    nodes: Vec<RedisBackend>,
    node_timeout: Duration,
    drift_factor: f64,
}

impl RedLockBackend {
    /// A quorum backend over `nodes` with the default settings.
    ///
    /// # Errors
    ///
    /// As [`RedLockBuilder::build`].
    pub fn new(nodes: Vec<RedisBackend>) -> Result<Self, LockError> {
        Self::builder(nodes).build()
    }

    /// A builder, to set the node timeout and the clock drift allowance.
    pub fn builder(nodes: Vec<RedisBackend>) -> RedLockBuilder {
        RedLockBuilder {
            nodes,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            drift_factor: DEFAULT_CLOCK_DRIFT_FACTOR,
        }
    }

    /// The nodes' `host:port`.
    pub fn servers(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(RedisBackend::server).collect()
    }

    /// How many nodes a step needs: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }
}

impl RedLockBuilder {
    /// How long one step waits for a node's replies, from when the step was written to it
    /// (default 100 ms). A node that has not answered by then counts as failed for that step.
    /// Waiting for one of this process's pooled connections is not counted (that is bounded by
    /// the nodes' checkout timeout), except while a node has no connection open at all. Keep it
    /// small against the lease: the time a step takes is subtracted from the grant's validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The clock drift allowance as a fraction of the lease (default 0.01, also the least
    /// used): how much faster one node's clock may run than the client's during a lease. Every
    /// deadline of the client's holds keeps `lease × factor + 2 ms` from the lease's end
    /// ([`DistributedLock::clock_drift`]).
    pub fn clock_drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Checks the nodes and settings.
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`]: fewer than 3 nodes (a majority of 1 or 2 servers survives no
    ///   failure a single server would not); the same server twice (by address, or the same
    ///   `run_id` behind two addresses); a node timeout of zero or a drift factor outside
    ///   `0..0.5`.
    /// - [`LockError::Unavailable`]: a node did not answer `INFO` within its timeouts.
    ///
    /// An even number of nodes is accepted with a warning: 4 nodes need 3, and tolerate one
    /// failure, as 3 do.
    pub fn build(self) -> Result<RedLockBackend, LockError> {
        let n = self.nodes.len();
        if n < 3 {
            return Err(LockError::config(format!(
                "a RedLock needs at least 3 independent Redis masters, got {n}"
            )));
        }
        if let Some(node) = self.nodes.iter().find(|node| node.is_cluster()) {
            return Err(LockError::config(format!(
                "a RedLock's nodes must be independent masters; {} is a Redis Cluster (which \
                 already keeps each lock on one master)",
                node.endpoint().describe()
            )));
        }
        if n % 2 == 0 {
            tracing::warn!(
                nodes = n,
                "dlock: a RedLock on an even number of nodes tolerates no more failures than one node fewer"
            );
        }
        if self.node_timeout.is_zero() || self.node_timeout > dlock_core::MAX_DURATION {
            return Err(LockError::config(format!(
                "node_timeout must be between zero and a year, got {:?}",
                self.node_timeout
            )));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(LockError::config(format!(
                "clock_drift_factor must be at least 0 and below 0.5, got {}",
                self.drift_factor
            )));
        }
        let mut seen: Vec<(String, String)> = Vec::with_capacity(n);
        for node in &self.nodes {
            let run_id = run_id(node)?;
            if let Some((other, _)) = seen
                .iter()
                .find(|(addr, id)| addr == node.server() || *id == run_id)
            {
                return Err(LockError::config(format!(
                    "a RedLock's nodes must be independent servers: {} and {} are the same \
                     server (run_id {run_id})",
                    other,
                    node.server()
                )));
            }
            seen.push((node.server().to_owned(), run_id));
        }
        Ok(RedLockBackend {
            inner: Arc::new(Inner {
                quorum: n / 2 + 1,
                nodes: self.nodes,
                node_timeout: self.node_timeout,
                drift_factor: self.drift_factor,
            }),
        })
    }
}

/// The server's `run_id`: the same server behind two addresses has one.
fn run_id(node: &RedisBackend) -> Result<String, LockError> {
    let info: String = node
        .server_parts()?
        .0
        .run("reading the server's run_id", |con| {
            redis::cmd("INFO").arg("server").query(con)
        })?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| node.server().to_owned()))
}

/// What one node is sent in one step.
struct Step {
    calls: Vec<ScriptCall>,
    /// Sent on the same connection if the node does not answer in time.
    undo: Vec<redis::Cmd>,
}

/// What one node answered in one step: its replies, or why it did not.
type NodeReply = Result<Vec<Value>, LockError>;

/// Run on a node's connection once its replies are read, before the connection goes back to
/// the pool (to leave a clean-up to be written with its next command).
type AfterReply<'a> = &'a dyn Fn(&Step, &[Value], &mut InFlight);

impl Inner {
    /// Sends each node its step and reads every node's replies. A node's time is counted from
    /// the moment its step is written: waiting for one of this process's own pooled
    /// connections is congestion here, not slowness of the node. So the step is written first
    /// to every node with a connection free now; their replies are read (each within the node
    /// timeout from its own send); then the nodes that had none are served one at a time,
    /// holding no other node's connection while waiting for one (no convoy of threads each
    /// holding one node's connection while queueing for the next's). A node with no connection
    /// open at all (down, or being reconnected to) gets no more than the node timeout from the
    /// start of the step. Each connection goes back to its pool as soon as its replies are
    /// read: none is kept while this thread waits for another node's pool.
    fn fan_out(&self, what: &str, steps: &[Step]) -> Vec<NodeReply> {
        self.fan_out_then(what, steps, &|_, _, _| {})
    }

    /// As [`fan_out`](Self::fan_out), running `after` on each connection that answered.
    fn fan_out_then(&self, what: &str, steps: &[Step], after: AfterReply<'_>) -> Vec<NodeReply> {
        let unreachable_by = Instant::now() + self.node_timeout;
        let mut replies: Vec<Option<NodeReply>> = steps.iter().map(|_| None).collect();
        let mut sent = Vec::new();
        let mut later = Vec::new();
        for (index, (node, step)) in self.nodes.iter().zip(steps).enumerate() {
            if step.calls.is_empty() {
                replies[index] = Some(Err(LockError::protocol("nothing to send to this node")));
                continue;
            }
            let commands = match node.server_parts() {
                Ok((commands, _)) => commands,
                Err(error) => {
                    replies[index] = Some(Err(error));
                    continue;
                }
            };
            match commands.try_send(what, &step.calls) {
                Some(Ok(in_flight)) => sent.push((index, in_flight, Instant::now())),
                Some(Err(error)) => replies[index] = Some(Err(error)),
                None => later.push(index),
            }
        }
        for (index, mut in_flight, sent_at) in sent {
            let deadline = sent_at + self.node_timeout;
            match in_flight.receive(deadline) {
                Err(error) if breaks_connection(&error) && !error.is_timeout() => {
                    // A pooled connection to a server that restarted: the step never ran
                    // there. Once more, on a fresh connection, after the other replies.
                    in_flight.abandon(&[]);
                    later.push(index);
                }
                received => {
                    replies[index] =
                        Some(self.finish(what, index, &steps[index], in_flight, received, after));
                }
            }
        }
        for index in later {
            let (node, step) = (&self.nodes[index], &steps[index]);
            let reply = node.server_parts().and_then(|(commands, _)| {
                let left = unreachable_by.saturating_duration_since(Instant::now());
                let mut in_flight = commands.send_when_free(what, &step.calls, left)?;
                let received = in_flight.receive(Instant::now() + self.node_timeout);
                self.finish(what, index, step, in_flight, received, after)
            });
            replies[index] = Some(reply);
        }
        replies
            .into_iter()
            .map(|reply| {
                reply.unwrap_or_else(|| Err(LockError::protocol("no reply from this node")))
            })
            .collect()
    }

    /// A node's replies once read: scripts loaded and the step sent again after `NOSCRIPT`;
    /// after an error, the connection is given up with the step's undo written behind it.
    /// Either way the connection is done with when this returns.
    fn finish(
        &self,
        what: &str,
        index: usize,
        step: &Step,
        mut in_flight: InFlight,
        received: redis::RedisResult<Vec<Value>>,
        after: AfterReply<'_>,
    ) -> NodeReply {
        let received = match received {
            Ok(replies) if needs_scripts(&replies) => {
                in_flight.resend(&step.calls, Instant::now() + self.node_timeout)
            }
            received => received,
        };
        match received {
            Ok(replies) => {
                after(step, &replies, &mut in_flight);
                Ok(replies)
            }
            Err(error) => {
                in_flight.abandon(&step.undo);
                let server = self.nodes[index].endpoint().describe();
                Err(crate::error::to_lock_error(error, what, &server))
            }
        }
    }

    /// The same step for every node.
    fn same_step(
        &self,
        calls: impl Fn() -> Vec<ScriptCall>,
        undo: impl Fn() -> Vec<redis::Cmd>,
    ) -> Vec<Step> {
        self.nodes
            .iter()
            .map(|_| Step {
                calls: calls(),
                undo: undo(),
            })
            .collect()
    }

    fn unavailable(&self, what: &str, answered: usize) -> LockError {
        LockError::unavailable(
            format!(
                "only {answered} of {} RedLock nodes answered {what} within {:?}; {} are needed",
                self.nodes.len(),
                self.node_timeout,
                self.quorum
            ),
            "no quorum",
        )
    }

    /// Releases `lock` for `owner` on the nodes `on` (every node if `None`); how many released
    /// it, how many did not answer, and whether other clients' waiters heard it on any.
    fn release_on(&self, lock: LockRef<'_>, owner: &OwnerId, on: Option<&[usize]>) -> Released {
        let request = request_id::next();
        let lifetime = self.nodes[0].latch_lifetime();
        let steps: Vec<Step> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| Step {
                calls: if on.is_none_or(|on| on.contains(&index)) {
                    let listening = |channel: &str| {
                        node.server_parts()
                            .is_ok_and(|(_, pubsub)| pubsub.is_listening(channel))
                    };
                    vec![layout::release(lock, owner, &request, lifetime, &listening)]
                } else {
                    Vec::new()
                },
                undo: Vec::new(),
            })
            .collect();
        // Once released, the latch is no longer needed: deleted with the connection's next
        // command (or it expires).
        let delete_latch = |step: &Step, replies: &[Value], in_flight: &mut InFlight| {
            if let (true, Some(latch)) = (
                release_outcome(replies).is_released(),
                step.calls.first().and_then(|call| call.latch.as_ref()),
            ) {
                in_flight.defer(&[b"DEL", latch.as_bytes()]);
            }
        };
        let replies = self.fan_out_then("releasing", &steps, &delete_latch);
        let mut outcome = Released::default();
        for (index, reply) in replies.into_iter().enumerate() {
            if on.is_some_and(|on| !on.contains(&index)) {
                continue;
            }
            match reply {
                Ok(replies) => {
                    let release = release_outcome(&replies);
                    outcome.released += usize::from(release.is_released());
                    outcome.heard_by_others |= release == Release::ReleasedToOthers;
                }
                Err(_) => outcome.unanswered += 1,
            }
        }
        outcome
    }
}

/// What a release over the nodes found.
#[derive(Debug, Default, Clone, Copy)]
struct Released {
    /// Nodes that released the lock.
    released: usize,
    /// Nodes that did not answer.
    unanswered: usize,
    /// Other clients' waiters heard the release on some node.
    heard_by_others: bool,
}

/// What a node's release step found.
fn release_outcome(replies: &[Value]) -> Release {
    replies
        .first()
        .map_or(Release::NotHeld, layout::release_outcome)
}

/// Whether a node answered `NOSCRIPT` (restarted, scripts flushed).
fn needs_scripts(replies: &[Value]) -> bool {
    replies
        .iter()
        .any(|reply| matches!(reply, Value::ServerError(e) if e.code() == "NOSCRIPT"))
}

fn check_kind(lock: LockRef<'_>) -> Result<(), LockError> {
    if lock.kind == LockKind::Reentrant {
        Ok(())
    } else {
        Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind: lock.kind,
        })
    }
}

impl DistributedLock for RedLockBackend {
    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        check_kind(request.lock)?;
        let inner = &*self.inner;
        let (lock, owner) = (request.lock, request.owner);
        let undo_request = request_id::next();
        let lifetime = inner.nodes[0].latch_lifetime();
        let steps = inner.same_step(
            || vec![layout::acquire(request)],
            || {
                if request.reentry {
                    // The hold it extends is still relied on: nothing to undo.
                    return Vec::new();
                }
                let release = layout::release(lock, owner, &undo_request, lifetime, &|_| false);
                let mut undo = vec![release.cmd(Announce::Publish)];
                if let Some(latch) = &release.latch {
                    undo.push(redis::cmd("DEL").arg(latch).clone());
                }
                undo
            },
        );
        let started = SystemClock.now();
        let replies = inner.fan_out("acquiring", &steps);
        let mut taken = Vec::new();
        let mut held_for = Vec::new();
        let mut answered = 0;
        let mut wrong_kind = None;
        for (index, reply) in replies.into_iter().enumerate() {
            let Ok(replies) = reply else { continue };
            answered += 1;
            match replies.into_iter().next() {
                Some(Value::Nil) => taken.push(index),
                Some(Value::Int(ttl)) => held_for.extend(pttl(ttl)),
                Some(Value::ServerError(error)) => {
                    let server = inner.nodes[index].endpoint().describe();
                    wrong_kind = Some(script_error(error.into(), lock, "acquire", &server));
                }
                _ => {}
            }
        }
        // Every node that granted it runs the lease from when it got the step, after `started`:
        // the lock is held on a majority until the lease's deadline from then, which must
        // still be ahead now that the last reply is in. (The client keeps its own deadline
        // from when it sent the request, with the same margin: `clock_drift`.)
        let valid =
            Lease::new(started, request.lease).deadline(self.clock_drift()) > SystemClock.now();
        if taken.len() >= inner.quorum && valid && wrong_kind.is_none() {
            return Ok(Acquire::Acquired(Grant::PLAIN));
        }
        // No majority in time: give back what was taken, everywhere it was; unless this was a
        // re-entry, whose hold the owner still relies on (it is confirmed before its next local
        // re-entry; what this step added, one count more and a lease never shorter, is
        // harmless).
        if !taken.is_empty() && !request.reentry {
            inner.release_on(lock, owner, Some(&taken));
        }
        if let Some(error) = wrong_kind {
            return Err(error);
        }
        if answered < inner.quorum {
            return Err(inner
                .unavailable("the acquire", answered)
                .on_lock(lock.name));
        }
        Ok(Acquire::Held {
            remaining_lease: held_for.into_iter().min(),
        })
    }

    /// The builder's drift factor (and the 2 ms floor): the lease's margin, at every grant and
    /// renewal.
    fn clock_drift(&self) -> ClockDrift {
        ClockDrift::new(
            self.inner.drift_factor.max(ClockDrift::DEFAULT.factor()),
            DRIFT_FLOOR,
        )
        .unwrap_or(ClockDrift::DEFAULT)
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        check_kind(lock)?;
        let inner = &*self.inner;
        let Released {
            released,
            unanswered,
            heard_by_others,
        } = inner.release_on(lock, owner, None);
        if released >= inner.quorum && heard_by_others {
            Ok(Release::ReleasedToOthers)
        } else if released >= inner.quorum {
            Ok(Release::Released)
        } else if released + unanswered >= inner.quorum {
            Err(inner
                .unavailable("the release", inner.nodes.len() - unanswered)
                .on_lock(lock.name))
        } else {
            Ok(Release::NotHeld)
        }
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        if holds.is_empty() {
            return Ok(Vec::new());
        }
        for hold in holds {
            check_kind(hold.lock)?;
        }
        let inner = &*self.inner;
        let lease_ms = layout::millis(lease);
        let chunks = || {
            holds
                .chunks(RENEW_CHUNK)
                .map(|chunk| {
                    ScriptCall::new(
                        &RENEW,
                        chunk.iter().map(|h| h.lock.name.to_owned()).collect(),
                        std::iter::once(lease_ms.clone())
                            .chain(chunk.iter().map(|h| h.owner.to_string()))
                            .collect(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let steps = inner.same_step(chunks, Vec::new);
        let replies = inner.fan_out("renewing leases", &steps);
        // Per hold: how many nodes renewed it, and how many found another owner.
        let mut renewed = vec![0usize; holds.len()];
        let mut taken_over = vec![0usize; holds.len()];
        let mut answered = 0;
        for reply in replies {
            let Ok(replies) = reply else { continue };
            let codes: Vec<i64> = replies
                .into_iter()
                .flat_map(|reply| match reply {
                    Value::Array(items) => items
                        .into_iter()
                        .map(|item| match item {
                            Value::Int(code) => code,
                            _ => 0,
                        })
                        .collect(),
                    _ => Vec::new(),
                })
                .collect();
            if codes.len() != holds.len() {
                continue;
            }
            answered += 1;
            for (index, code) in codes.into_iter().enumerate() {
                match code {
                    RENEWED => renewed[index] += 1,
                    HELD_BY_ANOTHER => taken_over[index] += 1,
                    _ => {}
                }
            }
        }
        if answered < inner.quorum {
            return Err(inner.unavailable("the renewal", answered));
        }
        Ok(renewed
            .into_iter()
            .zip(taken_over)
            .map(|(renewed, taken_over)| {
                if renewed >= inner.quorum {
                    Renewal::Renewed
                } else if taken_over >= inner.quorum {
                    Renewal::Lost(LossReason::TakenOver)
                } else {
                    Renewal::Lost(LossReason::Gone)
                }
            })
            .collect())
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        check_kind(lock)?;
        let inner = &*self.inner;
        let steps = inner.same_step(|| vec![layout::status(lock, owner)], Vec::new);
        let mut answered = 0;
        let (mut locked, mut mine) = (0, 0);
        let mut leases = Vec::new();
        for reply in inner.fan_out("reading the lock's status", &steps) {
            let Ok(replies) = reply else { continue };
            let Some(Value::Array(fields)) = replies.into_iter().next() else {
                continue;
            };
            let int = |i: usize| match fields.get(i) {
                Some(Value::Int(v)) => *v,
                _ => 0,
            };
            answered += 1;
            if int(0) == 1 {
                locked += 1;
                leases.extend(pttl(int(2)));
            }
            mine += usize::from(int(1) == 1);
        }
        if answered < inner.quorum {
            return Err(inner.unavailable("the status", answered).on_lock(lock.name));
        }
        if locked < inner.quorum {
            return Ok(LockStatus::FREE);
        }
        // The lease a majority still has: the quorum-th longest.
        leases.sort_unstable_by(|a, b| b.cmp(a));
        Ok(LockStatus::held(
            mine >= inner.quorum,
            leases.get(inner.quorum - 1).copied(),
        ))
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        check_kind(lock)?;
        let inner = &*self.inner;
        let steps = inner.same_step(|| vec![layout::force_unlock(lock)], Vec::new);
        let mut answered = 0;
        let mut deleted = 0;
        for reply in inner.fan_out("force-unlocking", &steps) {
            let Ok(replies) = reply else { continue };
            answered += 1;
            deleted += usize::from(matches!(replies.first(), Some(Value::Int(1))));
        }
        if answered < inner.quorum {
            return Err(inner
                .unavailable("the force unlock", answered)
                .on_lock(lock.name));
        }
        Ok(deleted >= inner.quorum)
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        check_kind(lock)?;
        let signal = Arc::new(Signal::new());
        let channel = layout::channel(lock, owner);
        let mut parts = Vec::new();
        for node in &self.inner.nodes {
            // A node that cannot be reached is skipped: the wait is capped by the lease anyway.
            match node.server_parts()?.1.subscribe_with(
                channel.clone(),
                Some(signal.clone()),
                Some(self.inner.node_timeout),
            ) {
                Ok(part) => parts.push(part),
                Err(error) => {
                    tracing::debug!(server = node.server(), %error, "dlock: RedLock node not subscribed")
                }
            }
        }
        Ok(Box::new(Subscription {
            signal,
            _parts: parts,
        }))
    }
}

/// Interest in a lock's releases on every node, all waking one signal.
struct Subscription {
    signal: Arc<Signal>,
    _parts: Vec<Box<dyn ReleaseSubscription>>,
}

impl ReleaseSubscription for Subscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

impl fmt::Debug for RedLockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockBackend")
            .field("servers", &self.servers())
            .field("quorum", &self.inner.quorum)
            .field("node_timeout", &self.inner.node_timeout)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RedLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<&str> = self.nodes.iter().map(RedisBackend::server).collect();
        f.debug_struct("RedLockBuilder")
            .field("servers", &servers)
            .field("node_timeout", &self.node_timeout)
            .field("clock_drift_factor", &self.drift_factor)
            .finish()
    }
}
