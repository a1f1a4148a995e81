//! The synchronizers' steps that are not acquires: counter steps and the leader's record.

use std::time::Duration;

use crate::contract::kind::LockKind;

/// A step on a synchronizer's counter: a semaphore's permits or a latch's count. Each is one
/// atomic step on the store, answered with a number (see each variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CounterStep<'a> {
    /// Sets semaphore `name`'s permits to `permits` if they were never set. Answers 1 if it
    /// did, 0 if they were set already.
    TrySetPermits {
        /// The semaphore.
        name: &'a str,
        /// Its number of permits.
        permits: u64,
    },
    /// Makes `permits` more permits of semaphore `name` available (setting them if they were
    /// never set), waking its waiters. Answers the permits available after.
    AddPermits {
        /// The semaphore.
        name: &'a str,
        /// How many permits are added.
        permits: u64,
    },
    /// Answers the permits of semaphore `name` available now; permits whose lease ran out
    /// count as given back.
    AvailablePermits {
        /// The semaphore.
        name: &'a str,
    },
    /// Sets latch `name`'s count to `count` if it has none (a latch that reached zero has
    /// none). Answers 1 if it did, 0 otherwise.
    TrySetCount {
        /// The latch.
        name: &'a str,
        /// Its count.
        count: u64,
    },
    /// Counts latch `name` down by one; at zero the latch opens and its waiters are woken.
    /// Answers the count after (0 for a latch that was open already).
    CountDown {
        /// The latch.
        name: &'a str,
    },
    /// Answers latch `name`'s count (0: open).
    Count {
        /// The latch.
        name: &'a str,
    },
}

impl CounterStep<'_> {
    /// The synchronizer the step is on.
    pub fn name(&self) -> &str {
        match self {
            CounterStep::TrySetPermits { name, .. }
            | CounterStep::AddPermits { name, .. }
            | CounterStep::AvailablePermits { name }
            | CounterStep::TrySetCount { name, .. }
            | CounterStep::CountDown { name }
            | CounterStep::Count { name } => name,
        }
    }

    /// The kind of synchronizer the step is on.
    pub fn kind(&self) -> LockKind {
        match self {
            CounterStep::TrySetPermits { .. }
            | CounterStep::AddPermits { .. }
            | CounterStep::AvailablePermits { .. } => LockKind::Semaphore,
            _ => LockKind::Latch,
        }
    }
}

/// The holder of a leader election, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The candidate id the leader campaigned with.
    pub candidate: String,
    /// The fencing token of its leadership.
    pub token: u64,
    /// Its remaining lease (`None`: no expiry).
    pub remaining_lease: Option<Duration>,
}

impl Leader {
    /// A leader `candidate` with `token`, whose lease has `remaining_lease` left.
    pub fn new(
        candidate: impl Into<String>,
        token: u64,
        remaining_lease: Option<Duration>,
    ) -> Self {
        Leader {
            candidate: candidate.into(),
            token,
            remaining_lease,
        }
    }
}
