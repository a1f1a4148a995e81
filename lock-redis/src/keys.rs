//! The names of the Redis keys and channels derived from a lock's name, as Redisson derives them.

/// The prefix of a lock's release channel (Redisson's `RedissonLock.getChannelName`).
pub const CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// The prefix of the keys that make a release idempotent (Redisson's unlock latch, 3.24+).
pub const UNLOCK_LATCH_PREFIX: &str = "redisson_unlock_latch";

/// The message published on a lock's channel when it is released (Redisson's
/// `LockPubSub.UNLOCK_MESSAGE`). Any message on the channel wakes dlock's waiters.
pub const UNLOCK_MESSAGE: &str = "0";

/// `prefix:{name}`, or `prefix:name` when the name already has a hash tag: Redisson's
/// `RedissonObject.prefixName`. The braces put the derived key in the lock's cluster slot.
fn prefixed(prefix: &str, name: &str) -> String {
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
/// use lock_redis::channel_name;
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
/// use lock_redis::unlock_latch_name;
/// assert_eq!(unlock_latch_name("a", "r1"), "redisson_unlock_latch:{a}:r1");
/// ```
pub fn unlock_latch_name(name: &str, request_id: &str) -> String {
    format!("{}:{request_id}", prefixed(UNLOCK_LATCH_PREFIX, name))
}

/// The private channel the pub/sub thread of one backend listens on to be woken.
pub(crate) fn control_channel(backend_id: &str) -> String {
    format!("dlock:control:{backend_id}")
}
