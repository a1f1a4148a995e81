//! The watchdog's second thread: it makes the renewal calls the watchdog hands it, one batch at
//! a time, and applies their answers. Calls block (a store that stopped answering holds one for
//! its whole response timeout); the watchdog thread never does, so deadlines are reported on
//! time while a call is stuck.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// What the parts of one renewal call applied so far left to schedule.
#[derive(Default)]
struct Applied {
    /// Which holds of the batch were told.
    told: Vec<bool>,
    /// A hold's renewal failed: the next tick comes sooner.
    any_failed: bool,
    /// The earliest deadline still ahead of a hold whose renewal failed.
    failed_deadline: Option<Instant>,
}

impl Shared {
    /// Renews `batch` in one backend call, applying each part of the answer as it comes (one
    /// silent node of several holds up only its own holds), then schedules the next tick.
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
        let applied = Mutex::new(Applied {
            told: vec![false; holds.len()],
            ..Applied::default()
        });
        let answered = |indexes: &[usize], found: &[Renewal]| {
            let mut applied = applied.lock();
            let fits = indexes.len() == found.len()
                && indexes
                    .iter()
                    .all(|&index| applied.told.get(index) == Some(&false));
            if !fits {
                tracing::error!(
                    "dlock: the backend told a part of a renewal that does not fit the batch; \
                     it is ignored"
                );
                return;
            }
            for &index in indexes {
                applied.told[index] = true;
            }
            let part: Vec<&Arc<Hold>> = indexes.iter().map(|&index| &holds[index]).collect();
            self.apply(&part, found, None, sent_at, &mut applied);
        };
        let answer = self.call_renew(&refs, &answered);
        crate::engine::metrics::renewal(
            self.backend.backend_name(),
            called.elapsed(),
            answer.is_err(),
        );
        let mut applied = applied.into_inner();
        let untold: Vec<&Arc<Hold>> = holds
            .iter()
            .zip(&applied.told)
            .filter(|(_, told)| !**told)
            .map(|(hold, _)| hold)
            .collect();
        let failed = answer.is_err();
        if !untold.is_empty() {
            let error = answer.err().unwrap_or_else(|| {
                LockError::protocol(format!(
                    "the backend left {} holds of a renewal unanswered",
                    untold.len()
                ))
            });
            let unanswered = vec![Renewal::Unanswered; untold.len()];
            self.apply(&untold, &unanswered, Some(error), sent_at, &mut applied);
        }
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        self.finish(&applied, failed);
    }

    /// One renewal call. A backend that panics fails the call, as an unreachable store does
    /// (the holds are warned, renewal is retried, and they are reported lost if their deadline
    /// passes first): the watchdog lives on for every other hold.
    fn call_renew(
        &self,
        refs: &[HoldRef<'_>],
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        catch_unwind(AssertUnwindSafe(|| {
            self.backend.renew_parts(refs, self.lease, answered)
        }))
        .unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            tracing::error!(%message, "dlock: the backend panicked while renewing leases");
            Err(LockError::protocol(format!(
                "the backend panicked while renewing leases: {message}"
            )))
        })
    }

    /// Applies what a renewal found for some holds of its batch (`error`: why they were not
    /// answered, when the call failed as a whole): a renewed hold's deadline moves, a lost one
    /// is reported, one whose renewal failed is warned once (its deadline, if it comes before
    /// the next try, loses it).
    fn apply(
        &self,
        holds: &[&Arc<Hold>],
        found: &[Renewal],
        error: Option<LockError>,
        sent_at: Instant,
        applied: &mut Applied,
    ) {
        let now = self.clock.now();
        let lease = Lease::new(sent_at, self.lease);
        let mut outcomes = Vec::with_capacity(holds.len());
        {
            let mut state = self.state.lock();
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
                        applied.any_failed = true;
                        let deadline = hold.deadline();
                        if deadline > now {
                            applied.failed_deadline = Some(
                                applied
                                    .failed_deadline
                                    .map_or(deadline, |earliest| earliest.min(deadline)),
                            );
                        }
                        let failed = state.warned.entry(hold.id).or_insert(0);
                        *failed += 1;
                        Outcome::Failed {
                            first: *failed == 1 && now < deadline,
                        }
                    }
                };
                if let Outcome::Lost(_) = outcome {
                    state.remove(hold.id);
                    state.warned.remove(&hold.id);
                }
                outcomes.push(outcome);
            }
            state.note_deadlines();
            self.reschedule(&state);
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
    }

    /// Schedules the next renewal once every part of a call is applied (`failed`: the call
    /// failed as a whole), and gives the watchdog thread its turn.
    fn finish(&self, applied: &Applied, failed: bool) {
        let now = self.clock.now();
        {
            let mut state = self.state.lock();
            state.failures = if failed { state.failures + 1 } else { 0 };
            state.next_tick = Some(if applied.any_failed {
                // Sooner: the rest of the lease gets several attempts. A hold whose renewal
                // failed close to its deadline (a fair turn's short grant) is tried again
                // within half the time it has left, not first at its deadline, when it is lost.
                let retry = now + self.lease / 12;
                applied
                    .failed_deadline
                    .filter(|deadline| *deadline > now)
                    .map_or(retry, |deadline| retry.min(retry_before(now, deadline)))
            } else {
                now + self.lease / 3
            });
            state.note_deadlines();
            state.in_flight = false;
            self.reschedule(&state);
        }
        self.signal.notify();
        // Everything told: a clock moved by hand may go on.
        self.renewer.done();
    }
}

/// The shortest wait between two tries of a failing renewal.
const RETRY_AT_LEAST: Duration = Duration::from_millis(50);

/// When to try again a renewal that failed for a hold good until `deadline`: half way there,
/// at least [`RETRY_AT_LEAST`] from `now` (but not after the deadline).
fn retry_before(now: Instant, deadline: Instant) -> Instant {
    let left = deadline.saturating_duration_since(now);
    now + (left / 2).max(RETRY_AT_LEAST).min(left)
}
