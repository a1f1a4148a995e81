//! The one acquire / wait / reentrancy / release algorithm, shared by every kind of lock.
//!
//! A handle (`Lock`, and the other kinds' handles) is a [`Handle`]: the client and the lock it
//! names. Everything a handle does is here, so a new kind is a new [`LockKind`] handled by the
//! backends and a thin handle type, never a copy of this file.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{
    Acquire, AcquireRequest, CounterStep, Grant, GrantOffer, Handover, HoldRef, Leader, LockStatus,
    Release,
};
use crate::client::ClientInner;
use crate::clock::{Timer, TimerRole};
use crate::events::LossReason;
use crate::hold::{self, Hold, LeaseMode};
use crate::kind::{LockKind, Target};
use crate::lease::Lease;
use crate::limits::{instant_after, validate_name, validate_wait};
use crate::outage::Outage;
use crate::owner::OwnerId;
use crate::signal::Wake;
use crate::wait_queue::{Grantee, Unparked};
use crate::LockError;

/// How long this client's head waiter must have waited before a release hands the lock
/// straight to it rather than letting the releasing thread re-take it first: parking_lot's
/// eventual fairness. Barging keeps a busy lock's throughput; this bounds every waiter's wait.
pub(crate) const HANDOFF_AFTER: Duration = Duration::from_micros(500);

/// The lease a store-queued waiter asks a granting release to set (or the watchdog lease, if
/// shorter): long enough for the grant's message and the waiter's confirming renewal, short
/// enough that a waiter that died just then holds the lock up no longer than this.
pub(crate) const GRANT_LEASE: Duration = Duration::from_secs(2);

/// A number for each attempt that offers a grant, unique within the process (hold ids are
/// unique across processes), so a grant made to another attempt is never taken for this one's.
fn next_attempt_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Who an acquire is for.
pub(crate) enum Claimant {
    /// The calling thread: its holds are reentrant and live in the thread's table.
    Thread,
    /// A hold of its own, not tied to a thread and never re-entered (an owned guard, a permit,
    /// a leadership), under `owner`, with `value` kept on the store for everyone to read.
    Owned {
        owner: OwnerId,
        value: Option<String>,
    },
}

/// A client and one of its locks: what every handle is made of.
#[derive(Clone)]
pub(crate) struct Handle {
    client: Arc<ClientInner>,
    target: Target,
}

/// What one acquire attempt found.
enum Attempt {
    /// Taken.
    Taken(Taken),
    /// Held by another owner, whose remaining lease the backend may know, when the attempt
    /// ran.
    Held {
        remaining_lease: Option<Duration>,
        refusal: Refusal,
    },
}

/// An attempt that found the lock held by another owner.
#[derive(Clone, Copy)]
struct Refusal {
    /// When it was sent: the hold it asked for did not exist then.
    sent_at: Instant,
    /// The number of the grant offer it made, if it made one ([`GrantOffer::attempt`]).
    offer: Option<u64>,
}

/// What a waiter's retry found.
enum Retried {
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

/// How a release goes on after its local half.
pub(crate) enum ReleaseStep {
    /// Nothing for the backend: this was a reentrant level, or the hold was abandoned.
    Done(Result<(), LockError>),
    /// The last level: the backend must release it.
    Backend(PendingRelease),
}

/// What the second half of a release needs from the first.
pub(crate) struct PendingRelease {
    now: Instant,
    expired: Option<LossReason>,
}

/// What a multi-lock step found among one client's members.
pub(crate) enum TryAll {
    /// Every member is held now (re-entered or taken), in the order given.
    Taken(Vec<Arc<Hold>>),
    /// Nothing was kept: the member at `index` is held by another owner.
    Blocked { index: usize },
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
    pub(crate) fn new(client: Arc<ClientInner>, name: Arc<str>, kind: LockKind) -> Self {
        Handle {
            client,
            target: Target::new(name, kind),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.target.name
    }

    pub(crate) fn kind(&self) -> LockKind {
        self.target.kind
    }

    /// The lock's name is valid and the backend keeps this kind.
    fn check(&self) -> Result<(), LockError> {
        validate_name(&self.target.name)?;
        if self.kind() != LockKind::Reentrant && !self.client.backend.supports(self.kind()) {
            return Err(LockError::Unsupported {
                name: self.name().to_owned(),
                kind: self.kind(),
            });
        }
        Ok(())
    }

    /// The calling thread's waiter id: its place in a store-side queue (never a hold).
    fn waiter(&self) -> OwnerId {
        OwnerId::current_thread(&self.client.id)
    }

    /// A new hold's id.
    fn new_hold_id(&self) -> OwnerId {
        OwnerId::hold(&self.client.id)
    }

    fn lease_of(&self, mode: LeaseMode) -> Duration {
        match mode {
            LeaseMode::Watchdog => self.client.watchdog_lease,
            LeaseMode::Fixed(lease) => lease,
        }
    }

    pub(crate) fn now(&self) -> Instant {
        self.client.clock.now()
    }

    pub(crate) fn backend(&self) -> &dyn crate::backend::DistributedLock {
        &*self.client.backend
    }

    /// Whether `hold`'s lease has been lost.
    pub(crate) fn is_lost(&self, hold: &Hold) -> bool {
        hold.is_lost(self.now())
    }

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
    fn acquire_request(
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

    /// Waits until a latch is open (its count is zero), through the same steps as an acquire
    /// that holds nothing: one try, then the client's queue, the release subscription and a
    /// retry each time a message comes or a watchdog lease has passed. Whether it opened
    /// within `wait` (`None`: as long as it takes).
    pub(crate) fn wait_until_open(&self, wait: Option<Duration>) -> Result<bool, LockError> {
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

    /// The acquire request of the hold `owner` for this lock, waiting in a store-side queue as
    /// `waiter`, with `lease`, for a caller that waits up to `wait`. A store-queued waiter on
    /// the watchdog lease offers to be handed the lock (each attempt numbers its own offer).
    fn request<'a>(
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
    fn write_hold(&self, now: Instant) -> Option<Arc<Hold>> {
        (self.kind() == LockKind::Read)
            .then(|| hold::find(self.client.key, self.name(), LockKind::Write))
            .flatten()
            .filter(|hold| !hold.is_lost(now))
    }

    /// Waits for `request` to be granted after a first attempt (`refused`) found it held: in
    /// the store's queue for a kind queued there, else in the client's.
    fn wait_for(
        &self,
        request: &AcquireRequest<'_>,
        refused: Refusal,
        deadline: Option<Instant>,
        timer: &dyn Timer,
    ) -> Result<Option<Taken>, LockError> {
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
    pub(crate) fn observe_leader(&self) -> Result<crate::LeaderChanges, LockError> {
        self.check()?;
        crate::leader_watch::observe(&self.client, &self.target)
    }

    /// Refuses an acquire that could only wait for the calling thread itself, or that would
    /// make the thread a holder of two kinds of lock under one name (a name is one kind at a
    /// time, however a store lays the kinds out).
    fn check_own_holds(&self, now: Instant) -> Result<(), LockError> {
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
    fn attempt(&self, request: &AcquireRequest<'_>) -> Result<Attempt, LockError> {
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
            }),
            Err(error) => Err(error.on_lock(self.name())),
        }
    }

    /// Waits in this client's queue for the lock; the instant of the acquire that took it, or
    /// `None` once `deadline` has passed. While other clients' waiters have their turn (see
    /// [`StepAside`](crate::step_aside::StepAside)), the head waits for it to end, or for a
    /// release, before it tries; it still tries once however soon its deadline comes.
    fn wait_in_queue(
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
    fn wait_in_store_queue(
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
    fn give_back_a_late_grant(&self, request: &AcquireRequest<'_>) {
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
    fn wait_on_own_signal(
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

    /// The hold a release granted on the offer of the attempt `refused`, on `offer`'s short
    /// lease. The grant was made after that attempt ran (it found the lock held, and made the
    /// offer the grant names), so its lease runs from no earlier than when that attempt was
    /// sent. If that leaves too little of it to wait for the watchdog's confirming renewal, the
    /// hold is confirmed here and now, by an acquire (which re-enters it on the store).
    /// `None`: the grant had run out and another owner holds the lock.
    fn take_grant(
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
    fn retry(
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
            Ok(Attempt::Held {
                remaining_lease,
                refusal,
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
                ));
                hold.set_fencing_token(taken.grant.fencing_token);
                if !owned {
                    hold::insert(self.client.key, hold.clone());
                }
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

    /// Marks `hold` lost and forgets it, so a new acquire starts afresh; its guards still
    /// report the loss.
    fn abandon(&self, hold: &Arc<Hold>, reason: LossReason) {
        self.client.events.lose(hold, reason, self.now());
        hold::remove(self.client.key, hold);
        self.client.watchdog.deregister(hold);
    }

    /// Releases one level of `hold`; the backend is told when the last level goes (and hands
    /// the lock to this client's head waiter in the same step, when it can and should).
    pub(crate) fn release_one(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        match self.release_locally(hold) {
            ReleaseStep::Done(result) => result,
            ReleaseStep::Backend(pending) => {
                if let Some(grantee) = self.successor(&pending) {
                    return self.hand_over(hold, pending, grantee);
                }
                let released = self
                    .client
                    .backend
                    .release(self.target.as_ref(), &hold.owner);
                self.finish_release(hold, pending, released)
            }
        }
    }

    /// This client's head waiter, when the lock should go straight to it: the backend hands
    /// this kind over, this hold's lease is not in doubt, and the head has waited at least
    /// [`HANDOFF_AFTER`] (until then the releasing thread may re-take the lock first).
    fn successor(&self, pending: &PendingRelease) -> Option<Grantee> {
        if pending.expired.is_some()
            || !self.client.backend.hands_over(self.kind())
            || self.client.step_aside.others_waiting(&self.target)
        {
            return None;
        }
        self.client
            .wait_queues
            .start_handoff(&self.target, pending.now, HANDOFF_AFTER)
    }

    /// Releases `hold` and hands the lock to `grantee` in one backend step; the head is told
    /// how it went whatever happens.
    fn hand_over(
        &self,
        hold: &Arc<Hold>,
        pending: PendingRelease,
        grantee: Grantee,
    ) -> Result<(), LockError> {
        let sent_at = self.now();
        let successor = AcquireRequest::new(self.target.as_ref(), &grantee.owner, grantee.lease);
        let handed = self
            .client
            .backend
            .release_to(self.target.as_ref(), &hold.owner, &successor);
        match handed {
            Ok(Handover::Granted(grant)) => {
                grantee.finish(Some(Taken::new(sent_at, grant)), false);
                Ok(())
            }
            Ok(Handover::NotHeld) => {
                grantee.finish(None, false);
                self.finish_release(hold, pending, Ok(Release::NotHeld))
            }
            Ok(_) => {
                grantee.finish(None, false);
                self.finish_release(hold, pending, Ok(Release::Released))
            }
            Err(error) => {
                grantee.finish(None, true);
                self.finish_release(hold, pending, Err(error))
            }
        }
    }

    /// The local half of a release: one level of reentrancy goes; when the last one does, the
    /// hold leaves this thread's table and the watchdog, and the backend must be told.
    pub(crate) fn release_locally(&self, hold: &Arc<Hold>) -> ReleaseStep {
        let now = self.now();
        if hold.decrement() > 0 {
            return ReleaseStep::Done(match hold.loss(now) {
                Some(reason) => Err(self.lost(reason)),
                None => Ok(()),
            });
        }
        let current = hold.is_owned() || hold::remove(self.client.key, hold);
        hold.mark_released();
        self.client.watchdog.deregister(hold);
        if !current {
            // Abandoned: this thread has since taken a new hold (same owner id), which a
            // backend release would end. Nothing of this one is left to give back.
            return ReleaseStep::Done(Err(self.lost(hold.loss(now).unwrap_or(LossReason::Gone))));
        }
        // Even when the lease looks expired, the backend may still have it: give it back.
        ReleaseStep::Backend(PendingRelease {
            now,
            expired: hold.loss(now),
        })
    }

    /// The second half of a release, once the backend answered.
    pub(crate) fn finish_release(
        &self,
        hold: &Arc<Hold>,
        pending: PendingRelease,
        released: Result<Release, LockError>,
    ) -> Result<(), LockError> {
        let released = released.map_err(|error| error.on_lock(self.name()))?;
        if released.is_released() {
            let others_waiting = released == Release::ReleasedToOthers;
            self.client
                .step_aside
                .released(&self.target, others_waiting, pending.now, || self.now());
            self.client.wait_queues.released(&self.target);
            if self.kind().is_read_write() {
                // Either side's release can let the other side in.
                let other = match self.kind() {
                    LockKind::Read => LockKind::Write,
                    _ => LockKind::Read,
                };
                self.client
                    .wait_queues
                    .released(&Target::new(self.target.name.clone(), other));
            }
        }
        match (released.is_released(), pending.expired) {
            (true, None) => Ok(()),
            (true, Some(reason)) => Err(self.lost(reason)),
            (_, reason) => {
                let reason = reason.unwrap_or(LossReason::Gone);
                self.client.events.lose(hold, reason, pending.now);
                Err(self.lost(hold.loss(pending.now).unwrap_or(reason)))
            }
        }
    }

    /// Whether `self` and `other` are locks of the same client.
    pub(crate) fn same_client(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.client, &other.client)
    }

    /// What orders the members of a multi-lock, the same way for every thread.
    pub(crate) fn order_key(&self) -> (&str, u8, u64) {
        let kind = match self.kind() {
            LockKind::Reentrant => 0,
            LockKind::Fair => 1,
            LockKind::Read => 2,
            LockKind::Write => 3,
            LockKind::Fenced => 4,
            LockKind::Semaphore => 5,
            LockKind::Latch => 6,
            LockKind::Election => 7,
        };
        (self.name(), kind, self.client.key)
    }

    /// The acquire step of a multi-lock for `members`, all of one client: members this thread
    /// already holds on a lease that covers the request are re-entered; the others are asked
    /// for together (one backend call; a member this thread holds on a lease that does not cover
    /// the request, as an extend of that hold), and either all of them are taken, or none: what
    /// was taken is given back and the first member found held is reported.
    pub(crate) fn try_all(members: &[&Handle], mode: LeaseMode) -> Result<TryAll, LockError> {
        let Some(first) = members.first() else {
            return Ok(TryAll::Taken(Vec::new()));
        };
        let now = first.now();
        for member in members {
            member.check()?;
            member.check_own_holds(now)?;
        }
        let mut reentered: Vec<Option<Arc<Hold>>> = vec![None; members.len()];
        // Members asked of the store, each with the hold it would extend.
        let mut asked: Vec<(usize, Option<Arc<Hold>>)> = Vec::new();
        for (index, member) in members.iter().enumerate() {
            match hold::find(member.client.key, member.name(), member.kind()) {
                Some(hold) if hold.covers(mode, now) => {
                    hold.increment();
                    reentered[index] = Some(hold);
                }
                Some(hold) => match hold.loss(now) {
                    Some(reason) => {
                        member.abandon(&hold, reason);
                        asked.push((index, None));
                    }
                    None => asked.push((index, Some(hold))),
                },
                None => asked.push((index, None)),
            }
        }
        let Some((first_asked, _)) = asked.first() else {
            return Ok(TryAll::Taken(reentered.into_iter().flatten().collect()));
        };
        // Each member asked of the store under its hold's id: the extended hold's, or a new one
        // (a later round asks under new ones again, so a late give-back of this round's never
        // meets them).
        let owners: Vec<OwnerId> = asked
            .iter()
            .map(|(index, extending)| {
                extending
                    .as_ref()
                    .map_or_else(|| members[*index].new_hold_id(), |hold| hold.owner.clone())
            })
            .collect();
        let write_holds: Vec<Option<Arc<Hold>>> = asked
            .iter()
            .map(|(index, _)| members[*index].write_hold(now))
            .collect();
        let requests: Vec<AcquireRequest<'_>> = asked
            .iter()
            .zip(&owners)
            .zip(&write_holds)
            .map(|(((index, extending), owner), write_hold)| {
                let member = members[*index];
                AcquireRequest::new(member.target.as_ref(), owner, member.lease_of(mode))
                    .reentering(extending.is_some())
                    .under_write_hold(write_hold.as_ref().map(|hold| &hold.owner))
            })
            .collect();
        let sent_at = first.now();
        let found = match first.client.backend.try_acquire_many(&requests) {
            Ok(found) if found.len() == requests.len() => Ok(found),
            Ok(found) => Err(LockError::protocol(format!(
                "the backend answered {} acquire attempts with {} results",
                requests.len(),
                found.len()
            ))),
            Err(error) => Err(error.on_lock(members[*first_asked].name())),
        };
        let found = match found {
            Ok(found) => found,
            Err(error) => {
                // Nothing is known of what the store did: extended holds are confirmed before
                // they are re-entered again, and the backend gave back what it could.
                for (_, extending) in &asked {
                    if let Some(hold) = extending {
                        hold.mark_unconfirmed();
                    }
                }
                Self::give_back(members, &reentered, &[], &[], &[]);
                return Err(error);
            }
        };
        if let Some(position) = found.iter().position(|found| !found.is_acquired()) {
            for ((index, extending), found) in asked.iter().zip(&found) {
                if let (Some(hold), false) = (extending, found.is_acquired()) {
                    // Another owner has it: the hold this thread believed valid is gone.
                    members[*index].abandon(hold, LossReason::TakenOver);
                }
            }
            Self::give_back(members, &reentered, &asked, &owners, &found);
            return Ok(TryAll::Blocked {
                index: asked[position].0,
            });
        }
        let mut holds = reentered;
        for (position, ((index, extending), outcome)) in asked.iter().zip(&found).enumerate() {
            let Acquire::Acquired(grant) = outcome else {
                continue;
            };
            let taken_now = Taken::new(sent_at, *grant);
            let owner = &owners[position];
            match members[*index].held(extending.clone(), mode, taken_now, owner, false) {
                Ok(hold) => holds[*index] = Some(hold),
                Err(error) => {
                    // Give back everything: what was recorded (`held` gave back its own), and
                    // what was taken but not recorded yet.
                    for hold in holds.iter().flatten() {
                        let _ = members[0].release_member(hold);
                    }
                    let rest = &asked[position + 1..];
                    let rest_owners = &owners[position + 1..];
                    Self::give_back(members, &[], rest, rest_owners, &found[position + 1..]);
                    return Err(error);
                }
            }
        }
        Ok(TryAll::Taken(holds.into_iter().flatten().collect()))
    }

    /// After a multi step that is not kept: the re-entered holds count down again, and the
    /// holds the backend made in this step go back. Holds this step extended stay as they are
    /// (the store never shortened them, and the thread still relies on them).
    fn give_back(
        members: &[&Handle],
        reentered: &[Option<Arc<Hold>>],
        asked: &[(usize, Option<Arc<Hold>>)],
        owners: &[OwnerId],
        found: &[Acquire],
    ) {
        for hold in reentered.iter().flatten() {
            hold.decrement();
        }
        let given: Vec<HoldRef<'_>> = asked
            .iter()
            .zip(owners)
            .zip(found)
            .filter(|(((_, extending), _), found)| extending.is_none() && found.is_acquired())
            .map(|(((index, _), owner), _)| HoldRef {
                lock: members[*index].target.as_ref(),
                owner,
            })
            .collect();
        if let (Some(first), false) = (members.first(), given.is_empty()) {
            for (result, hold) in first.client.backend.release_many(&given).iter().zip(&given) {
                if let Err(error) = result {
                    tracing::warn!(lock = hold.lock.name, %error, "dlock: giving back a multi-lock member failed; its lease will end it");
                }
            }
        }
    }

    /// Releases a hold of any member of this client (used by a multi-lock, whose holds are of
    /// several handles).
    pub(crate) fn release_member(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        Handle::new(
            self.client.clone(),
            hold.target.name.clone(),
            hold.target.kind,
        )
        .release_one(hold)
    }

    fn lost(&self, reason: LossReason) -> LockError {
        LockError::LeaseLost {
            name: self.name().to_owned(),
            reason,
        }
    }

    /// Releases one hold of the calling thread given up with `leak`.
    pub(crate) fn unlock_leaked(&self) -> Result<(), LockError> {
        validate_name(self.name())?;
        match hold::find(self.client.key, self.name(), self.kind()) {
            Some(hold) if hold.count() > 0 => self.release_one(&hold),
            _ => Err(LockError::NotHeld {
                name: self.name().to_owned(),
            }),
        }
    }

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

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.target.name)
            .field("kind", &self.target.kind)
            .finish_non_exhaustive()
    }
}
