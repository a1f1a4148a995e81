//! The synchronizers' steps that are not acquires: counter steps and reading the leader.

use super::handle::Handle;
use crate::contract::backend::{CounterStep, Leader};
use crate::contract::error::LockError;

impl Handle {
    /// A step on this synchronizer's counter. A step that may let waiters in (permits added,
    /// a latch counted down to zero) also wakes this client's own waiters at once.
    pub(crate) fn counter(&self, step: CounterStep<'_>) -> Result<u64, LockError> {
        self.check()?;
        let answer = self
            .client
            .backend
            .counter(step)
            .map_err(|error| error.on_lock(self.name()))?;
        let opens = match step {
            CounterStep::AddPermits { .. } => true,
            CounterStep::CountDown { .. } => answer == 0,
            _ => false,
        };
        if opens {
            self.client.wait_queues.released(&self.target);
        }
        Ok(answer)
    }

    /// The current leader of this election, as the store has it.
    pub(crate) fn leader(&self) -> Result<Option<Leader>, LockError> {
        self.check()?;
        self.client
            .backend
            .leader(self.target.as_ref())
            .map_err(|error| error.on_lock(self.name()))
    }

    /// A receiver of this election's leader changes (see `LeaderElection::observe`).
    pub(crate) fn observe_leader(
        &self,
    ) -> Result<crate::engine::leader_watch::LeaderChanges, LockError> {
        self.check()?;
        crate::engine::leader_watch::observe(&self.client, &self.target)
    }
}
