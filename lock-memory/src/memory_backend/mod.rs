//! The in-process backend: a sharded map of lock states with real leases.

use rustc_hash::{FxHashMap as HashMap, FxHasher};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::{Clock, OwnerId, SystemClock};
use parking_lot::Mutex;

mod acquire;
mod entry;
mod marks;
mod steps;
mod subscription;

use entry::LockEntry;

/// Independent shards, so threads working on different names rarely share a mutex.
const SHARDS: usize = 32;

/// An in-process lock store with the same semantics as a networked one: leases expire,
/// releases wake subscribers, renewals only extend holds that are still there.
///
/// Clones share the same locks, so several [`LockClient`](dlock_core::LockClient)s on clones of
/// one backend behave like several processes on one Redis. With a
/// [`ManualClock`](crate::ManualClock), time (and so every expiry and timed-out wait) moves only
/// when the test says.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let service_a = LockClient::new(backend.clone());
/// let service_b = LockClient::new(backend);
/// let held = service_a.lock("invoice:7").lock()?;
/// assert!(service_b.lock("invoice:7").try_lock()?.is_none()); // excluded across clients
/// drop(held);
/// assert!(service_b.lock("invoice:7").try_lock()?.is_some());
/// # Ok::<(), dlocks::LockError>(())
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
    /// How many entries this shard has made: the next one's number.
    entries_made: u64,
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
                let mut shard = shard.lock();
                shard
                    .locks
                    .values_mut()
                    .map(|e| !e.is_idle(now))
                    .filter(|busy| *busy)
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

    /// Reads `name`'s entry with `f`, if it has one (none is made, nothing is swept).
    fn read_entry<R>(&self, name: &str, f: impl FnOnce(&LockEntry) -> R) -> Option<R> {
        self.shard(name).lock().locks.get(name).map(f)
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
            entry.serial = shard.entries_made;
            shard.entries_made += 1;
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
