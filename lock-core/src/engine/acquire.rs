//! Acquiring: re-entering locally, trying the store, retrying as the same hold, and
//! believing a grant only for the attempt it was made to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handle::{Claimant, Handle, GRANT_LEASE};
use crate::contract::backend::{Acquire, AcquireRequest, Grant, GrantOffer};
use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::lease::Lease;
use crate::contract::limits::validate_wait;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;
use crate::engine::hold::{self, Hold, LeaseMode};
use crate::engine::metrics;
use crate::engine::outage::Outage;
use crate::time::clock::{Timer, TimerRole};
use crate::time::instant_after;

/// A number for each attempt that offers a grant: random in `1..2^63` (positive as a signed
/// 64-bit number, as stores keep it), so a grant made to another attempt is never taken for
/// this one's, and a grant message from anyone who cannot read the store's copy of the offer
/// names it only by a guess (see [`GrantOffer`]).
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
        refusal: Refusal,
        gone: Option<LossReason>,
    },
}

/// An attempt that found the lock held by another owner.
#[derive(Clone, Copy)]
pub(super) struct Refusal {
    /// When it was sent: the hold it asked for did not exist then.
    pub(super) sent_at: Instant,
    /// The number of the grant offer it made, if it made one ([`GrantOffer::attempt`]).
    pub(super) offer: Option<u64>,
}

/// What a waiter's retry found.
pub(super) enum Retried {
    Taken(Taken),
    /// Held, and the waiter's deadline has passed.
    OutOfTime,
    /// Held: the timer is set; the waiter parks. `refusal`: the attempt that found the lock
    /// held; `now`: when its answer came.
    Parking {
        refusal: Refusal,
        now: Instant,
    },
    /// The store could not be reached: the timer is set to the next try (see [`Outage`]); the
    /// waiter parks until then, or until a release is announced.
    Unanswered,
}

/// A successful backend acquire: the lease runs from the instant the request was sent, on the
/// grant's terms.
#[derive(Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) sent_at: Instant,
    pub(crate) grant: Grant,
    /// Granted by the store on a short lease the holder must confirm at once (a renewal).
    pub(crate) confirm: bool,
}

impl Taken {
    /// Taken by this client's own call sent at `sent_at`, on `grant`'s terms.
    pub(crate) fn new(sent_at: Instant, grant: Grant) -> Self {
        Taken {
            sent_at,
            grant,
            confirm: false,
        }
    }
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

    /// The same algorithm for `claimant`: the calling thread (reentrant), or a hold of its own.
    pub(crate) fn acquire_as(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
        claimant: Claimant,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let called = Instant::now();
        let mut reentered = false;
        let answer = self.acquire_or_reenter(wait, mode, claimant, &mut reentered);
        if !reentered {
            let taken = answer.as_ref().map(Option::is_some);
            metrics::acquire_answered(&self.labels, taken, called.elapsed());
        }
        answer
    }

    /// [`acquire_as`](Self::acquire_as), telling whether it was a local re-entry.
    fn acquire_or_reenter(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
        claimant: Claimant,
        reentered: &mut bool,
    ) -> Result<Option<Arc<Hold>>, LockError> {
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
                    *reentered = true;
                    return Ok(Some(hold));
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
        self.acquire_request(
            extending, wait, deadline, start, mode, &owner, &waiter, value, owned,
        )
    }

    /// The rest of [`acquire_as`](Self::acquire_as), once the hold's ids are chosen.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn acquire_request(
        &self,
        mut extending: Option<Arc<Hold>>,
        wait: Option<Duration>,
        deadline: Option<Instant>,
        start: Instant,
        mode: LeaseMode,
        owner: &OwnerId,
        waiter: &OwnerId,
        value: Option<String>,
        owned: bool,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let write_hold = self.write_hold(start);

        let request = self
            .request(
                owner,
                waiter,
                wait,
                self.lease_of(mode),
                mode == LeaseMode::Watchdog,
            )
            .reentering(extending.is_some())
            .under_write_hold(write_hold.as_ref().map(|hold| &hold.owner))
            .with_value(value.as_deref());

        // Other clients' waiters were told of this client's last release: they get a turn
        // before this client tries (a single try does not wait), so the first try is made in
        // the client's queue, once the turn is over.
        let their_turn = extending.is_none()
            && wait != Some(Duration::ZERO)
            && !self.kind().queues_on_store()
            && self.client.step_aside.turn(&self.target, start).is_some();
        let refused = if their_turn {
            // Not read: a kind that takes turns waits in the client's queue, not the store's.
            Refusal {
                sent_at: start,
                offer: None,
            }
        } else {
            // The first try goes straight to the backend: uncontended, that is the only call.
            match self.attempt(&request) {
                Ok(Attempt::Taken(taken)) => {
                    return self.held(extending, mode, taken, owner, owned).map(Some)
                }
                Ok(Attempt::Held {
                    gone: Some(reason), ..
                }) => {
                    // The store ended the hold the thread extended (or the one an earlier
                    // acquire of unknown outcome made under this id): its guards are lost for
                    // good, and this acquire is for a new hold, with an id of its own.
                    if let Some(hold) = extending.take() {
                        self.abandon(&hold, reason);
                    }
                    let fresh = self.new_hold_id();
                    return self.acquire_request(
                        None, wait, deadline, start, mode, &fresh, waiter, value, owned,
                    );
                }
                Ok(Attempt::Held { refusal, .. }) => refusal,
                Err(error) => {
                    match &extending {
                        // The extend may or may not have reached the store: the hold keeps its
                        // deadline (stores never shorten a lease), and is confirmed before it
                        // is re-entered locally again.
                        Some(hold) => hold.mark_unconfirmed(),
                        // The new hold may be on the store (or get there late): the thread's
                        // next acquire asks as the same hold. Nothing was ever sent to end this
                        // hold, so no late step can meet it there.
                        None if !owned => {
                            hold::remember_unknown(self.client.key, &self.target, owner)
                        }
                        None => {}
                    }
                    return Err(error);
                }
            }
        };
        // Another owner has the lock the thread extended: the hold it believed valid is gone,
        // and the wait is for a new hold, with an id of its own.
        let fresh;
        let (request, owner) = match extending.take() {
            Some(hold) => {
                self.abandon(&hold, LossReason::TakenOver);
                fresh = self.new_hold_id();
                let mut request = request;
                request.owner = &fresh;
                request.reentry = false;
                (request, &fresh)
            }
            None => (request, owner),
        };
        if !their_turn && deadline.is_some_and(|deadline| self.now() >= deadline) {
            return Ok(None);
        }
        // Every wake-up of this thread goes through one timer of the clock, set to the caller's
        // deadline from the start, and kept until the hold is recorded and its renewals
        // scheduled: a clock moved by hand waits for all of that before it moves on.
        let timer = self.client.clock.timer(TimerRole::Waiter);
        timer.set(deadline);
        let waited = self.wait_for(&request, refused, deadline, &*timer);
        if let Err(error) = &waited {
            // The last retry may have made the hold on the store: the thread's next acquire
            // asks as the same hold. (A fair waiter that gives up releases a grant it may have
            // had instead, so its id is done with.)
            if error.is_unavailable() && !owned && !self.kind().queues_on_store() {
                hold::remember_unknown(self.client.key, &self.target, owner);
            }
        }
        let held = match waited? {
            Some(taken) => self.held(None, mode, taken, owner, owned).map(Some),
            None => Ok(None),
        };
        drop(timer);
        held
    }

    /// The acquire request of the hold `owner` for this lock, waiting in a store-side queue as
    /// `waiter`, with `lease`, for a caller that waits up to `wait`. A store-queued waiter on
    /// the watchdog lease offers to be handed the lock (each attempt numbers its own offer).
    pub(super) fn request<'a>(
        &'a self,
        owner: &'a OwnerId,
        waiter: &'a OwnerId,
        wait: Option<Duration>,
        lease: Duration,
        watchdog: bool,
    ) -> AcquireRequest<'a> {
        // A waiter's place in a store-side queue is kept for its own wait, or for the client's
        // fair wait timeout when it waits without a bound (Redisson's rule).
        let queue_slot = match wait {
            Some(wait) if !wait.is_zero() => wait,
            _ => self.client.fair_wait_timeout,
        };
        let request = AcquireRequest::new(self.target.as_ref(), owner, lease)
            .queued_as(waiter)
            .waiting(wait != Some(Duration::ZERO), queue_slot);
        if self.kind().queues_on_store() && watchdog && self.client.backend.hands_over(self.kind())
        {
            // Renewed by the watchdog from the start, a granted hold is confirmed at once.
            let lease = self.client.watchdog_lease.min(GRANT_LEASE);
            return request.accepting_grant(GrantOffer::new(lease, 0));
        }
        request
    }

    /// For a read lock: the calling thread's live write hold on the same name, which lets its
    /// read in (a writer may read).
    pub(super) fn write_hold(&self, now: Instant) -> Option<Arc<Hold>> {
        (self.kind() == LockKind::Read)
            .then(|| hold::find(self.client.key, self.name(), LockKind::Write))
            .flatten()
            .filter(|hold| !hold.is_lost(now))
    }

    /// Waits for `request` to be granted after a first attempt (`refused`) found it held: in
    /// the store's queue for a kind queued there, else in the client's.
    pub(super) fn wait_for(
        &self,
        request: &AcquireRequest<'_>,
        refused: Refusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
        let _waiting = metrics::Waiting::start(&self.labels);
        if self.kind().queues_on_store() {
            self.wait_in_store_queue(request, refused, deadline, timer)
        } else {
            self.wait_in_queue(request, deadline, timer)
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
        let owner = match self.kind() {
            LockKind::Semaphore => OwnerId::permit(),
            _ => OwnerId::unique(&self.client.id),
        };
        self.acquire_as(wait, mode, Claimant::Owned { owner, value })
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

    /// One acquire attempt. A grant offer gets a number of its own for this attempt.
    pub(super) fn attempt(&self, request: &AcquireRequest<'_>) -> Result<Attempt, LockError> {
        let mut request = *request;
        let offer = request.grant.map(|offer| {
            let numbered = GrantOffer::new(offer.lease, next_attempt_id());
            request.grant = Some(numbered);
            numbered.attempt
        });
        let sent_at = self.now();
        match self.client.backend.try_acquire(&request) {
            Ok(Acquire::Acquired(grant)) => Ok(Attempt::Taken(Taken::new(sent_at, grant))),
            Ok(Acquire::Held { remaining_lease }) => Ok(Attempt::Held {
                remaining_lease,
                refusal: Refusal { sent_at, offer },
                gone: None,
            }),
            // The hold the request extends ended, or (a new hold) an operator force-unlocked
            // a hold an earlier copy of the request made under this id.
            Ok(Acquire::Gone { reason }) => Ok(Attempt::Held {
                remaining_lease: None,
                refusal: Refusal { sent_at, offer },
                gone: Some(reason),
            }),
            Err(error) => Err(error.on_lock(self.name())),
        }
    }

    /// The hold a release granted on the offer of the attempt `refused`, on `offer`'s short
    /// lease. The grant was made after that attempt ran (it found the lock held, and made the
    /// offer the grant names), so its lease runs from no earlier than when that attempt was
    /// sent. If that leaves too little of it to wait for the watchdog's confirming renewal, the
    /// hold is confirmed here and now, by an acquire (which re-enters it on the store).
    /// `None`: the grant had run out and another owner holds the lock.
    pub(super) fn take_grant(
        &self,
        request: &AcquireRequest<'_>,
        offer: GrantOffer,
        refused: Refusal,
    ) -> Result<Option<Taken>, LockError> {
        let granted = Lease::new(refused.sent_at, offer.lease);
        let left = granted
            .deadline(self.client.drift)
            .saturating_duration_since(self.now());
        if left >= offer.lease / 2 {
            return Ok(Some(Taken {
                sent_at: refused.sent_at,
                grant: Grant::PLAIN.valid_for(offer.lease),
                confirm: true,
            }));
        }
        Ok(match self.attempt(request)? {
            Attempt::Taken(taken) => Some(taken),
            Attempt::Held { .. } => None,
        })
    }

    /// A waiter's retry: taken; out of time; or still held, with `timer` set to wake the
    /// waiter when the holder's lease runs out or its own wait ends, whichever comes first.
    /// A holder with no expiry is re-checked once per watchdog lease, in case a release
    /// message was lost. A retry the store did not answer is made again, as the same hold,
    /// after a pause (see [`Outage`]); its error ends the wait only once `outage` says so.
    pub(super) fn retry(
        &self,
        request: &AcquireRequest<'_>,
        deadline: Option<Instant>,
        timer: &dyn Timer,
        outage: &mut Outage,
    ) -> Result<Retried, LockError> {
        let attempt = self.attempt(request);
        if attempt.is_ok() {
            outage.answered();
        }
        let (remaining_lease, refusal) = match attempt {
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
                remaining_lease,
                refusal,
                ..
            }) => (remaining_lease, refusal),
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
        let cap = instant_after(now, remaining_lease.unwrap_or(self.client.watchdog_lease));
        timer.set(Some(deadline.map_or(cap, |deadline| deadline.min(cap))));
        Ok(Retried::Parking { refusal, now })
    }

    /// Records a successful backend acquire as `owner`'s hold: in the calling thread's table,
    /// unless it is a hold of its own (`owned`).
    pub(crate) fn held(
        &self,
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
            let _ = self.client.backend.release(self.target.as_ref(), owner);
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
            let _ = self
                .client
                .backend
                .release(self.target.as_ref(), &hold.owner);
            return Err(error);
        }
        if taken.confirm {
            self.client.watchdog.confirm(&hold);
        }
        Ok(hold)
    }
}
