//! Several locks taken as one: all of them, or none (Redisson's `RedissonMultiLock`).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::limits::{validate_lease, validate_wait};
use crate::engine::hold::{Hold, LeaseMode};
use crate::engine::{Handle, ReleaseStep, TryAll};
use crate::handles::fair_lock::FairLock;
use crate::handles::fenced_lock::FencedLock;
use crate::handles::lock::Lock;
use crate::handles::read_write_lock::{ReadLock, WriteLock};
use crate::time::instant_after;

/// One member of a [`MultiLock`]: a handle of any kind, from any client.
///
/// Made with `.into()` from [`Lock`], [`FairLock`], [`FencedLock`], [`ReadLock`] or
/// [`WriteLock`].
#[derive(Clone)]
pub struct MultiLockMember {
    handle: Handle,
}

macro_rules! member_from {
    ($($handle:ty),*) => {$(
        impl From<$handle> for MultiLockMember {
            fn from(lock: $handle) -> Self {
                MultiLockMember { handle: lock.handle }
            }
        }
        impl From<&$handle> for MultiLockMember {
            fn from(lock: &$handle) -> Self {
                MultiLockMember { handle: lock.handle.clone() }
            }
        }
    )*};
}
member_from!(Lock, FairLock, FencedLock, ReadLock, WriteLock);

impl fmt::Debug for MultiLockMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockMember")
            .field("name", &self.handle.name())
            .field("kind", &self.handle.kind())
            .finish()
    }
}

/// Several locks taken as one: every member, or none (Redisson's `RedissonMultiLock`).
///
/// Members may be of any kind and from any clients and backends (two Redis servers and the
/// in-process store, say). An acquire never waits while it holds some members: it takes all
/// the members it can at once, and if one is held elsewhere it gives back what it took, waits
/// for that one, and tries again. So two threads asking for the same members in different
/// orders never deadlock, and the total wait is bounded by the caller's. Members of one client
/// are asked for together: on Redis, in one round trip whatever their number.
///
/// The methods are [`Lock`]'s; the guard ([`MultiLockGuard`]) releases every member.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend, MultiLock};
///
/// let accounts = LockClient::new(MemoryBackend::new());
/// let ledger = LockClient::new(MemoryBackend::new());     // another store
/// let both = MultiLock::new([accounts.lock("a:1"), accounts.lock("a:2"), ledger.lock("l")]);
/// let guard = both.lock()?;                                // all three, or none
/// assert!(accounts.lock("a:2").is_locked()?);
/// guard.unlock()?;                                         // every member
/// let mixed = MultiLock::new([accounts.lock("a:1")]).and(ledger.fair_lock("queue"));
/// assert!(mixed.try_lock_for(Duration::from_millis(5))?.is_some());
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct MultiLock {
    members: Vec<Handle>,
}

impl MultiLock {
    /// The locks `members`, taken as one.
    pub fn new<I>(members: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<MultiLockMember>,
    {
        MultiLock {
            members: members.into_iter().map(|m| m.into().handle).collect(),
        }
    }

    /// The same set and one more member (of any kind).
    pub fn and(mut self, member: impl Into<MultiLockMember>) -> Self {
        self.members.push(member.into().handle);
        self
    }

    /// The members' names, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(Handle::name).collect()
    }

    /// Takes every member, waiting as long as it takes. Members without an explicit lease are
    /// renewed by their clients' watchdogs until the guard is dropped.
    pub fn lock(&self) -> Result<MultiLockGuard, LockError> {
        self.acquire(None, LeaseMode::Watchdog)?
            .ok_or_else(|| LockError::protocol("a multi-lock acquire without a wait limit ended"))
    }

    /// Takes every member if each is free (or held by this thread); never waits.
    pub fn try_lock(&self) -> Result<Option<MultiLockGuard>, LockError> {
        self.acquire(Some(Duration::ZERO), LeaseMode::Watchdog)
    }

    /// Takes every member, waiting at most `wait` in all; `Ok(None)` if they could not all be
    /// had by then (nothing is kept).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiLockGuard>, LockError> {
        self.acquire(Some(wait), LeaseMode::Watchdog)
    }

    /// Takes every member with a fixed `lease`, waiting as long as it takes.
    pub fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard, LockError> {
        validate_lease("lease", lease)?;
        self.acquire(None, LeaseMode::Fixed(lease))?
            .ok_or_else(|| LockError::protocol("a multi-lock acquire without a wait limit ended"))
    }

    /// Takes every member with a fixed `lease`, waiting at most `wait` in all.
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<MultiLockGuard>, LockError> {
        validate_lease("lease", lease)?;
        self.acquire(Some(wait), LeaseMode::Fixed(lease))
    }

    /// Releases one hold of every member given up with [`MultiLockGuard::leak`]. Every member
    /// is tried; the first error is reported.
    pub fn unlock(&self) -> Result<(), LockError> {
        self.check()?;
        first_error(self.members.iter().map(Handle::unlock_leaked))
    }

    /// Whether any member is held by anyone now: the set cannot be taken while one is.
    pub fn is_locked(&self) -> Result<bool, LockError> {
        self.check()?;
        for member in &self.members {
            if member.status()?.locked {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the calling thread holds every member now.
    pub fn is_held_by_current_thread(&self) -> Result<bool, LockError> {
        self.check()?;
        for member in &self.members {
            if !member.is_held_by_current_thread()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// How many times the calling thread holds the whole set (the least hold count of its
    /// members).
    pub fn hold_count(&self) -> Result<u32, LockError> {
        self.check()?;
        let mut least = u32::MAX;
        for member in &self.members {
            least = least.min(member.hold_count()?);
        }
        Ok(least)
    }

    /// The shortest remaining lease among the members that are held; `None` if none is.
    pub fn remaining_lease(&self) -> Result<Option<Duration>, LockError> {
        self.check()?;
        let mut shortest: Option<Duration> = None;
        for member in &self.members {
            if let Some(left) = member.status()?.remaining_lease {
                shortest = Some(shortest.map_or(left, |s| s.min(left)));
            }
        }
        Ok(shortest)
    }

    /// Frees every member whoever holds it. Returns whether any was held. Every member is
    /// tried; the first error is reported.
    pub fn force_unlock(&self) -> Result<bool, LockError> {
        self.check()?;
        let mut any = false;
        let mut first = None;
        for member in &self.members {
            match member.force_unlock() {
                Ok(held) => any |= held,
                Err(error) => {
                    first.get_or_insert(error);
                }
            }
        }
        first.map_or(Ok(any), Err)
    }

    /// A set that can be taken: not empty, no member twice.
    fn check(&self) -> Result<(), LockError> {
        if self.members.is_empty() {
            return Err(LockError::invalid(
                "members",
                "a multi-lock needs at least one member",
            ));
        }
        let mut keys: Vec<_> = self.members.iter().map(Handle::order_key).collect();
        keys.sort_unstable();
        if let Some(pair) = keys.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(LockError::invalid(
                "members",
                format!(
                    "the lock {:?} is a member twice (of the same kind and client)",
                    pair[0].0
                ),
            ));
        }
        Ok(())
    }

    /// Take every member: in rounds, each one taking all members it can at once (one call per
    /// client); a round that finds a member held gives back what it took, waits for that
    /// member (holding nothing else), and starts again with it.
    fn acquire(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
    ) -> Result<Option<MultiLockGuard>, LockError> {
        self.check()?;
        if let Some(wait) = wait {
            validate_wait(wait)?;
        }
        let mut members: Vec<&Handle> = self.members.iter().collect();
        members.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        // Time is the members' clock (the first one's, if they have several).
        let start = members[0].now();
        let deadline = wait.map(|wait| instant_after(start, wait));
        // The member waited for in the previous round, already held for this one.
        let mut waited: Option<(usize, Arc<Hold>)> = None;
        loop {
            let mut taken: Vec<(usize, Arc<Hold>)> = waited.take().into_iter().collect();
            let mut blocked = None;
            let mut done = vec![false; members.len()];
            for (index, _) in &taken {
                done[*index] = true;
            }
            for first in 0..members.len() {
                if done[first] {
                    continue;
                }
                let group: Vec<usize> = (first..members.len())
                    .filter(|i| !done[*i] && members[*i].same_client(members[first]))
                    .collect();
                let handles: Vec<&Handle> = group.iter().map(|i| members[*i]).collect();
                let step = Handle::try_all(&handles, mode);
                for i in &group {
                    done[*i] = true;
                }
                match step {
                    Ok(TryAll::Taken(holds)) => taken.extend(group.iter().copied().zip(holds)),
                    Ok(TryAll::Blocked { index, .. }) => {
                        blocked = Some(group[index]);
                        break;
                    }
                    Err(error) => {
                        release_all(&members, &taken);
                        return Err(error);
                    }
                }
            }
            let Some(blocker) = blocked else {
                taken.sort_by_key(|(index, _)| *index);
                return Ok(Some(MultiLockGuard::new(
                    taken
                        .into_iter()
                        .map(|(index, hold)| (members[index].clone(), hold))
                        .collect(),
                )));
            };
            release_all(&members, &taken);
            let left = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(members[0].now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    Some(left)
                }
                None => None,
            };
            match members[blocker].acquire(left, mode)? {
                Some(hold) => waited = Some((blocker, hold)),
                None => return Ok(None),
            }
        }
    }
}

/// Gives back every hold of a failed round, one backend call per client.
fn release_all(members: &[&Handle], taken: &[(usize, Arc<Hold>)]) {
    let holds: Vec<(Handle, Arc<Hold>)> = taken
        .iter()
        .map(|(index, hold)| (members[*index].clone(), hold.clone()))
        .collect();
    for result in release_holds(&holds) {
        if let Err(error) = result {
            tracing::warn!(%error, "dlock: giving back a multi-lock member failed");
        }
    }
}

/// Releases one level of each hold; the last levels go to the backends together, one call per
/// client. Returns each hold's result, in order.
fn release_holds(holds: &[(Handle, Arc<Hold>)]) -> Vec<Result<(), LockError>> {
    let mut results: Vec<Option<Result<(), LockError>>> = Vec::with_capacity(holds.len());
    let mut pending = Vec::new();
    // As a single release's (`release_one`): time moved by hand waits for these.
    let _in_progress: Vec<_> = holds
        .iter()
        .filter_map(|(handle, _)| handle.release_in_progress())
        .collect();
    for (index, (handle, hold)) in holds.iter().enumerate() {
        match handle.release_locally(hold) {
            ReleaseStep::Done(result) => results.push(Some(result)),
            ReleaseStep::Backend(step) => {
                results.push(None);
                pending.push((index, step));
            }
        }
    }
    while !pending.is_empty() {
        let first = pending[0].0;
        let (group, rest): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(index, _)| holds[*index].0.same_client(&holds[first].0));
        pending = rest;
        let refs: Vec<_> = group
            .iter()
            .map(|(index, _)| crate::contract::backend::HoldRef {
                lock: holds[*index].1.target.as_ref(),
                owner: &holds[*index].1.owner,
            })
            .collect();
        let released = holds[first].0.backend().release_many(&refs);
        for ((index, step), released) in group.into_iter().zip(released) {
            let (handle, hold) = &holds[index];
            results[index] = Some(handle.finish_release(hold, step, released));
        }
    }
    results
        .into_iter()
        .map(|result| result.unwrap_or(Ok(())))
        .collect()
}

/// The first error of `results`, after going through all of them.
fn first_error(results: impl Iterator<Item = Result<(), LockError>>) -> Result<(), LockError> {
    let mut first = None;
    for result in results {
        if let Err(error) = result {
            first.get_or_insert(error);
        }
    }
    first.map_or(Ok(()), Err)
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("members", &self.names())
            .finish()
    }
}

/// The calling thread's hold on every member of a [`MultiLock`]; dropping it releases them all.
///
/// Not `Send`, like [`LockGuard`](crate::LockGuard).
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiLockGuard {
    holds: Vec<(Handle, Arc<Hold>)>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl MultiLockGuard {
    fn new(holds: Vec<(Handle, Arc<Hold>)>) -> Self {
        MultiLockGuard {
            holds,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// Whether any member's lease may have been lost: then the set is no longer held as one.
    pub fn is_lost(&self) -> bool {
        self.holds.iter().any(|(handle, hold)| handle.is_lost(hold))
    }

    /// Each member's lock name and kind, and the id its hold has on the store (see
    /// [`LockGuard::owner`](crate::LockGuard::owner)).
    pub fn holds(&self) -> Vec<(&str, LockKind, &str)> {
        self.holds
            .iter()
            .map(|(handle, hold)| (handle.name(), handle.kind(), hold.owner.as_str()))
            .collect()
    }

    /// The earliest instant until which every member's lease is known to last.
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.holds.iter().map(|(_, hold)| hold.deadline()).min()
    }

    /// Releases every member now. Every member is released even if one fails; the first error
    /// is reported ([`LockError::LeaseLost`] for a member whose lease was lost, or a backend's
    /// error).
    pub fn unlock(mut self) -> Result<(), LockError> {
        self.released = true;
        first_error(release_holds(&self.holds).into_iter())
    }

    /// Gives up the guard without releasing: the thread keeps every member until it calls
    /// [`MultiLock::unlock`] (or the leases end).
    pub fn leak(mut self) {
        self.released = true;
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        for result in release_holds(&self.holds) {
            if let Err(error) = result {
                tracing::warn!(%error, "dlock: releasing a dropped multi-lock guard failed");
            }
        }
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.holds.iter().map(|(handle, _)| handle.name()).collect();
        f.debug_struct("MultiLockGuard")
            .field("members", &names)
            .field("lost", &self.is_lost())
            .finish()
    }
}
