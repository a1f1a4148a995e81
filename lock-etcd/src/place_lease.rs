//! The lease fair waiters' places share: short, and kept alive by a thread of this backend
//! while a place on it is still wanted, so a waiter whose process died holds the queue up for
//! the lease's few seconds, not for its queue slot (the fair wait timeout, minutes).
//!
//! A place is wanted for its queue slot after each attempt of its waiter (which comes back
//! within half a slot). One its waiter neither kept nor gave up within its slot (a waiter that
//! stopped coming back while its process lives), or whose removal failed, is no longer wanted:
//! the keeper deletes it, as its waiter last wrote it. Only if that fails too is the lease let
//! run out, and the places of live waiters on it with it (their watches wake them to queue
//! again, on a new lease). Nothing here grants a lock: a place is a turn, and the waiter's take
//! in turn is what holds.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_core::LockError;
use parking_lot::{Condvar, Mutex};

use crate::leases::{grant_on, keep_alive_on, revoke_on, Granted};
use crate::transport::{Resend, Transport};
use crate::wire::{delete, modified_at, txn, value_is, Span};

/// The places' lease TTL, in etcd's whole seconds: how long a dead waiter's place outlives it.
pub(crate) const PLACE_TTL: i64 = 3;

/// How often the lease is kept alive: three times a TTL, so one keep-alive lost or late does
/// not let a live waiter's place go.
const KEEP_EVERY: Duration = Duration::from_secs(1);

/// A place (a waiter id and its name's prefix), as [`Places`](crate::steps::fair::Places)
/// knows it.
pub(crate) type PlaceId = (String, Vec<u8>);

pub(crate) struct PlaceLease {
    shared: Arc<Shared>,
}

struct Shared {
    transport: Arc<Transport>,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// The lease new places go on, as last granted or kept alive.
    current: Option<Granted>,
    /// Each wanted place.
    wanted: HashMap<PlaceId, Wanted>,
    /// Leases let run out: a place on them may be unwanted.
    abandoned: HashSet<i64>,
    keeper: bool,
    stopped: bool,
}

impl State {
    /// The lease kept now, for places to go on: with room for the keeper's next keep-alive (a
    /// kept lease has two to three seconds left; a new keeper's first comes one round after it
    /// starts), and not let run out.
    fn kept(&self, now: Instant) -> Option<Granted> {
        self.current
            .filter(|lease| lease.ends_after > now + KEEP_EVERY)
            .filter(|lease| !self.abandoned.contains(&lease.id))
    }
}

/// A place its waiter wants kept.
struct Wanted {
    /// The lease it was last put on.
    lease: i64,
    /// Until when: its waiter comes back before then, or is taken for dead.
    until: Instant,
    /// Its key, and the revision of its waiter's last write of it, once known.
    key: Vec<u8>,
    written: Option<i64>,
}

impl PlaceLease {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        PlaceLease {
            shared: Arc::new(Shared {
                transport,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// The lease to put `place` (its key `key`) on, wanted for `slot` from now (granted if
    /// none is kept).
    pub(crate) fn lease_for(
        &self,
        place: PlaceId,
        key: &[u8],
        slot: Duration,
    ) -> Result<Granted, LockError> {
        if let Some(lease) = self.place_on(&place, key, slot, None)? {
            return Ok(lease);
        }
        let granted = grant_on(&self.shared.transport, PLACE_TTL)?;
        // Another thread's grant may have come first: its lease is used (one at a time), and
        // this one runs out with nothing on it.
        let placed = self.place_on(&place, key, slot, Some(granted))?;
        Ok(placed.unwrap_or(granted))
    }

    /// The lease to put `place` (its key `key`) on, wanted for `slot` from now, if one is kept
    /// now: `None` where [`lease_for`](Self::lease_for) would grant one first.
    pub(crate) fn kept_lease_for(
        &self,
        place: PlaceId,
        key: &[u8],
        slot: Duration,
    ) -> Result<Option<Granted>, LockError> {
        self.place_on(&place, key, slot, None)
    }

    /// `place` was written at `revision` (the put `lease_for` was asked for landed).
    pub(crate) fn written(&self, place: &PlaceId, revision: i64) {
        if let Some(wanted) = self.shared.state.lock().wanted.get_mut(place) {
            wanted.written = Some(revision);
        }
    }

    /// Notes `place` as wanted on the lease kept, or else on `granted` (then the lease kept);
    /// `None` if there is neither.
    fn place_on(
        &self,
        place: &PlaceId,
        key: &[u8],
        slot: Duration,
        granted: Option<Granted>,
    ) -> Result<Option<Granted>, LockError> {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        let Some(lease) = state.kept(now).or(granted) else {
            return Ok(None);
        };
        state.current = Some(lease);
        state.wanted.insert(
            place.clone(),
            Wanted {
                lease: lease.id,
                until: now + slot,
                key: key.to_vec(),
                written: None,
            },
        );
        if !state.keeper {
            let shared = self.shared.clone();
            thread::Builder::new()
                .name("dlock-etcd-places".into())
                .spawn(move || shared.keep())
                .map_err(|error| {
                    LockError::thread_spawn("the keeper of fair waiters' places", error)
                })?;
            state.keeper = true;
        }
        Ok(Some(lease))
    }

    /// Keeps `place` (its key `key`) wanted for `slot` more with no write, if it is on the store
    /// as its waiter last wrote it (at `written`) on the lease kept now, with room for the
    /// keeper's next keep-alive: what a put of it would do. False if it must be put again.
    pub(crate) fn still_wanted(
        &self,
        place: &PlaceId,
        key: &[u8],
        written: i64,
        slot: Duration,
    ) -> bool {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        let Some(current) = state.kept(now) else {
            return false;
        };
        let Some(wanted) = state.wanted.get_mut(place) else {
            return false;
        };
        if wanted.key != key || wanted.written != Some(written) || wanted.lease != current.id {
            return false;
        }
        wanted.until = now + slot;
        true
    }

    /// The lease `place` (its key `key`, written at `written`) is on, and until when the place
    /// is sure to stay: while this backend keeps that lease alive and wants the place (the
    /// keeper deletes a place no longer wanted), if that is more than `at_least` from now. The
    /// place is its waiter's hold (its turn came) until then, and is wanted no longer: a place
    /// whose hold's id was not written into it by then is deleted.
    pub(crate) fn turn(
        &self,
        place: &PlaceId,
        key: &[u8],
        written: i64,
        at_least: Duration,
    ) -> Option<(Granted, Instant)> {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        let current = state
            .current
            .filter(|current| !state.abandoned.contains(&current.id))?;
        let wanted = state.wanted.get_mut(place)?;
        if wanted.key != key || wanted.written != Some(written) || wanted.lease != current.id {
            return None;
        }
        let until = wanted.until.min(current.ends_after);
        if until <= now + at_least {
            return None;
        }
        wanted.until = until;
        Some((current, until))
    }

    /// The place `place` at `key`, which its waiter's turn made a hold of, is wanted no longer:
    /// the hold's id is written into it, or it was released. A place its waiter has made since
    /// (at its other key) stays wanted.
    pub(crate) fn let_go(&self, place: &PlaceId, key: &[u8]) {
        let mut state = self.shared.state.lock();
        if state
            .wanted
            .get(place)
            .is_some_and(|wanted| wanted.key == key)
        {
            state.wanted.remove(place);
        }
    }

    /// A write of a place on `lease` whose outcome is unknown: a copy held up in the network
    /// may land after its waiter took its turn and let go, or gave up, when nothing deletes
    /// it. The lease is let run out, and every place on it with it (their waiters' watches wake
    /// them to queue again, on a new lease), so such a place outlives its write by the lease's
    /// few seconds at most.
    pub(crate) fn write_unknown(&self, lease: i64) {
        self.shared.state.lock().abandon(lease);
    }

    /// `place` is no longer a place: taken (a hold now) or removed.
    pub(crate) fn release(&self, place: &PlaceId) {
        self.shared.state.lock().wanted.remove(place);
    }

    /// `place` is no longer wanted, and may still be on the store (its removal failed): the
    /// keeper deletes it at its next round (or lets its lease run out).
    pub(crate) fn abandon(&self, place: &PlaceId) {
        if let Some(wanted) = self.shared.state.lock().wanted.get_mut(place) {
            wanted.until = Instant::now();
        }
    }
}

impl State {
    fn abandon(&mut self, lease: i64) {
        self.abandoned.insert(lease);
        if self.current.is_some_and(|current| current.id == lease) {
            self.current = None;
        }
    }
}

impl Shared {
    /// The keeper: keeps alive the leases of the wanted places, until none is left.
    fn keep(&self) {
        let mut kept: HashMap<i64, Granted> = HashMap::new();
        loop {
            {
                // A lease new to the keeper lasts at least this long (see `lease_for`).
                let mut state = self.state.lock();
                if !state.stopped {
                    self.changed.wait_for(&mut state, KEEP_EVERY);
                }
            }
            let to_keep: Vec<i64> = {
                let mut state = self.state.lock();
                if state.stopped {
                    break;
                }
                let now = Instant::now();
                let stale: Vec<PlaceId> = state
                    .wanted
                    .iter()
                    .filter(|(_, wanted)| wanted.until <= now)
                    .map(|(place, _)| place.clone())
                    .collect();
                let stale: Vec<Wanted> = stale
                    .iter()
                    .filter_map(|place| state.wanted.remove(place))
                    .collect();
                if !stale.is_empty() {
                    drop(state);
                    for place in stale {
                        if !self.remove(&place) {
                            self.state.lock().abandon(place.lease);
                        }
                    }
                    state = self.state.lock();
                }
                let in_use: HashSet<i64> =
                    state.wanted.values().map(|wanted| wanted.lease).collect();
                state.abandoned.retain(|lease| in_use.contains(lease));
                let to_keep: Vec<i64> = in_use
                    .into_iter()
                    .filter(|lease| !state.abandoned.contains(lease))
                    .collect();
                if to_keep.is_empty() {
                    // Nothing to keep: the lease runs out by itself, and a new place gets a
                    // new one (and a new keeper).
                    state.current = None;
                    state.keeper = false;
                    return;
                }
                to_keep
            };
            kept.retain(|lease, _| to_keep.contains(lease));
            for id in to_keep {
                let lease = kept.get(&id).copied().unwrap_or(Granted {
                    id,
                    ttl: PLACE_TTL,
                    ends_after: Instant::now(),
                });
                match keep_alive_on(&self.transport, lease) {
                    Ok(Some(lease)) => {
                        kept.insert(id, lease);
                        let mut state = self.state.lock();
                        if state.current.is_some_and(|current| current.id == id) {
                            state.current = Some(lease);
                        }
                    }
                    // Gone (ran out, revoked): its places went with it, and their waiters'
                    // watches wake them to queue again, on a new lease.
                    Ok(None) => {
                        kept.remove(&id);
                        self.state.lock().abandon(id);
                    }
                    // Not answered: tried again next round, while the lease may still last.
                    Err(_) => {}
                }
            }
        }
        // The backend is gone, and its waiters with it: their places go now.
        let leases: HashSet<i64> = self
            .state
            .lock()
            .wanted
            .values()
            .map(|wanted| wanted.lease)
            .collect();
        for lease in leases {
            revoke_on(&self.transport, lease);
        }
    }
}

impl Shared {
    /// Deletes a place no longer wanted if it is still as its waiter last wrote it (a waiter
    /// that came back since wrote it again, or took its turn); whether it is gone.
    fn remove(&self, place: &Wanted) -> bool {
        let Some(written) = place.written else {
            return false;
        };
        let request = txn(
            vec![modified_at(&place.key, written), value_is(&place.key, b"")],
            vec![delete(&Span::key(&place.key))],
            Vec::new(),
        );
        // A copy sent again after a lost answer compares the same revision: it deletes
        // nothing written since.
        self.transport
            .call("/v3/kv/txn", &request, Resend::Safe)
            .is_ok()
    }
}

impl Drop for PlaceLease {
    fn drop(&mut self) {
        self.shared.state.lock().stopped = true;
        self.shared.changed.notify_all();
    }
}
