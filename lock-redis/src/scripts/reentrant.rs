//! The reentrant lock (Redisson's `RLock`), and the renewal every exclusive kind shares.

use std::sync::LazyLock;

use super::LuaScript;

/// Redisson's acquire, refusing names used by other kinds: free → the hold (its id, one
/// count) and the lease, the hash marked `mode` = `lock`; already this hold's → count one more
/// and extend the lease to at least the one asked for (never shorten it: the hold may rely on a
/// longer one); return nil. Held by another hold → its remaining lease (`PTTL`). A name in use
/// as another kind (a fair lock, also one with only waiters queued; a read-write lock; a
/// synchronizer) → `DLOCK_WRONGKIND`, before anything is written.
///
/// An extend (ARGV[3] `1`) of a hold this hold id no longer has, and any acquire under the id
/// of a hold force-unlocked before (a copy of its acquire arriving late) → `DLOCK_GONE`:
/// an ended hold is never made again.
///
/// dlock's own: a waiter refused (ARGV[6] `1`) marks itself in the name's waiters' order and
/// marks (`preamble/turns.lua`), and a free lock goes to the first live waiter alone (the
/// others are answered how long its mark has left). With nobody marked, the free path is one
/// `EXISTS`, as before.
///
/// KEYS[1] lock · KEYS[2] fair queue of that name · KEYS[3] its time-outs · KEYS[4]
/// force-unlocked holds of that name · KEYS[5] waiters' order · KEYS[6] waiters' marks ·
/// ARGV[1] lease in ms · ARGV[2] hold id · ARGV[3] `1` for an extend · ARGV[4] waiter id ·
/// ARGV[5] how long its mark lives, in ms · ARGV[6] `1` if it will wait.
pub(crate) static ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "acquire",
        "reentrant/acquire",
        "preamble/kinds",
        "preamble/ended",
        "preamble/turns"
    )
});

/// The fenced acquire (Redisson's `RFencedLock`): the plain acquire (a re-entry never shortens
/// the lease), and a new hold (not a reentrant one) takes the next fencing token. Answers
/// `{-1, token}` when taken, `{PTTL, -1}` when held. The next token is the counter plus one, or
/// the server's clock in microseconds if that is higher (see `preamble/tokens.lua`).
/// Redisson's `INCR` on the same counter just continues from it.
///
/// Gone holds and waiters' marks as the plain acquire's.
///
/// KEYS[1] lock · KEYS[2] fair queue of that name · KEYS[3] its time-outs · KEYS[4] token
/// counter · KEYS[5] force-unlocked holds of that name · KEYS[6] waiters' order · KEYS[7]
/// waiters' marks · ARGV[1] lease in ms · ARGV[2] hold id · ARGV[3] `1` for an extend ·
/// ARGV[4] waiter id · ARGV[5] how long its mark lives, in ms · ARGV[6] `1` if it will wait.
pub(crate) static FENCED_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "fenced acquire",
        "reentrant/fenced_acquire",
        "preamble/kinds",
        "preamble/tokens",
        "preamble/ended",
        "preamble/turns"
    )
});

/// A plain lock's waiter gives up: its mark goes (waiters' order and marks), and if the lock
/// is free the unlock message wakes the waiters it held off. Answers 1 if it was marked.
///
/// KEYS[1] waiters' order · KEYS[2] waiters' marks · KEYS[3] lock · KEYS[4] channel ·
/// ARGV[1] waiter id · ARGV[2] unlock message.
pub(crate) static CANCEL: LazyLock<LuaScript> =
    LazyLock::new(|| step!("plain waiter's cancel", "reentrant/cancel"));

/// A full release with Redisson's unlock latch: a latch left by an earlier attempt of the same
/// request → replay its result. Not held by this hold → nil. Else delete the lock whatever the
/// hold's count (the client counts reentrant holds itself), announce it on the channel,
/// remember the release in the latch, and return 1; or 3 when the announcement reached more
/// subscribers than the releasing client's own (other clients wait for the lock). The hold's
/// id is its own, so a field of that name can only be this hold, whatever kind the name is in
/// use as now: a release that arrives late finds nothing, and changes nothing.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] latch · ARGV[1] unlock message · ARGV[2] hold id ·
/// ARGV[3] latch lifetime in ms · ARGV[4] the releasing client's own subscriptions to the
/// channel (0 or 1).
pub(crate) static RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| step!("release", "reentrant/release"));

/// Takes back one acquire of a hold whose outcome the client never learnt (a RedLock node
/// that did not answer in time, or one of a quorum that was not reached): the hold's count one
/// less, and the hold deleted and its release announced when none is left. An acquire counts
/// one on its hold (made, or re-entered by a copy of an earlier attempt under the same id), and
/// none on a lock another hold has; so a take-back that lands after the thread's next attempt
/// re-entered the hold leaves that attempt's count, where a whole release ended the hold the
/// thread then trusted. Answers 1 (deleted), 0 (counts left) or nil (no such hold).
///
/// KEYS[1] lock · KEYS[2] channel · ARGV[1] unlock message · ARGV[2] hold id.
pub(crate) static UNDO_ACQUIRE: LazyLock<LuaScript> =
    LazyLock::new(|| step!("acquire take-back", "reentrant/undo_acquire"));

/// A release that hands the lock over, with the unlock latch: a latch left by an earlier
/// attempt of the same request → replay its result. Not held by this hold → nil. Else the
/// lock becomes the successor hold's (one count, its lease) in place, nobody is woken (the
/// lock is not free), the result is remembered in the latch, and 2 is returned. Unless a
/// waiter is marked before the successor's waiter: then the hold is released in the same step
/// and the release announced (the marked waiter takes the lock once free), and 1 is returned
/// and remembered.
///
/// KEYS[1] lock · KEYS[2] latch · KEYS[3] waiters' order · KEYS[4] waiters' marks · KEYS[5]
/// channel · ARGV[1] hold id · ARGV[2] latch lifetime in ms · ARGV[3] successor's hold id ·
/// ARGV[4] successor's lease in ms · ARGV[5] successor's waiter id · ARGV[6] unlock message.
pub(crate) static HAND_OVER: LazyLock<LuaScript> =
    LazyLock::new(|| step!("hand-over release", "reentrant/hand_over", "preamble/turns"));

/// The watchdog's batch renewal of exclusive holds (reentrant, fair and write locks, whose
/// holder is one hash field): for each lock still held by its field, extend the lease to at
/// least the one given, never shortening it (a late renewal may find a newer hold of the same
/// owner on a longer lease). Returns per key 1 (renewed), 2 (another owner holds it now) or 0
/// (gone, or not a hash any more). A lock that is gone is never recreated, and one another
/// owner holds is left alone.
///
/// KEYS[i] lock i · ARGV[1] lease in ms · ARGV[i + 1] holder field of lock i.
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| step!("renew", "reentrant/renew"));

/// A consistent snapshot of one lock as the kind asked: {held, held by this hold, PTTL}; a
/// name in use as another kind → `DLOCK_WRONGKIND`.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · ARGV[1] hold id · ARGV[2] the kind
/// asked, as the lock's `mode` says it: `lock`, `fair` or `election`.
pub(crate) static STATUS: LazyLock<LuaScript> =
    LazyLock::new(|| step!("status", "reentrant/status", "preamble/kinds"));

/// Redisson's force unlock: delete the lock whoever holds it; if it existed, announce the
/// release. Returns 1 if the lock was held. A name in use as another kind than the one asked →
/// `DLOCK_WRONGKIND`. The holds it ends are remembered for ARGV[3] ms: never made again.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] fair time-outs of that name · KEYS[4]
/// force-unlocked holds of that name · ARGV[1] unlock message · ARGV[2] the kind asked (`lock`
/// or `election`) · ARGV[3] how long an ended hold is remembered, in ms.
pub(crate) static FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "force unlock",
        "reentrant/force_unlock",
        "preamble/kinds",
        "preamble/ended"
    )
});
