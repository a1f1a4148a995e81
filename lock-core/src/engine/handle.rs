//! [`Handle`]: a client and one of its locks, what every handle type is made of.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contract::error::LockError;
use crate::contract::kind::{LockKind, Target};
use crate::contract::limits::validate_name;
use crate::contract::owner::OwnerId;
use crate::engine::client_state::ClientState;
use crate::engine::hold::{Hold, LeaseMode};
use crate::engine::metrics::LockLabels;

/// The lease a store-queued waiter asks a granting release to set (or the watchdog lease, if
/// shorter): [`GrantOffer::MAX_LEASE`](crate::backend::GrantOffer::MAX_LEASE).
pub(crate) const GRANT_LEASE: Duration = crate::contract::acquire::GrantOffer::MAX_LEASE;

/// How long a waiter's mark lives on the store after each of its attempts, for the kinds that
/// mark their waiters ([`LockKind::marks_waiters`]; see
/// [`AcquireRequest::queue_slot`](crate::backend::AcquireRequest::queue_slot)): the waiter
/// tries again within half of it, so its mark lives while it waits, and a waiter that died
/// holds the others off for no longer.
pub(crate) const WAITER_MARK: Duration = Duration::from_secs(2);

/// Who an acquire is for.
pub(crate) enum Claimant {
    /// The calling thread: its holds are reentrant and live in the thread's table.
    Thread,
    /// A hold of its own, not tied to a thread and never re-entered (an owned guard, a permit,
    /// a leadership), under `owner`, with `value` kept on the store for everyone to read.
    Owned {
        owner: OwnerId,
        value: Option<String>,
    },
}

/// A client and one of its locks: what every handle is made of.
#[derive(Clone)]
pub(crate) struct Handle {
    pub(super) client: Arc<ClientState>,
    pub(super) target: Target,
    /// The labels of this lock's metrics.
    pub(super) labels: LockLabels,
}

impl Handle {
    pub(crate) fn new(client: Arc<ClientState>, name: Arc<str>, kind: LockKind) -> Self {
        let labels = LockLabels::new(kind, &name, client.metric_name.as_ref());
        Handle {
            client,
            target: Target::new(name, kind),
            labels,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.target.name
    }

    pub(crate) fn kind(&self) -> LockKind {
        self.target.kind
    }

    /// The lock's name is valid and the backend keeps this kind.
    pub(super) fn check(&self) -> Result<(), LockError> {
        validate_name(&self.target.name)?;
        if self.kind() != LockKind::Reentrant && !self.client.backend.supports(self.kind()) {
            return Err(LockError::Unsupported {
                name: self.name().to_owned(),
                kind: self.kind(),
            });
        }
        Ok(())
    }

    /// The calling thread's waiter id: its place in a store-side queue (never a hold).
    pub(super) fn waiter(&self) -> OwnerId {
        OwnerId::current_thread(&self.client.id)
    }

    /// A new hold's id.
    pub(super) fn new_hold_id(&self) -> OwnerId {
        OwnerId::hold(&self.client.id)
    }

    pub(super) fn lease_of(&self, mode: LeaseMode) -> Duration {
        match mode {
            LeaseMode::Watchdog => self.client.watchdog_lease,
            LeaseMode::Fixed(lease) => lease,
        }
    }

    pub(crate) fn now(&self) -> Instant {
        self.client.clock.now()
    }

    pub(crate) fn backend(&self) -> &dyn crate::contract::backend::DistributedLock {
        &*self.client.backend
    }

    /// Whether `hold`'s lease has been lost.
    pub(crate) fn is_lost(&self, hold: &Hold) -> bool {
        hold.is_lost(self.now())
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.target.name)
            .field("kind", &self.target.kind)
            .finish_non_exhaustive()
    }
}
