//! What a backend remembers of the holds it made: each hold's key, the lease it is on, the
//! revision it was written at (its fencing token), and its deadline.
//!
//! The store is the truth about which holds exist (a hold is its key, identified by the hold id:
//! the key's value for a key a client's holds share, the key itself for the others), and every
//! step can ask it. What only the backend knows is *until when* each hold's holder counts on it:
//! etcd keeps a hold as long as its lease, whole seconds and ended by a lessor that looks every
//! half second, or as long as a session other holds keep alive. Past its deadline a hold is over
//! for this backend: every step that meets its key deletes it (in the step's own transaction)
//! and answers as if etcd had ended it, so a hold ends when its holder's lease does, not up to a
//! second and a half later. etcd's lease remains the end for other processes, and for a backend
//! that died.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dlock_core::backend::{LockRef, OwnerId};
use dlock_core::LockKind;
use parking_lot::{Condvar, Mutex};

use crate::leases::{Granted, SessionKey};
use crate::place_lease::PlaceId;

/// Identifies a hold: the name, its kind (a fenced hold is a reentrant one) and the hold id.
pub(crate) type HoldId = (String, LockKind, OwnerId);

pub(crate) fn hold_id(lock: LockRef<'_>, owner: &OwnerId) -> HoldId {
    let kind = match lock.kind {
        LockKind::Fenced => LockKind::Reentrant,
        kind => kind,
    };
    (lock.name.to_owned(), kind, owner.clone())
}

/// What the backend remembers of a hold it made (or may have made).
#[derive(Debug, Clone)]
pub(crate) struct HoldRecord {
    pub(crate) key: Vec<u8>,
    /// The revision of the write that made the hold (its key's create revision, or the revision
    /// at which it took over a key of an ended hold of its own): its fencing token. `None`: the
    /// step that would make it failed with an unknown outcome; it may be on the store, or arrive
    /// there later.
    pub(crate) made_at: Option<i64>,
    /// The revision of this backend's last write of the key for the hold: while the key's mod
    /// revision is no later, it is the hold's as this backend left it. `None`: a write of it
    /// failed with an unknown outcome; the key is asked about when next met.
    pub(crate) written: Option<i64>,
    pub(crate) lease: Granted,
    /// The session the lease is, if it is one.
    pub(crate) session: Option<SessionKey>,
    /// Until when its holder counts on it: the deadline of the last step that kept it and was
    /// answered (or that the store shows landed while the hold lasted).
    pub(crate) deadline: Instant,
    /// A write of unknown outcome that would have kept it longer or moved its key onto another
    /// lease (an extend, a renewal's move), or taken its key over once it was over: until the
    /// store shows it landed, the hold counts as it was.
    pub(crate) pending_move: Option<PendingMove>,
    /// A fair waiter's place that became the first key under the name (its turn, seen on the
    /// name's watch): the hold is that key, empty and on the places' lease, until its first
    /// renewal writes the hold's id into it and moves it onto the session. Which waiter's
    /// place, for the places' keeper to let it go then.
    pub(crate) turn_of: Option<PlaceId>,
}

/// What a write of unknown outcome asked for a hold, applied once the store shows it landed.
#[derive(Debug, Clone)]
pub(crate) struct PendingMove {
    /// The key's mod revision before it (this backend's last write of the key): a later one,
    /// with the hold's value, is that write.
    pub(crate) from: i64,
    pub(crate) lease: Granted,
    pub(crate) session: Option<SessionKey>,
    pub(crate) deadline: Instant,
    /// Whether the write makes a new hold over the key of this over one (a take, its key
    /// written over), rather than keeping a live one longer: landed, whenever it did, the hold
    /// is the new one, counted on to the write's own deadline.
    pub(crate) anew: bool,
}

impl HoldRecord {
    /// Whether the lease it is on is its own (not a session, nor the places' lease): revoked
    /// when the hold ends.
    pub(crate) fn owns_lease(&self) -> bool {
        self.session.is_none() && self.turn_of.is_none()
    }

    /// Whether its holder no longer counts on it at `now`.
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        self.deadline <= now
    }
}

/// The holds of one backend, by name.
#[derive(Default)]
pub(crate) struct Holds {
    names: Mutex<Names>,
    /// Notified when an attempt that was making a key finishes.
    finished: Condvar,
}

#[derive(Default)]
struct Names {
    holds: HashMap<String, HashMap<(LockKind, OwnerId), HoldRecord>>,
    /// Which hold each recorded key is (a client's key serves its holds one after another).
    by_key: HashMap<Vec<u8>, HoldId>,
    /// The attempts making a hold at each key, from before their request until the hold is
    /// recorded (or the attempt failed).
    creating: HashMap<Vec<u8>, InFlight>,
    /// Records since the last sweep of long-ended ones.
    added: usize,
}

/// The attempts in flight at one key: `started - finished` of them.
struct InFlight {
    epoch: u64,
    started: u64,
    finished: u64,
}

/// How long a record is kept after its hold's deadline and lease are over, for a late answer
/// about it to find it (then it is forgotten).
const KEPT_AFTER: Duration = Duration::from_secs(60);

impl Holds {
    /// Remembers hold `id`. A hold recorded before at the same key ended (its key was written
    /// again), and is forgotten; unless this one's making had an unknown outcome: until the
    /// store shows it made, the key may still be the earlier hold's, which stays recorded (to
    /// be released, or deleted once over, by this backend: nobody else can).
    pub(crate) fn record(&self, id: HoldId, record: HoldRecord) {
        let mut names = self.names.lock();
        names.added += 1;
        if names.added >= 4096 {
            names.added = 0;
            names.forget_long_ended(Instant::now());
        }
        let earlier = names.by_key.get(&record.key).cloned();
        match earlier {
            Some(earlier) if earlier != id && record.written.is_none() && names.has(&earlier) => {}
            _ => {
                names.by_key.insert(record.key.clone(), id.clone());
                if let Some(earlier) = earlier.filter(|earlier| *earlier != id) {
                    names.remove(&earlier);
                }
            }
        }
        let (name, kind, owner) = id;
        names
            .holds
            .entry(name)
            .or_default()
            .insert((kind, owner), record);
    }

    pub(crate) fn lookup(&self, id: &HoldId) -> Option<HoldRecord> {
        let names = self.names.lock();
        names.holds.get(&id.0)?.get(&(id.1, id.2.clone())).cloned()
    }

    /// The hold recorded at `key`, and its record.
    pub(crate) fn holder_of_key(&self, key: &[u8]) -> Option<(HoldId, HoldRecord)> {
        let names = self.names.lock();
        let id = names.by_key.get(key)?.clone();
        let record = names.holds.get(&id.0)?.get(&(id.1, id.2.clone()))?.clone();
        Some((id, record))
    }

    /// Every hold recorded under `name`.
    pub(crate) fn of_name(&self, name: &str) -> Vec<(HoldId, HoldRecord)> {
        let names = self.names.lock();
        names.holds.get(name).map_or_else(Vec::new, |holds| {
            holds
                .iter()
                .map(|((kind, owner), record)| {
                    ((name.to_owned(), *kind, owner.clone()), record.clone())
                })
                .collect()
        })
    }

    /// Every hold on the session `session` whose deadline has passed.
    pub(crate) fn over_on(&self, session: &SessionKey, now: Instant) -> Vec<(HoldId, HoldRecord)> {
        let names = self.names.lock();
        names
            .holds
            .iter()
            .flat_map(|(name, holds)| {
                holds
                    .iter()
                    .filter(move |(_, record)| {
                        record.session.as_ref() == Some(session) && record.is_over(now)
                    })
                    .map(move |((kind, owner), record)| {
                        ((name.clone(), *kind, owner.clone()), record.clone())
                    })
            })
            .collect()
    }

    pub(crate) fn forget(&self, id: &HoldId) -> Option<HoldRecord> {
        self.names.lock().remove(id)
    }

    /// Forgets `id` only if it is still recorded as `record` had it (made at the same revision):
    /// a later record of the same hold (made again meanwhile) stays.
    pub(crate) fn forget_if(&self, id: &HoldId, record: &HoldRecord) {
        let mut names = self.names.lock();
        let same = names
            .holds
            .get(&id.0)
            .and_then(|holds| holds.get(&(id.1, id.2.clone())))
            .is_some_and(|now| now.made_at == record.made_at && now.key == record.key);
        if same {
            names.remove(id);
        }
    }

    /// Marks `key` as being made by a hold of this backend until the guard is dropped (after
    /// the hold is recorded): a renewal that finds the key then cannot tell whose it is.
    pub(crate) fn creating(&self, key: &[u8]) -> Creating<'_> {
        static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut names = self.names.lock();
        let flight = names
            .creating
            .entry(key.to_vec())
            .or_insert_with(|| InFlight {
                epoch: EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                started: 0,
                finished: 0,
            });
        flight.started += 1;
        Creating {
            holds: self,
            key: key.to_vec(),
        }
    }

    /// Returns once every attempt that was making a hold at `key` when called has finished
    /// (its hold recorded, or failed), or after `limit`; later attempts are not waited for.
    pub(crate) fn settle(&self, key: &[u8], limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut names = self.names.lock();
        let Some((epoch, target)) = names.creating.get(key).map(|f| (f.epoch, f.started)) else {
            return;
        };
        loop {
            match names.creating.get(key) {
                Some(flight) if flight.epoch == epoch && flight.finished < target => {}
                _ => return,
            }
            if self.finished.wait_until(&mut names, deadline).timed_out() {
                return;
            }
        }
    }
}

impl Names {
    fn has(&self, (name, kind, owner): &HoldId) -> bool {
        self.holds
            .get(name)
            .is_some_and(|holds| holds.contains_key(&(*kind, owner.clone())))
    }

    fn remove(&mut self, id: &HoldId) -> Option<HoldRecord> {
        let holds = self.holds.get_mut(&id.0)?;
        let record = holds.remove(&(id.1, id.2.clone()))?;
        if holds.is_empty() {
            self.holds.remove(&id.0);
        }
        if self.by_key.get(&record.key) == Some(id) {
            self.by_key.remove(&record.key);
        }
        Some(record)
    }

    /// Forgets holds whose deadline and lease are long over (they ended without a step of this
    /// backend meeting them).
    fn forget_long_ended(&mut self, now: Instant) {
        for holds in self.holds.values_mut() {
            holds.retain(|_, r| r.deadline.max(r.lease.ends_after) + KEPT_AFTER > now);
        }
        self.holds.retain(|_, holds| !holds.is_empty());
        let holds = &self.holds;
        self.by_key.retain(|_, (name, kind, owner)| {
            holds
                .get(name)
                .is_some_and(|h| h.contains_key(&(*kind, owner.clone())))
        });
    }
}

/// A key being made (see [`Holds::creating`]).
pub(crate) struct Creating<'a> {
    holds: &'a Holds,
    key: Vec<u8>,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        let mut names = self.holds.names.lock();
        if let Some(flight) = names.creating.get_mut(&self.key) {
            flight.finished += 1;
            if flight.finished == flight.started {
                names.creating.remove(&self.key);
            }
        }
        self.holds.finished.notify_all();
    }
}
