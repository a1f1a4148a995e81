//! How each kind of lock is laid out on Redis: for every step, the script, its keys and its
//! arguments. The backend runs what this module describes; docs/redis.md has the same tables.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dlock_core::backend::{AcquireRequest, CounterStep, HoldRef, LockRef, OwnerId, Release};
use dlock_core::LockKind;
use redis::Value;

use crate::keys::{
    channel_name, election_channel_name, election_token_name, ended_name, fair_channel_name,
    fair_grant_name, fair_queue_name, fair_timeout_name, fencing_token_name, kind_mark_name,
    latch_channel_name, lock_waiter_marks_name, lock_waiters_name, read_key_prefix,
    read_timeout_prefix, read_waiters_name, read_write_channel_name, request_latch_name,
    semaphore_channel_name, semaphore_permits_name, unlock_latch_name, write_field,
    write_order_name, write_waiters_name, ENDED_KEPT, READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE,
};
use crate::scripts::{
    self, Announce, LuaScript, ACQUIRE, CANCEL, ELECTION_CAMPAIGN, ELECTION_LEADER, FAIR_ACQUIRE,
    FAIR_CANCEL, FAIR_FORCE_UNLOCK, FAIR_RELEASE, FENCED_ACQUIRE, FORCE_UNLOCK, HAND_OVER,
    LATCH_COUNT, LATCH_COUNT_DOWN, LATCH_OPEN, LATCH_TRY_SET, READ_ACQUIRE, READ_FORCE_UNLOCK,
    READ_RELEASE, READ_STATUS, READ_WRITE_CANCEL, RELEASE, SEMAPHORE_ACQUIRE, SEMAPHORE_ADD,
    SEMAPHORE_AVAILABLE, SEMAPHORE_HAND_OVER, SEMAPHORE_RELEASE, SEMAPHORE_STATUS,
    SEMAPHORE_TRY_SET, STATUS, UNDO_ACQUIRE, WRITE_ACQUIRE, WRITE_FORCE_UNLOCK, WRITE_RELEASE,
    WRITE_STATUS,
};

/// One script run: the script, its `KEYS` and its `ARGV`.
pub(crate) struct ScriptCall {
    pub(crate) script: &'static LuaScript,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<String>,
    /// The unlock latch of a release or hand-over (one of `keys`): once its answer is in hand,
    /// it is deleted. Set by the step that made the call, never guessed from a key's spelling.
    pub(crate) latch: Option<String>,
    /// How many copies of the call were written that may have run or may still land: a second
    /// (sent again after a time-out) means the first may land late, and needs the latch to
    /// replay.
    copies: AtomicU32,
}

impl ScriptCall {
    pub(crate) fn new(script: &'static LuaScript, keys: Vec<String>, args: Vec<String>) -> Self {
        ScriptCall {
            script,
            keys,
            args,
            latch: None,
            copies: AtomicU32::new(0),
        }
    }

    /// The same call, whose key `latch` is its unlock latch.
    fn with_latch(mut self, latch: String) -> Self {
        self.latch = Some(latch);
        self
    }

    /// `EVAL` of the call (the script's whole text), for a command whose `NOSCRIPT` answer
    /// would never be read.
    pub(crate) fn eval_cmd(&self, announce: Announce) -> redis::Cmd {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        scripts::eval(self.script, announce, &keys, &args)
    }

    /// `EVALSHA` of the call, with the script announcing releases as `announce` says.
    pub(crate) fn cmd(&self, announce: Announce) -> redis::Cmd {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        scripts::evalsha(self.script, announce, &keys, &args)
    }

    /// Appends the call's `EVALSHA`, packed, to `out` (see [`scripts::write_evalsha`]).
    pub(crate) fn write_to(&self, out: &mut Vec<u8>, announce: Announce) {
        self.copies.fetch_add(1, Ordering::Relaxed);
        scripts::write_evalsha(out, self.script, announce, &self.keys, &self.args);
    }

    /// Notes that a copy written was refused unrun (`NOSCRIPT`): it can land no more.
    pub(crate) fn not_run(&self) {
        self.copies.fetch_sub(1, Ordering::Relaxed);
    }

    /// The latch to delete now that the call's answer is in hand: none when the call was
    /// written more than once, since an earlier copy held up on its way (on a connection given
    /// up after a time-out) may still land and must replay, not act; that latch expires.
    pub(crate) fn latch_to_delete(&self) -> Option<&str> {
        self.latch
            .as_deref()
            .filter(|_| self.copies.load(Ordering::Relaxed) == 1)
    }
}

/// How many of a channel's subscribers are the releasing client's own.
fn own(listening: bool) -> String {
    u8::from(listening).to_string()
}

/// A duration in whole milliseconds for `PEXPIRE`, rounded up (a lease the store sets is never
/// shorter than the one the client counts on), at least 1 (0 would delete the key).
pub(crate) fn millis(duration: Duration) -> String {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
        .to_string()
}

/// The acquire of `request`.
pub(crate) fn acquire(request: &AcquireRequest<'_>) -> ScriptCall {
    let name = request.lock.name;
    let owner = request.owner.as_str();
    let lease = millis(request.lease);
    // Set on an extend: the script then acts only on a hold the store still has.
    let reentry = if request.reentry { "1" } else { "0" }.to_owned();
    match request.lock.kind {
        LockKind::Fair => ScriptCall::new(
            &FAIR_ACQUIRE,
            vec![
                name.into(),
                fair_queue_name(name),
                fair_timeout_name(name),
                fair_grant_name(name),
                ended_name(name),
            ],
            vec![
                lease,
                request.waiter.as_str().into(),
                millis(request.queue_slot),
                if request.will_wait { "1" } else { "0" }.into(),
                request.grant.map_or_else(
                    || "0".to_owned(),
                    |offer| format!("{}:{}:{owner}", millis(offer.lease), offer.attempt),
                ),
                owner.into(),
                reentry,
            ],
        ),
        LockKind::Read => ScriptCall::new(
            &READ_ACQUIRE,
            vec![
                name.into(),
                read_timeout_prefix(name, owner),
                fair_timeout_name(name),
                ended_name(name),
                write_waiters_name(name),
                read_waiters_name(name),
            ],
            vec![
                lease,
                owner.into(),
                request
                    .write_hold
                    .map(|writer| write_field(writer.as_str()))
                    .unwrap_or_default(),
                reentry,
                request.waiter.as_str().into(),
                millis(request.queue_slot),
                if request.will_wait { "1" } else { "0" }.into(),
            ],
        ),
        LockKind::Write => ScriptCall::new(
            &WRITE_ACQUIRE,
            vec![
                name.into(),
                fair_timeout_name(name),
                ended_name(name),
                write_waiters_name(name),
                read_waiters_name(name),
                write_order_name(name),
            ],
            vec![
                lease,
                write_field(owner),
                reentry,
                request.waiter.as_str().into(),
                millis(request.queue_slot),
                if request.will_wait { "1" } else { "0" }.into(),
            ],
        ),
        LockKind::Fenced => ScriptCall::new(
            &FENCED_ACQUIRE,
            vec![
                name.into(),
                fair_queue_name(name),
                fair_timeout_name(name),
                fencing_token_name(name),
                ended_name(name),
                lock_waiters_name(name),
                lock_waiter_marks_name(name),
            ],
            plain_args(request, lease, reentry),
        ),
        LockKind::Semaphore => ScriptCall::new(
            &SEMAPHORE_ACQUIRE,
            semaphore_keys(name),
            vec![lease, owner.into(), reentry],
        ),
        LockKind::Latch => ScriptCall::new(&LATCH_OPEN, counter_keys(name), Vec::new()),
        LockKind::Election => ScriptCall::new(
            &ELECTION_CAMPAIGN,
            vec![
                name.into(),
                election_token_name(name),
                election_channel_name(name),
                fair_timeout_name(name),
                ended_name(name),
            ],
            vec![
                lease,
                owner.into(),
                request.value.unwrap_or_default().into(),
                reentry,
            ],
        ),
        _ => ScriptCall::new(
            &ACQUIRE,
            vec![
                name.into(),
                fair_queue_name(name),
                fair_timeout_name(name),
                ended_name(name),
                lock_waiters_name(name),
                lock_waiter_marks_name(name),
            ],
            plain_args(request, lease, reentry),
        ),
    }
}

/// The `ARGV` of a plain or fenced acquire: the lease, the hold, whether it extends, and its
/// waiter's id, mark slot and whether it waits (`preamble/turns.lua`).
fn plain_args(request: &AcquireRequest<'_>, lease: String, reentry: String) -> Vec<String> {
    vec![
        lease,
        request.owner.as_str().into(),
        reentry,
        request.waiter.as_str().into(),
        millis(request.queue_slot),
        if request.will_wait { "1" } else { "0" }.into(),
    ]
}

/// The release of `owner`'s reentrant hold as request `request_id`, handing the lock to
/// `successor` in the same step; the latch key is the last key.
pub(crate) fn hand_over(
    lock: LockRef<'_>,
    owner: &OwnerId,
    successor: &AcquireRequest<'_>,
    request_id: &str,
    latch_lifetime: Duration,
) -> ScriptCall {
    let latch = unlock_latch_name(lock.name, request_id);
    if lock.kind == LockKind::Semaphore {
        let mut keys = semaphore_keys(lock.name);
        keys.push(latch.clone());
        return ScriptCall::new(
            &SEMAPHORE_HAND_OVER,
            keys,
            vec![
                owner.as_str().into(),
                millis(latch_lifetime),
                successor.owner.as_str().into(),
                millis(successor.lease),
            ],
        )
        .with_latch(latch);
    }
    ScriptCall::new(
        &HAND_OVER,
        vec![
            lock.name.into(),
            latch.clone(),
            lock_waiters_name(lock.name),
            lock_waiter_marks_name(lock.name),
            channel_name(lock.name),
        ],
        vec![
            owner.as_str().into(),
            millis(latch_lifetime),
            successor.owner.as_str().into(),
            millis(successor.lease),
            successor.waiter.as_str().into(),
            UNLOCK_MESSAGE.into(),
        ],
    )
    .with_latch(latch)
}

/// The release of `owner`'s hold as request `request_id`; the latch key is the last key.
/// `listening(channel)`: whether the releasing client is itself subscribed to the lock's
/// channel (so one subscriber less means other clients wait; see [`RELEASE`] and
/// [`release_outcome`]).
pub(crate) fn release(
    lock: LockRef<'_>,
    owner: &OwnerId,
    request_id: &str,
    latch_lifetime: Duration,
    listening: &dyn Fn(&str) -> bool,
) -> ScriptCall {
    let name = lock.name;
    let owner = owner.as_str();
    let latch = unlock_latch_name(name, request_id);
    let latch_ms = millis(latch_lifetime);
    let call = match lock.kind {
        LockKind::Fair => ScriptCall::new(
            &FAIR_RELEASE,
            vec![
                name.into(),
                fair_queue_name(name),
                fair_timeout_name(name),
                channel_name(name),
                fair_grant_name(name),
                latch.clone(),
            ],
            vec![UNLOCK_MESSAGE.into(), owner.into(), latch_ms],
        ),
        LockKind::Read => ScriptCall::new(
            &READ_RELEASE,
            vec![
                name.into(),
                read_write_channel_name(name),
                read_timeout_prefix(name, owner),
                read_key_prefix(name),
                latch.clone(),
            ],
            vec![UNLOCK_MESSAGE.into(), owner.into(), latch_ms],
        ),
        LockKind::Write => ScriptCall::new(
            &WRITE_RELEASE,
            vec![name.into(), read_write_channel_name(name), latch.clone()],
            vec![READ_UNLOCK_MESSAGE.into(), write_field(owner), latch_ms],
        ),
        LockKind::Semaphore => {
            let mut keys = semaphore_keys(name);
            keys.push(latch.clone());
            ScriptCall::new(&SEMAPHORE_RELEASE, keys, vec![owner.into(), latch_ms])
        }
        _ => {
            let channel = match lock.kind {
                LockKind::Election => election_channel_name(name),
                _ => channel_name(name),
            };
            let own = own(listening(&channel));
            ScriptCall::new(
                &RELEASE,
                vec![name.into(), channel, latch.clone()],
                vec![UNLOCK_MESSAGE.into(), owner.into(), latch_ms, own],
            )
        }
    };
    call.with_latch(latch)
}

/// Takes back one acquire of `owner`'s reentrant hold of `lock` ([`UNDO_ACQUIRE`]): what a
/// RedLock acquire leaves behind on a node that did not answer in time, and sends to the nodes
/// that granted it when the quorum was not reached.
pub(crate) fn undo_acquire(lock: LockRef<'_>, owner: &OwnerId) -> ScriptCall {
    ScriptCall::new(
        &UNDO_ACQUIRE,
        vec![lock.name.into(), channel_name(lock.name)],
        vec![UNLOCK_MESSAGE.into(), owner.as_str().into()],
    )
}

/// What a release script answered: 1 released, 3 released while other clients waited (the
/// reentrant lock's release, [`RELEASE`]); anything else, not held.
pub(crate) fn release_outcome(reply: &Value) -> Release {
    match reply {
        Value::Int(1) => Release::Released,
        Value::Int(3) => Release::ReleasedToOthers,
        _ => Release::NotHeld,
    }
}

/// The status of `lock` as seen by `owner`: the reply is `{held, held by owner, PTTL}`.
pub(crate) fn status(lock: LockRef<'_>, owner: &OwnerId) -> ScriptCall {
    let name = lock.name;
    let keys = vec![name.into(), fair_timeout_name(name)];
    match lock.kind {
        LockKind::Read => {
            let mut keys = keys;
            keys.push(read_timeout_prefix(name, owner.as_str()));
            ScriptCall::new(&READ_STATUS, keys, vec![owner.to_string()])
        }
        LockKind::Write => ScriptCall::new(&WRITE_STATUS, keys, vec![write_field(owner.as_str())]),
        LockKind::Semaphore => {
            let mut keys = counter_keys(name);
            keys.push(semaphore_permits_name(name));
            ScriptCall::new(&SEMAPHORE_STATUS, keys, vec![owner.to_string()])
        }
        kind => ScriptCall::new(
            &STATUS,
            keys,
            vec![owner.to_string(), exclusive_mode(kind).into()],
        ),
    }
}

/// The `mode` an exclusive kind's hash is marked with.
fn exclusive_mode(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Fair => "fair",
        LockKind::Election => "election",
        _ => "lock",
    }
}

/// The force unlock of `lock`: the reply is 1 if it was held. The holds it ends are remembered
/// (see [`ended_name`]).
pub(crate) fn force_unlock(lock: LockRef<'_>) -> ScriptCall {
    let name = lock.name;
    let kept = millis(ENDED_KEPT);
    match lock.kind {
        LockKind::Fair => ScriptCall::new(
            &FAIR_FORCE_UNLOCK,
            vec![
                name.into(),
                fair_queue_name(name),
                fair_timeout_name(name),
                channel_name(name),
                fair_grant_name(name),
                ended_name(name),
            ],
            vec![UNLOCK_MESSAGE.into(), kept],
        ),
        LockKind::Read => ScriptCall::new(
            &READ_FORCE_UNLOCK,
            vec![
                name.into(),
                read_write_channel_name(name),
                fair_timeout_name(name),
                ended_name(name),
            ],
            vec![UNLOCK_MESSAGE.into(), kept],
        ),
        LockKind::Write => ScriptCall::new(
            &WRITE_FORCE_UNLOCK,
            vec![
                name.into(),
                read_write_channel_name(name),
                fair_timeout_name(name),
                ended_name(name),
            ],
            vec![READ_UNLOCK_MESSAGE.into(), kept],
        ),
        kind => {
            let channel = match kind {
                LockKind::Election => election_channel_name(name),
                _ => channel_name(name),
            };
            ScriptCall::new(
                &FORCE_UNLOCK,
                vec![
                    name.into(),
                    channel,
                    fair_timeout_name(name),
                    ended_name(name),
                ],
                vec![UNLOCK_MESSAGE.into(), exclusive_mode(kind).into(), kept],
            )
        }
    }
}

/// A waiter leaving `lock`'s queue (a fair lock), or a waiter's mark going (a plain or
/// read-write lock), for the kinds that wait on the store.
pub(crate) fn cancel_wait(
    lock: LockRef<'_>,
    owner: &OwnerId,
    queue_slot: Duration,
) -> Option<ScriptCall> {
    let name = lock.name;
    if matches!(lock.kind, LockKind::Reentrant | LockKind::Fenced) {
        return Some(ScriptCall::new(
            &CANCEL,
            vec![
                lock_waiters_name(name),
                lock_waiter_marks_name(name),
                name.into(),
                channel_name(name),
            ],
            vec![owner.to_string(), UNLOCK_MESSAGE.into()],
        ));
    }
    if lock.kind.is_read_write() {
        let mut keys = match lock.kind {
            LockKind::Write => vec![write_waiters_name(name)],
            _ => vec![read_waiters_name(name)],
        };
        keys.extend([name.into(), read_write_channel_name(name)]);
        if lock.kind == LockKind::Write {
            // A writer's place in the writers' order goes with its mark.
            keys.push(write_order_name(name));
        }
        return Some(ScriptCall::new(
            &READ_WRITE_CANCEL,
            keys,
            vec![owner.to_string(), READ_UNLOCK_MESSAGE.into()],
        ));
    }
    (lock.kind == LockKind::Fair).then(|| {
        ScriptCall::new(
            &FAIR_CANCEL,
            vec![
                fair_queue_name(name),
                fair_timeout_name(name),
                name.into(),
                channel_name(name),
                fair_grant_name(name),
            ],
            vec![owner.to_string(), millis(queue_slot), UNLOCK_MESSAGE.into()],
        )
    })
}

/// The channel on which `owner` waits for `lock` to be released.
pub(crate) fn channel(lock: LockRef<'_>, owner: &OwnerId) -> String {
    match lock.kind {
        LockKind::Fair => fair_channel_name(lock.name, owner.as_str()),
        LockKind::Read | LockKind::Write => read_write_channel_name(lock.name),
        LockKind::Semaphore => semaphore_channel_name(lock.name),
        LockKind::Latch => latch_channel_name(lock.name),
        LockKind::Election => election_channel_name(lock.name),
        _ => channel_name(lock.name),
    }
}

/// A second channel whose messages wake `lock`'s waiters too: for a fair waiter, the plain
/// lock's, on which a Redisson `RLock` sharing the name announces its release (Redisson's
/// `RLock` and `RFairLock` keep one hash; only the fair lock's releases reach a waiter's own
/// channel).
pub(crate) fn also_wakes(lock: LockRef<'_>) -> Option<String> {
    (lock.kind == LockKind::Fair).then(|| channel_name(lock.name))
}

/// How one hold is renewed: by the exclusive renewal (a holder field), the fair renewal (which
/// also moves the queue's time-outs), or the read renewal.
pub(crate) enum Renewal {
    /// `RENEW` with the lock's key and the holder's field.
    Exclusive { key: String, field: String },
    /// `FAIR_RENEW` with the lock's key, queue and time-outs, and the owner.
    Fair {
        key: String,
        queue: String,
        timeouts: String,
        owner: String,
    },
    /// `READ_RENEW` with the lock's key and the owner's hold-key prefix.
    Read {
        key: String,
        prefix: String,
        owner: String,
    },
    /// `SEMAPHORE_RENEW` with the semaphore's permits held and the permit id.
    Permit { key: String, id: String },
}

/// How `hold` is renewed.
pub(crate) fn renewal(hold: &HoldRef<'_>) -> Renewal {
    let (name, owner) = (hold.lock.name, hold.owner.as_str());
    match hold.lock.kind {
        LockKind::Read => Renewal::Read {
            key: name.into(),
            prefix: read_timeout_prefix(name, owner),
            owner: owner.into(),
        },
        LockKind::Write => Renewal::Exclusive {
            key: name.into(),
            field: write_field(owner),
        },
        LockKind::Fair => Renewal::Fair {
            key: name.into(),
            queue: fair_queue_name(name),
            timeouts: fair_timeout_name(name),
            owner: owner.into(),
        },
        LockKind::Semaphore => Renewal::Permit {
            key: semaphore_permits_name(name),
            id: owner.into(),
        },
        _ => Renewal::Exclusive {
            key: name.into(),
            field: owner.into(),
        },
    }
}

/// The keys every step on a semaphore or latch starts with: the number, the fair time-outs of
/// that name, and the mark that says which it counts (see the scripts' `counter_kind!`).
fn counter_keys(name: &str) -> Vec<String> {
    vec![name.into(), fair_timeout_name(name), kind_mark_name(name)]
}

/// A semaphore's keys, in the order its scripts take them: the counter keys, the permits held,
/// the channel.
fn semaphore_keys(name: &str) -> Vec<String> {
    let mut keys = counter_keys(name);
    keys.push(semaphore_permits_name(name));
    keys.push(semaphore_channel_name(name));
    keys
}

/// [`counter_keys`] and the kind's channel.
fn counter_keys_and(name: &str, channel: String) -> Vec<String> {
    let mut keys = counter_keys(name);
    keys.push(channel);
    keys
}

/// A step on a semaphore's or a latch's counter. A set-once step keeps its answer under
/// request `request_id` for `latch_lifetime` (its latch key is the last key): one sent again
/// replays it.
pub(crate) fn counter(
    step: CounterStep<'_>,
    request_id: &str,
    latch_lifetime: Duration,
) -> Option<ScriptCall> {
    let set_once = |script: &'static LuaScript, name: &str, channel: String, value: u64| {
        let latch = request_latch_name(name, request_id);
        let mut keys = counter_keys_and(name, channel);
        keys.push(latch.clone());
        ScriptCall::new(
            script,
            keys,
            vec![value.to_string(), millis(latch_lifetime)],
        )
        .with_latch(latch)
    };
    Some(match step {
        CounterStep::TrySetPermits { name, permits } => set_once(
            &SEMAPHORE_TRY_SET,
            name,
            semaphore_channel_name(name),
            permits,
        ),
        CounterStep::AddPermits { name, permits } => ScriptCall::new(
            &SEMAPHORE_ADD,
            semaphore_keys(name),
            vec![permits.to_string()],
        ),
        CounterStep::AvailablePermits { name } => {
            ScriptCall::new(&SEMAPHORE_AVAILABLE, semaphore_keys(name), Vec::new())
        }
        CounterStep::TrySetCount { name, count } => {
            set_once(&LATCH_TRY_SET, name, latch_channel_name(name), count)
        }
        CounterStep::CountDown { name } => ScriptCall::new(
            &LATCH_COUNT_DOWN,
            counter_keys_and(name, latch_channel_name(name)),
            Vec::new(),
        ),
        CounterStep::Count { name } => {
            ScriptCall::new(&LATCH_COUNT, counter_keys(name), Vec::new())
        }
        _ => return None,
    })
}

/// The leader of election `name`: `{candidate id, token, PTTL}` or nil.
pub(crate) fn leader(name: &str) -> ScriptCall {
    ScriptCall::new(
        &ELECTION_LEADER,
        vec![
            name.into(),
            election_token_name(name),
            fair_timeout_name(name),
        ],
        Vec::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::millis;
    use std::time::Duration;

    #[test]
    fn a_lease_is_sent_in_whole_milliseconds_rounded_up() {
        assert_eq!(millis(Duration::from_millis(30_000)), "30000");
        // The store never gets less than the client counts on.
        assert_eq!(millis(Duration::from_micros(1500)), "2");
        assert_eq!(millis(Duration::from_nanos(2_000_001)), "3");
        // At least 1: 0 would delete the key.
        assert_eq!(millis(Duration::ZERO), "1");
        assert_eq!(millis(Duration::MAX), u64::MAX.to_string());
    }
}
