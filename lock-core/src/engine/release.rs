//! Releasing: the local half (reentrancy, loss), then the store's half, handing the lock
//! straight to this client's head waiter when it has waited long enough.

use std::sync::Arc;
use std::time::Instant;

use super::handle::Handle;
use super::taken::Taken;
use super::wait_queue::HANDOFF_AFTER;
use crate::contract::backend::{AcquireRequest, Handover, Release};
use crate::contract::error::LockError;
use crate::contract::kind::{LockKind, Target};
use crate::contract::limits::validate_name;
use crate::contract::loss::LossReason;
use crate::engine::hold::{self, Hold};
use crate::engine::wait_queue::Grantee;

/// How a release goes on after its local half.
pub(crate) enum ReleaseStep {
    /// Nothing for the backend: this was a reentrant level, or the hold was abandoned.
    Done(Result<(), LockError>),
    /// The last level: the backend must release it.
    Backend(PendingRelease),
}

/// What the second half of a release needs from the first.
pub(crate) struct PendingRelease {
    pub(super) now: Instant,
    pub(super) expired: Option<LossReason>,
}

impl Handle {
    /// Marks `hold` lost and forgets it, so a new acquire starts afresh; its guards still
    /// report the loss.
    pub(super) fn abandon(&self, hold: &Arc<Hold>, reason: LossReason) {
        self.client.events.lose(hold, reason, self.now());
        hold::remove(self.client.key, hold);
        self.client.watchdog.deregister(hold);
    }

    /// The mark of a release in progress, held until the store answers: from the moment the
    /// hold leaves the watchdog nothing renews it, and a clock moved by hand waits for the
    /// release rather than run its lease out meanwhile (see
    /// [`Clock::work_in_progress`](crate::time::clock::Clock::work_in_progress)).
    pub(crate) fn release_in_progress(&self) -> Option<Box<dyn crate::time::clock::Timer>> {
        self.client.clock.work_in_progress()
    }

    /// Releases one level of `hold`; the backend is told when the last level goes (and hands
    /// the lock to this client's head waiter in the same step, when it can and should).
    pub(crate) fn release_one(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        let _in_progress = self.release_in_progress();
        match self.release_locally(hold) {
            ReleaseStep::Done(result) => result,
            ReleaseStep::Backend(pending) => {
                if let Some(grantee) = self.successor(&pending) {
                    return self.hand_over(hold, pending, grantee);
                }
                let released = self
                    .client
                    .backend
                    .release(self.target.as_ref(), &hold.owner);
                self.finish_release(hold, pending, released)
            }
        }
    }

    /// This client's head waiter, when the lock should go straight to it: the backend hands
    /// this kind over, this hold's lease is not in doubt, and the head has waited at least
    /// [`HANDOFF_AFTER`] (until then the releasing thread may re-take the lock first).
    pub(super) fn successor(&self, pending: &PendingRelease) -> Option<Grantee> {
        if pending.expired.is_some()
            || !self.client.backend.hands_over(self.kind())
            || self.client.step_aside.others_waiting(&self.target)
        {
            return None;
        }
        self.client
            .wait_queues
            .start_handoff(&self.target, pending.now, HANDOFF_AFTER)
    }

    /// Releases `hold` and hands the lock to `grantee` in one backend step; the head is told
    /// how it went whatever happens.
    pub(super) fn hand_over(
        &self,
        hold: &Arc<Hold>,
        pending: PendingRelease,
        grantee: Grantee,
    ) -> Result<(), LockError> {
        let sent_at = self.now();
        // As the head waits: a store that marks waiters hands the lock over only to a waiter
        // whose turn it is.
        let successor = AcquireRequest::new(self.target.as_ref(), &grantee.owner, grantee.lease)
            .queued_as(&grantee.waiter);
        let handed = self
            .client
            .backend
            .release_to(self.target.as_ref(), &hold.owner, &successor);
        let heir = grantee.owner.clone();
        match handed {
            Ok(Handover::Granted(grant)) => {
                if !grantee.finish(Some(Taken::new(sent_at, grant)), false) {
                    // The waiter left meanwhile (its future was dropped): nobody will hold it.
                    self.give_back_hold(&heir);
                }
                Ok(())
            }
            Ok(Handover::NotHeld) => {
                grantee.finish(None, false);
                self.finish_release(hold, pending, Ok(Release::NotHeld))
            }
            Ok(_) => {
                grantee.finish(None, false);
                self.finish_release(hold, pending, Ok(Release::Released))
            }
            Err(error) => {
                if !grantee.finish(None, true) {
                    // It may have been handed over before the call failed.
                    self.give_back_hold(&heir);
                }
                self.finish_release(hold, pending, Err(error))
            }
        }
    }

    /// The local half of a release: one level of reentrancy goes; when the last one does, the
    /// hold leaves this thread's table and the watchdog, and the backend must be told.
    pub(crate) fn release_locally(&self, hold: &Arc<Hold>) -> ReleaseStep {
        let now = self.now();
        if hold.decrement() > 0 {
            return ReleaseStep::Done(match hold.loss(now) {
                Some(reason) => Err(self.lost(reason)),
                None => Ok(()),
            });
        }
        let current = hold.is_owned() || hold::remove(self.client.key, hold);
        hold.mark_released();
        self.client.watchdog.deregister(hold);
        if !current {
            // Abandoned: this thread has since taken a new hold (same owner id), which a
            // backend release would end. Nothing of this one is left to give back.
            return ReleaseStep::Done(Err(self.lost(hold.loss(now).unwrap_or(LossReason::Gone))));
        }
        // Even when the lease looks expired, the backend may still have it: give it back.
        ReleaseStep::Backend(PendingRelease {
            now,
            expired: hold.loss(now),
        })
    }

    /// The second half of a release, once the backend answered.
    pub(crate) fn finish_release(
        &self,
        hold: &Arc<Hold>,
        pending: PendingRelease,
        released: Result<Release, LockError>,
    ) -> Result<(), LockError> {
        let released = released.map_err(|error| error.on_lock(self.name()))?;
        if released.is_released() {
            let others_waiting = released == Release::ReleasedToOthers;
            self.client
                .step_aside
                .released(&self.target, others_waiting, pending.now, || self.now());
            self.client.wait_queues.released(&self.target);
            if self.kind().is_read_write() {
                // Either side's release can let the other side in.
                let other = match self.kind() {
                    LockKind::Read => LockKind::Write,
                    _ => LockKind::Read,
                };
                self.client
                    .wait_queues
                    .released(&Target::new(self.target.name.clone(), other));
            }
        }
        match (released.is_released(), pending.expired) {
            (true, None) => Ok(()),
            (true, Some(reason)) => Err(self.lost(reason)),
            (_, reason) => {
                let reason = reason.unwrap_or(LossReason::Gone);
                self.client.events.lose(hold, reason, pending.now);
                Err(self.lost(hold.loss(pending.now).unwrap_or(reason)))
            }
        }
    }

    pub(super) fn lost(&self, reason: LossReason) -> LockError {
        LockError::LeaseLost {
            name: self.name().to_owned(),
            reason,
        }
    }

    /// Releases one hold of the calling thread given up with `leak`.
    pub(crate) fn unlock_leaked(&self) -> Result<(), LockError> {
        validate_name(self.name())?;
        match hold::find(self.client.key, self.name(), self.kind()) {
            Some(hold) if hold.count() > 0 => self.release_one(&hold),
            _ => Err(LockError::NotHeld {
                name: self.name().to_owned(),
            }),
        }
    }
}
