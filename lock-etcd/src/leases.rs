//! Which etcd lease each hold's key is bound to.
//!
//! A client's watchdog holds share one lease, its *session* (etcd's `concurrency.Session`):
//! the watchdog's renewal of all of them is one keep-alive. A hold on another lease (a fixed
//! lease, or one taken before the backend knew the client's watchdog lease) gets a lease of its
//! own, its lease rounded up to whole seconds, so it ends when its holder's lease does; the
//! first renewal moves such a hold onto the session. Leases are whole seconds on etcd: a
//! session's is the watchdog lease and a third more, rounded up, so that a hold taken between
//! two renewals is covered for a whole watchdog lease without a keep-alive of its own.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::OwnerId;
use dlock_core::LockError;
use parking_lot::Mutex;
use serde_json::json;

use crate::transport::{Resend, Transport};
use crate::wire::{int, Json};

/// A lease's whole seconds, rounded up (never down: the store keeps a hold at least as long
/// as its holder counts on).
pub(crate) fn whole_seconds(lease: Duration) -> i64 {
    let seconds = lease.as_secs() + u64::from(lease.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// A lease granted on etcd, and the earliest it can end (it is kept alive from then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) id: i64,
    pub(crate) ttl: i64,
    /// No earlier than this (a request's sent-at plus the lease's TTL).
    pub(crate) ends_after: Instant,
}

impl Granted {
    fn covers(&self, until: Instant) -> bool {
        self.ends_after >= until
    }

    /// Whether a renewal sent at `at` may count on this lease for `lease` without keeping it
    /// alive: it was granted or kept alive less than a watchdog tick (`lease / 3`) before, and
    /// already lasts past `at + lease`. A renewal soon after a keep-alive (a waiter's turn's
    /// first renewal) then costs no keep-alive of its own; the ticks keep theirs, so the
    /// session's cadence stays one keep-alive a tick.
    pub(crate) fn fresh_for(&self, at: Instant, lease: Duration) -> bool {
        let kept_at = self
            .ends_after
            .checked_sub(Duration::from_secs(self.ttl.max(0).unsigned_abs()));
        kept_at.is_some_and(|kept_at| at.saturating_duration_since(kept_at) < lease / 3)
            && self.covers(at + lease)
    }
}

/// Whose session a hold goes on: a client (the first part of its hold ids) and its watchdog
/// lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey {
    pub(crate) client: String,
    pub(crate) watchdog: Duration,
}

pub(crate) use crate::keys::client_of;

pub(crate) struct Leases {
    transport: Arc<Transport>,
    /// The watchdog leases clients of this backend use (configured, and learned from
    /// renewals).
    watchdog: Mutex<BTreeSet<Duration>>,
    sessions: Mutex<HashMap<SessionKey, Arc<Mutex<Option<Granted>>>>>,
    /// Leases that many keys share (tombstones, set-once answers), by the
    /// whole seconds each key needs: each used while it still lasts that long.
    shared: Mutex<HashMap<i64, Granted>>,
    /// A lease of its own granted for an attempt that did not take the lock, by TTL: the next
    /// attempt with that TTL uses it if it still lasts long enough.
    spares: Mutex<HashMap<i64, Granted>>,
    /// The earliest each lease this backend granted or kept alive ends.
    ends: Mutex<HashMap<i64, Instant>>,
    /// The lease of each client's record (see `client_records`), by client id.
    records: Mutex<HashMap<String, Granted>>,
    /// The lease read-write waiters' marks share (see [`mark_lease`](Self::mark_lease)).
    mark: Mutex<Option<Granted>>,
    /// The earliest each lease a waiter asked about ends, as etcd last told it (see
    /// [`remaining_for_waiter`](Self::remaining_for_waiter)).
    told: Mutex<HashMap<i64, Instant>>,
}

impl Leases {
    pub(crate) fn new(transport: Arc<Transport>, watchdog: Duration) -> Self {
        Leases {
            transport,
            watchdog: Mutex::new(BTreeSet::from([watchdog])),
            sessions: Mutex::new(HashMap::new()),
            shared: Mutex::new(HashMap::new()),
            ends: Mutex::new(HashMap::new()),
            spares: Mutex::new(HashMap::new()),
            records: Mutex::new(HashMap::new()),
            mark: Mutex::new(None),
            told: Mutex::new(HashMap::new()),
        }
    }

    /// Remembers `lease` as a watchdog lease (a renewal was asked for with it).
    pub(crate) fn learn_watchdog(&self, lease: Duration) {
        self.watchdog.lock().insert(lease);
    }

    /// The session a new hold of `owner` asking for `lease` goes on, if any.
    pub(crate) fn session_for(&self, owner: &OwnerId, lease: Duration) -> Option<SessionKey> {
        let client = client_of(owner)?;
        self.watchdog.lock().contains(&lease).then(|| SessionKey {
            client: client.to_owned(),
            watchdog: lease,
        })
    }

    /// A lease that lasts at least `lease` from now for a hold of `owner`: its client's session
    /// (kept alive first if it would end sooner) or a new lease of its own.
    pub(crate) fn lease_for(
        &self,
        owner: &OwnerId,
        lease: Duration,
    ) -> Result<(Granted, Option<SessionKey>), LockError> {
        match self.session_for(owner, lease) {
            Some(session) => {
                let granted = self.session(&session, lease)?;
                Ok((granted, Some(session)))
            }
            None => {
                let ttl = whole_seconds(lease);
                let spare = self.spares.lock().remove(&ttl);
                match spare {
                    Some(spare) if spare.covers(Instant::now() + lease) => Ok((spare, None)),
                    _ => Ok((self.grant(ttl)?, None)),
                }
            }
        }
    }

    /// The session `key`, alive for at least `needed` from now. One thread at a time grants
    /// it or keeps it alive; the others wait for it within the request timeout (a call that
    /// could not wait longer was not sent).
    pub(crate) fn session(&self, key: &SessionKey, needed: Duration) -> Result<Granted, LockError> {
        let slot = self.sessions.lock().entry(key.clone()).or_default().clone();
        let Some(mut slot) = slot.try_lock_for(self.transport.timeout) else {
            return Err(LockError::unavailable(
                format!(
                    "the client's etcd session was not made or kept alive within {:?}: \
                     another call is at it (not sent)",
                    self.transport.timeout
                ),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ));
        };
        let now = Instant::now();
        if let Some(granted) = *slot {
            if granted.covers(now + needed) {
                return Ok(granted);
            }
            if let Some(kept) = self.keep_alive(granted)? {
                *slot = Some(kept);
                if kept.covers(now + needed) {
                    return Ok(kept);
                }
            }
        }
        let granted = self.grant(session_ttl(key.watchdog))?;
        *slot = Some(granted);
        Ok(granted)
    }

    /// Forgets the session `key` (etcd no longer has it): the next hold gets a new one.
    pub(crate) fn forget_session(&self, key: &SessionKey) {
        if let Some(slot) = self.sessions.lock().get(key) {
            *slot.lock() = None;
        }
    }

    /// Keeps the session `key` alive now: its lease as kept, `None` if etcd no longer had it
    /// (every hold on it ended), or an error when etcd did not answer.
    pub(crate) fn refresh_session(&self, key: &SessionKey) -> Result<Option<Granted>, LockError> {
        let slot = self.sessions.lock().get(key).cloned();
        let Some(slot) = slot else {
            return Ok(None);
        };
        let mut slot = slot.lock();
        let Some(granted) = *slot else {
            return Ok(None);
        };
        let kept = self.keep_alive(granted)?;
        *slot = kept;
        Ok(kept)
    }

    /// The session `key` as last granted or kept alive.
    pub(crate) fn current_session(&self, key: &SessionKey) -> Option<Granted> {
        let slot = self.sessions.lock().get(key).cloned()?;
        let granted = *slot.lock();
        granted
    }

    /// Grants a new lease of `ttl` seconds.
    pub(crate) fn grant(&self, ttl: i64) -> Result<Granted, LockError> {
        let granted = grant_on(&self.transport, ttl)?;
        self.note_end(granted);
        Ok(granted)
    }

    fn note_end(&self, granted: Granted) {
        remember_end(&mut self.ends.lock(), granted.id, granted.ends_after);
    }

    /// The earliest `lease` ends, if this backend granted it or kept it alive.
    pub(crate) fn known_end(&self, lease: i64) -> Option<Instant> {
        self.ends.lock().get(&lease).copied()
    }

    /// One keep-alive of `lease`: its new end, or `None` if etcd no longer has it.
    pub(crate) fn keep_alive(&self, lease: Granted) -> Result<Option<Granted>, LockError> {
        let kept = keep_alive_on(&self.transport, lease)?;
        if let Some(kept) = kept {
            self.note_end(kept);
        }
        Ok(kept)
    }

    /// The keys bound to `lease` now (`None`: the lease is gone).
    pub(crate) fn keys_of(&self, lease: i64) -> Result<Option<Vec<Vec<u8>>>, LockError> {
        let answer = self
            .transport
            .call(
                "/v3/lease/timetolive",
                &Json::from(json!({ "ID": lease.to_string(), "keys": true })),
                Resend::Safe,
            )
            .map_err(LockError::from)?;
        if int(&answer["TTL"]) <= 0 {
            return Ok(None);
        }
        Ok(Some(
            answer["keys"]
                .as_array()
                .map(|keys| {
                    keys.iter()
                        .map(|k| crate::wire::unb64(k.as_str().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default(),
        ))
    }

    /// The time left on `lease`, as etcd counts it (whole seconds), if it still exists.
    pub(crate) fn remaining(&self, lease: i64) -> Result<Option<Duration>, LockError> {
        if lease == 0 {
            return Ok(None);
        }
        let answer = self
            .transport
            .call(
                "/v3/lease/timetolive",
                &Json::from(json!({ "ID": lease.to_string() })),
                Resend::Safe,
            )
            .map_err(LockError::from)?;
        let ttl = int(&answer["TTL"]);
        if ttl < 0 {
            return Ok(None);
        }
        // etcd tells whole seconds, cut down: what this backend knows of a lease it keeps (no
        // earlier than a request's sent-at plus its TTL) is closer.
        let told = Duration::from_secs(ttl.unsigned_abs());
        let known = self.known_end(lease).map_or(Duration::ZERO, |end| {
            end.saturating_duration_since(Instant::now())
        });
        Ok(Some(told.max(known)))
    }

    /// How long `lease` lasts at least, for a waiter refused by one of its keys: as
    /// [`remaining`](Self::remaining) says, with etcd asked at most once while its last answer
    /// holds. The answer only sets when the waiter tries again if nothing wakes it first (its
    /// watch wakes it when the key goes, by a release or by the lease's end): a lease kept
    /// alive since makes that try early, never late. Without it, every refusal by a holder of
    /// another client cost a round trip on the waiter's way to waiting.
    pub(crate) fn remaining_for_waiter(&self, lease: i64) -> Result<Option<Duration>, LockError> {
        let asked_at = Instant::now();
        let known = self.told.lock().get(&lease).copied();
        if let Some(end) = known.filter(|end| *end > asked_at) {
            return Ok(Some(end.saturating_duration_since(asked_at)));
        }
        let left = self.remaining(lease)?;
        if let Some(left) = left {
            remember_end(&mut self.told.lock(), lease, asked_at + left);
        }
        Ok(left)
    }

    /// A lease that lasts at least `keep` from now, shared by every key that needs as much
    /// (granted for twice `keep`, in whole seconds, and used while it still covers `keep`).
    pub(crate) fn shared(&self, keep: Duration) -> Result<Granted, LockError> {
        let seconds = whole_seconds(keep);
        let needed = Instant::now() + Duration::from_secs(seconds.unsigned_abs());
        if let Some(lease) = self.shared.lock().get(&seconds) {
            if lease.covers(needed) {
                return Ok(*lease);
            }
        }
        let lease = self.grant(seconds.saturating_mul(2))?;
        self.shared.lock().insert(seconds, lease);
        Ok(lease)
    }

    /// A lease for read-write waiters' marks of `slot`: it lasts at least `slot` from now, and
    /// no more than a second beyond, so a mark whose waiter died holds the other side off for
    /// at most that. Shared by the marks of this backend while it lasts that long (each waiter
    /// marks itself again within half a slot), so a mark goes in the refusal's own
    /// transaction without a grant of its own, as a rule.
    pub(crate) fn mark_lease(&self, slot: Duration) -> Result<Granted, LockError> {
        if let Some(lease) = self.kept_mark_lease(slot) {
            return Ok(lease);
        }
        let lease = self.grant(whole_seconds(slot).saturating_add(1))?;
        *self.mark.lock() = Some(lease);
        Ok(lease)
    }

    /// The marks' lease if one is kept that lasts `slot` more (see
    /// [`mark_lease`](Self::mark_lease)): none is granted for a try that may not wait.
    pub(crate) fn kept_mark_lease(&self, slot: Duration) -> Option<Granted> {
        let needed = Instant::now() + Duration::from_secs(whole_seconds(slot).unsigned_abs());
        self.mark.lock().filter(|lease| lease.covers(needed))
    }

    /// Forgets the marks' lease (etcd no longer has it).
    pub(crate) fn forget_mark_lease(&self, lease: i64) {
        let mut mark = self.mark.lock();
        if mark.is_some_and(|kept| kept.id == lease) {
            *mark = None;
        }
    }

    /// Keeps `lease`, which no hold uses, for the next attempt of its TTL; the one it replaces
    /// runs out by itself.
    pub(crate) fn spare(&self, lease: Granted) {
        let mut spares = self.spares.lock();
        let keep = spares
            .get(&lease.ttl)
            .is_none_or(|kept| kept.ends_after < lease.ends_after);
        if keep {
            spares.insert(lease.ttl, lease);
        }
    }

    /// The lease of `client`'s record, kept alive now for `ttl` (its whole seconds), or granted
    /// if it has none or etcd no longer has it.
    pub(crate) fn record_lease(&self, client: &str, ttl: Duration) -> Result<Granted, LockError> {
        let known = self.records.lock().get(client).copied();
        let lease = match known {
            Some(lease) if lease.ttl == whole_seconds(ttl) => match self.keep_alive(lease)? {
                Some(kept) => kept,
                None => self.grant(whole_seconds(ttl))?,
            },
            _ => self.grant(whole_seconds(ttl))?,
        };
        self.records.lock().insert(client.to_owned(), lease);
        Ok(lease)
    }

    /// Forgets the lease of `client`'s record (etcd no longer has it).
    pub(crate) fn forget_record_lease(&self, client: &str) {
        self.records.lock().remove(client);
    }

    /// Revokes a lease no hold uses any more, best effort (it would run out by itself).
    pub(crate) fn revoke(&self, lease: i64) {
        self.ends.lock().remove(&lease);
        revoke_on(&self.transport, lease);
    }
}

/// Grants a new lease of `ttl` seconds on `transport`'s etcd.
pub(crate) fn grant_on(transport: &Transport, ttl: i64) -> Result<Granted, LockError> {
    let sent_at = Instant::now();
    let answer = transport
        .call(
            "/v3/lease/grant",
            &Json::from(json!({ "TTL": ttl.to_string() })),
            Resend::Safe,
        )
        .map_err(LockError::from)?;
    let id = int(&answer["ID"]);
    let granted_ttl = int(&answer["TTL"]);
    if id == 0 || granted_ttl <= 0 {
        return Err(LockError::protocol(format!(
            "etcd granted no lease: {}",
            answer["error"].as_str().unwrap_or("no ID in its answer")
        )));
    }
    Ok(Granted {
        id,
        ttl: granted_ttl,
        ends_after: sent_at + Duration::from_secs(granted_ttl.unsigned_abs()),
    })
}

/// One keep-alive of `lease` on `transport`'s etcd: its new end, or `None` if etcd no longer
/// has it.
pub(crate) fn keep_alive_on(
    transport: &Transport,
    lease: Granted,
) -> Result<Option<Granted>, LockError> {
    let sent_at = Instant::now();
    let answer = transport
        .call(
            "/v3/lease/keepalive",
            &Json::from(json!({ "ID": lease.id.to_string() })),
            Resend::Safe,
        )
        .map_err(LockError::from)?;
    let ttl = int(&answer["result"]["TTL"]);
    if ttl <= 0 {
        return Ok(None);
    }
    Ok(Some(Granted {
        id: lease.id,
        ttl,
        ends_after: sent_at + Duration::from_secs(ttl.unsigned_abs()),
    }))
}

/// Revokes `lease` on `transport`'s etcd, best effort (it would run out by itself).
pub(crate) fn revoke_on(transport: &Transport, lease: i64) {
    let _ = transport.call(
        "/v3/lease/revoke",
        &Json::from(json!({ "ID": lease.to_string() })),
        Resend::Safe,
    );
}

/// A session's TTL for clients renewing every third of `watchdog`: the watchdog lease and a
/// third more, in whole seconds.
pub(crate) fn session_ttl(watchdog: Duration) -> i64 {
    whole_seconds(watchdog + watchdog / 3)
}

/// Notes that `lease` ends at `end` in `ends`, first dropping the ends already past whenever the
/// map has grown to another power of two from 4,096 (what it keeps is what is still to come).
fn remember_end(ends: &mut HashMap<i64, Instant>, lease: i64, end: Instant) {
    if ends.len() >= 4096 && ends.len().is_power_of_two() {
        let now = Instant::now();
        ends.retain(|_, end| *end > now);
    }
    ends.insert(lease, end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
        assert_eq!(session_ttl(Duration::from_secs(30)), 40);
        assert_eq!(session_ttl(Duration::from_secs(6)), 8);
    }

    #[test]
    fn hold_ids_name_their_client() {
        assert_eq!(client_of(&OwnerId::from_raw("abc:12")), Some("abc"));
        assert_eq!(client_of(&OwnerId::from_raw("abc:owned-3")), Some("abc"));
        assert_eq!(client_of(&OwnerId::from_raw("0123abcd")), None);
    }
}
