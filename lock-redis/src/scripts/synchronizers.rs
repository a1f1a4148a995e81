//! The synchronizers: the semaphore with leased permits (Redisson's
//! `RPermitExpirableSemaphore`), the count-down latch (Redisson's `RCountDownLatch`) and the
//! leader election (dlock's own layout).
//!
//! The semaphore's layout is Redisson's: the available permits in a string at `<name>`, the
//! permits held in a sorted set `{<name>}:timeout` (permit id → lease end, epoch ms), releases
//! announced on `redisson_sc:{<name>}` with the permits available. A permit id is 16 bytes,
//! stored as they are (Redisson's); dlock passes it as 32 hex digits and the scripts turn it
//! into the bytes. Lease ends are the server's time (`TIME`); Redisson's clients write their
//! own wall clock, as its fair lock does.
//!
//! The latch is Redisson's: the count in a string at `<name>`, gone once it reaches zero,
//! announced on `redisson_countdownlatch__channel__{<name>}` (`0` when it reaches zero, `1`
//! when a count is set).
//!
//! Both keep a number at the name, so dlock marks which it is with `dlock_kind:{<name>}`
//! (`semaphore` or `latch`), written with the number and gone with it: a name counted as one
//! is refused as the other. Counts are returned as the strings Redis keeps (a Lua number is a
//! double, exact only up to 2^53); a count Redis cannot keep (`INCRBY` past 2^63 − 1) is
//! refused with `DLOCK_INVALID`.
//!
//! An election is a hash at `<name>`, marked `mode` = `election`, whose other field is the
//! leader's hold id, valued with its candidate id, with the leadership's lease; its token
//! counter `dlock_election_token:{<name>}`; its channel `dlock_election_channel:{<name>}`. Its
//! release, renewal, status and force unlock are the exclusive lock's scripts on that hash.

use std::sync::LazyLock;

use super::LuaScript;

/// A permit acquire: a name in use as another kind → `DLOCK_WRONGKIND`; give back expired
/// permits; the same permit again (a retried request) → its lease extended (never shortened),
/// nil; a permit available → take it with its lease, nil; else how long until the soonest
/// permit lease ends (-1 if none does).
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// ARGV[1] lease ms · ARGV[2] permit id.
pub(crate) static SEMAPHORE_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "permit acquire",
        "synchronizers/semaphore_acquire",
        "preamble/kinds",
        "preamble/clock"
    )
});

/// A permit release, with the unlock latch: a latch left by an earlier attempt → its result.
/// The permit not held → nil. Else it goes back: the permits available go up by one and are
/// announced; nil if its lease had ended already (it is given back all the same), else 1. A
/// permit's id is its own, so the step acts on that permit alone, whenever it arrives.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// KEYS[6] latch · ARGV[1] permit id · ARGV[2] latch ms.
pub(crate) static SEMAPHORE_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "permit release",
        "synchronizers/semaphore_release",
        "preamble/clock"
    )
});

/// A permit release that hands the permit to a waiter of the same client, with the unlock
/// latch: the permit held and live → it becomes the successor's permit with its lease, none
/// comes free, nobody is woken, 2. Not held → nil; its lease ended → given back as by the
/// release, nil.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// KEYS[6] latch · ARGV[1] permit id · ARGV[2] latch ms · ARGV[3] successor's permit id ·
/// ARGV[4] successor's lease ms.
pub(crate) static SEMAPHORE_HAND_OVER: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "permit hand-over",
        "synchronizers/semaphore_hand_over",
        "preamble/clock"
    )
});

/// The watchdog's batch renewal of permits: for each permit still held and live, its lease is
/// extended to at least the one given (never shortened); 1. Gone, or its lease ended → 0 (it is
/// given back by the next step that finds it).
///
/// KEYS[i] held permits of semaphore i · ARGV[1] lease ms · ARGV[i + 1] permit id i.
pub(crate) static SEMAPHORE_RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "permit renew",
        "synchronizers/semaphore_renew",
        "preamble/clock"
    )
});

/// A snapshot of a semaphore for one permit: {some permit held, this permit held, its
/// remaining lease (or the soonest one's), -2 if none}; a name in use as another kind →
/// `DLOCK_WRONGKIND`.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · ARGV[1] permit
/// id.
pub(crate) static SEMAPHORE_STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "permit status",
        "synchronizers/semaphore_status",
        "preamble/kinds",
        "preamble/clock"
    )
});

/// Sets the permits if they were never set (Redisson's `trySetPermits`), marking the name a
/// semaphore: 1 if it did.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel · ARGV[1]
/// permits.
pub(crate) static SEMAPHORE_TRY_SET: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "set permits",
        "synchronizers/semaphore_try_set",
        "preamble/kinds"
    )
});

/// Adds permits (Redisson's `addPermits`), announcing them, marking the name a semaphore,
/// expired ones given back first; the permits available after, as Redis keeps the number.
/// More than Redis can count → `DLOCK_INVALID`, nothing changed.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel ·
/// ARGV[1] permits.
pub(crate) static SEMAPHORE_ADD: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "add permits",
        "synchronizers/semaphore_add",
        "preamble/kinds",
        "preamble/clock"
    )
});

/// The permits available now, expired ones given back first (Redisson's
/// `availablePermits`), as Redis keeps the number.
///
/// KEYS[1] available · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] held · KEYS[5] channel.
pub(crate) static SEMAPHORE_AVAILABLE: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "available permits",
        "synchronizers/semaphore_available",
        "preamble/kinds",
        "preamble/clock"
    )
});

/// Whether the latch is open: count missing or at most zero → nil (taken), else -1 (held, no
/// lease known); a name in use as another kind → `DLOCK_WRONGKIND`.
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark.
pub(crate) static LATCH_OPEN: LazyLock<LuaScript> =
    LazyLock::new(|| step!("latch open", "synchronizers/latch_open", "preamble/kinds"));

/// Redisson's `trySetCount`: no count → set it, mark the name a latch, and announce `1`; 1 if
/// it did.
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel · ARGV[1] count.
pub(crate) static LATCH_TRY_SET: LazyLock<LuaScript> =
    LazyLock::new(|| step!("set count", "synchronizers/latch_try_set", "preamble/kinds"));

/// Redisson's `countDown`: one down; at zero or below the count (and its mark) goes, and
/// reaching zero is announced with `0`. The count after, as Redis keeps it (`0` at least). A
/// latch that is open already stays so.
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark · KEYS[4] channel.
pub(crate) static LATCH_COUNT_DOWN: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "count down",
        "synchronizers/latch_count_down",
        "preamble/kinds"
    )
});

/// The latch's count, as Redis keeps it (`0` when it has none).
///
/// KEYS[1] count · KEYS[2] fair time-outs · KEYS[3] mark.
pub(crate) static LATCH_COUNT: LazyLock<LuaScript> =
    LazyLock::new(|| step!("count", "synchronizers/latch_count", "preamble/kinds"));

/// A campaign: a name in use as another kind → `DLOCK_WRONGKIND`. No leader → this hold leads
/// with its candidate id and the lease (the hash marked `mode` = `election`), takes the next
/// token (as the fenced lock's: the counter + 1, or the server's clock in µs if higher), and
/// the new leader is announced; `{-1, token}`. Already this hold's → its lease extended (never
/// shortened); `{-1, token}`. Another leader → `{PTTL, -1}`.
///
/// An extend of a leadership no longer there, or one force-unlocked before → `DLOCK_GONE`.
///
/// KEYS[1] election · KEYS[2] token counter · KEYS[3] channel · KEYS[4] fair time-outs of that
/// name · KEYS[5] force-unlocked holds of that name · ARGV[1] lease ms · ARGV[2] hold id ·
/// ARGV[3] candidate id · ARGV[4] `1` for an extend.
pub(crate) static ELECTION_CAMPAIGN: LazyLock<LuaScript> = LazyLock::new(|| {
    step!(
        "campaign",
        "synchronizers/election_campaign",
        "preamble/kinds",
        "preamble/tokens",
        "preamble/ended"
    )
});

/// The leader: `{candidate id, token, PTTL}`, or nil when nobody leads; a name in use as
/// another kind → `DLOCK_WRONGKIND`.
///
/// KEYS[1] election · KEYS[2] token counter · KEYS[3] fair time-outs of that name.
pub(crate) static ELECTION_LEADER: LazyLock<LuaScript> =
    LazyLock::new(|| step!("leader", "synchronizers/election_leader", "preamble/kinds"));
