//! [`Ask`]: an acquire request in owned form, what a step sent to another thread carries.

use std::sync::Arc;
use std::time::Duration;

use super::handle::{Handle, GRANT_LEASE, WAITER_MARK};
use crate::contract::backend::{AcquireRequest, GrantOffer};
use crate::contract::kind::Target;
use crate::contract::owner::OwnerId;

/// The acquire request of one hold: the owned fields of an [`AcquireRequest`] (see it for what
/// each means). Cheap to clone: names and ids are shared.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) target: Target,
    pub(crate) owner: OwnerId,
    pub(crate) waiter: OwnerId,
    pub(crate) write_hold: Option<OwnerId>,
    pub(crate) value: Option<Arc<str>>,
    pub(crate) lease: Duration,
    pub(crate) reentry: bool,
    pub(crate) will_wait: bool,
    pub(crate) queue_slot: Duration,
    pub(crate) grant: Option<GrantOffer>,
    pub(crate) first_try: bool,
    pub(crate) renewed: bool,
}

impl Ask {
    /// The request as the backend takes it.
    pub(crate) fn request(&self) -> AcquireRequest<'_> {
        let request = AcquireRequest::new(self.target.as_ref(), &self.owner, self.lease)
            .queued_as(&self.waiter)
            .under_write_hold(self.write_hold.as_ref())
            .reentering(self.reentry)
            .with_value(self.value.as_deref())
            .waiting(self.will_wait, self.queue_slot)
            .as_first_try(self.first_try)
            .renewed_by_watchdog(self.renewed);
        match self.grant {
            Some(offer) => request.accepting_grant(offer),
            None => request,
        }
    }
}

impl Handle {
    /// The acquire request of the hold `owner` for this lock, waiting in a store-side queue as
    /// `waiter`, with `lease`, for a caller that waits up to `wait`. A store-queued waiter
    /// offers to be handed the lock (each attempt numbers its own offer).
    pub(super) fn ask(
        &self,
        owner: OwnerId,
        waiter: OwnerId,
        wait: Option<Duration>,
        lease: Duration,
    ) -> Ask {
        // A waiter's place in a store-side queue is kept for its own wait, or for the client's
        // fair wait timeout when it waits without a bound (Redisson's rule). A plain or
        // read-write lock's waiter's mark lives a short while, renewed by its tries.
        let queue_slot = match wait {
            _ if self.kind().marks_waiters() => WAITER_MARK,
            Some(wait) if !wait.is_zero() => wait,
            _ => self.client.fair_wait_timeout,
        };
        // A granted hold lasts a short grant lease until the waiter claims it with its own
        // lease (the watchdog's or a fixed one), so a waiter that died meanwhile holds the lock
        // up no longer than that, whatever lease it asked for.
        let grant = (self.kind().queues_on_store() && self.client.backend.hands_over(self.kind()))
            .then(|| GrantOffer::new(lease.min(GRANT_LEASE), 0));
        Ask {
            target: self.target.clone(),
            owner,
            waiter,
            write_hold: None,
            value: None,
            lease,
            reentry: false,
            will_wait: wait != Some(Duration::ZERO),
            queue_slot,
            grant,
            first_try: false,
            renewed: false,
        }
    }
}
