//! The watchdog's second thread: it makes the renewal calls the watchdog hands it, one batch at
//! a time, and applies their answers. Calls block (a store that stopped answering holds one for
//! its whole response timeout); the watchdog thread never does, so deadlines are reported on
//! time while a call is stuck.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::contract::backend::{HoldRef, Renewal};
use crate::contract::error::LockError;
use crate::contract::lease::Lease;
use crate::contract::loss::LossReason;
use crate::engine::events::LeaseChange;
use crate::engine::hold::{Hold, LeaseMode};
use crate::engine::watchdog::Shared;
use crate::time::clock::{Clock, Timer, TimerRole};
use crate::time::signal::Signal;

/// A batch of holds to renew in one call.
pub(crate) struct Batch {
    holds: Vec<Arc<Hold>>,
}

impl Batch {
    /// Every renewed hold, at a tick.
    pub(crate) fn tick(holds: Vec<Arc<Hold>>) -> Self {
        Batch { holds }
    }

    /// Holds granted on a short lease, to confirm at once.
    pub(crate) fn confirm(holds: Vec<Arc<Hold>>) -> Self {
        Batch { holds }
    }
}

/// The renewer's mailbox: the batch handed to it, the signal that wakes it, and its timer, set
/// while it has a batch so a clock moved by hand waits for it.
pub(crate) struct Renewer {
    batch: Mutex<Option<Batch>>,
    signal: Arc<Signal>,
    timer: Box<dyn Timer>,
}

/// How one hold's renewal went, to report once the state's lock is released.
enum Outcome {
    Renewed { recovered: Option<u32> },
    Lost(LossReason),
    Failed { first: bool },
}

impl Renewer {
    pub(crate) fn new(clock: &dyn Clock) -> Self {
        Renewer {
            batch: Mutex::new(None),
            signal: Arc::new(Signal::new()),
            timer: clock.timer(TimerRole::Background),
        }
    }

    /// Hands `batch` over (the caller has marked a renewal in flight).
    pub(crate) fn hand(&self, batch: Batch, now: Instant) {
        {
            let mut slot = self.batch.lock();
            *slot = Some(batch);
            // Known to the clock before the renewer wakes: its work is due now.
            self.timer.set(Some(now));
        }
        self.signal.notify();
    }

    /// The renewer is done with its batch: its timer is cleared, unless the next batch was
    /// handed over meanwhile (checked with the handing-over excluded).
    fn done(&self) {
        let slot = self.batch.lock();
        if slot.is_none() {
            self.timer.set(None);
        }
    }

    /// Wakes the renewer (to see a shutdown).
    pub(crate) fn wake(&self) {
        self.signal.notify();
    }

    /// Forgets the renewer's schedule.
    pub(crate) fn clear(&self) {
        self.timer.set(None);
    }

    /// The renewer thread: each batch handed to it, until shutdown.
    pub(crate) fn run(shared: &Shared) {
        let renewer = &shared.renewer;
        loop {
            let seen = renewer.signal.generation();
            if shared.shutdown.load(Ordering::Acquire) {
                break;
            }
            let batch = renewer.batch.lock().take();
            match batch {
                Some(batch) => shared.renew_batch(batch),
                None => {
                    renewer.timer.wait(&renewer.signal, seen);
                }
            }
        }
        renewer.timer.set(None);
    }
}

impl Shared {
    /// Renews `batch` in one backend call and applies the answer.
    fn renew_batch(&self, batch: Batch) {
        let holds = batch.holds;
        let refs: Vec<HoldRef<'_>> = holds
            .iter()
            .map(|hold| HoldRef {
                lock: hold.target.as_ref(),
                owner: &hold.owner,
            })
            .collect();
        let sent_at = self.clock.now();
        self.batches.fetch_add(1, Ordering::Relaxed);
        let called = std::time::Instant::now();
        let answer = self.call_renew(&refs);
        crate::engine::metrics::renewal(
            self.backend.backend_name(),
            called.elapsed(),
            answer.is_err(),
        );
        let result = match answer {
            Ok(found) if found.len() == holds.len() => Ok(found),
            Ok(found) => Err(LockError::protocol(format!(
                "the backend answered a renewal of {} holds with {} results",
                holds.len(),
                found.len()
            ))),
            Err(error) => Err(error),
        };
        let now = self.clock.now();
        let (found, error) = match result {
            Ok(found) => (found, None),
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                (vec![Renewal::Unanswered; holds.len()], Some(error))
            }
        };
        self.apply(&holds, &found, error, sent_at, now);
    }

    /// One renewal call. A backend that panics fails the call, as an unreachable store does
    /// (the holds are warned, renewal is retried, and they are reported lost if their deadline
    /// passes first): the watchdog lives on for every other hold.
    fn call_renew(&self, refs: &[HoldRef<'_>]) -> Result<Vec<Renewal>, LockError> {
        catch_unwind(AssertUnwindSafe(|| self.backend.renew(refs, self.lease))).unwrap_or_else(
            |panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                tracing::error!(%message, "dlock: the backend panicked while renewing leases");
                Err(LockError::protocol(format!(
                    "the backend panicked while renewing leases: {message}"
                )))
            },
        )
    }

    /// Applies what a renewal found (`error`: the call failed as a whole), schedules the next
    /// renewal, and gives the watchdog thread its turn: a renewed hold's deadline moves, a lost
    /// one is reported, one whose renewal failed is warned once and tried again soon (its
    /// deadline, if it comes first, loses it).
    fn apply(
        &self,
        holds: &[Arc<Hold>],
        found: &[Renewal],
        error: Option<LockError>,
        sent_at: Instant,
        now: Instant,
    ) {
        let lease = Lease::new(sent_at, self.lease);
        let mut outcomes = Vec::with_capacity(holds.len());
        {
            let mut state = self.state.lock();
            let mut any_failed = error.is_some();
            for (hold, renewal) in holds.iter().zip(found) {
                let outcome = match renewal {
                    Renewal::Renewed if hold.extend_if_live(LeaseMode::Watchdog, lease, now) => {
                        Outcome::Renewed {
                            recovered: state.warned.remove(&hold.id),
                        }
                    }
                    // Answered after its deadline: it has told its guards it may be lost.
                    Renewal::Renewed => Outcome::Lost(LossReason::Unreachable),
                    Renewal::Lost(reason) => Outcome::Lost(*reason),
                    _ => {
                        any_failed = true;
                        let failed = state.warned.entry(hold.id).or_insert(0);
                        *failed += 1;
                        Outcome::Failed {
                            first: *failed == 1 && now < hold.deadline(),
                        }
                    }
                };
                if let Outcome::Lost(_) = outcome {
                    state.remove(hold.id);
                    state.warned.remove(&hold.id);
                }
                outcomes.push(outcome);
            }
            state.failures = if error.is_some() {
                state.failures + 1
            } else {
                0
            };
            state.next_tick = Some(if any_failed {
                // Sooner: the rest of the lease gets several attempts, and one at the first
                // deadline of a hold whose renewal failed.
                let retry = now + self.lease / 12;
                holds
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, outcome)| matches!(outcome, Outcome::Failed { .. }))
                    .map(|(hold, _)| hold.deadline())
                    .filter(|deadline| *deadline > now)
                    .min()
                    .map_or(retry, |deadline| deadline.min(retry))
            } else {
                now + self.lease / 3
            });
            state.note_deadlines();
            state.in_flight = false;
            self.reschedule(&state, now);
        }
        self.signal.notify();
        let error = Arc::new(error.unwrap_or_else(|| {
            LockError::unavailable(
                "the part of the store that keeps this lock did not answer the renewal",
                "one node of the store failed; the others answered",
            )
        }));
        for (hold, outcome) in holds.iter().zip(outcomes) {
            if hold.is_released() {
                continue;
            }
            match outcome {
                Outcome::Renewed { recovered } => {
                    self.renewed.fetch_add(1, Ordering::Relaxed);
                    if let Some(failures) = recovered {
                        self.events
                            .emit_for(hold, LeaseChange::RenewalRecovered { failures }, now);
                    }
                }
                Outcome::Lost(reason) => self.lose(hold, reason, now),
                Outcome::Failed { first } => {
                    if first {
                        let change = LeaseChange::RenewalFailed {
                            error: error.clone(),
                            deadline: hold.deadline(),
                        };
                        self.events.emit_for(hold, change, now);
                    }
                }
            }
        }
        // Everything told: a clock moved by hand may go on.
        self.renewer.done();
    }
}
