//! Replica acknowledgement: a lock-changing step is followed, in the same pipeline, by `WAIT`
//! for the master's replicas (Redisson's `checkLockSyncedSlaves`), so a change a failover
//! could lose is not counted as done.
//!
//! The number of replicas to wait for comes from `ROLE` (which lists only the replicas that
//! are online, so a replica still in its first sync is not waited for). It is read when the
//! backend connects and then kept; `ROLE` rides along in the pipeline of the next step once a
//! second has passed or a `WAIT` answered another number than expected, so keeping it current
//! costs no round trip. With no replicas, no `WAIT` is sent at all.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

/// How long a replica count read from `ROLE` is trusted before it is read again.
const REFRESH_AFTER: Duration = Duration::from_secs(1);

/// `refreshed_at` when the count must be read again at the next step.
const STALE: u64 = u64::MAX;

/// The backend's replica acknowledgement: on or off, its timeout, and the replica count.
pub(crate) struct ReplicaSync {
    /// How long `WAIT` may block; `None` when acknowledgement is turned off.
    timeout: Option<Duration>,
    /// Online replicas of the master, from the last `ROLE` read.
    replicas: AtomicU32,
    /// When `replicas` was read, in milliseconds since `created`, or [`STALE`].
    refreshed_at: AtomicU64,
    created: Instant,
}

/// What one step sends after its scripts: a `WAIT`, a `ROLE`, both or neither.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncPlan {
    /// Replicas to wait for (0: no `WAIT`).
    wait_for: u32,
    /// Whether a `ROLE` follows, to read the replica count again.
    refresh: bool,
    timeout: Duration,
}

/// Whether the replicas acknowledged a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ack {
    /// No replica needed to acknowledge it: there are none, or acknowledgement is off.
    NotNeeded,
    /// At least one replica acknowledged it.
    Acknowledged,
    /// None of the master's `replicas` acknowledged it within `timeout`.
    Missing {
        /// How many replicas were waited for.
        replicas: u32,
        /// How long they were waited for.
        timeout: Duration,
    },
    /// The server refused the `WAIT` (an ACL changed since the backend connected, say).
    Refused(String),
}

impl ReplicaSync {
    /// Acknowledgement turned off: nothing is ever sent after a step.
    pub(crate) fn off() -> Self {
        Self::with_timeout(None)
    }

    /// Acknowledgement waiting up to `timeout`, with the replica count still to be read.
    pub(crate) fn waiting(timeout: Duration) -> Self {
        Self::with_timeout(Some(timeout))
    }

    fn with_timeout(timeout: Option<Duration>) -> Self {
        ReplicaSync {
            timeout,
            replicas: AtomicU32::new(0),
            refreshed_at: AtomicU64::new(STALE),
            created: Instant::now(),
        }
    }

    /// The replica count last read (0 before the first read).
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas.load(Ordering::Acquire)
    }

    /// What the next step sends after its scripts. When the count is due for a refresh, one
    /// step claims it (the others go on with the count they have).
    pub(crate) fn plan(&self) -> SyncPlan {
        let Some(timeout) = self.timeout else {
            return SyncPlan {
                wait_for: 0,
                refresh: false,
                timeout: Duration::ZERO,
            };
        };
        let now = self.millis_now();
        let last = self.refreshed_at.load(Ordering::Acquire);
        let due = last == STALE || now.saturating_sub(last) >= millis(REFRESH_AFTER);
        let refresh = due
            && self
                .refreshed_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        SyncPlan {
            wait_for: self.replicas(),
            refresh,
            timeout,
        }
    }

    /// Reads a `ROLE` reply into the replica count, as when the backend connects.
    pub(crate) fn record_role(&self, role: &Value) -> Result<u32, String> {
        let count = online_replicas(role)?;
        self.replicas.store(count, Ordering::Release);
        self.refreshed_at
            .store(self.millis_now(), Ordering::Release);
        Ok(count)
    }

    /// The outcome of a step from the replies to the commands of [`SyncPlan::commands`]:
    /// records a refreshed count, and marks the count stale when `WAIT` saw another number of
    /// replicas than expected.
    pub(crate) fn settle(&self, plan: &SyncPlan, replies: &[Value]) -> Ack {
        let mut replies = replies.iter();
        let acknowledged = (plan.wait_for > 0).then(|| match replies.next() {
            Some(Value::Int(count)) => Ok(u32::try_from(*count).unwrap_or(0)),
            Some(Value::ServerError(error)) => Err(format!("the server refused WAIT: {error}")),
            other => Err(format!("unexpected reply to WAIT: {other:?}")),
        });
        if plan.refresh {
            if let Some(role) = replies.next() {
                if let Err(problem) = self.record_role(role) {
                    tracing::warn!(%problem, "could not read the replica count from ROLE");
                }
            }
        }
        match acknowledged {
            None => Ack::NotNeeded,
            Some(Err(problem)) => {
                self.refreshed_at.store(STALE, Ordering::Release);
                Ack::Refused(problem)
            }
            Some(Ok(count)) => {
                if count != plan.wait_for {
                    self.refreshed_at.store(STALE, Ordering::Release);
                }
                if count == 0 {
                    Ack::Missing {
                        replicas: plan.wait_for,
                        timeout: plan.timeout,
                    }
                } else {
                    Ack::Acknowledged
                }
            }
        }
    }

    fn millis_now(&self) -> u64 {
        millis(self.created.elapsed())
    }
}

impl SyncPlan {
    /// The commands that follow the step's scripts in its pipeline.
    pub(crate) fn commands(&self) -> Vec<Cmd> {
        let mut commands = Vec::new();
        if self.wait_for > 0 {
            let mut wait = redis::cmd("WAIT");
            wait.arg(self.wait_for).arg(millis(self.timeout).max(1));
            commands.push(wait);
        }
        if self.refresh {
            commands.push(redis::cmd("ROLE"));
        }
        commands
    }

    /// The same plan without the `ROLE`: for the scripts sent again after `NOSCRIPT`.
    pub(crate) fn without_refresh(self) -> SyncPlan {
        SyncPlan {
            refresh: false,
            ..self
        }
    }

    /// How much longer than a plain step the step's replies may take: the `WAIT`.
    pub(crate) fn extra_time(&self) -> Duration {
        if self.wait_for > 0 {
            self.timeout
        } else {
            Duration::ZERO
        }
    }
}

/// The number of online replicas in a `ROLE` reply: the third item of a master's answer; a
/// replica or a sentinel has none.
fn online_replicas(role: &Value) -> Result<u32, String> {
    let Value::Array(items) = role else {
        return Err(format!("unexpected reply to ROLE: {role:?}"));
    };
    match items.as_slice() {
        [kind, _, Value::Array(replicas), ..] if is_text(kind, "master") => {
            Ok(u32::try_from(replicas.len()).unwrap_or(u32::MAX))
        }
        [kind, ..] if is_text(kind, "slave") || is_text(kind, "sentinel") => Ok(0),
        _ => Err(format!("unexpected reply to ROLE: {role:?}")),
    }
}

fn is_text(value: &Value, text: &str) -> bool {
    match value {
        Value::BulkString(bytes) => bytes == text.as_bytes(),
        Value::SimpleString(s) => s == text,
        _ => false,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn master_with(replicas: usize) -> Value {
        let replica = Value::Array(vec![bulk("127.0.0.1"), bulk("6380"), bulk("42")]);
        Value::Array(vec![
            bulk("master"),
            Value::Int(42),
            Value::Array(vec![replica; replicas]),
        ])
    }

    #[test]
    fn role_replies_give_the_online_replica_count() {
        assert_eq!(online_replicas(&master_with(0)), Ok(0));
        assert_eq!(online_replicas(&master_with(2)), Ok(2));
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(6379),
            bulk("connected"),
            Value::Int(42),
        ]);
        assert_eq!(online_replicas(&replica), Ok(0));
        assert!(online_replicas(&Value::Int(1)).is_err());
    }

    #[test]
    fn no_wait_is_planned_without_replicas_or_when_off() {
        let sync = ReplicaSync::waiting(Duration::from_secs(1));
        assert_eq!(sync.record_role(&master_with(0)), Ok(0));
        assert!(sync.plan().commands().is_empty());
        let off = ReplicaSync::off();
        assert!(off.plan().commands().is_empty());
    }

    #[test]
    fn a_wait_that_no_replica_answered_is_missing_and_makes_the_count_stale() {
        let sync = ReplicaSync::waiting(Duration::from_millis(250));
        assert_eq!(sync.record_role(&master_with(2)), Ok(2));
        let plan = sync.plan();
        assert_eq!(plan.wait_for, 2);
        assert!(!plan.refresh, "the count was just read");
        assert_eq!(plan.extra_time(), Duration::from_millis(250));
        assert_eq!(sync.settle(&plan, &[Value::Int(2)]), Ack::Acknowledged);
        assert!(!sync.plan().refresh);
        assert_eq!(
            sync.settle(&plan, &[Value::Int(0)]),
            Ack::Missing {
                replicas: 2,
                timeout: Duration::from_millis(250)
            }
        );
        let next = sync.plan();
        assert!(next.refresh, "a surprising count is read again");
        assert_eq!(
            sync.settle(&next, &[Value::Int(1), master_with(1)]),
            Ack::Acknowledged
        );
        assert_eq!(sync.replicas(), 1);
    }
}
