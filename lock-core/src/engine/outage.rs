//! How a waiter goes on through a store that does not answer for a while.
//!
//! A thread waiting for a lock retries its acquire each time a release is announced or the
//! holder's lease ends. When a retry fails because the store could not be reached (a failover
//! under way, a restart, a dropped connection: [`LockError::is_unavailable`]), the waiter does
//! not give up its whole wait for it: it tries again after a short pause, growing up to
//! [`MAX_PAUSE`], for as long as its own wait lasts, or, for a wait without a bound, for one
//! watchdog lease of failures in a row. Only then is the last error returned. An error of
//! another kind (bad input, a name in use as another kind) ends the wait at once.

use std::time::{Duration, Instant};

use crate::contract::error::LockError;

/// The first pause after a failed retry.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two retries that failed.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The failed retries of one wait, in a row.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// When the first failure of the current run was seen.
    since: Option<Instant>,
    /// The pause before the next retry.
    pause: Duration,
}

impl Outage {
    /// A retry was answered: the next failure starts a new run.
    pub(crate) fn answered(&mut self) {
        self.since = None;
    }

    /// A retry failed with `error` at `now`: the instant to try again, or the error back when
    /// the wait is over (its `deadline`, or `patience` of failures in a row for a wait without
    /// a bound) or the error is not one that passes.
    pub(crate) fn failed(
        &mut self,
        error: LockError,
        now: Instant,
        deadline: Option<Instant>,
        patience: Duration,
    ) -> Result<Instant, LockError> {
        if !error.is_unavailable() {
            return Err(error);
        }
        let since = *self.since.get_or_insert_with(|| {
            self.pause = FIRST_PAUSE;
            now
        });
        let until = deadline.unwrap_or_else(|| crate::time::instant_after(since, patience));
        if now >= until {
            return Err(error);
        }
        let next = crate::time::instant_after(now, self.pause).min(until);
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> LockError {
        LockError::unavailable("the store", "connection refused")
    }

    #[test]
    fn pauses_grow_to_the_largest_and_end_with_the_wait() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(3);
        let mut outage = Outage::default();
        let mut now = start;
        let mut pauses = Vec::new();
        while let Ok(next) = outage.failed(unavailable(), now, Some(deadline), Duration::ZERO) {
            pauses.push(next - now);
            now = next;
        }
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert!(pauses
            .windows(2)
            .all(|pair| pair[1] >= pair[0] || now == deadline));
        assert!(pauses.iter().all(|pause| *pause <= MAX_PAUSE));
        assert_eq!(now, deadline, "tried up to the end of the wait");
    }

    #[test]
    fn a_wait_without_a_bound_gives_up_after_its_patience_of_failures_in_a_row() {
        let start = Instant::now();
        let patience = Duration::from_secs(2);
        let mut outage = Outage::default();
        let mut now = start;
        while let Ok(next) = outage.failed(unavailable(), now, None, patience) {
            now = next;
        }
        assert_eq!(now, start + patience);
        // An answer starts a new run.
        outage.answered();
        assert!(outage.failed(unavailable(), now, None, patience).is_ok());
    }

    #[test]
    fn other_errors_end_the_wait_at_once() {
        let mut outage = Outage::default();
        let error = LockError::invalid("name", "empty");
        assert!(outage
            .failed(error, Instant::now(), None, Duration::from_secs(30))
            .is_err());
    }
}
