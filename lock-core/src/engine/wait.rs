//! Waiting for a release: in the client's queue for the lock, in the store's queue, or on
//! the waiter's own signal, until the wait runs out. A waiter that leaves early (its future
//! dropped) gives back what it may have been handed on the way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::Refusal;
use super::ask::Ask;
use super::attempt::{Attempt, FirstRefusal, Retried};
use super::handle::Handle;
use super::runner::{block, InPlace, Runner};
use super::taken::Taken;
use crate::contract::backend::{Grant, LockStatus, ReleaseSubscription};
use crate::contract::error::LockError;
use crate::contract::limits::validate_wait;
use crate::contract::owner::OwnerId;
use crate::engine::outage::Outage;
use crate::engine::wait_queue::{Ticket, Unparked};
use crate::time::clock::{Timer, TimerRole};
use crate::time::instant_after;
use crate::time::signal::{Signal, Wake};

impl Handle {
    /// Waits until a latch is open (its count is zero), through the same steps as an acquire
    /// that holds nothing: one try, then the client's queue, the release subscription and a
    /// retry each time a message comes or a watchdog lease has passed. Whether it opened
    /// within `wait` (`None`: as long as it takes).
    pub(crate) fn wait_until_open(&self, wait: Option<Duration>) -> Result<bool, LockError> {
        block(self.wait_until_open_with(&InPlace, wait))
    }

    /// [`wait_until_open`](Self::wait_until_open), run by `runner`.
    pub(crate) async fn wait_until_open_with<R: Runner>(
        &self,
        runner: &R,
        wait: Option<Duration>,
    ) -> Result<bool, LockError> {
        let called = std::time::Instant::now();
        let answer = self.wait_until_open_unmetered(runner, wait).await;
        let opened = answer.as_ref().copied();
        crate::engine::metrics::acquire_answered(&self.labels, opened, called.elapsed());
        answer
    }

    /// [`wait_until_open`](Self::wait_until_open), before it is reported.
    async fn wait_until_open_unmetered<R: Runner>(
        &self,
        runner: &R,
        wait: Option<Duration>,
    ) -> Result<bool, LockError> {
        self.check()?;
        if let Some(wait) = wait {
            validate_wait(wait)?;
        }
        let deadline = wait.map(|wait| instant_after(self.now(), wait));
        let waiter = self.waiter();
        let ask = self.ask(waiter.clone(), waiter, wait, self.client.watchdog_lease);
        if let Attempt::Taken(_) = self.attempt(runner, &ask).await? {
            return Ok(true);
        }
        if deadline.is_some_and(|deadline| self.now() >= deadline) {
            return Ok(false);
        }
        let timer = self.client.clock.timer(TimerRole::Waiter);
        timer.set(deadline);
        let opened = self
            .wait_for(runner, &ask, Refusal::default(), deadline, &*timer)
            .await?;
        drop(timer);
        Ok(opened.is_some())
    }

    /// Waits in this client's queue for the lock; the instant of the acquire that took it, or
    /// `None` once `deadline` has passed. While other clients' waiters have their turn (see
    /// [`StepAside`](crate::engine::step_aside::StepAside)), the head waits for it to end, or for a
    /// release, before it tries; it still tries once however soon its deadline comes.
    /// `refusal`: what the first attempt left.
    pub(super) async fn wait_in_queue<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
        refusal: Refusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let ticket = self.client.wait_queues.join(&self.target);
        // A waiter behind another one of this client tries again once it is the head.
        let mut first = refusal.first.filter(|_| ticket.is_head());
        if refusal.marked && !ticket.is_head() {
            // The first attempt marked this waiter on the store, but another waiter of this
            // client joined the queue between the look before that attempt and now. Only the
            // head renews its mark and comes in on it: a mark left behind the head would hold
            // others off until it ran out (a plain waiter's, every waiter after it; a reader's
            // behind a head refused by waiting writers, those writers). It goes now; this
            // waiter marks itself again once it is the head.
            self.leave_store_queue_to_end(runner, ask).await;
        }
        // Dropped before the ticket, whichever way the wait ends (its future dropped too).
        let mut leaving = LeavingQueue {
            runner,
            handle: self,
            ticket: &ticket,
            owner: &ask.owner,
            maybe_handed: false,
        };
        let hands_over = self.client.backend.hands_over(self.kind());
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
                runner.park(timer, ticket.turn(), seen).await;
                continue;
            }
            let head_since = *head_since.get_or_insert_with(|| self.now());
            // At the head: subscribed before each retry, so a release between the retry and
            // the wait is caught by the signal.
            let signal = self.release_signal(runner, &ticket, &ask.waiter).await?;
            let seen = signal.generation();
            let turn = self.client.step_aside.turn(&self.target, self.now());
            if let Some(turn) = turn.filter(|turn| stepped_aside_until != Some(turn.until)) {
                first = None;
                stepped_aside_until = Some(turn.until);
                let until = turn.until;
                timer.set(Some(deadline.map_or(until, |deadline| deadline.min(until))));
                // While this client's own release message may still be on its way, one
                // message lets the wait go on and a second (another client took the lock and
                // let it go) ends it.
                if runner.park(timer, &signal, seen).await == Wake::Signaled && turn.own_message_due
                {
                    let moved = signal.generation();
                    if moved == seen.wrapping_add(1) {
                        runner.park(timer, &signal, moved).await;
                    }
                }
                continue;
            }
            let skipped = first
                .take()
                .and_then(|first| self.parks_on_first_refusal(ask, first, deadline, timer));
            let now = match skipped {
                Some(now) => now,
                None => match self
                    .retry(runner, ask, deadline, timer, &mut outage)
                    .await?
                {
                    Retried::Taken(taken) => return Ok(Some(taken)),
                    Retried::OutOfTime => return Ok(None),
                    Retried::Parking { now, .. } => now,
                    Retried::Unanswered => {
                        runner.park(timer, &signal, seen).await;
                        continue;
                    }
                },
            };
            if ticket.subscription_lapsed() {
                // Its channel moved (before the store confirmed it, or since `seen`): nothing
                // would wake this park but the timer. Subscribe where it lives now, and retry.
                continue;
            }
            if !hands_over {
                runner.park(timer, &signal, seen).await;
                continue;
            }
            // Parked: a releasing thread of this client may hand the lock over meanwhile.
            ticket.open_handoff(&ask.owner, &ask.waiter, ask.lease, head_since, now);
            runner.park(timer, &signal, seen).await;
            match self.close_handoff(runner, &ticket).await {
                Unparked::Retry => {}
                // Held now, even if the deadline passed while the hand-off was in flight.
                Unparked::Granted(taken) => return Ok(Some(taken)),
                Unparked::Unknown { opened_at } => {
                    // The releaser's call failed: the store may have handed it over all the
                    // same (and a waiter that leaves while it asks gives it back).
                    leaving.maybe_handed = true;
                    let status = self.status_of(runner, &ask.owner).await;
                    leaving.maybe_handed = false;
                    if status?.held_by_owner {
                        return Ok(Some(Taken::new(opened_at, Grant::PLAIN)));
                    }
                }
            }
        }
    }

    /// The queue's release signal, subscribing to the lock's releases first if nobody has yet
    /// (only the head calls this, so one subscription at most is made per queue).
    async fn release_signal<R: Runner>(
        &self,
        runner: &R,
        ticket: &Ticket<'_>,
        waiter: &OwnerId,
    ) -> Result<Arc<Signal>, LockError> {
        if let Some(signal) = ticket.release_signal() {
            return Ok(signal);
        }
        let subscription = self.subscribe(runner, waiter).await?;
        Ok(ticket.keep_subscription(subscription))
    }

    /// A subscription to this lock's releases for `waiter`.
    async fn subscribe<R: Runner>(
        &self,
        runner: &R,
        waiter: &OwnerId,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let (client, target, waiter) = (self.client.clone(), self.target.clone(), waiter.clone());
        runner
            .step(
                move || {
                    client
                        .backend
                        .subscribe(target.as_ref(), &waiter)
                        .map(Subscribed)
                },
                |_| {},
            )
            .await
            .map(|subscribed| subscribed.0)
            .map_err(|error| error.on_lock(self.name()))
    }

    /// The lock as the store sees it for `owner`.
    async fn status_of<R: Runner>(
        &self,
        runner: &R,
        owner: &OwnerId,
    ) -> Result<LockStatus, LockError> {
        let (client, target, owner) = (self.client.clone(), self.target.clone(), owner.clone());
        runner
            .step(
                move || client.backend.status(target.as_ref(), &owner),
                |_| {},
            )
            .await
            .map_err(|error| error.on_lock(self.name()))
    }

    /// Closes the head's hand-off once it wakes: what happened meanwhile. A hand-off in flight
    /// is waited for (its backend call is bounded by the backend's timeouts).
    async fn close_handoff<R: Runner>(&self, runner: &R, ticket: &Ticket<'_>) -> Unparked {
        loop {
            match ticket.close_handoff() {
                Ok(unparked) => return unparked,
                Err(seen) => runner.wait(ticket.handoff_done(), seen).await,
            }
        }
    }

    /// Runs `wait` for a waiter the store knows of ([`LockKind::waits_on_store`]): a fair
    /// waiter, whose first attempt put it at the end of the store's queue, or a plain or
    /// read-write lock's, whose attempts mark it as waiting. A waiter that gives up (its wait
    /// ended, failed, or its future was dropped) leaves the queue or removes its mark at once,
    /// so it holds up nobody behind it.
    ///
    /// [`LockKind::waits_on_store`]: crate::LockKind::waits_on_store
    pub(super) async fn leaving_store_after<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
        wait: impl std::future::Future<Output = Result<Option<Taken>, LockError>>,
    ) -> Result<Option<Taken>, LockError> {
        let mut leaving = LeavingStoreQueue {
            runner,
            handle: self,
            ask,
            left: false,
        };
        let result = wait.await;
        leaving.left = true;
        if !matches!(result, Ok(Some(_))) {
            self.leave_store_queue_to_end(runner, ask).await;
        }
        result
    }

    /// [`leave_store_queue`](Self::leave_store_queue) as one step, finished even if the waiter
    /// is dropped while it runs.
    pub(super) async fn leave_store_queue_to_end<R: Runner>(&self, runner: &R, ask: &Ask) {
        let (handle, left) = (self.clone(), ask.clone());
        let _ = runner
            .step_to_end(move || {
                handle.leave_store_queue(&left);
                Ok(())
            })
            .await;
    }

    /// Takes the waiter of `ask` out of the store's queue; a grant made to it meanwhile is
    /// given back (else the lock would stay taken until the grant's lease ran out).
    pub(super) fn leave_store_queue(&self, ask: &Ask) {
        let left =
            self.client
                .backend
                .cancel_wait(self.target.as_ref(), &ask.waiter, ask.queue_slot);
        if let Err(error) = left {
            // Its place is then dropped when its slot runs out, as for a dead waiter.
            tracing::warn!(lock = %self.name(), %error, "dlock: leaving the lock's queue failed");
        }
        if ask.grant.is_some() {
            self.give_back_a_late_grant(&ask.owner);
        }
    }

    /// A waiter that gave up may have been granted the lock at the same instant: it holds it
    /// then, and gives it back (else the lock would stay taken until the grant's lease ran out).
    fn give_back_a_late_grant(&self, owner: &OwnerId) {
        let backend = &*self.client.backend;
        let held = backend
            .status(self.target.as_ref(), owner)
            .map(|status| status.held_by_owner);
        match held {
            Ok(true) => {
                if let Err(error) = backend.release(self.target.as_ref(), owner) {
                    tracing::warn!(lock = %self.name(), %error, "dlock: giving back a lock granted to a waiter that gave up failed; its short grant lease ends it");
                }
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(lock = %self.name(), %error, "dlock: could not check for a lock granted to a waiter that gave up; a grant would end with its short lease");
            }
        }
    }

    /// Waits in the store's own queue (a fair lock): each attempt finds the waiter still
    /// queued (or takes the lock at the head). The store wakes the new head alone, on the
    /// waiter's own subscription.
    /// `first`: its first attempt's refusal, if the backend already listened then.
    pub(super) async fn wait_on_own_signal<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
        mut first: Option<FirstRefusal>,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let mut subscription = self.subscribe(runner, &ask.waiter).await?;
        let mut outage = Outage::default();
        loop {
            if subscription.lapsed() {
                // Its channel moved: listen where it is now, before the next retry.
                subscription = self.subscribe(runner, &ask.waiter).await?;
            }
            let signal = subscription.signal().clone();
            let seen = signal.generation();
            let skipped = first
                .take()
                .and_then(|first| self.parks_on_first_refusal(ask, first, deadline, timer));
            if skipped.is_some() && !subscription.lapsed() {
                runner.park(timer, &signal, seen).await;
                continue;
            }
            // A grant is announced on the waiter's channel, but a message is only a hint:
            // anyone who can read the store may send one. The retry below claims it: the
            // store's answer to the waiter's own step is what is believed.
            match self
                .retry(runner, ask, deadline, timer, &mut outage)
                .await?
            {
                Retried::Taken(taken) => return Ok(Some(taken)),
                Retried::OutOfTime => return Ok(None),
                // Its channel moved (before the store confirmed it, or since `seen`): nothing
                // would wake this park but the timer. Subscribe where it lives now, and retry.
                Retried::Parking { .. } if subscription.lapsed() => {}
                Retried::Parking { .. } | Retried::Unanswered => {
                    runner.park(timer, &signal, seen).await;
                }
            }
        }
    }
}

/// A subscription on its way from the thread that made it: a type of its own, with no
/// lifetime for the compiler to lose in a future's state.
struct Subscribed(Box<dyn ReleaseSubscription>);

/// A waiter leaving its client's queue for the lock, whichever way: a hand-off still on its
/// way to it is marked deserted (its releaser gives the lock back), and one that came (or may
/// have: its outcome is unknown, or it was being checked) is given back here.
struct LeavingQueue<'a, R: Runner> {
    runner: &'a R,
    handle: &'a Handle,
    ticket: &'a Ticket<'a>,
    owner: &'a OwnerId,
    /// The store may have handed the lock to this waiter, and it is asking.
    maybe_handed: bool,
}

impl<R: Runner> Drop for LeavingQueue<'_, R> {
    fn drop(&mut self) {
        let handed = self.ticket.desert();
        if handed || self.maybe_handed {
            let (handle, owner) = (self.handle.clone(), self.owner.clone());
            self.runner.detach(move || handle.give_back_hold(&owner));
        }
    }
}

/// A waiter in the store's queue whose wait ended before it could leave the queue itself (its
/// future was dropped): it leaves after whatever step of its is still running.
struct LeavingStoreQueue<'a, R: Runner> {
    runner: &'a R,
    handle: &'a Handle,
    ask: &'a Ask,
    /// The wait ended on its own, and the waiter leaves (or left) the queue itself.
    left: bool,
}

impl<R: Runner> Drop for LeavingStoreQueue<'_, R> {
    fn drop(&mut self) {
        if !self.left {
            let (handle, ask) = (self.handle.clone(), self.ask.clone());
            self.runner.detach(move || handle.leave_store_queue(&ask));
        }
    }
}
