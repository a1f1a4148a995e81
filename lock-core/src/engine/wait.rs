//! Waiting for a release: in the client's queue for the lock, in the store's queue, or on
//! the waiter's own signal, until the wait runs out.

use std::time::{Duration, Instant};

use super::acquire::{Attempt, Refusal, Retried, Taken};
use super::handle::Handle;
use crate::contract::backend::{AcquireRequest, Grant};
use crate::contract::error::LockError;
use crate::contract::limits::validate_wait;
use crate::engine::outage::Outage;
use crate::engine::wait_queue::Unparked;
use crate::time::clock::{Timer, TimerRole};
use crate::time::instant_after;
use crate::time::signal::Wake;

impl Handle {
    /// Waits until a latch is open (its count is zero), through the same steps as an acquire
    /// that holds nothing: one try, then the client's queue, the release subscription and a
    /// retry each time a message comes or a watchdog lease has passed. Whether it opened
    /// within `wait` (`None`: as long as it takes).
    pub(crate) fn wait_until_open(&self, wait: Option<Duration>) -> Result<bool, LockError> {
        let called = std::time::Instant::now();
        let answer = self.wait_until_open_unmetered(wait);
        let opened = answer.as_ref().copied();
        crate::engine::metrics::acquire_answered(&self.labels, opened, called.elapsed());
        answer
    }

    /// [`wait_until_open`](Self::wait_until_open), before it is reported.
    fn wait_until_open_unmetered(&self, wait: Option<Duration>) -> Result<bool, LockError> {
        self.check()?;
        if let Some(wait) = wait {
            validate_wait(wait)?;
        }
        let deadline = wait.map(|wait| instant_after(self.now(), wait));
        let waiter = self.waiter();
        let request = self.request(&waiter, &waiter, wait, self.client.watchdog_lease, false);
        let refused = match self.attempt(&request)? {
            Attempt::Taken(_) => return Ok(true),
            Attempt::Held { refusal, .. } => refusal,
        };
        if deadline.is_some_and(|deadline| self.now() >= deadline) {
            return Ok(false);
        }
        let timer = self.client.clock.timer(TimerRole::Waiter);
        timer.set(deadline);
        let opened = self.wait_for(&request, refused, deadline, &*timer)?;
        drop(timer);
        Ok(opened.is_some())
    }

    /// Waits in this client's queue for the lock; the instant of the acquire that took it, or
    /// `None` once `deadline` has passed. While other clients' waiters have their turn (see
    /// [`StepAside`](crate::engine::step_aside::StepAside)), the head waits for it to end, or for a
    /// release, before it tries; it still tries once however soon its deadline comes.
    pub(super) fn wait_in_queue(
        &self,
        request: &AcquireRequest<'_>,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let backend = &*self.client.backend;
        let ticket = self.client.wait_queues.join(&self.target);
        let hands_over = backend.hands_over(self.kind());
        let mut head_since = None;
        let mut stepped_aside_until = None;
        let mut outage = Outage::default();
        loop {
            if !ticket.is_head() {
                let seen = ticket.turn().generation();
                if ticket.is_head() {
                    continue;
                }
                if deadline.is_some_and(|deadline| self.now() >= deadline) {
                    // Still behind another waiter of this client, which gets the lock first
                    // when it frees: giving up costs no backend call, so a thousand waiters
                    // timing out together do not flood the backend.
                    return Ok(None);
                }
                timer.set(deadline);
                timer.wait(ticket.turn(), seen);
                continue;
            }
            let head_since = *head_since.get_or_insert_with(|| self.now());
            // At the head: subscribed before each retry, so a release between the retry and
            // the wait is caught by the signal.
            let signal = ticket
                .release_signal(backend, request.waiter)
                .map_err(|error| error.on_lock(self.name()))?;
            let seen = signal.generation();
            let turn = self.client.step_aside.turn(&self.target, self.now());
            if let Some(turn) = turn.filter(|turn| stepped_aside_until != Some(turn.until)) {
                stepped_aside_until = Some(turn.until);
                let until = turn.until;
                timer.set(Some(deadline.map_or(until, |deadline| deadline.min(until))));
                // While this client's own release message may still be on its way, one
                // message lets the wait go on and a second (another client took the lock and
                // let it go) ends it.
                if timer.wait(&signal, seen) == Wake::Signaled && turn.own_message_due {
                    let moved = signal.generation();
                    if moved == seen.wrapping_add(1) {
                        timer.wait(&signal, moved);
                    }
                }
                continue;
            }
            let now = match self.retry(request, deadline, timer, &mut outage)? {
                Retried::Taken(taken) => return Ok(Some(taken)),
                Retried::OutOfTime => return Ok(None),
                Retried::Parking { now, .. } => now,
                Retried::Unanswered => {
                    timer.wait(&signal, seen);
                    continue;
                }
            };
            if !hands_over {
                timer.wait(&signal, seen);
                continue;
            }
            // Parked: a releasing thread of this client may hand the lock over meanwhile.
            ticket.open_handoff(request.owner, request.lease, head_since, now);
            timer.wait(&signal, seen);
            match ticket.close_handoff() {
                Unparked::Retry => {}
                // Held now, even if the deadline passed while the hand-off was in flight.
                Unparked::Granted(taken) => return Ok(Some(taken)),
                Unparked::Unknown { opened_at } => {
                    // The releaser's call failed: the store may have handed it over all the same.
                    let status = backend
                        .status(self.target.as_ref(), request.owner)
                        .map_err(|error| error.on_lock(self.name()))?;
                    if status.held_by_owner {
                        return Ok(Some(Taken::new(opened_at, Grant::PLAIN)));
                    }
                }
            }
        }
    }

    /// Waits in the store's own queue (a fair lock): the first attempt put this owner at its
    /// end; each later one finds it still queued (or takes the lock at the head). The store
    /// wakes the new head alone, on the owner's own subscription. A waiter that gives up leaves
    /// the queue at once, so it holds up nobody behind it.
    pub(super) fn wait_in_store_queue(
        &self,
        request: &AcquireRequest<'_>,
        refused: Refusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let result = self.wait_on_own_signal(request, refused, deadline, timer);
        if !matches!(result, Ok(Some(_))) {
            let left = self.client.backend.cancel_wait(
                self.target.as_ref(),
                request.waiter,
                request.queue_slot,
            );
            if let Err(error) = left {
                // Its place is then dropped when its slot runs out, as for a dead waiter.
                tracing::warn!(lock = %self.name(), %error, "dlock: leaving the lock's queue failed");
            }
            if request.grant.is_some() {
                self.give_back_a_late_grant(request);
            }
        }
        result
    }

    /// A waiter that gave up may have been granted the lock at the same instant: it holds it
    /// then, and gives it back (else the lock would stay taken until the grant's lease ran out).
    pub(super) fn give_back_a_late_grant(&self, request: &AcquireRequest<'_>) {
        let backend = &*self.client.backend;
        let held = backend
            .status(self.target.as_ref(), request.owner)
            .map(|status| status.held_by_owner);
        match held {
            Ok(true) => {
                if let Err(error) = backend.release(self.target.as_ref(), request.owner) {
                    tracing::warn!(lock = %self.name(), %error, "dlock: giving back a lock granted to a waiter that gave up failed; its short grant lease ends it");
                }
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(lock = %self.name(), %error, "dlock: could not check for a lock granted to a waiter that gave up; a grant would end with its short lease");
            }
        }
    }

    /// The waiting loop of [`wait_in_store_queue`](Self::wait_in_store_queue); `refused`:
    /// the last attempt that found the lock held.
    pub(super) fn wait_on_own_signal(
        &self,
        request: &AcquireRequest<'_>,
        mut refused: Refusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let subscribe = || {
            self.client
                .backend
                .subscribe(self.target.as_ref(), request.waiter)
                .map_err(|error| error.on_lock(self.name()))
        };
        let mut subscription = subscribe()?;
        let mut outage = Outage::default();
        loop {
            if subscription.lapsed() {
                // Its channel moved: listen where it is now, before the next retry.
                subscription = subscribe()?;
            }
            let signal = subscription.signal().clone();
            let seen = signal.generation();
            // Only a grant to the latest refused attempt is believed: one made to an earlier
            // attempt had ended before that attempt ran (else it would have found its own
            // hold), so it is never counted from a later refusal.
            if let (Some(offer), Some(attempt)) = (request.grant, refused.offer) {
                if subscription.granted(attempt) {
                    if let Some(taken) = self.take_grant(request, offer, refused)? {
                        return Ok(Some(taken));
                    }
                }
            }
            match self.retry(request, deadline, timer, &mut outage)? {
                Retried::Taken(taken) => return Ok(Some(taken)),
                Retried::OutOfTime => return Ok(None),
                Retried::Parking { refusal, .. } => {
                    refused = refusal;
                    timer.wait(&signal, seen);
                }
                Retried::Unanswered => {
                    timer.wait(&signal, seen);
                }
            }
        }
    }
}
