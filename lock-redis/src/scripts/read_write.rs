//! The read-write lock (Redisson's `RReadWriteLock`): one hash for both sides, its `mode` field
//! `read` or `write`; a reader's field `<owner>` counts its holds, each hold a string key
//! `{name}:<owner>:rwlock_timeout:<n>` with the hold's lease; the writer's field is
//! `<owner>:write`. The hash lives as long as its longest hold. Both sides share one channel;
//! a write release publishes `1` (Redisson clients wake all their waiters on it).

use std::sync::LazyLock;

use super::LuaScript;

/// Read acquire: free → mode `read`, this hold's first count; read mode, or write mode held by
/// the caller's own write hold (a writer may read) → one more. Each count gets its own key with
/// the lease, and the hash lives at least as long. While a waiting writer's mark lives, a hold
/// that does not read already (a live hold: one of its keys left), and whose waiter waited
/// behind no writer's hold, is refused.
/// Refused by a writer's hold, a reader that will wait marks its waiter (it goes before the
/// next writer). Returns nil when taken, else the hash's `PTTL` (or how long the writers' marks
/// last). A name in use as another kind → `DLOCK_WRONGKIND`, before anything is written.
///
/// An extend of a read hold no longer there, or a hold force-unlocked before → `DLOCK_GONE`.
///
/// KEYS[1] lock · KEYS[2] this hold's hold-key prefix · KEYS[3] fair time-outs of that name ·
/// KEYS[4] force-unlocked holds of that name · KEYS[5] the waiting writers' marks · KEYS[6] the
/// waiting readers' marks · ARGV[1] lease ms · ARGV[2] hold id · ARGV[3] the write field of the
/// caller's own write hold (empty if it has none) · ARGV[4] `1` for an extend · ARGV[5] waiter
/// id · ARGV[6] its mark's slot ms · ARGV[7] `1` if it will wait.
pub(crate) static READ_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "read acquire",
        "read_write/read_acquire",
        "preamble/kinds",
        "preamble/ended",
        "preamble/marks",
        "preamble/reads"
    )
});

/// Read release of this owner's whole share, with the unlock latch: not held → nil. Else its
/// field and hold keys go; if other holds remain, the hash lives as long as the longest of them
/// (a dead reader's share ends with its own lease), or stays while a writer holds it; if none
/// remain, the hash goes. The release is announced either way (waiters re-read the lease they
/// wait for). Returns 1.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] this owner's hold-key prefix · KEYS[4] hold-key
/// prefix of every owner · KEYS[5] latch · ARGV[1] message · ARGV[2] owner id · ARGV[3] latch ms.
pub(crate) static READ_RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| step!("read release", "read_write/read_release"));

/// Renewal of read holds, in a batch: for each (lock, hold-key prefix) still held by its owner,
/// every hold key of that owner that is left is extended to at least the lease (never
/// shortened), and the hash lives at least as long. Only the owner's own holds are extended:
/// another reader that died still runs out. The owner's share is there as long as one of its
/// hold keys is (the hash outlives the longest of them). Returns per pair 1 (renewed), 2 (held
/// by others only) or 0 (gone, or every one of its holds had already run out).
///
/// KEYS[2i-1] lock i · KEYS[2i] its owner's hold-key prefix · ARGV[1] lease ms ·
/// ARGV[i + 1] owner id of hold i.
pub(crate) static READ_RENEW: LazyLock<LuaScript> =
    LazyLock::new(|| step!("read renew", "read_write/read_renew"));

/// A snapshot of the read side: {someone reads, this hold reads, PTTL}.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · ARGV[1] hold id.
pub(crate) static READ_STATUS: LazyLock<LuaScript> =
    LazyLock::new(|| step!("read status", "read_write/read_status", "preamble/kinds"));

/// Force unlock of the read side (Redisson's): in read mode, delete the lock and announce it.
/// Returns 1 if it was read-locked.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] fair time-outs of that name · KEYS[4]
/// force-unlocked holds of that name · ARGV[1] message · ARGV[2] how long an ended hold is
/// remembered, in ms.
pub(crate) static READ_FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "read force unlock",
        "read_write/read_force_unlock",
        "preamble/kinds",
        "preamble/ended"
    )
});

/// Write acquire: free → mode `write`, this hold's write field; write mode held by this hold
/// → one more count, the hash living at least the lease. Returns nil when taken, else the
/// hash's `PTTL`. A name in use as another kind → `DLOCK_WRONGKIND`, before anything is
/// written. A free lock is not taken while a waiting reader's mark lives, nor while another
/// writer's mark lives that was first refused before this writer (`preamble/turns.lua`: the
/// writers take it in turn). A writer that will wait, refused, marks its waiter as waiting for
/// its slot, in its place if it has one, else after the others (the keys live as long as the
/// last mark); taken, its mark and place go.
///
/// An extend of a hold no longer there, or a hold force-unlocked before → `DLOCK_GONE`.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · KEYS[3] force-unlocked holds of that
/// name · KEYS[4] the waiting writers' marks · KEYS[5] the waiting readers' marks · KEYS[6] the
/// waiting writers' order · ARGV[1] lease ms · ARGV[2] the hold's write field · ARGV[3] `1` for
/// an extend · ARGV[4] waiter id · ARGV[5] its mark's slot ms · ARGV[6] `1` if it will wait.
pub(crate) static WRITE_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "write acquire",
        "read_write/write_acquire",
        "preamble/kinds",
        "preamble/ended",
        "preamble/marks",
        "preamble/turns"
    )
});

/// A waiting writer or reader gives up: its mark goes, and unless a writer holds the lock the
/// waiters it held off are woken. Returns 1 if it was marked.
///
/// KEYS[1] that side's marks · KEYS[2] lock · KEYS[3] channel · KEYS[4] (a writer's) the
/// writers' order · ARGV[1] waiter id · ARGV[2] message (`1`, every waiter).
pub(crate) static READ_WRITE_CANCEL: LazyLock<LuaScript> =
    LazyLock::new(|| step!("read-write cancel", "read_write/cancel"));

/// Write release of this owner's whole hold, with the unlock latch: not held → nil. Else the
/// write field goes; the hash goes too unless this owner still reads (then mode `read`: a
/// downgrade). Announced with `1`, so every waiter (readers may all come in) looks again.
/// Returns 1.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] latch · ARGV[1] message (`1`) · ARGV[2] the owner's
/// write field · ARGV[3] latch ms.
pub(crate) static WRITE_RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| step!("write release", "read_write/write_release"));

/// A snapshot of the write side: {someone writes, this hold writes, PTTL}.
///
/// KEYS[1] lock · KEYS[2] fair time-outs of that name · ARGV[1] the hold's write field.
pub(crate) static WRITE_STATUS: LazyLock<LuaScript> =
    LazyLock::new(|| step!("write status", "read_write/write_status", "preamble/kinds"));

/// Force unlock of the write side (Redisson's): in write mode, delete the lock and announce it
/// with `1`. Returns 1 if it was write-locked.
///
/// KEYS[1] lock · KEYS[2] channel · KEYS[3] fair time-outs of that name · KEYS[4]
/// force-unlocked holds of that name · ARGV[1] message (`1`) · ARGV[2] how long an ended hold
/// is remembered, in ms.
pub(crate) static WRITE_FORCE_UNLOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "write force unlock",
        "read_write/write_force_unlock",
        "preamble/kinds",
        "preamble/ended"
    )
});
