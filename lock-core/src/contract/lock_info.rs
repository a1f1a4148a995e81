//! What a store holds for one lock name, as an operator reads it: one shape for every backend,
//! so that tools (the `dlock` command, a dashboard) print Redis and PostgreSQL locks alike.

use std::time::Duration;

use crate::contract::client_record::HolderClient;

/// How a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeldAs {
    /// Nobody holds it (a fair lock may still have queued waiters).
    Free,
    /// Held by one owner as a reentrant or fenced lock (on Redis, also a fair lock: one hash
    /// layout serves all three).
    Exclusive,
    /// Held by one owner, on a name whose holds get fencing tokens: a fenced lock, on stores
    /// that tell it apart (Redis and PostgreSQL keep the name's token counter; on etcd every
    /// hold has a token, its create revision, and shows as [`Exclusive`](HeldAs::Exclusive)).
    Fenced,
    /// Held by one owner as a fair lock, on stores that tell it apart.
    Fair,
    /// The read side of a read-write lock: one or more readers.
    Read,
    /// The write side of a read-write lock.
    Write,
}

impl HeldAs {
    /// The word used in messages and JSON: `free`, `exclusive`, `fenced`, `fair`, `read` or
    /// `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldAs::Free => "free",
            HeldAs::Exclusive => "exclusive",
            HeldAs::Fenced => "fenced",
            HeldAs::Fair => "fair",
            HeldAs::Read => "read",
            HeldAs::Write => "write",
        }
    }
}

/// One owner's holds on a lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner id (`<client id>:<thread>`; Redisson's `<uuid>:<thread id>`).
    pub owner: String,
    /// How many times it holds the lock on the store (the client counts reentrant holds
    /// itself, so this is 1 unless a hold was extended by a longer lease, or the owner is
    /// a Redisson client).
    pub holds: u64,
    /// Whether these are write holds (read-write locks only).
    pub write: bool,
    /// Who the owner is and how long it has held, from its client's record, on stores that
    /// keep client records ([`DistributedLock::keeps_client_records`]); `None` where they do
    /// not.
    ///
    /// [`DistributedLock::keeps_client_records`]: crate::backend::DistributedLock::keeps_client_records
    pub client: Option<HolderClient>,
}

impl LockHolder {
    /// A holder, as a backend reads it.
    pub fn new(owner: String, holds: u64, write: bool) -> Self {
        LockHolder {
            owner,
            holds,
            write,
            client: None,
        }
    }

    /// The holder, with what its client's record says of it.
    pub fn with_client(mut self, client: HolderClient) -> Self {
        self.client = Some(client);
        self
    }

    /// The client id part of the owner id (`<client id>:<hold>`).
    pub fn client_id(&self) -> &str {
        self.owner
            .rsplit_once(':')
            .map_or(self.owner.as_str(), |(client, _)| client)
    }
}

/// What the store holds for one lock name, read in one round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// How it is held.
    pub held_as: HeldAs,
    /// Its holders: the writer first, then the readers.
    pub holders: Vec<LockHolder>,
    /// How long the lease still runs (the longest one, for several readers); `None` when free,
    /// or when the store keeps the lock without an expiry.
    pub remaining_lease: Option<Duration>,
    /// Waiters queued on the store (fair locks; other kinds queue in their clients).
    pub queued_waiters: u64,
    /// Clients listening for the lock's releases, on stores that can count them (Redis: the
    /// subscribers of its channels): for kinds with no queue on the store, how many clients
    /// have threads waiting (each client subscribes once, however many of its threads wait).
    pub subscribers: Option<u64>,
    /// The last fencing token issued for the name, when it has been used as a fenced lock.
    pub last_fencing_token: Option<u64>,
}

impl LockInfo {
    /// A free lock named `name` with nothing queued and no token: what a backend starts from
    /// before it reads the holders.
    pub fn free(name: impl Into<String>) -> Self {
        LockInfo {
            name: name.into(),
            held_as: HeldAs::Free,
            holders: Vec::new(),
            remaining_lease: None,
            queued_waiters: 0,
            subscribers: None,
            last_fencing_token: None,
        }
    }

    /// Whether anybody holds the lock.
    pub fn is_held(&self) -> bool {
        self.held_as != HeldAs::Free
    }
}

/// A snapshot of one lock, as the backend sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Some owner holds the lock.
    pub locked: bool,
    /// The owner asked about holds it.
    pub held_by_owner: bool,
    /// The holder's remaining lease (`None` when the lock is free or has no expiry).
    pub remaining_lease: Option<Duration>,
}

impl LockStatus {
    /// The status of a lock nobody holds.
    pub const FREE: LockStatus = LockStatus {
        locked: false,
        held_by_owner: false,
        remaining_lease: None,
    };

    /// The status of a lock that is held.
    pub fn held(held_by_owner: bool, remaining_lease: Option<Duration>) -> Self {
        LockStatus {
            locked: true,
            held_by_owner,
            remaining_lease,
        }
    }
}
