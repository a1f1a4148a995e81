//! Acquiring: re-entering locally, trying the store, waiting, and recording the hold.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ask::Ask;
use super::attempt::{Attempt, FirstRefusal};
use super::handle::{Claimant, Handle};
use super::runner::{block, InPlace, Runner};
use super::taken::Taken;
use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::lease::Lease;
use crate::contract::limits::validate_wait;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;
use crate::engine::hold::{self, Hold, LeaseMode};
use crate::engine::metrics;
use crate::time::clock::{Timer, TimerRole};
use crate::time::instant_after;

/// What a waiter's first attempt left: whether it may have marked the waiter on the store (a
/// read-write lock's), and its refusal if the backend already listened for releases then.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Refusal {
    pub(super) marked: bool,
    pub(super) first: Option<FirstRefusal>,
}

/// What an acquire found before asking the store.
pub(super) enum Prepared {
    /// The calling thread's hold covers the request: re-entered, no step.
    Reentered(Arc<Hold>),
    /// The store must be asked.
    Asking(Asking),
}

/// An acquire ready to ask the store: the hold it extends (if any), its wait, its lease, and
/// the ids it asks under (the hold's own, the waiter's place in a store-side queue, and what it
/// keeps on the store for everyone to read).
pub(super) struct Asking {
    extending: Option<Arc<Hold>>,
    wait: Option<Duration>,
    deadline: Option<Instant>,
    start: Instant,
    mode: LeaseMode,
    owner: OwnerId,
    waiter: OwnerId,
    value: Option<Arc<str>>,
    owned: bool,
}

impl Handle {
    /// The algorithm behind every acquire by the calling thread: re-enter locally when this
    /// thread's lease covers the request; else try the backend once; else wait for a release
    /// (in the client's queue for this lock, only the head listening and retrying) and retry
    /// each time one is announced or the holder's lease runs out, until `wait` has passed
    /// (`None`: as long as it takes).
    pub(crate) fn acquire(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        self.acquire_as(wait, mode, Claimant::Thread)
    }

    /// The same algorithm for `claimant` on the calling thread: the calling thread (reentrant),
    /// or a hold of its own.
    pub(crate) fn acquire_as(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
        claimant: Claimant,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let called = Instant::now();
        let answer = match self.prepare(wait, mode, claimant) {
            Ok(Prepared::Reentered(hold)) => return Ok(Some(hold)),
            Ok(Prepared::Asking(asking)) => block(self.acquire_request(&InPlace, asking)),
            Err(error) => Err(error),
        };
        self.answered(&answer, called);
        answer
    }

    /// The algorithm for `claimant`, run by `runner`: in place (the blocking API) or by a
    /// future.
    pub(crate) async fn acquire_with<R: Runner>(
        &self,
        runner: &R,
        wait: Option<Duration>,
        mode: LeaseMode,
        claimant: Claimant,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let called = Instant::now();
        let answer = match self.prepare(wait, mode, claimant) {
            Ok(Prepared::Reentered(hold)) => return Ok(Some(hold)),
            Ok(Prepared::Asking(asking)) => self.acquire_request(runner, asking).await,
            Err(error) => Err(error),
        };
        self.answered(&answer, called);
        answer
    }

    /// Reports an acquire's answer (a local re-entry is not one).
    fn answered(&self, answer: &Result<Option<Arc<Hold>>, LockError>, called: Instant) {
        let taken = answer.as_ref().map(Option::is_some);
        metrics::acquire_answered(&self.labels, taken, called.elapsed());
    }

    /// What an acquire does before it asks the store, with no step and no wait: it checks its
    /// input, re-enters the calling thread's hold when its lease covers the request, and
    /// otherwise chooses the ids to ask under.
    fn prepare(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
        claimant: Claimant,
    ) -> Result<Prepared, LockError> {
        self.check()?;
        if let Some(wait) = wait {
            validate_wait(wait)?;
        }
        let start = self.now();
        let deadline = wait.map(|wait| instant_after(start, wait));
        let owned = matches!(claimant, Claimant::Owned { .. });

        // This thread's current hold, if its lease is still valid but does not cover the
        // request (a longer fixed lease, or the watchdog): the backend extends it below.
        let mut extending = None;
        if !owned {
            if let Some(hold) = hold::find(self.client.key, self.name(), self.kind()) {
                if hold.covers(mode, start) {
                    hold.increment();
                    return Ok(Prepared::Reentered(hold));
                }
                match hold.loss(start) {
                    // The old guards stay lost; this acquire starts a new hold.
                    Some(reason) => self.abandon(&hold, reason),
                    None => extending = Some(hold),
                }
            }
            self.check_own_holds(start)?;
        }
        // The hold's id on the store: the extended hold's own, or a new one. A waiter's place
        // in a store-side queue is the thread's (a hold of its own waits as itself).
        // A new hold asks as the hold of the thread's last acquire of the lock whose outcome is
        // unknown, if any: the store may keep it, and then re-enters it.
        let (owner, waiter, value) = match claimant {
            Claimant::Thread => (
                extending.as_ref().map_or_else(
                    || {
                        hold::take_unknown(self.client.key, self.name(), self.kind())
                            .unwrap_or_else(|| self.new_hold_id())
                    },
                    |hold| hold.owner.clone(),
                ),
                self.waiter(),
                None,
            ),
            Claimant::Owned { owner, value } => (owner.clone(), owner, value),
        };
        Ok(Prepared::Asking(Asking {
            extending,
            wait,
            deadline,
            start,
            mode,
            owner,
            waiter,
            value: value.map(Into::into),
            owned,
        }))
    }

    /// The rest of an acquire, once the hold's ids are chosen.
    pub(super) async fn acquire_request<R: Runner>(
        &self,
        runner: &R,
        asking: Asking,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let Asking {
            mut extending,
            wait,
            deadline,
            start,
            mode,
            owner,
            waiter,
            value,
            owned,
        } = asking;
        let mut ask = self.ask(owner, waiter, wait, self.lease_of(mode));
        ask.renewed = mode == LeaseMode::Watchdog;
        ask.write_hold = self.write_hold(start).map(|hold| hold.owner.clone());
        ask.value = value;
        loop {
            ask.reentry = extending.is_some();
            // Other clients' waiters were told of this client's last release: they get a turn
            // before this client tries (a single try does not wait), so the first try is made
            // in the client's queue, once the turn is over.
            let their_turn = extending.is_none()
                && wait != Some(Duration::ZERO)
                && !self.kind().queues_on_store()
                && self.client.step_aside.turn(&self.target, start).is_some();
            // Whether the first try marked the thread as waiting on the store.
            let mut first_marked = false;
            // The first try's refusal, if the backend already listened for releases.
            let mut refused = None;
            if !their_turn {
                // The first try goes straight to the backend: uncontended, that is the only
                // call. A marked kind's waiter that will queue behind another of this client's
                // waiters does not mark itself with it: only the head of the client's queue
                // tries again and renews its mark, and a mark left behind it would hold others
                // off (a plain waiter's, every other waiter; a reader's, every writer) while
                // the head waits, until the mark ran out.
                let will_wait = ask.will_wait;
                ask.will_wait &= !(self.kind().marks_waiters()
                    && self.client.wait_queues.has_waiters(&self.target));
                first_marked = ask.will_wait && self.kind().waits_on_store();
                // What the backend has heard of the lock's releases before the try: if it has
                // heard nothing more once the waiter has subscribed, the waiter parks without
                // a retry. Not for an extend (a refusal ends that hold: the wait is for
                // another), nor for a try that marks no read-write waiter (its retry does).
                let heard = (extending.is_none() && ask.will_wait)
                    .then(|| {
                        (self.client.backend).releases_heard(self.target.as_ref(), &ask.waiter)
                    })
                    .flatten();
                ask.first_try = true;
                let first = self.first_attempt(runner, &ask, deadline).await;
                ask.first_try = false;
                ask.will_wait = will_wait;
                if let (
                    Some(heard),
                    Ok(Attempt::Held {
                        remaining_lease,
                        gone: None,
                    }),
                ) = (heard, &first)
                {
                    refused = Some(FirstRefusal {
                        heard,
                        remaining_lease: *remaining_lease,
                        sent_at: start,
                    });
                }
                match first {
                    Ok(Attempt::Taken(taken)) => {
                        return self
                            .held(runner, extending, mode, taken, &ask.owner, owned)
                            .map(Some)
                    }
                    Ok(Attempt::Held {
                        gone: Some(reason), ..
                    }) => {
                        // The store ended the hold the thread extended (or the one an earlier
                        // acquire of unknown outcome made under this id): its guards are lost
                        // for good, and this acquire is for a new hold, with an id of its own.
                        if let Some(hold) = extending.take() {
                            self.abandon(&hold, reason);
                        }
                        ask.owner = self.new_hold_id();
                        continue;
                    }
                    Ok(Attempt::Held { .. }) => {}
                    Err(error) => {
                        match &extending {
                            // The extend may or may not have reached the store: the hold keeps
                            // its deadline (stores never shorten a lease), and is confirmed
                            // before it is re-entered locally again.
                            Some(hold) => hold.mark_unconfirmed(),
                            // The new hold may be on the store (or get there late): the
                            // thread's next acquire asks as the same hold. Nothing was ever
                            // sent to end this hold, so no late step can meet it there.
                            None if !owned => {
                                hold::remember_unknown(self.client.key, &self.target, &ask.owner)
                            }
                            None => {}
                        }
                        return Err(error);
                    }
                }
            };
            // Another owner has the lock the thread extended: the hold it believed valid is
            // gone, and the wait is for a new hold, with an id of its own.
            if let Some(hold) = extending.take() {
                self.abandon(&hold, LossReason::TakenOver);
                ask.owner = self.new_hold_id();
                ask.reentry = false;
            }
            if !their_turn && deadline.is_some_and(|deadline| self.now() >= deadline) {
                if first_marked {
                    // Its try left it known to the store as waiting: it leaves.
                    self.leave_store_queue_to_end(runner, &ask).await;
                }
                return Ok(None);
            }
            // Every wake-up of this waiter goes through one timer of the clock, set to the
            // caller's deadline from the start, and kept until the hold is recorded and its
            // renewals scheduled: a clock moved by hand waits for all of that before it moves
            // on.
            let timer = self.client.clock.timer(TimerRole::Waiter);
            timer.set(deadline);
            // On the heap: the wait's state is most of an acquire's, and an acquire that does
            // not wait should not carry it (a future is moved whole, each time it is).
            let waited = Box::pin(self.wait_for(
                runner,
                &ask,
                Refusal {
                    marked: first_marked,
                    first: refused,
                },
                deadline,
                &*timer,
            ))
            .await;
            if let Err(error) = &waited {
                // The last retry may have made the hold on the store: the thread's next acquire
                // asks as the same hold. (A fair waiter that gives up releases a grant it may
                // have had instead, so its id is done with.)
                if error.is_unavailable() && !owned && !self.kind().queues_on_store() {
                    hold::remember_unknown(self.client.key, &self.target, &ask.owner);
                }
            }
            let held = match waited? {
                Some(taken) => self
                    .held(runner, None, mode, taken, &ask.owner, owned)
                    .map(Some),
                None => Ok(None),
            };
            drop(timer);
            return held;
        }
    }

    /// For a read lock: the calling thread's live write hold on the same name, which lets its
    /// read in (a writer may read).
    pub(super) fn write_hold(&self, now: Instant) -> Option<Arc<Hold>> {
        (self.kind() == LockKind::Read)
            .then(|| hold::find(self.client.key, self.name(), LockKind::Write))
            .flatten()
            .filter(|hold| !hold.is_lost(now))
    }

    /// Waits for `request` to be granted after a first attempt found it held (`refusal`): in
    /// the store's queue for a kind queued there, else in the client's.
    pub(super) async fn wait_for<R: Runner>(
        &self,
        runner: &R,
        ask: &Ask,
        refusal: Refusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let _waiting = metrics::Waiting::start(&self.labels);
        if self.kind().queues_on_store() {
            let wait = self.wait_on_own_signal(runner, ask, refusal.first, deadline, timer);
            self.leaving_store_after(runner, ask, wait).await
        } else if self.kind().waits_on_store() {
            // A plain or read-write lock's waiter: in the client's queue, marked on the store.
            let wait = self.wait_in_queue(runner, ask, refusal, deadline, timer);
            self.leaving_store_after(runner, ask, wait).await
        } else {
            let refusal = Refusal {
                marked: false,
                ..refusal
            };
            self.wait_in_queue(runner, ask, refusal, deadline, timer)
                .await
        }
    }

    /// An acquire for a hold of its own (an owned guard, a permit, a leadership), under a fresh
    /// owner id (a permit id for a semaphore), keeping `value` on the store.
    pub(crate) fn acquire_owned(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
        value: Option<String>,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        block(self.acquire_owned_with(&InPlace, wait, mode, value))
    }

    /// [`acquire_owned`](Self::acquire_owned), run by `runner`.
    pub(crate) async fn acquire_owned_with<R: Runner>(
        &self,
        runner: &R,
        wait: Option<Duration>,
        mode: LeaseMode,
        value: Option<String>,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let owner = match self.kind() {
            LockKind::Semaphore => OwnerId::permit(),
            _ => OwnerId::unique(&self.client.id),
        };
        self.acquire_with(runner, wait, mode, Claimant::Owned { owner, value })
            .await
    }

    /// Refuses an acquire that could only wait for the calling thread itself, or that would
    /// make the thread a holder of two kinds of lock under one name (a name is one kind at a
    /// time, however a store lays the kinds out).
    pub(super) fn check_own_holds(&self, now: Instant) -> Result<(), LockError> {
        let other_kind = hold::find_other_kinds(self.client.key, self.name(), self.kind())
            .into_iter()
            .find(|hold| {
                // A writer may read; a reader asking to write is refused below.
                !self.kind().is_read_write() || !hold.target.kind.is_read_write()
            })
            .filter(|hold| !hold.is_lost(now));
        if let Some(hold) = other_kind {
            return Err(LockError::WrongKind {
                name: self.name().to_owned(),
                expected: self.kind(),
                found: format!("a {} held by the calling thread", hold.target.kind),
            });
        }
        if self.kind() == LockKind::Write {
            let reading = hold::find(self.client.key, self.name(), LockKind::Read)
                .is_some_and(|hold| !hold.is_lost(now));
            if reading {
                return Err(LockError::WouldDeadlock {
                    name: self.name().to_owned(),
                    reason: "the calling thread holds the read lock, and the write lock waits \
                             for every reader; release the read lock first (a writer may take \
                             the read lock, not the other way round)",
                });
            }
        }
        Ok(())
    }

    /// Records a successful backend acquire as `owner`'s hold: in the calling thread's table,
    /// unless it is a hold of its own (`owned`).
    pub(crate) fn held<R: Runner>(
        &self,
        runner: &R,
        extending: Option<Arc<Hold>>,
        mode: LeaseMode,
        taken: Taken,
        owner: &OwnerId,
        owned: bool,
    ) -> Result<Arc<Hold>, LockError> {
        // A new fenced hold needs a token of its own (they start at 1); an extended one keeps
        // the token it has.
        if extending.is_none()
            && self.kind().is_fenced()
            && taken.grant.fencing_token.is_none_or(|token| token == 0)
        {
            let (handle, owner) = (self.clone(), owner.clone());
            runner.detach(move || handle.give_back_hold(&owner));
            return Err(LockError::protocol(format!(
                "the backend granted a {} without a fencing token",
                self.kind()
            ))
            .on_lock(self.name()));
        }
        let lease = self.lease_of(mode);
        let granted = taken
            .grant
            .valid_for
            .map_or(lease, |valid| valid.min(lease));
        let lease = Lease::new(taken.sent_at, granted);
        let hold = match extending {
            // A still-valid hold whose lease this acquire extended (or switched to the watchdog).
            Some(hold) => {
                hold.extend(mode, lease);
                hold.increment();
                hold
            }
            None => {
                let hold = Arc::new(Hold::new(
                    self.target.clone(),
                    owner.clone(),
                    mode,
                    lease,
                    self.client.drift,
                    owned,
                    self.labels.clone(),
                ));
                hold.set_fencing_token(taken.grant.fencing_token);
                if !owned {
                    hold::insert(self.client.key, hold.clone());
                }
                self.client.presence.add(&hold);
                hold
            }
        };
        if let Err(error) = self.client.watchdog.register(&hold) {
            // Without the watchdog the lease would silently run out: give the lock back.
            hold.mark_released();
            hold::remove(self.client.key, &hold);
            let (handle, owner) = (self.clone(), hold.owner.clone());
            runner.detach(move || handle.give_back_hold(&owner));
            return Err(error);
        }
        Ok(hold)
    }
}
