//! The kinds of lock the model keeps, and the families they share a name's state in.

/// A kind of lock or synchronizer, as a step names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The reentrant lock.
    Reentrant,
    /// The reentrant lock whose new holds carry a fencing token.
    Fenced,
    /// The fair lock: waiters queue on the store and are handed the lock in order.
    Fair,
    /// A read-write lock's read side.
    Read,
    /// A read-write lock's write side.
    Write,
    /// A semaphore's leased permit.
    Semaphore,
    /// Passing a count-down latch (nothing is held).
    Latch,
    /// A leader election's leadership, with a token.
    Election,
}

/// What a name is in use as: kinds of one family share the store's state of the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Reentrant and fenced locks.
    Lock,
    /// The fair lock.
    Fair,
    /// Both sides of a read-write lock.
    ReadWrite,
    /// A semaphore.
    Semaphore,
    /// A count-down latch.
    Latch,
    /// A leader election.
    Election,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 8] = [
        Kind::Reentrant,
        Kind::Fenced,
        Kind::Fair,
        Kind::Read,
        Kind::Write,
        Kind::Semaphore,
        Kind::Latch,
        Kind::Election,
    ];

    /// The family the kind's state lives in.
    pub fn family(self) -> Family {
        match self {
            Kind::Reentrant | Kind::Fenced => Family::Lock,
            Kind::Fair => Family::Fair,
            Kind::Read | Kind::Write => Family::ReadWrite,
            Kind::Semaphore => Family::Semaphore,
            Kind::Latch => Family::Latch,
            Kind::Election => Family::Election,
        }
    }

    /// The plain lock (reentrant or fenced): a waiter refused marks itself, and a free lock
    /// goes to the waiter marked first.
    pub fn is_plain_lock(self) -> bool {
        matches!(self, Kind::Reentrant | Kind::Fenced)
    }

    /// Whether a new hold of this kind carries a token, strictly above the name's earlier ones.
    pub fn issues_token(self) -> bool {
        matches!(self, Kind::Fenced | Kind::Election)
    }

    /// Whether a thread holds this kind for itself (reentrant, extendable); the others are
    /// holds of their own (a permit, a leadership) or hold nothing (a latch).
    pub fn held_by_thread(self) -> bool {
        matches!(
            self,
            Kind::Reentrant | Kind::Fenced | Kind::Fair | Kind::Read | Kind::Write
        )
    }
}
