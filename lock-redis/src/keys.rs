//! The names of the Redis keys and channels derived from a lock's name, as Redisson derives them.

/// The prefix of a lock's release channel (Redisson's `RedissonLock.getChannelName`).
pub const CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// The prefix of the keys that make a release idempotent (Redisson's unlock latch, 3.24+).
pub const UNLOCK_LATCH_PREFIX: &str = "redisson_unlock_latch";

/// The message published on a lock's channel when it is released (Redisson's
/// `LockPubSub.UNLOCK_MESSAGE`). Any message on the channel wakes dlock's waiters.
pub const UNLOCK_MESSAGE: &str = "0";

/// The message a write lock's release publishes (Redisson's `READ_UNLOCK_MESSAGE`): Redisson
/// clients wake all their waiters on it, not one.
pub const READ_UNLOCK_MESSAGE: &str = "1";

/// The message a granting fair release publishes on the new holder's own channel, followed by
/// the wait id: `grant:<wait id>`. Only dlock waiters are granted, so only they receive it.
pub const GRANT_MESSAGE_PREFIX: &str = "grant:";

/// The prefix of a fair lock's grant offers: `dlock_lock_grant:{name}`, a hash of the queued
/// dlock waiters that accept being handed the lock (owner id → `<grant lease ms>:<wait id>`).
/// Redisson never writes it, so its waiters are never handed a lock.
pub const FAIR_GRANT_PREFIX: &str = "dlock_lock_grant";

/// The prefix of the keys that make a set-once step idempotent: `dlock_request:{name}:<request
/// id>` keeps the answer of a semaphore's `try_set_permits` or a latch's `try_set_count` for a
/// short while, so one sent again after a lost reply answers as its first attempt did.
pub const REQUEST_LATCH_PREFIX: &str = "dlock_request";

/// The prefix of a name's force-unlocked holds: `dlock_ended:{name}`, a sorted set of hold id
/// → epoch ms until which it is remembered. An acquire under such an id (a copy of the request
/// that made the hold, arriving late) answers "gone": an ended hold is never made again.
pub const ENDED_PREFIX: &str = "dlock_ended";

/// How long a force-unlocked hold is remembered.
pub(crate) const ENDED_KEPT: std::time::Duration = std::time::Duration::from_secs(600);

/// The key of `name`'s force-unlocked holds (see [`ENDED_PREFIX`]).
pub(crate) fn ended_name(name: &str) -> String {
    prefixed(ENDED_PREFIX, name)
}

/// The prefix of a fair lock's queue of waiters (a list of owner ids).
pub const FAIR_QUEUE_PREFIX: &str = "redisson_lock_queue";

/// The prefix of a fair lock's waiter time-outs (a sorted set of owner id → epoch ms).
pub const FAIR_TIMEOUT_PREFIX: &str = "redisson_lock_timeout";

/// The prefix of a fenced lock's token counter (Redisson's `RFencedLock`).
pub const FENCING_TOKEN_PREFIX: &str = "redisson_lock_token";

/// The prefix of the order of a plain lock's waiters: `dlock_lock_waiters:{name}`, a sorted
/// set of waiter id → its number in the order the waiters were first refused. A free lock goes
/// to the first whose mark lives (see [`LOCK_WAITER_MARKS_PREFIX`]), so a waiter waits for the
/// holds of those before it at most. Redisson never writes or reads it: its `RLock` takes a
/// free lock whoever waits.
pub const LOCK_WAITERS_PREFIX: &str = "dlock_lock_waiters";

/// The key of the order of `name`'s plain lock's waiters (see [`LOCK_WAITERS_PREFIX`]).
///
/// ```
/// use dlocks::redis::lock_waiters_name;
/// assert_eq!(lock_waiters_name("jobs"), "dlock_lock_waiters:{jobs}");
/// ```
pub fn lock_waiters_name(name: &str) -> String {
    prefixed(LOCK_WAITERS_PREFIX, name)
}

/// The prefix of the marks of a plain lock's waiters: `dlock_lock_waiter_marks:{name}`, a
/// sorted set of waiter id → epoch ms its mark lives until (a waiter renews it with each
/// attempt; one that died holds the others off for no longer).
pub const LOCK_WAITER_MARKS_PREFIX: &str = "dlock_lock_waiter_marks";

/// The key of the marks of `name`'s plain lock's waiters (see [`LOCK_WAITER_MARKS_PREFIX`]).
///
/// ```
/// use dlocks::redis::lock_waiter_marks_name;
/// assert_eq!(lock_waiter_marks_name("jobs"), "dlock_lock_waiter_marks:{jobs}");
/// ```
pub fn lock_waiter_marks_name(name: &str) -> String {
    prefixed(LOCK_WAITER_MARKS_PREFIX, name)
}

/// The prefix of the marks of a read-write lock's waiting writers: `dlock_rwlock_writers:{name}`,
/// a sorted set of waiter id → epoch ms its mark lives until. While one lives, no new reader
/// is let in. Redisson never writes or reads it: its readers are not held off.
pub const WRITE_WAITERS_PREFIX: &str = "dlock_rwlock_writers";

/// The key of the marks of `name`'s waiting writers (see [`WRITE_WAITERS_PREFIX`]).
///
/// ```
/// use dlocks::redis::write_waiters_name;
/// assert_eq!(write_waiters_name("cfg"), "dlock_rwlock_writers:{cfg}");
/// ```
pub fn write_waiters_name(name: &str) -> String {
    prefixed(WRITE_WAITERS_PREFIX, name)
}

/// The prefix of the order of a read-write lock's waiting writers:
/// `dlock_rwlock_writer_order:{name}`, a sorted set of waiter id → its number in the order the
/// writers were first refused. A free lock goes to the first whose mark lives (see
/// [`WRITE_WAITERS_PREFIX`]), so writers cannot starve one another. Redisson never writes or
/// reads it: its writers take a free lock whoever waits.
pub const WRITE_ORDER_PREFIX: &str = "dlock_rwlock_writer_order";

/// The key of the order of `name`'s waiting writers (see [`WRITE_ORDER_PREFIX`]).
///
/// ```
/// use dlocks::redis::write_order_name;
/// assert_eq!(write_order_name("cfg"), "dlock_rwlock_writer_order:{cfg}");
/// ```
pub fn write_order_name(name: &str) -> String {
    prefixed(WRITE_ORDER_PREFIX, name)
}

/// The prefix of the marks of a read-write lock's readers waiting behind a writer's hold:
/// `dlock_rwlock_readers:{name}`, a sorted set of waiter id → epoch ms its mark lives until.
/// While one lives, no writer takes the lock: the readers that waited go first. Redisson never
/// writes or reads it.
pub const READ_WAITERS_PREFIX: &str = "dlock_rwlock_readers";

/// The key of the marks of `name`'s waiting readers (see [`READ_WAITERS_PREFIX`]).
///
/// ```
/// use dlocks::redis::read_waiters_name;
/// assert_eq!(read_waiters_name("cfg"), "dlock_rwlock_readers:{cfg}");
/// ```
pub fn read_waiters_name(name: &str) -> String {
    prefixed(READ_WAITERS_PREFIX, name)
}

/// The prefix of a read-write lock's channel.
pub const READ_WRITE_CHANNEL_PREFIX: &str = "redisson_rwlock";

/// `prefix:{name}`, or `prefix:name` when the name already has a hash tag: Redisson's
/// `RedissonObject.prefixName`. The braces put the derived key in the lock's cluster slot.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The pub/sub channel on which releases of lock `name` are announced:
/// `redisson_lock__channel:{name}`.
///
/// ```
/// use dlocks::redis::channel_name;
/// assert_eq!(channel_name("orders:42"), "redisson_lock__channel:{orders:42}");
/// assert_eq!(channel_name("{user7}:cart"), "redisson_lock__channel:{user7}:cart");
/// ```
pub fn channel_name(name: &str) -> String {
    prefixed(CHANNEL_PREFIX, name)
}

/// The latch key of one release request of lock `name`:
/// `redisson_unlock_latch:{name}:<request id>`. It keeps the release's result for a short
/// while, so a release retried after a lost reply replays that result instead of acting twice.
///
/// ```
/// use dlocks::redis::unlock_latch_name;
/// assert_eq!(unlock_latch_name("a", "r1"), "redisson_unlock_latch:{a}:r1");
/// ```
pub fn unlock_latch_name(name: &str, request_id: &str) -> String {
    let mut latch = prefixed(UNLOCK_LATCH_PREFIX, name);
    latch.reserve_exact(1 + request_id.len());
    latch.push(':');
    latch.push_str(request_id);
    latch
}

/// The latch key of one set-once step of `name`: `dlock_request:{name}:<request id>` (see
/// [`REQUEST_LATCH_PREFIX`]).
pub(crate) fn request_latch_name(name: &str, request_id: &str) -> String {
    format!("{}:{request_id}", prefixed(REQUEST_LATCH_PREFIX, name))
}

/// `{name}:suffix`, or `name:suffix` when the name already has a hash tag: Redisson's
/// `RedissonObject.suffixName`.
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The prefix of a semaphore's channel (Redisson's `RPermitExpirableSemaphore`).
pub const SEMAPHORE_CHANNEL_PREFIX: &str = "redisson_sc";

/// A semaphore's permits held: `{name}:timeout`, a sorted set of permit id → lease end.
pub fn semaphore_permits_name(name: &str) -> String {
    suffixed(name, "timeout")
}

/// A semaphore's channel: `redisson_sc:{name}`.
pub fn semaphore_channel_name(name: &str) -> String {
    prefixed(SEMAPHORE_CHANNEL_PREFIX, name)
}

/// A count-down latch's channel: `redisson_countdownlatch__channel__{name}` (Redisson puts the
/// braces around the name whatever it holds).
pub fn latch_channel_name(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The prefix of a client's record (its name, host, pid and holds).
pub const CLIENT_RECORD_PREFIX: &str = "dlock_client";

/// The record of client `id`: `dlock_client:{id}`.
pub fn client_record_name(id: &str) -> String {
    prefixed(CLIENT_RECORD_PREFIX, id)
}

/// The prefix of the mark that tells a semaphore's number from a latch's.
pub const KIND_MARK_PREFIX: &str = "dlock_kind";

/// The mark of what the number at `name` counts: `dlock_kind:{name}`, `semaphore` or `latch`.
pub fn kind_mark_name(name: &str) -> String {
    prefixed(KIND_MARK_PREFIX, name)
}

/// The name a key made by `prefixed(prefix, name)` or `suffixed(name, suffix)` was made from.
pub(crate) fn base_name(key: &str, prefix: Option<&str>, suffix: Option<&str>) -> Option<String> {
    let mut rest = key;
    if let Some(prefix) = prefix {
        rest = rest.strip_prefix(prefix)?.strip_prefix(':')?;
    }
    if let Some(suffix) = suffix {
        rest = rest.strip_suffix(suffix)?.strip_suffix(':')?;
    }
    // `{name}` for a name without a hash tag of its own.
    let inner = rest
        .strip_prefix('{')
        .and_then(|inner| inner.strip_suffix('}'))
        .filter(|inner| !inner.contains('{') && !inner.contains('}'));
    Some(inner.unwrap_or(rest).to_owned())
}

/// A leader election's token counter: `dlock_election_token:{name}`.
pub fn election_token_name(name: &str) -> String {
    prefixed("dlock_election_token", name)
}

/// A leader election's channel: `dlock_election_channel:{name}`.
pub fn election_channel_name(name: &str) -> String {
    prefixed("dlock_election_channel", name)
}

/// A fenced lock's token counter: `redisson_lock_token:{name}`.
pub fn fencing_token_name(name: &str) -> String {
    prefixed(FENCING_TOKEN_PREFIX, name)
}

/// A fair lock's queue: `redisson_lock_queue:{name}`.
pub fn fair_queue_name(name: &str) -> String {
    prefixed(FAIR_QUEUE_PREFIX, name)
}

/// A fair lock's grant offers: `dlock_lock_grant:{name}`.
pub fn fair_grant_name(name: &str) -> String {
    prefixed(FAIR_GRANT_PREFIX, name)
}

/// A fair lock's waiter time-outs: `redisson_lock_timeout:{name}`.
pub fn fair_timeout_name(name: &str) -> String {
    prefixed(FAIR_TIMEOUT_PREFIX, name)
}

/// The channel on which a fair lock's waiter `owner` is told it is its turn:
/// `redisson_lock__channel:{name}:<owner>`.
///
/// ```
/// use dlocks::redis::fair_channel_name;
/// assert_eq!(fair_channel_name("jobs", "c1:7"), "redisson_lock__channel:{jobs}:c1:7");
/// ```
pub fn fair_channel_name(name: &str, owner: &str) -> String {
    format!("{}:{owner}", channel_name(name))
}

/// A read-write lock's channel, for readers and writers alike: `redisson_rwlock:{name}`.
pub fn read_write_channel_name(name: &str) -> String {
    prefixed(READ_WRITE_CHANNEL_PREFIX, name)
}

/// The hash field of a write hold: `<owner>:write`.
pub fn write_field(owner: &str) -> String {
    format!("{owner}:write")
}

/// The prefix of `owner`'s read-hold keys on a read-write lock:
/// `{name}:<owner>:rwlock_timeout` (each hold is `...:<n>`, a string with the hold's lease).
///
/// ```
/// use dlocks::redis::read_timeout_prefix;
/// assert_eq!(read_timeout_prefix("cfg", "c1:7"), "{cfg}:c1:7:rwlock_timeout");
/// ```
pub fn read_timeout_prefix(name: &str, owner: &str) -> String {
    suffixed(name, &format!("{owner}:rwlock_timeout"))
}

/// What read-hold keys of every owner start with: `{name}` (or `name` with its own hash tag).
pub(crate) fn read_key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// The private channel the pub/sub thread of one backend listens on to be woken.
pub(crate) fn control_channel(backend_id: &str) -> String {
    format!("dlock:control:{backend_id}")
}
