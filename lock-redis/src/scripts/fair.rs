//! The fair lock (Redisson's `RedissonFairLock`): the lock hash of the reentrant lock, plus a
//! queue of waiters (a list of owner ids) and each waiter's time-out (a sorted set of owner id
//! → epoch ms), and one channel per waiter.
//!
//! A waiter's time-out is when it is taken for dead if it has not got the lock: one slot after
//! the time-out of the waiter ahead of it, and the head's one slot after the lock is free for
//! it (the holder's lease end). Each script first drops waiters at the head whose time-out has
//! passed. The time is the server's (`TIME`), so dlock clients need no wall clock; Redisson
//! clients send their own, which is why Redisson asks for clocks kept in step.
//!
//! dlock's scripts keep that anchor exact where Redisson's let it drift: a renewal moves every
//! time-out by the lease it adds, a release moves them back by the lease it did not use (the
//! lock is free for the head now), and an acquire re-anchors the rest at the new holder's lease
//! end. So a waiter whose process died holds the queue up for at most its slot after its turn
//! came. A release wakes the head and the waiter behind it, which re-reads when the head's
//! place times out: if the head is dead, it takes over one slot later.

use std::sync::LazyLock;

use super::LuaScript;

/// The fair acquire. A name in use as another kind (a plain or read-write lock, a
/// synchronizer) → `DLOCK_WRONGKIND`, before anything is written. Free, and this waiter is at
/// the head of the queue (or the queue is empty) → take it (the hash marked `mode` = `fair`),
/// leave the queue, and re-anchor the time-outs of everyone behind at its lease end; return
/// nil. Held by this hold → count one more hold, its lease extended to at least the one asked for (never
/// shortened; the waiters' time-outs move with it); nil. Else, if the caller will wait and is not queued yet →
/// join the queue at its end. Returns how long to wait at most before trying again without
/// being woken: until the holder's lease ends or the head waiter's time-out, whichever comes
/// first (at least 1 ms).
///
/// The queue holds waiter ids (a thread's place, kept across its attempts); the lock's field is
/// the hold's own id, which a grant takes from the offer.
///
/// Gone holds as the reentrant acquire's (`DLOCK_GONE`).
///
/// KEYS[1] lock · KEYS[2] queue · KEYS[3] time-outs · ARGV[1] lease ms · ARGV[2] waiter id ·
/// ARGV[3] slot ms · ARGV[4] `1` to join the queue if held, `0` to try once · KEYS[4] grant
/// offers · ARGV[5] the grant offer (`<lease ms>:<attempt>:<hold id>`), or `0` for none: kept
/// while the waiter is queued, replaced by each of its attempts · ARGV[6] hold id · ARGV[7] `1`
/// for an extend · KEYS[5] force-unlocked holds of that name.
pub(crate) static FAIR_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "fair acquire",
        "fair/acquire",
        "preamble/kinds",
        "preamble/ended"
    )
});

/// The fair release, with the unlock latch: not held by this owner → nil; else delete the
/// lock, remember the result, move every time-out back by the lease left unused, drop dead
/// heads, and wake the head and the waiter behind it, each on its own channel (no other waiter
/// is woken). Returns 1.
///
/// If the head made a grant offer (a dlock waiter; see `FAIR_GRANT_PREFIX`), the lock is
/// handed to it instead: the offer's hold becomes the holder on the offer's lease, the waiter
/// leaves the queue, everyone behind is re-anchored at that lease's end, it is told with
/// `grant:<attempt>` (the attempt whose offer was granted), and the
/// waiter behind it is woken to re-read its wait (it takes over once the grant lease runs out,
/// should the granted waiter be dead). Re-anchoring makes moving the time-outs back by the
/// unused lease moot: each time-out moves once, by the sum of both shifts.
///
/// KEYS[1] lock · KEYS[2] queue · KEYS[3] time-outs · KEYS[4] channel (the waiter's id is
/// appended) · KEYS[5] grant offers · KEYS[6] latch · ARGV[1] unlock message · ARGV[2] hold
/// id · ARGV[3] latch ms.
pub(crate) static FAIR_RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| step!("fair release", "fair/release"));

/// A waiter gives up (Redisson's `acquireFailed`): everyone behind it moves up one slot and it
/// leaves the queue; if it was at the head and the lock is free, the new head and the one
/// behind it are woken.
/// Returns 1 if it was queued.
///
/// KEYS[1] queue · KEYS[2] time-outs · KEYS[3] lock · KEYS[4] channel · KEYS[5] grant offers ·
/// ARGV[1] waiter id · ARGV[2] its slot ms · ARGV[3] unlock message.
pub(crate) static FAIR_CANCEL: LazyLock<LuaScript> =
    LazyLock::new(|| step!("fair give-up", "fair/cancel"));

/// Force unlock of a fair lock: drop dead heads, delete the lock, wake the head. Returns 1 if
/// the lock was held.
///
/// KEYS[1] lock · KEYS[2] queue · KEYS[3] time-outs · KEYS[4] channel · KEYS[5] grant offers ·
/// KEYS[6] force-unlocked holds of that name · ARGV[1] unlock message · ARGV[2] how long an
/// ended hold is remembered, in ms.
pub(crate) static FAIR_FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "fair force unlock",
        "fair/force_unlock",
        "preamble/kinds",
        "preamble/ended"
    )
});

/// The watchdog's batch renewal of fair holds: as the exclusive renewal (never shortening a
/// lease), and the time-outs of the lock's waiters move by the lease added, so a waiter's place still times out one slot
/// after the lock is free for it. Returns per lock 1 (renewed), 2 (another owner holds it) or
/// 0 (gone).
///
/// KEYS[3i-2] lock i · KEYS[3i-1] its queue · KEYS[3i] its time-outs · ARGV[1] lease ms ·
/// ARGV[i + 1] owner id of lock i.
pub(crate) static FAIR_RENEW: LazyLock<LuaScript> =
    LazyLock::new(|| step!("fair renew", "fair/renew"));
