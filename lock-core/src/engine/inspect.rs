//! What a handle can ask about its lock: status, who holds it here, force-unlock.

use super::handle::Handle;
use crate::contract::backend::LockStatus;
use crate::contract::error::LockError;
use crate::contract::loss::LossReason;
use crate::engine::hold::{self};

impl Handle {
    /// The lock as the backend sees it, asked on behalf of the calling thread.
    pub(crate) fn status(&self) -> Result<LockStatus, LockError> {
        self.check()?;
        self.client
            .backend
            .status(self.target.as_ref(), &self.waiter())
            .map_err(|error| error.on_lock(self.name()))
    }

    /// Whether the calling thread holds the lock now. Asks the backend when this thread has a
    /// hold, so a lease lost behind its back is seen (and its guards marked lost).
    pub(crate) fn is_held_by_current_thread(&self) -> Result<bool, LockError> {
        self.check()?;
        let Some(hold) = hold::find(self.client.key, self.name(), self.kind()) else {
            return Ok(false);
        };
        let now = self.now();
        if hold.is_lost(now) {
            return Ok(false);
        }
        let status = self
            .client
            .backend
            .status(self.target.as_ref(), &hold.owner)
            .map_err(|error| error.on_lock(self.name()))?;
        if !status.held_by_owner {
            let reason = if status.locked {
                LossReason::TakenOver
            } else {
                LossReason::Gone
            };
            self.client.events.lose(&hold, reason, now);
        }
        Ok(status.held_by_owner)
    }

    /// How many times the calling thread holds the lock (0 if it does not).
    pub(crate) fn hold_count(&self) -> Result<u32, LockError> {
        if self.is_held_by_current_thread()? {
            Ok(
                hold::find(self.client.key, self.name(), self.kind())
                    .map_or(0, |hold| hold.count()),
            )
        } else {
            Ok(0)
        }
    }

    /// Frees the lock whoever holds it, and wakes its waiters.
    pub(crate) fn force_unlock(&self) -> Result<bool, LockError> {
        self.check()?;
        self.client
            .backend
            .force_unlock(self.target.as_ref())
            .map_err(|error| error.on_lock(self.name()))
    }
}
