//! What a store holds for a name as a semaphore, a latch or a leader election, read without
//! taking anything: for operators and the `dlock` command.

use std::time::Duration;

/// One permit held, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// The permit's id (on Redis, 32 hex digits).
    pub id: String,
    /// How long its lease still runs (`None`: a Redisson permit taken without a lease).
    pub remaining_lease: Option<Duration>,
}

impl PermitInfo {
    /// The permit `id`, whose lease has `remaining_lease` left.
    pub fn new(id: impl Into<String>, remaining_lease: Option<Duration>) -> Self {
        PermitInfo {
            id: id.into(),
            remaining_lease,
        }
    }
}

/// The leader of an election, as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The candidate id it campaigned with.
    pub candidate: String,
    /// Its owner id.
    pub owner: String,
    /// The fencing token of its leadership.
    pub token: u64,
    /// How long its lease still runs.
    pub remaining_lease: Option<Duration>,
}

impl LeaderInfo {
    /// The leader `candidate`, held by `owner` with `token`, whose lease has `remaining_lease`
    /// left.
    pub fn new(
        candidate: impl Into<String>,
        owner: impl Into<String>,
        token: u64,
        remaining_lease: Option<Duration>,
    ) -> Self {
        LeaderInfo {
            candidate: candidate.into(),
            owner: owner.into(),
            token,
            remaining_lease,
        }
    }
}

/// What the store holds for one name as a synchronizer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SynchronizerInfo {
    /// The name.
    pub name: String,
    /// The number kept at the name, if it is one: a semaphore's available permits, or a
    /// latch's count (a semaphore with permits held has
    /// [`permits_held`](SynchronizerInfo::permits_held), a latch never has).
    pub count: Option<i64>,
    /// What the number counts: `semaphore` or `latch` (`None`: the store does not say, as for
    /// a number written by Redisson, or no number).
    pub counts: Option<String>,
    /// The semaphore permits held under the name.
    pub permits_held: Vec<PermitInfo>,
    /// The leader of the election of that name.
    pub leader: Option<LeaderInfo>,
}

impl SynchronizerInfo {
    /// Nothing held under `name`.
    pub fn new(name: impl Into<String>) -> Self {
        SynchronizerInfo {
            name: name.into(),
            ..SynchronizerInfo::default()
        }
    }

    /// Whether the name is in use as any synchronizer.
    pub fn is_in_use(&self) -> bool {
        self.count.is_some() || !self.permits_held.is_empty() || self.leader.is_some()
    }
}
