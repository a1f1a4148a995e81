//! The in-process backend: a sharded map of lock states with real leases.

use rustc_hash::{FxHashMap as HashMap, FxHasher};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{
    instant_after, Acquire, AcquireRequest, Clock, DistributedLock, HoldRef, LockRef, LockStatus,
    LossReason, OwnerId, Release, ReleaseSubscription, Renewal, Signal, SystemClock,
};
use lock_core::{LockError, LockKind};
use parking_lot::Mutex;

/// Independent shards, so threads working on different names rarely share a mutex.
const SHARDS: usize = 32;

/// An in-process lock store with the same semantics as a networked one: leases expire,
/// releases wake subscribers, renewals only extend holds that are still there.
///
/// Clones share the same locks, so several [`LockClient`](lock_core::LockClient)s on clones of
/// one backend behave like several processes on one Redis. With a
/// [`ManualClock`](crate::ManualClock), time (and so every expiry and timed-out wait) moves only
/// when the test says.
///
/// # Examples
///
/// ```
/// use dlock::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let service_a = LockClient::new(backend.clone());
/// let service_b = LockClient::new(backend);
/// let held = service_a.lock("invoice:7").lock()?;
/// assert!(service_b.lock("invoice:7").try_lock()?.is_none()); // excluded across clients
/// drop(held);
/// assert!(service_b.lock("invoice:7").try_lock()?.is_some());
/// # Ok::<(), dlock::LockError>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    locks: HashMap<String, LockEntry>,
    /// Size at which expired entries are next swept out.
    sweep_at: usize,
}

#[derive(Default)]
struct LockEntry {
    holder: Option<Holder>,
    /// The last holder whose hold ended other than by its own release, and how: what a
    /// renewal by that owner reports.
    ended: Option<(OwnerId, LossReason)>,
    signal: Arc<Signal>,
    subscribers: usize,
}

struct Holder {
    owner: OwnerId,
    count: u32,
    expires_at: Instant,
}

impl LockEntry {
    /// The holder whose lease has not run out at `now`.
    fn live_holder(&mut self, now: Instant) -> Option<&mut Holder> {
        if self.holder.as_ref().is_some_and(|h| h.expires_at <= now) {
            if let Some(holder) = self.holder.take() {
                self.ended = Some((holder.owner, LossReason::Expired));
            }
        }
        self.holder.as_mut()
    }

    /// Why `owner`, who does not hold the lock now, lost it.
    fn loss_of(&mut self, owner: &OwnerId, now: Instant) -> LossReason {
        if self.live_holder(now).is_some() {
            return LossReason::TakenOver;
        }
        match &self.ended {
            Some((ended, reason)) if ended == owner => *reason,
            _ => LossReason::Gone,
        }
    }

    fn is_idle(&self, now: Instant) -> bool {
        self.subscribers == 0 && self.holder.as_ref().is_none_or(|h| h.expires_at <= now)
    }
}

impl MemoryBackend {
    /// A backend on the system's monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }

    /// A backend on `clock`, usually a [`ManualClock`](crate::ManualClock) in tests.
    pub fn with_clock(clock: impl Clock) -> Self {
        MemoryBackend {
            inner: Arc::new(Inner {
                clock: Arc::new(clock),
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            }),
        }
    }

    /// How many names currently have state (a holder or subscribers). Released and expired
    /// locks do not count: this returns to 0 when everything is released.
    pub fn len(&self) -> usize {
        let now = self.inner.clock.now();
        self.inner
            .shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .locks
                    .values()
                    .filter(|e| !e.is_idle(now))
                    .count()
            })
            .sum()
    }

    /// Whether no name has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The owner holding `name` now, if any (for tests that check who holds what).
    pub fn holder(&self, name: &str) -> Option<OwnerId> {
        self.inner.with_entry(name, |entry, now| {
            entry.live_holder(now).map(|holder| holder.owner.clone())
        })
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn shard(&self, name: &str) -> &Mutex<Shard> {
        let mut hasher = FxHasher::default();
        name.hash(&mut hasher);
        // The high bits are the best mixed.
        &self.shards[((hasher.finish() >> 32) as usize) % self.shards.len()]
    }

    /// Runs `f` on `name`'s entry (made if missing); idle entries are swept out as the shard
    /// grows, so memory stays proportional to the locks in use.
    fn with_entry<R>(&self, name: &str, f: impl FnOnce(&mut LockEntry, Instant) -> R) -> R {
        let now = self.clock.now();
        let mut shard = self.shard(name).lock();
        let result;
        let idle;
        // Look up by `&str` first: the key is only allocated for a new entry. An entry that
        // becomes idle stays for reuse until the next sweep.
        if let Some(entry) = shard.locks.get_mut(name) {
            result = f(entry, now);
            idle = entry.is_idle(now);
        } else {
            let mut entry = LockEntry::default();
            result = f(&mut entry, now);
            idle = entry.is_idle(now);
            if !idle {
                shard.locks.insert(name.to_owned(), entry);
            }
        }
        if !idle && shard.locks.len() >= shard.sweep_at {
            shard.locks.retain(|_, entry| !entry.is_idle(now));
            shard.sweep_at = (shard.locks.len() * 2).max(64);
        }
        result
    }
}

fn remaining(expires_at: Instant, now: Instant) -> Duration {
    expires_at.saturating_duration_since(now)
}

impl DistributedLock for MemoryBackend {
    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Reentrant
    }

    fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
        check_kind(request.lock)?;
        let owner = request.owner;
        Ok(self.inner.with_entry(request.lock.name, |entry, now| {
            let expires_at = instant_after(now, request.lease);
            match entry.live_holder(now) {
                None => {
                    entry.holder = Some(Holder {
                        owner: owner.clone(),
                        count: 1,
                        expires_at,
                    });
                    Acquire::Acquired
                }
                Some(holder) if holder.owner == *owner => {
                    holder.count += 1;
                    holder.expires_at = expires_at;
                    Acquire::Acquired
                }
                Some(holder) => Acquire::Held {
                    remaining_lease: Some(remaining(holder.expires_at, now)),
                },
            }
        }))
    }

    fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
        check_kind(lock)?;
        Ok(self
            .inner
            .with_entry(lock.name, |entry, now| match entry.live_holder(now) {
                Some(holder) if holder.owner == *owner => {
                    entry.holder = None;
                    entry.signal.notify();
                    Release::Released
                }
                _ => Release::NotHeld,
            }))
    }

    fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
        holds.iter().try_for_each(|hold| check_kind(hold.lock))?;
        Ok(holds
            .iter()
            .map(|hold| {
                self.inner
                    .with_entry(hold.lock.name, |entry, now| match entry.live_holder(now) {
                        Some(holder) if holder.owner == *hold.owner => {
                            holder.expires_at = instant_after(now, lease);
                            Renewal::Renewed
                        }
                        _ => Renewal::Lost(entry.loss_of(hold.owner, now)),
                    })
            })
            .collect())
    }

    fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
        check_kind(lock)?;
        Ok(self
            .inner
            .with_entry(lock.name, |entry, now| match entry.live_holder(now) {
                Some(holder) => LockStatus::held(
                    holder.owner == *owner,
                    Some(remaining(holder.expires_at, now)),
                ),
                None => LockStatus::FREE,
            }))
    }

    fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
        check_kind(lock)?;
        Ok(self.inner.with_entry(lock.name, |entry, now| {
            let held = entry.live_holder(now).is_some();
            if let Some(holder) = entry.holder.take() {
                entry.ended = Some((holder.owner, LossReason::ForceUnlocked));
            }
            if held {
                entry.signal.notify();
            }
            held
        }))
    }

    fn subscribe(
        &self,
        lock: LockRef<'_>,
        _owner: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        check_kind(lock)?;
        let signal = self.inner.with_entry(lock.name, |entry, _| {
            entry.subscribers += 1;
            entry.signal.clone()
        });
        Ok(Box::new(MemorySubscription {
            backend: self.inner.clone(),
            name: lock.name.to_owned(),
            signal,
        }))
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }
}

/// The client only sends the kinds a backend supports; anything else is a caller's mistake.
fn check_kind(lock: LockRef<'_>) -> Result<(), LockError> {
    match lock.kind {
        LockKind::Reentrant => Ok(()),
        kind => Err(LockError::Unsupported {
            name: lock.name.to_owned(),
            kind,
        }),
    }
}

/// Interest in one name's releases; dropping it lets the entry go once idle.
struct MemorySubscription {
    backend: Arc<Inner>,
    name: String,
    signal: Arc<Signal>,
}

impl ReleaseSubscription for MemorySubscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

impl Drop for MemorySubscription {
    fn drop(&mut self) {
        self.backend.with_entry(&self.name, |entry, _| {
            entry.subscribers = entry.subscribers.saturating_sub(1);
        });
    }
}
