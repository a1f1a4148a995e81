//! A handle on one named lock: acquire, inspect, force-unlock.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Acquire, LockStatus, Release};
use crate::client::ClientInner;
use crate::guard::LockGuard;
use crate::hold::{self, Hold, LeaseMode};
use crate::owner::OwnerId;
use crate::{instant_after, validate_lease, validate_name, validate_wait, LockError};

/// A handle on the lock called [`name`](Lock::name), from [`LockClient::lock`](crate::LockClient::lock).
///
/// Cheap to clone, `Send` and `Sync`: share it between threads or make a new one from the
/// client each time. Holding is per thread: each acquire returns a [`LockGuard`] that releases
/// its hold when dropped, and a thread that already holds the lock re-enters it at once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlock::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let orders = client.lock("orders:42");
/// {
///     let outer = orders.lock()?;          // renewed by the watchdog until dropped
///     let inner = orders.lock()?;          // reentrant on the same thread
///     assert_eq!(orders.hold_count()?, 2);
/// }                                        // both released
/// let fixed = orders.lock_with_lease(Duration::from_secs(10))?; // expires on its own
/// fixed.unlock()?;
/// assert!(orders.try_lock_for(Duration::from_millis(5))?.is_some());
/// # Ok::<(), dlock::LockError>(())
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Arc<ClientInner>,
    name: Arc<str>,
}

impl Lock {
    pub(crate) fn new(client: Arc<ClientInner>, name: Arc<str>) -> Self {
        Lock { client, name }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock, waiting as long as it takes. The lease is the client's watchdog lease,
    /// renewed until the guard is dropped.
    pub fn lock(&self) -> Result<LockGuard, LockError> {
        self.acquire(None, LeaseMode::Watchdog)
            .and_then(|guard| guard.ok_or_else(|| unreachable_timeout(&self.name)))
    }

    /// Takes the lock if it is free (or already held by this thread); never waits.
    pub fn try_lock(&self) -> Result<Option<LockGuard>, LockError> {
        self.acquire(Some(Duration::ZERO), LeaseMode::Watchdog)
    }

    /// Takes the lock, waiting at most `wait`; `Ok(None)` if it stayed held that long.
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>, LockError> {
        self.acquire(Some(wait), LeaseMode::Watchdog)
    }

    /// Takes the lock with a fixed `lease`, waiting as long as it takes. The lease is not
    /// renewed: the lock frees itself `lease` after it was taken unless released before.
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard, LockError> {
        validate_lease("lease", lease)?;
        self.acquire(None, LeaseMode::Fixed(lease))
            .and_then(|guard| guard.ok_or_else(|| unreachable_timeout(&self.name)))
    }

    /// Takes the lock with a fixed `lease`, waiting at most `wait` (Redisson's
    /// `tryLock(wait, lease)`); `Ok(None)` if it stayed held that long.
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>, LockError> {
        validate_lease("lease", lease)?;
        self.acquire(Some(wait), LeaseMode::Fixed(lease))
    }

    /// Releases one hold of the calling thread whose guard was given up with
    /// [`LockGuard::leak`]. Fails with [`LockError::NotHeld`] if this thread holds nothing here,
    /// leaving the lock untouched.
    pub fn unlock(&self) -> Result<(), LockError> {
        validate_name(&self.name)?;
        match hold::find(self.client.key, &self.name) {
            Some(hold) if hold.count() > 0 => self.release_one(&hold),
            _ => Err(LockError::NotHeld {
                name: self.name.to_string(),
            }),
        }
    }

    /// Whether any owner holds the lock now (one backend call).
    pub fn is_locked(&self) -> Result<bool, LockError> {
        Ok(self.status()?.locked)
    }

    /// Whether the calling thread holds the lock now. Asks the backend when this thread has a
    /// hold, so a lease lost behind its back is seen (and its guards marked lost).
    pub fn is_held_by_current_thread(&self) -> Result<bool, LockError> {
        validate_name(&self.name)?;
        let Some(hold) = hold::find(self.client.key, &self.name) else {
            return Ok(false);
        };
        if hold.is_lost(self.client.clock.now()) {
            return Ok(false);
        }
        let held = self
            .client
            .backend
            .status(&self.name, &hold.owner)?
            .held_by_owner;
        if !held {
            hold.mark_lost();
        }
        Ok(held)
    }

    /// How many times the calling thread holds the lock (0 if it does not).
    pub fn hold_count(&self) -> Result<u32, LockError> {
        if self.is_held_by_current_thread()? {
            Ok(hold::find(self.client.key, &self.name).map_or(0, |hold| hold.count()))
        } else {
            Ok(0)
        }
    }

    /// The holder's remaining lease as the backend sees it; `None` when the lock is free.
    pub fn remaining_lease(&self) -> Result<Option<Duration>, LockError> {
        Ok(self.status()?.remaining_lease)
    }

    /// Frees the lock whoever holds it, and wakes its waiters. Returns whether it was held.
    /// The holder's guards find out at their next renewal or release (`is_lost`, `LeaseLost`).
    pub fn force_unlock(&self) -> Result<bool, LockError> {
        validate_name(&self.name)?;
        self.client.backend.force_unlock(&self.name)
    }

    fn status(&self) -> Result<LockStatus, LockError> {
        validate_name(&self.name)?;
        let owner = self.owner();
        self.client.backend.status(&self.name, &owner)
    }

    fn owner(&self) -> OwnerId {
        OwnerId::current_thread(&self.client.id)
    }

    pub(crate) fn client(&self) -> &ClientInner {
        &self.client
    }

    /// The algorithm behind every acquire: re-enter locally when this thread's lease covers
    /// the request; else try the backend once; else join the client's queue for this name and,
    /// once at its head, subscribe to releases and retry each time one is announced or the
    /// holder's lease runs out, until `wait` has passed.
    fn acquire(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
    ) -> Result<Option<LockGuard>, LockError> {
        validate_name(&self.name)?;
        if let Some(wait) = wait {
            validate_wait(wait)?;
        }
        let clock = &self.client.clock;
        let start = clock.now();
        let deadline = wait.map(|wait| start + wait);

        // This thread's current hold, if its lease is still valid but does not cover the
        // request (a longer fixed lease, or the watchdog): the backend extends it below.
        let mut extending = None;
        if let Some(hold) = hold::find(self.client.key, &self.name) {
            if hold.covers(mode, start) {
                hold.increment();
                return Ok(Some(LockGuard::new(self, hold)));
            }
            if hold.is_lost(start) {
                // The old guards stay lost; this acquire starts a new hold.
                self.abandon(&hold);
            } else {
                extending = Some(hold);
            }
        }

        let _settle = Settle(&**clock);
        let owner = self.owner();
        let backend = &*self.client.backend;
        let lease = self.lease_of(mode);

        // The first try goes straight to the backend: uncontended, that is the only call.
        let sent_at = clock.now();
        if let Acquire::Acquired = backend.try_acquire(&self.name, &owner, lease)? {
            return self.held(extending, owner, mode, sent_at).map(Some);
        }
        if let Some(hold) = extending.take() {
            // Another owner has it: the hold this thread believed valid is gone.
            self.abandon(&hold);
        }
        if deadline.is_some_and(|deadline| clock.now() >= deadline) {
            return Ok(None);
        }

        // Contended: line up behind this client's other waiters on the same name.
        let ticket = self.client.wait_queues.join(&self.name);
        loop {
            if !ticket.is_head() {
                let seen = ticket.turn().generation();
                if ticket.is_head() {
                    continue;
                }
                if deadline.is_some_and(|deadline| clock.now() >= deadline) {
                    // Still behind another waiter of this client, which gets the lock first
                    // when it frees: giving up costs no backend call, so a thousand waiters
                    // timing out together do not flood the backend.
                    return Ok(None);
                }
                clock.wait(ticket.turn(), seen, deadline);
                continue;
            }
            // At the head: subscribed before each retry, so a release between the retry and
            // the wait is caught by the signal.
            let signal = ticket.release_signal(backend)?;
            let seen = signal.generation();
            let sent_at = clock.now();
            let remaining = match backend.try_acquire(&self.name, &owner, lease)? {
                Acquire::Acquired => return self.held(None, owner, mode, sent_at).map(Some),
                Acquire::Held { remaining_lease } => remaining_lease,
            };
            let now = clock.now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Ok(None);
            }
            // Without a release message, wake when the holder's lease runs out; a holder with
            // no expiry is re-checked once per watchdog lease in case a message was lost.
            let cap = instant_after(now, remaining.unwrap_or(self.client.watchdog_lease));
            let wake_at = deadline.map_or(cap, |deadline| deadline.min(cap));
            clock.wait(&signal, seen, Some(wake_at));
        }
    }

    fn lease_of(&self, mode: LeaseMode) -> Duration {
        match mode {
            LeaseMode::Watchdog => self.client.watchdog_lease,
            LeaseMode::Fixed(lease) => lease,
        }
    }

    /// Records a successful backend acquire sent at `sent_at` as this thread's hold.
    fn held(
        &self,
        extending: Option<Arc<Hold>>,
        owner: OwnerId,
        mode: LeaseMode,
        sent_at: Instant,
    ) -> Result<LockGuard, LockError> {
        let deadline = sent_at + self.lease_of(mode);
        let hold = match extending {
            // A still-valid hold whose lease this acquire extended (or switched to the watchdog).
            Some(hold) => {
                hold.extend(mode, deadline);
                hold.increment();
                hold
            }
            _ => {
                let hold = Arc::new(Hold::new(self.name.clone(), owner, mode, deadline));
                hold::insert(self.client.key, hold.clone());
                hold
            }
        };
        if hold.mode() == LeaseMode::Watchdog {
            if let Err(error) = self.client.watchdog.register(&hold) {
                // Without a renewal thread the lease would silently run out: give the lock back.
                let _ = self.release_one(&hold);
                return Err(LockError::Config {
                    message: "could not start the watchdog thread".into(),
                    source: Some(Box::new(error)),
                });
            }
        }
        Ok(LockGuard::new(self, hold))
    }

    /// Marks `hold` lost and forgets it, so a new acquire starts afresh; its guards still
    /// report the loss.
    fn abandon(&self, hold: &Arc<Hold>) {
        hold.mark_lost();
        hold::remove(self.client.key, hold);
        self.client.watchdog.deregister(hold);
    }

    /// Releases one level of `hold`; the backend is told when the last level goes.
    pub(crate) fn release_one(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        let lost = || LockError::LeaseLost {
            name: self.name.to_string(),
        };
        let now = self.client.clock.now();
        if hold.decrement() > 0 {
            return if hold.is_lost(now) {
                Err(lost())
            } else {
                Ok(())
            };
        }
        let current = hold::remove(self.client.key, hold);
        hold.mark_released();
        self.client.watchdog.deregister(hold);
        if !current {
            // Abandoned: this thread has since taken a new hold (same owner id), which a
            // backend release would end. Nothing of this one is left to give back.
            return Err(lost());
        }
        let expired = hold.is_lost(now);
        // Even when the lease looks expired, the backend may still have it: give it back.
        let released = self.client.backend.release(&self.name, &hold.owner)?;
        if released == Release::Released {
            self.client.wait_queues.released(&self.name);
        }
        match released {
            Release::Released if !expired => Ok(()),
            _ => {
                hold.mark_lost();
                Err(lost())
            }
        }
    }
}

/// Tells the clock that a blocking call is done, however it ends.
struct Settle<'a>(&'a dyn crate::Clock);

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        self.0.settle();
    }
}

fn unreachable_timeout(name: &str) -> LockError {
    LockError::protocol(format!(
        "acquire of {name:?} without a wait limit returned without the lock"
    ))
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
