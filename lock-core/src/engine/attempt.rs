//! One acquire attempt: asking the store once, retrying as the same hold (through an outage
//! too), and undoing what an attempt nobody waits for any more left on the store.

use std::time::{Duration, Instant};

use super::ask::Ask;
use super::handle::Handle;
use super::runner::Runner;
use super::taken::Taken;
use crate::contract::backend::{Acquire, GrantOffer};
use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;
use crate::engine::outage::Outage;
use crate::time::clock::{Timer, TimerRole};
use crate::time::instant_after;
use crate::time::signal::Signal;

/// A number for each attempt that offers a grant: random in `1..2^63` (positive as a signed
/// 64-bit number, as stores keep it), so each offer is told from the waiter's earlier ones
/// (see [`GrantOffer`]).
pub(super) fn next_attempt_id() -> u64 {
    loop {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let mut number = [0; 8];
        number.copy_from_slice(&bytes[..8]);
        let id = u64::from_le_bytes(number) >> 1;
        if id != 0 {
            return id;
        }
    }
}

/// What one acquire attempt found.
pub(super) enum Attempt {
    /// Taken.
    Taken(Taken),
    /// Not taken: held by another owner, whose remaining lease the backend may know, when the
    /// attempt ran; or (`gone`) the hold the attempt extended had ended on the store.
    Held {
        remaining_lease: Option<Duration>,
        gone: Option<LossReason>,
    },
}

/// What a waiter's retry found.
pub(super) enum Retried {
    Taken(Taken),
    /// Held, and the waiter's deadline has passed.
    OutOfTime,
    /// Held: the timer is set; the waiter parks. `now`: when the answer came.
    Parking {
        now: Instant,
    },
    /// The store could not be reached: the timer is set to the next try (see [`Outage`]); the
    /// waiter parks until then, or until a release is announced.
    Unanswered,
}

impl Handle {
    /// One acquire attempt. A grant offer gets a number of its own for this attempt.
    pub(super) async fn attempt<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
    ) -> Result<Attempt, LockError> {
        let numbered = ask
            .grant
            .map(|offer| GrantOffer::new(offer.lease, next_attempt_id()));
        let sent_at = self.now();
        let here = runner.in_place(|| {
            let mut request = ask.request();
            request.grant = numbered;
            self.client.backend.try_acquire(&request)
        });
        let answer = match here {
            Some(answer) => answer,
            None => {
                let mut ask = ask.clone();
                ask.grant = numbered;
                let (client, sent) = (self.client.clone(), ask.clone());
                let handle = self.clone();
                runner
                    .step(
                        move || client.backend.try_acquire(&sent.request()),
                        move |answer| handle.undo_attempt(&ask, answer),
                    )
                    .await
            }
        };
        match answer {
            Ok(Acquire::Acquired(grant)) => Ok(Attempt::Taken(Taken::new(sent_at, grant))),
            Ok(Acquire::Held { remaining_lease }) => Ok(Attempt::Held {
                remaining_lease,
                gone: None,
            }),
            // The hold the request extends ended, or (a new hold) an operator force-unlocked
            // a hold an earlier copy of the request made under this id.
            Ok(Acquire::Gone { reason }) => Ok(Attempt::Held {
                remaining_lease: None,
                gone: Some(reason),
            }),
            Err(error) => Err(error.on_lock(self.name())),
        }
    }

    /// The first attempt of an acquire of a new hold that may wait: made again as the same
    /// hold (so a hold an unanswered try made is re-entered, not waited for) while the store
    /// does not answer (a failover, a leader election, a dropped connection), after pauses
    /// that grow (see [`Outage`]), for as long as the caller's wait lasts, or one watchdog
    /// lease of failures for a wait without a bound. One try for a wait of zero, for an extend
    /// of a hold the thread has (its caller learns at once that the hold may not have grown),
    /// and for a store that answered but could not make the step durable (`NotReplicated`:
    /// each try would cost the replicas' sync timeout again).
    pub(super) async fn first_attempt<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
        deadline: Option<Instant>,
    ) -> Result<Attempt, LockError> {
        let mut outage = Outage::default();
        let mut pause = None;
        loop {
            let error = match self.attempt(runner, ask).await {
                Ok(attempt) => return Ok(attempt),
                Err(error @ LockError::Unavailable { .. }) if ask.will_wait && !ask.reentry => {
                    error
                }
                Err(error) => return Err(error),
            };
            let next = outage.failed(error, self.now(), deadline, self.client.watchdog_lease)?;
            tracing::debug!(lock = %self.name(), "dlock: an acquire was not answered; trying again as the same hold");
            let (timer, never) = pause.get_or_insert_with(|| {
                (
                    self.client.clock.timer(TimerRole::Waiter),
                    std::sync::Arc::new(Signal::new()),
                )
            });
            timer.set(Some(next));
            runner.park(&**timer, never, never.generation()).await;
        }
    }

    /// Undoes what an attempt nobody waits for any more (its future was dropped while it ran)
    /// left on the store: a hold it made (or may have made: its call failed) is given back, a
    /// place it took in the store's queue is left. An extend is left alone: the hold it
    /// extended is still relied on.
    pub(super) fn undo_attempt(&self, ask: &Ask, answer: Result<Acquire, LockError>) {
        if ask.reentry || self.kind() == LockKind::Latch {
            return;
        }
        if self.kind().waits_on_store() && ask.will_wait {
            // Leaves the queue (or removes its read-write mark), and gives back a grant made
            // meanwhile.
            self.leave_store_queue(ask);
        }
        if matches!(answer, Ok(Acquire::Acquired(_)) | Err(_)) {
            self.give_back_hold(&ask.owner);
        }
    }

    /// Releases the hold `owner` may have on the store (nothing if it has none): for holds
    /// no caller will ever get a guard of.
    pub(crate) fn give_back_hold(&self, owner: &OwnerId) {
        if let Err(error) = self.client.backend.release(self.target.as_ref(), owner) {
            tracing::warn!(lock = %self.name(), %error, "dlock: giving back a lock nobody waits for any more failed; its lease ends it");
        }
    }

    /// A waiter's retry: taken; out of time; or still held, with `timer` set to wake the
    /// waiter when the holder's lease runs out or its own wait ends, whichever comes first.
    /// A holder with no expiry is re-checked once per watchdog lease, in case a release
    /// message was lost. A retry the store did not answer is made again, as the same hold,
    /// after a pause (see [`Outage`]); its error ends the wait only once `outage` says so.
    pub(super) async fn retry<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
        deadline: Option<Instant>,
        timer: &dyn Timer,
        outage: &mut Outage,
    ) -> Result<Retried, LockError> {
        let attempt = self.attempt(runner, ask).await;
        if attempt.is_ok() {
            outage.answered();
        }
        let remaining_lease = match attempt {
            Ok(Attempt::Taken(taken)) => return Ok(Retried::Taken(taken)),
            // An earlier try of this wait made a hold under this id (its answer was lost),
            // and an operator force-unlocked it: the id is ended for good.
            Ok(Attempt::Held {
                gone: Some(reason), ..
            }) => {
                return Err(LockError::LeaseLost {
                    name: self.name().to_owned(),
                    reason,
                })
            }
            Ok(Attempt::Held {
                remaining_lease, ..
            }) => remaining_lease,
            Err(error) => {
                let patience = self.client.watchdog_lease;
                let next = outage.failed(error, self.now(), deadline, patience)?;
                tracing::debug!(lock = %self.name(), "dlock: a waiter's retry was not answered; trying again");
                timer.set(Some(next));
                return Ok(Retried::Unanswered);
            }
        };
        let now = self.now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Ok(Retried::OutOfTime);
        }
        self.set_next_retry(ask, remaining_lease, now, deadline, timer);
        Ok(Retried::Parking { now })
    }

    /// After a refusal answered at `refused_at`: sets `timer` to wake the waiter when the
    /// holder's lease runs out or its own wait ends, whichever comes first (a holder with no
    /// expiry is looked at again once per watchdog lease, in case a release message was lost).
    fn set_next_retry(
        &self,
        ask: &Ask,
        remaining_lease: Option<Duration>,
        refused_at: Instant,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) {
        let mut pause = remaining_lease.unwrap_or(self.client.watchdog_lease);
        let marked = self.kind().is_read_write() || self.client.backend.keeps_turns();
        if self.kind().marks_waiters() && marked && ask.will_wait {
            // A marked waiter's mark lives `queue_slot` from this try: the next comes first.
            pause = pause.min(ask.queue_slot / 2);
        }
        let cap = instant_after(refused_at, pause);
        timer.set(Some(deadline.map_or(cap, |deadline| deadline.min(cap))));
    }

    /// Whether a waiter subscribed since its first try may park without trying again: its
    /// backend has heard no announcement of the lock's releases since before that try (see
    /// [`DistributedLock::releases_heard`]), so none came before the subscription, and a later
    /// one reaches it. The signal's generation the waiter parks from must have been read
    /// before this. `Some(now)`, with `timer` set as the try's refusal sets it; `None`: the
    /// waiter retries.
    ///
    /// [`DistributedLock::releases_heard`]: crate::backend::DistributedLock::releases_heard
    pub(super) fn parks_on_first_refusal(
        &self,
        ask: &Ask,
        first: FirstRefusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Option<Instant> {
        let heard = self
            .client
            .backend
            .releases_heard(self.target.as_ref(), &ask.waiter)?;
        let now = self.now();
        if heard != first.heard || deadline.is_some_and(|deadline| now >= deadline) {
            return None;
        }
        self.set_next_retry(ask, first.remaining_lease, first.sent_at, deadline, timer);
        Some(now)
    }
}

/// An acquire's first try, refused while the backend already listened for the lock's
/// releases: what its waiter needs to park without trying again (see
/// [`Handle::parks_on_first_refusal`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct FirstRefusal {
    /// [`DistributedLock::releases_heard`] before the try.
    ///
    /// [`DistributedLock::releases_heard`]: crate::backend::DistributedLock::releases_heard
    pub(super) heard: u64,
    /// The holder's remaining lease, as the refusal gave it.
    pub(super) remaining_lease: Option<Duration>,
    /// When the try was sent, or earlier (the acquire's start).
    pub(super) sent_at: Instant,
}
