//! A thread's hold on one lock: its reentrancy count and what is known of its lease.

use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::contract::kind::{LockKind, Target};
use crate::contract::lease::{ClockDrift, Lease};
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;
use crate::engine::metrics::{HoldMeter, LockLabels};

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseMode {
    /// Renewed by the client's watchdog until released.
    Watchdog,
    /// Fixed when acquired, never renewed.
    Fixed(Duration),
}

/// One thread's hold on one lock, shared by its guards and the watchdog.
///
/// The reentrancy count lives here, not on the backend: a reentrant acquire while the lease is
/// known valid costs no round trip. The backend sees one hold per owner.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) id: u64,
    pub(crate) target: Target,
    pub(crate) owner: OwnerId,
    /// Guards (and leaked holds) not yet released. Changed only by the owning thread (or, for
    /// a hold of its own, by the thread that has its guard).
    count: AtomicU32,
    /// Set once the lease is known to be lost; never cleared.
    lost: Mutex<Option<LossReason>>,
    lost_flag: AtomicBool,
    /// Set once the last hold was released; the watchdog drops it then.
    released: AtomicBool,
    lease: Mutex<LeaseState>,
    /// The client's clock drift allowance, kept from every deadline.
    drift: ClockDrift,
    /// The fencing token the store issued with this hold, for kinds that issue one.
    fencing_token: AtomicU64,
    /// A hold of its own (an owned guard, a permit, a leadership): in no thread's table, never
    /// re-entered, released by whichever thread has its guard.
    owned: bool,
    /// The hold's report in the client's metrics.
    meter: HoldMeter,
    /// When it was taken, on the wall clock: what the client's record says of it.
    since: SystemTime,
}

/// "No token", in a hold's token field.
const NO_TOKEN: u64 = 0;

#[derive(Debug, Clone, Copy)]
struct LeaseState {
    mode: LeaseMode,
    /// The latest instant the backend is known to keep the lease until: the latest
    /// [`Lease::deadline`] of the steps that set or extended it. Stores never shorten a lease,
    /// so a later step can only move it later.
    deadline: Instant,
    /// A step that would have extended this hold failed or was taken back: the store still has
    /// the lease this deadline stands for, but the hold is not re-entered locally again until
    /// the store has confirmed it (an acquire or a renewal that reaches it).
    unconfirmed: bool,
}

impl Hold {
    pub(crate) fn new(
        target: Target,
        owner: OwnerId,
        mode: LeaseMode,
        lease: Lease,
        drift: ClockDrift,
        owned: bool,
        labels: LockLabels,
    ) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Hold {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            target,
            owner,
            count: AtomicU32::new(1),
            lost: Mutex::new(None),
            lost_flag: AtomicBool::new(false),
            released: AtomicBool::new(false),
            lease: Mutex::new(LeaseState {
                mode,
                deadline: lease.deadline(drift),
                unconfirmed: false,
            }),
            drift,
            fencing_token: AtomicU64::new(NO_TOKEN),
            owned,
            meter: HoldMeter::start(labels),
            since: SystemTime::now(),
        }
    }

    /// Whether this is a hold of its own, in no thread's table.
    pub(crate) fn is_owned(&self) -> bool {
        self.owned
    }

    /// Records the fencing token the store issued (tokens start at 1).
    pub(crate) fn set_fencing_token(&self, token: Option<u64>) {
        self.fencing_token
            .store(token.unwrap_or(NO_TOKEN), Ordering::Release);
    }

    /// The fencing token of this hold, if its kind issues one.
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        match self.fencing_token.load(Ordering::Acquire) {
            NO_TOKEN => None,
            token => Some(token),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.target.name
    }

    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn increment(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// Drops one level of reentrancy; returns the levels left.
    pub(crate) fn decrement(&self) -> u32 {
        let previous = self.count.load(Ordering::Acquire);
        let left = previous.saturating_sub(1);
        self.count.store(left, Ordering::Release);
        left
    }

    /// Records the loss; returns true the first time (the caller then reports it).
    pub(crate) fn mark_lost(&self, reason: LossReason) -> bool {
        let mut lost = self.lost.lock();
        if lost.is_some() {
            return false;
        }
        *lost = Some(reason);
        self.lost_flag.store(true, Ordering::Release);
        self.meter.lost(reason);
        true
    }

    /// How the lease was lost: recorded, or its deadline passed at `now`.
    pub(crate) fn loss(&self, now: Instant) -> Option<LossReason> {
        if self.lost_flag.load(Ordering::Acquire) {
            return *self.lost.lock();
        }
        (now >= self.deadline()).then_some(LossReason::Expired)
    }

    /// The loss recorded so far, if any (a deadline that passed unnoticed is not one).
    pub(crate) fn loss_recorded(&self) -> Option<LossReason> {
        if self.lost_flag.load(Ordering::Acquire) {
            return *self.lost.lock();
        }
        None
    }

    /// When the hold was taken, on the wall clock.
    pub(crate) fn since(&self) -> SystemTime {
        self.since
    }

    pub(crate) fn mark_released(&self) {
        self.released.store(true, Ordering::Release);
        self.meter.released();
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    pub(crate) fn mode(&self) -> LeaseMode {
        self.lease.lock().mode
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.lease.lock().deadline
    }

    /// Records a step the store confirmed (a re-entering acquire, a renewal) that set `lease`.
    /// The deadline only moves later: the store never shortens a lease.
    pub(crate) fn extend(&self, mode: LeaseMode, lease: Lease) {
        let deadline = lease.deadline(self.drift);
        let mut state = self.lease.lock();
        state.mode = mode;
        state.unconfirmed = false;
        if deadline > state.deadline {
            state.deadline = deadline;
        }
    }

    /// As [`extend`](Hold::extend), for a renewal answered at `now`: only while the hold is not
    /// lost and its deadline has not passed. A hold whose deadline passed has told its guards
    /// (`is_lost`) and maybe its events: it stays lost, whatever a late answer says. Returns
    /// whether it extended.
    pub(crate) fn extend_if_live(&self, mode: LeaseMode, lease: Lease, now: Instant) -> bool {
        let deadline = lease.deadline(self.drift);
        let mut state = self.lease.lock();
        if self.lost_flag.load(Ordering::Acquire) || now >= state.deadline {
            return false;
        }
        state.mode = mode;
        state.unconfirmed = false;
        if deadline > state.deadline {
            state.deadline = deadline;
        }
        true
    }

    /// A step that would have extended this hold failed or was taken back: it keeps its
    /// deadline, but is not re-entered locally again until the store confirms it.
    pub(crate) fn mark_unconfirmed(&self) {
        self.lease.lock().unconfirmed = true;
    }

    /// Lost: marked so, or the lease deadline has passed without a renewal.
    pub(crate) fn is_lost(&self, now: Instant) -> bool {
        self.lost_flag.load(Ordering::Acquire) || now >= self.deadline()
    }

    /// Whether an acquire asking for `mode` is already covered by this hold at `now`, so it
    /// can be re-entered without asking the store.
    pub(crate) fn covers(&self, mode: LeaseMode, now: Instant) -> bool {
        if self.lost_flag.load(Ordering::Acquire) {
            return false;
        }
        let lease = *self.lease.lock();
        if now >= lease.deadline || lease.unconfirmed {
            return false;
        }
        match (lease.mode, mode) {
            (LeaseMode::Watchdog, _) => true,
            (LeaseMode::Fixed(_), LeaseMode::Watchdog) => false,
            (LeaseMode::Fixed(_), LeaseMode::Fixed(wanted)) => now
                .checked_add(wanted)
                .is_some_and(|end| end <= lease.deadline),
        }
    }
}

/// One client's holds on this thread, by lock name (one per kind held under that name).
type HoldsByName = HashMap<Arc<str>, Vec<Arc<Hold>>>;

thread_local! {
    /// This thread's holds: client key → lock name → holds.
    static HOLDS: RefCell<HashMap<u64, HoldsByName>> = RefCell::new(HashMap::default());
}

/// What `f` makes of the calling thread's holds on `name` within client `client_key` (none
/// when the thread's table is gone, during its teardown).
fn on_name<T>(client_key: u64, name: &str, f: impl Fn(&[Arc<Hold>]) -> T) -> T {
    HOLDS
        .try_with(|holds| {
            let holds = holds.borrow();
            let held = holds.get(&client_key).and_then(|by_name| by_name.get(name));
            f(held.map_or(&[][..], |held| &held[..]))
        })
        .unwrap_or_else(|_| f(&[]))
}

/// The calling thread's hold on `name` of `kind` within client `client_key`, if any.
pub(crate) fn find(client_key: u64, name: &str, kind: LockKind) -> Option<Arc<Hold>> {
    on_name(client_key, name, |held| {
        held.iter().find(|h| h.target.kind == kind).cloned()
    })
}

/// The calling thread's holds on `name` within client `client_key` of kinds other than `kind`.
pub(crate) fn find_other_kinds(client_key: u64, name: &str, kind: LockKind) -> Vec<Arc<Hold>> {
    on_name(client_key, name, |held| {
        held.iter()
            .filter(|h| h.target.kind != kind)
            .cloned()
            .collect()
    })
}

/// Records `hold` as the calling thread's hold on its lock.
pub(crate) fn insert(client_key: u64, hold: Arc<Hold>) {
    // During thread teardown the table is gone; the hold then lives only in its guards.
    let _ = HOLDS.try_with(|holds| {
        let mut holds = holds.borrow_mut();
        if !holds.contains_key(&client_key) {
            // A client this thread has not used before: tables other clients left empty are
            // dropped now, so a thread that meets many clients over its life keeps at most one
            // empty table (the most recent client's, reused by its next acquire).
            holds.retain(|_, by_name| !by_name.is_empty());
        }
        let held = holds
            .entry(client_key)
            .or_default()
            .entry(hold.target.name.clone())
            .or_default();
        held.retain(|h| h.target.kind != hold.target.kind);
        held.push(hold);
    });
}

/// Forgets `hold` if it is still the calling thread's hold on its lock; returns whether it was.
pub(crate) fn remove(client_key: u64, hold: &Arc<Hold>) -> bool {
    HOLDS
        .try_with(|holds| {
            let mut holds = holds.borrow_mut();
            let Some(by_name) = holds.get_mut(&client_key) else {
                return false;
            };
            let Some(held) = by_name.get_mut(hold.name()) else {
                return false;
            };
            let Some(at) = held.iter().position(|h| Arc::ptr_eq(h, hold)) else {
                return false;
            };
            held.swap_remove(at);
            if held.is_empty() {
                // The emptied client table is kept: the next acquire on this thread reuses it.
                by_name.remove(hold.name());
            }
            true
        })
        .unwrap_or(false)
}

/// How many hold ids of acquires with an unknown outcome a thread remembers.
const UNKNOWN_KEPT: usize = 16;

/// An acquire whose outcome is unknown: client key, lock name and kind, hold id.
type UnknownAcquire = (u64, Arc<str>, LockKind, OwnerId);

thread_local! {
    /// Hold ids of this thread's acquires whose outcome is unknown (the call failed after it
    /// may have reached the store), newest last.
    static UNKNOWN: RefCell<Vec<UnknownAcquire>> = const { RefCell::new(Vec::new()) };
}

/// Remembers that an acquire of `target` as the hold `owner` failed with an unknown outcome:
/// the store may keep that hold (it may even make it later, when the request arrives). The
/// thread's next acquire of the lock asks as the same hold, so it re-enters it instead of
/// waiting for it to run out.
pub(crate) fn remember_unknown(client_key: u64, target: &Target, owner: &OwnerId) {
    let _ = UNKNOWN.try_with(|unknown| {
        let mut unknown = unknown.borrow_mut();
        unknown.retain(|(key, name, kind, _)| {
            !(*key == client_key && *name == target.name && *kind == target.kind)
        });
        if unknown.len() >= UNKNOWN_KEPT {
            unknown.remove(0);
        }
        unknown.push((client_key, target.name.clone(), target.kind, owner.clone()));
    });
}

/// The hold id of the thread's last acquire of `name` as `kind` whose outcome is unknown, if
/// any (forgotten now).
pub(crate) fn take_unknown(client_key: u64, name: &str, kind: LockKind) -> Option<OwnerId> {
    UNKNOWN
        .try_with(|unknown| {
            let mut unknown = unknown.borrow_mut();
            let at = unknown.iter().position(|(key, held, held_kind, _)| {
                *key == client_key && &**held == name && *held_kind == kind
            })?;
            Some(unknown.remove(at).3)
        })
        .ok()
        .flatten()
}

/// How many clients' tables this thread keeps (for tests of the table's bound).
#[cfg(test)]
pub(crate) fn tables() -> usize {
    HOLDS.with(|holds| holds.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(name: &str) -> Arc<Hold> {
        Arc::new(Hold::new(
            Target::new(name.into(), LockKind::Reentrant),
            OwnerId::from_raw("c:1"),
            LeaseMode::Watchdog,
            Lease::new(Instant::now(), Duration::from_secs(10)),
            ClockDrift::DEFAULT,
            false,
            LockLabels::new(LockKind::Reentrant, name, None),
        ))
    }

    #[test]
    fn a_thread_keeps_at_most_one_empty_table_whatever_the_clients_it_meets() {
        std::thread::spawn(|| {
            for client in 0..1000 {
                let h = hold("x");
                insert(client, h.clone());
                assert!(find(client, "x", LockKind::Reentrant).is_some());
                assert!(remove(client, &h));
            }
            assert_eq!(tables(), 1);
            // A live hold's table is never dropped.
            let kept = hold("kept");
            insert(5000, kept.clone());
            insert(5001, hold("y"));
            assert!(find(5000, "kept", LockKind::Reentrant).is_some());
        })
        .join()
        .expect("thread");
    }
}
