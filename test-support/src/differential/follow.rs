//! Running a sequence on a backend while following the model: each step's answer must be one
//! the model allows, and the model's states are narrowed to those that give it.
//!
//! The model is followed as a set of candidate states: a step whose fate is not known (a reply
//! cut, a request held up, a lease ending between when the step was sent and when its answer
//! came) gives each outcome the model allows, and the backend's answer keeps those that match.

use std::time::Duration;

use dlock_protocol_model::name::Lease;
use dlock_protocol_model::{
    Answer, Family, HandsOver, HoldId, Keep, Keeps, Kind, Name, RequestId, Settings, Step, Store,
    Time, WaiterId,
};
use dlocks::backend::{
    Acquire, AcquireRequest, CounterStep, DistributedLock, GrantOffer, Handover, HoldRef, LockRef,
    OwnerId, Release, Renewal,
};
use dlocks::{LockError, LockKind};

use super::sequence::{lock_kind, long, Op, SHORT};
use super::{Fault, Target};

/// What the backend answered a step: an answer in the model's terms, or an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Observed {
    Answer(Answer),
    Error(String),
}

/// One state the model may be in: the store, the requests held up on their way (in order),
/// how the backend's fencing tokens match the model's so far (per name: model token →
/// backend token), and the holds whose lease ran out that the store may still keep for a
/// request landing late (see [`Target::lingering`]).
#[derive(Clone, PartialEq, Eq)]
struct Candidate {
    store: Store,
    held: Vec<(Step, RequestId)>,
    tokens: Vec<(Name, u64, u64)>,
    lapsed: Vec<(Name, Family, Lease)>,
}

impl Candidate {
    /// Notes the holders whose lease has run out at `now` (the store's next step ends them),
    /// while they may still linger on the store, and forgets those that can linger no more.
    fn note_lapsed(&mut self, now: Time, lingering: Time) {
        if lingering == 0 {
            return;
        }
        self.lapsed
            .retain(|(_, _, lease)| lease.until.saturating_add(lingering) > now);
        for (name, state) in self.store.names.iter().enumerate() {
            let lapsed = state.holder.filter(|h| h.until <= now);
            if let (Some(holder), Some(family)) = (lapsed, state.family) {
                if holder.until.saturating_add(lingering) > now {
                    self.lapsed.push((name as Name, family, holder));
                }
            }
        }
    }

    /// Takes `step` sent as `request` at `now`, noting first what lapsed by then.
    fn apply(&mut self, step: &Step, request: RequestId, now: Time, lingering: Time) -> Answer {
        self.note_lapsed(now, lingering);
        self.store.apply(step, request, now).answer
    }

    /// Settles the store at `now`, noting first what lapsed by then.
    fn settle(&mut self, now: Time, lingering: Time) {
        self.note_lapsed(now, lingering);
        self.store.settle(now);
    }

    /// `step`, landing late at `now`, as it lands where the store still keeps the hold it acts
    /// on after that hold's lease ran out: a hand-over of a hold that lapsed within the store's
    /// lingering, to a name nothing took since, hands it over as if the hold were live (etcd:
    /// the hold's key is there until etcd ends its lease). `None` where that cannot happen.
    fn lingering_hand_over(
        &self,
        step: &Step,
        request: RequestId,
        now: Time,
        lingering: Time,
    ) -> Option<Candidate> {
        let Step::ReleaseTo {
            name, kind, owner, ..
        } = step
        else {
            return None;
        };
        let at = self.lapsed.iter().position(|(n, family, lease)| {
            n == name && *family == kind.family() && lease.hold == *owner
        })?;
        let state = &self.store.names[usize::from(*name)];
        let untouched = state.holder.is_none()
            && state.readers.is_empty()
            && state.permits.is_none()
            && state.permits_held.is_empty()
            && state.count.is_none()
            && state.queue.is_empty();
        let (_, family, lease) = self.lapsed[at];
        if !untouched || lease.until.saturating_add(lingering) <= now {
            return None;
        }
        let mut revived = self.clone();
        revived.lapsed.remove(at);
        let state = &mut revived.store.names[usize::from(*name)];
        state.family = Some(family);
        state.holder = Some(Lease {
            until: now + 1,
            ..lease
        });
        revived.store.apply(step, request, now);
        Some(revived)
    }
}

/// How a sequence's model ids read on the store.
struct Ids {
    prefix: String,
    owner_prefix: u64,
}

impl Ids {
    fn new() -> Self {
        let id = uuid::Uuid::new_v4();
        let (high, _) = id.as_u64_pair();
        Ids {
            prefix: id.simple().to_string()[..12].to_owned(),
            owner_prefix: high,
        }
    }

    fn name(&self, name: Name) -> String {
        format!("{}{}:n{name}", super::NAME_PREFIX, self.prefix)
    }

    /// A hold's id as a client makes it: a semaphore's permit, 32 hex digits (Redisson's
    /// form); any other kind's, `<client>:<thread>`, of one of two clients, so that the holds
    /// of one client share what a backend keeps per client (etcd's client key and session).
    fn owner(&self, hold: HoldId, kind: Kind) -> OwnerId {
        match kind {
            Kind::Semaphore | Kind::Latch => {
                OwnerId::from_raw(format!("{:016x}{:016x}", self.owner_prefix, hold.0))
            }
            _ => OwnerId::from_raw(format!(
                "{:016x}{}:{}",
                self.owner_prefix,
                Self::client(hold),
                hold.0
            )),
        }
    }

    /// How many clients the holds of a sequence belong to.
    const CLIENTS: u32 = 2;

    /// The client hold `hold` belongs to.
    fn client(hold: HoldId) -> u32 {
        hold.0 % Self::CLIENTS
    }

    fn hold_of(&self, owner: &str) -> Option<HoldId> {
        let (prefix, number) = owner.split_at_checked(16)?;
        if u64::from_str_radix(prefix, 16).ok()? != self.owner_prefix {
            return None;
        }
        match number.split_once(':') {
            Some((_, thread)) => thread.parse().ok().map(HoldId),
            None => u32::from_str_radix(number, 16).ok().map(HoldId),
        }
    }

    fn waiter(&self, waiter: WaiterId) -> OwnerId {
        OwnerId::from_raw(format!("{}:waiter-{}", self.prefix, waiter.0))
    }
}

/// A step with the short lease's placeholder replaced by `short`, in microseconds.
fn with_leases(step: &Step, short: Time) -> Step {
    let lease = |lease: Time| if lease == SHORT { short } else { lease };
    let mut step = step.clone();
    match &mut step {
        Step::Acquire(acquire) => acquire.lease = lease(acquire.lease),
        Step::Renew { lease: l, .. } | Step::ReleaseTo { lease: l, .. } => *l = lease(*l),
        _ => {}
    }
    step
}

/// Runs `ops` on `target`'s backend while following the model: the first answer the model
/// does not allow, in words.
/// A step the backend answered otherwise than the model allows.
#[derive(Debug)]
pub(super) struct Mismatch {
    /// The kind of step and of answer, to tell the same mismatch in a shorter sequence.
    pub(super) shape: String,
    /// The step, the backend's answer and the model's, in words.
    pub(super) text: String,
}

/// A step's kind, without its arguments.
fn step_shape(step: &Step) -> String {
    let text = format!("{step:?}");
    text.split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// An answer's kind, without its values.
fn observed_shape(observed: &Observed) -> String {
    match observed {
        Observed::Error(_) => "an error".to_owned(),
        Observed::Answer(answer) => {
            let text = format!("{answer:?}");
            text.split(['(', ' ', '{'])
                .next()
                .unwrap_or_default()
                .to_owned()
        }
    }
}

pub(super) fn check(target: &dyn Target, ops: &[Op]) -> Result<(), Mismatch> {
    let checked = follow(target, ops);
    // Nothing is left held up in the network (a held connection keeps a server's slot).
    target.deliver();
    checked
}

fn follow(target: &dyn Target, ops: &[Op]) -> Result<(), Mismatch> {
    let backend = target.backend();
    let ids = Ids::new();
    let short = target.short_lease().as_micros() as Time;
    let start = target.now();
    let lingering = target.lingering().as_micros() as Time;
    let micros = |at: Duration| at.saturating_sub(start).as_micros() as Time;
    // Each step's answer so far, for the report of a mismatch.
    let mut answers: Vec<String> = Vec::new();
    let mut candidates = vec![Candidate {
        store: Store::new(3, settings_of(&*backend)),
        held: Vec::new(),
        tokens: Vec::new(),
        lapsed: Vec::new(),
    }];
    let mut longest_short_end: Time = 0;
    // The holds some step of the sequence may have taken: answered as taking, or sent with an
    // outcome the client could not see (their ids may have ended since).
    let mut maybe_taken: Vec<HoldId> = Vec::new();
    for (at, op) in ops.iter().enumerate() {
        let step = match op {
            Op::Wait => {
                let now = micros(target.now());
                let until = longest_short_end.max(now);
                target.wait(
                    Duration::from_micros(until - now) + target.short_lease() / 4 + target.slack(),
                );
                answers.push(format!("  {}. waited", at + 1));
                continue;
            }
            Op::Deliver => {
                let sent = micros(target.now());
                target.deliver();
                let landed_by = micros(target.now()) + target.slack().as_micros() as Time;
                // Held requests go out together, each on its own connection: they may land
                // in any order, and (where the store may lose one) not at all; and any time
                // until the delivery returned (a short lease may have run out by then).
                let lossy = target.may_lose_held();
                let mut starts = Vec::new();
                for candidate in candidates.drain(..) {
                    let sets_short = candidate
                        .held
                        .iter()
                        .any(|(step, _)| sets_lease(step, short));
                    let mut late = candidate.clone();
                    late.settle(landed_by, lingering);
                    if late.store != candidate.store || sets_short {
                        starts.push((late, landed_by));
                    }
                    if sets_short {
                        longest_short_end = longest_short_end.max(landed_by + short);
                    }
                    starts.push((candidate, sent));
                }
                let mut delivered = Vec::new();
                for (candidate, landed_at) in starts {
                    let held = candidate.held.clone();
                    for order in orders(held.len()) {
                        let mut landed = vec![Candidate {
                            held: Vec::new(),
                            ..candidate.clone()
                        }];
                        for at in order {
                            let (step, request) = &held[at];
                            let lost = if lossy { landed.clone() } else { Vec::new() };
                            let mut lingered = Vec::new();
                            for state in &mut landed {
                                state.settle(landed_at, lingering);
                                lingered.extend(
                                    state.lingering_hand_over(step, *request, landed_at, lingering),
                                );
                                state.apply(step, *request, landed_at, lingering);
                            }
                            landed.extend(lost);
                            landed.extend(lingered);
                        }
                        delivered.extend(landed);
                    }
                }
                candidates = delivered;
                dedup(&mut candidates);
                answers.push(format!("  {}. delivered", at + 1));
                continue;
            }
            Op::Step(step, fault) => (with_leases(step, short), *fault),
        };
        let (step, fault) = step;
        let armed = fault.filter(|fault| target.arm(*fault, &step, &ids.name(step_name(&step))));
        let request = RequestId(at as u32 + 1);
        let sent = micros(target.now());
        let observed = take(&*backend, &ids, &step);
        let answered = micros(target.now()) + target.slack().as_micros() as Time;
        let armed = armed.filter(|_| target.fired());
        // A backend that could not tell what became of a step says so (an error): the step may
        // have landed or not, as with a reply lost.
        let armed = match (&observed, armed) {
            (Observed::Error(_), None) => Some(Fault::CutReply),
            (_, armed) => armed,
        };
        if sets_lease(&step, short) {
            longest_short_end = longest_short_end.max(answered + short);
        }
        let mut next = Vec::new();
        let mut allowed = Vec::new();
        for candidate in &candidates {
            let times = (sent, answered);
            let outcomes = outcomes(candidate, &step, request, armed, times, (short, lingering));
            for (answer, after) in outcomes {
                let mut after = after;
                if fits(&answer, &observed, &step, &mut after.tokens) {
                    next.push(after);
                } else {
                    allowed.push(answer);
                }
            }
        }
        if next.is_empty() && gone_conservatively(&step, &observed, &maybe_taken) {
            // A store may refuse to make again under its id a hold that ended (expired, past
            // its lease when force-unlocked): "gone" is what the hold rule asks for an ended
            // hold, and makes nothing.
            next = candidates.clone();
        }
        if let Step::Acquire(acquire) = &step {
            // A request held up or whose reply was lost may land and make its hold.
            let taken = matches!(observed, Observed::Answer(Answer::Acquired { .. }));
            if taken || armed.is_some() {
                maybe_taken.push(acquire.owner);
            }
        }
        if next.is_empty() {
            allowed.dedup();
            return Err(Mismatch {
                shape: format!("{}: {}", step_shape(&step), observed_shape(&observed)),
                text: format!(
                    "step {} ({step:?}{}): the backend answered {observed:?}; the model allows \
                     {allowed:?}\nwhat this run's steps answered (a timing-dependent mismatch \
                     may not replay):\n{}",
                    at + 1,
                    armed.map_or(String::new(), |fault| format!(", {fault:?}")),
                    answers.join("\n")
                ),
            });
        }
        answers.push(format!(
            "  {}. {observed:?}{}",
            at + 1,
            armed.map_or(String::new(), |fault| format!(" ({fault:?} met)"))
        ));
        dedup(&mut next);
        candidates = next;
    }
    Ok(())
}

/// The model's store for `backend`: what it hands over, and which records it keeps. Records
/// that lapse outlive a sequence (tombstones and latched answers are kept for minutes), so
/// they are kept for good here; a record a backend does not keep at all is not: etcd keeps no
/// release record, so a release sent again that finds its hold gone answers "not held" (the
/// hold is reported lost), even when its first copy released it.
fn settings_of(backend: &dyn DistributedLock) -> Settings {
    let keeps_releases = backend.backend_name() != "etcd";
    Settings {
        // A turn, or a grant's proof, is believed by the waiter; the store's steps are the same
        // either way.
        turns: false,
        proofs: false,
        lock_turns: backend.keeps_turns(),
        hands_over: HandsOver {
            reentrant: backend.hands_over(LockKind::Reentrant),
            permit: backend.hands_over(LockKind::Semaphore),
        },
        keeps: Keeps {
            releases: if keeps_releases {
                Keep::Always
            } else {
                Keep::Never
            },
            ..Keeps::ALWAYS
        },
        ops_per_step: None,
    }
}

/// Every order of `count` items (one order, as sent, beyond four).
fn orders(count: usize) -> Vec<Vec<usize>> {
    if count > 4 {
        return vec![(0..count).collect()];
    }
    let mut orders = vec![Vec::new()];
    for _ in 0..count {
        orders = orders
            .into_iter()
            .flat_map(|order: Vec<usize>| {
                (0..count)
                    .filter(|at| !order.contains(at))
                    .map(|at| {
                        let mut longer = order.clone();
                        longer.push(at);
                        longer
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    orders
}

/// The most candidate states followed at once: beyond, the oldest-found are kept.
const MOST_CANDIDATES: usize = 128;

fn dedup(candidates: &mut Vec<Candidate>) {
    let mut kept: Vec<Candidate> = Vec::with_capacity(candidates.len());
    for candidate in candidates.drain(..) {
        if !kept.contains(&candidate) {
            kept.push(candidate);
        }
    }
    kept.truncate(MOST_CANDIDATES);
    *candidates = kept;
}

fn step_name(step: &Step) -> Name {
    match step {
        Step::Acquire(acquire) => acquire.name,
        Step::Release { name, .. }
        | Step::ReleaseTo { name, .. }
        | Step::Status { name, .. }
        | Step::ForceUnlock { name, .. }
        | Step::Counter { name, .. }
        | Step::Leader { name }
        | Step::CancelWait { name, .. } => *name,
        Step::Renew { holds, .. } => holds.first().map_or(0, |(name, _, _)| *name),
    }
}

/// What the model allows for `step` from `candidate`: each possible answer (`None`: the caller
/// got an error) with the state after. The step landed at some moment between `sent` and
/// `answered` (`times`): the two ends are followed, so a lease that ends in between may or may
/// not have ended when it landed, and a short lease it sets may end as late as `answered` plus
/// the lease (the server starts it when the step runs, which load can delay); a fault gives
/// the outcomes it allows.
fn outcomes(
    candidate: &Candidate,
    step: &Step,
    request: RequestId,
    fault: Option<Fault>,
    (sent, answered): (Time, Time),
    (short, lingering): (Time, Time),
) -> Vec<(Option<Answer>, Candidate)> {
    let mut starts = vec![(candidate.clone(), sent)];
    let mut late = candidate.clone();
    late.settle(answered, lingering);
    if late.store != candidate.store || sets_lease(step, short) {
        starts.push((late, answered));
    }
    let mut found = Vec::new();
    for (start, landed) in starts {
        let apply = |mut state: Candidate, times: usize| {
            let mut answer = None;
            for _ in 0..times {
                answer = Some(state.apply(step, request, landed, lingering));
            }
            (answer, state)
        };
        // A store may mark a read-write waiter, or queue a fair one, in a call of its own after
        // the refusal (etcd): a reply lost, or a request held up, before that call leaves the
        // refusal unmarked. (Marks and places only refuse: no hold differs between the two.)
        let unmarked = unmarked(step);
        match fault {
            None => found.push(apply(start, 1)),
            Some(Fault::CutReply) => {
                // Sent again by the backend (its answer), where the protocol allows it, or
                // not (an error).
                if step.may_be_sent_again() {
                    let (answer, twice) = apply(start.clone(), 2);
                    found.push((answer, twice.clone()));
                    // The copy sent again landed too, and its own answer came too late for
                    // the step's deadline: an error.
                    found.push((None, twice));
                }
                if let Some(unmarked) = &unmarked {
                    let mut state = start.clone();
                    state.apply(unmarked, request, landed, lingering);
                    found.push((None, state));
                }
                let (_, once) = apply(start, 1);
                found.push((None, once));
            }
            Some(Fault::HoldBack) => {
                if let Some(unmarked) = &unmarked {
                    let mut later = start.clone();
                    later.held.push((unmarked.clone(), request));
                    found.push((None, later));
                }
                // Held up, and sent again by the backend (its answer), where the protocol
                // allows it, or not (an error).
                let mut later = start.clone();
                later.held.push((step.clone(), request));
                if step.may_be_sent_again() {
                    let (answer, resent) = apply(later.clone(), 1);
                    found.push((answer, resent.clone()));
                    // The copy sent again landed, and its answer came too late for the
                    // step's deadline (the held one took most of it): an error.
                    found.push((None, resent));
                }
                found.push((None, later));
            }
        }
    }
    found
}

/// `step` as a plain or read-write waiter's acquire that leaves no mark, or a fair waiter's
/// that makes no place, if it is one that marks or queues (a fair waiter that offers to be
/// granted the lock queues in its refusal's own step: only a store whose release grants is
/// sent offers).
fn unmarked(step: &Step) -> Option<Step> {
    match step {
        Step::Acquire(acquire)
            if acquire.will_wait
                && (matches!(
                    acquire.kind,
                    Kind::Reentrant | Kind::Fenced | Kind::Read | Kind::Write
                ) || acquire.kind == Kind::Fair && acquire.offer.is_none()) =>
        {
            let mut unmarked = *acquire;
            unmarked.will_wait = false;
            Some(Step::Acquire(unmarked))
        }
        _ => None,
    }
}

/// Whether `step` takes or renews a hold for `lease`.
fn sets_lease(step: &Step, lease: Time) -> bool {
    match step {
        Step::Acquire(acquire) => acquire.lease == lease,
        Step::Renew { lease: renewed, .. } => *renewed == lease,
        _ => false,
    }
}

/// Whether the model's `answer` (`None`: an error) is what the backend `observed`, fencing
/// tokens compared by their order (a backend's tokens are its own numbers).
fn fits(
    answer: &Option<Answer>,
    observed: &Observed,
    step: &Step,
    tokens: &mut Vec<(Name, u64, u64)>,
) -> bool {
    let (answer, observed) = match (answer, observed) {
        (None, Observed::Error(_)) => return true,
        (Some(answer), Observed::Answer(observed)) => (answer, observed),
        _ => return false,
    };
    match (answer, observed) {
        (Answer::Acquired { token: Some(model) }, Answer::Acquired { token: Some(real) }) => {
            let name = step_name(step);
            let consistent = tokens
                .iter()
                .filter(|(n, _, _)| *n == name)
                .all(|(_, m, r)| (m < model) == (r < real) && (m == model) == (r == real));
            if consistent {
                tokens.push((name, *model, *real));
            }
            consistent
        }
        (answer, observed) => answer == observed,
    }
}

/// The backend's answer to `step`, in the model's terms.
fn take(backend: &dyn DistributedLock, ids: &Ids, step: &Step) -> Observed {
    let lease_of = |micros: Time| Duration::from_micros(micros);
    let answer = |result: Result<Answer, LockError>| match result {
        Ok(answer) => Observed::Answer(answer),
        Err(LockError::WrongKind { .. }) => Observed::Answer(Answer::WrongKind),
        Err(LockError::Unsupported { .. }) => Observed::Answer(Answer::Unsupported),
        Err(error) => Observed::Error(error.to_string()),
    };
    match step {
        Step::Acquire(acquire) => {
            let name = ids.name(acquire.name);
            let owner = ids.owner(acquire.owner, acquire.kind);
            let waiter = ids.waiter(acquire.waiter);
            let write_hold = acquire.write_hold.map(|hold| ids.owner(hold, Kind::Write));
            let candidate = owner.as_str().to_owned();
            let lock = LockRef::new(&name, lock_kind(acquire.kind));
            let mut request = AcquireRequest::new(lock, &owner, lease_of(acquire.lease))
                .queued_as(&waiter)
                .under_write_hold(write_hold.as_ref())
                .reentering(acquire.reentry)
                .waiting(acquire.will_wait, lease_of(long()))
                // A hint that must not change the answer: half the holds give it.
                .as_first_try(acquire.owner.0 % 2 == 0)
                .with_value((acquire.kind == Kind::Election).then_some(candidate.as_str()));
            if let Some(offer) = acquire.offer {
                request =
                    request.accepting_grant(GrantOffer::new(lease_of(offer.lease), offer.attempt));
            }
            answer(backend.try_acquire(&request).map(|found| match found {
                Acquire::Acquired(grant) => Answer::Acquired {
                    token: grant.fencing_token,
                },
                Acquire::Gone { .. } => Answer::Gone,
                _ => Answer::Held,
            }))
        }
        Step::Release { name, kind, owner } => {
            let name = ids.name(*name);
            let owner = ids.owner(*owner, *kind);
            answer(
                backend
                    .release(LockRef::new(&name, lock_kind(*kind)), &owner)
                    .map(|release| match release {
                        Release::NotHeld => Answer::NotHeld,
                        _ => Answer::Released,
                    }),
            )
        }
        Step::ReleaseTo {
            name,
            kind,
            owner,
            successor,
            lease,
        } => {
            let name = ids.name(*name);
            let owner = ids.owner(*owner, *kind);
            let successor = ids.owner(*successor, *kind);
            let lock = LockRef::new(&name, lock_kind(*kind));
            let request = AcquireRequest::new(lock, &successor, lease_of(*lease));
            answer(
                backend
                    .release_to(lock, &owner, &request)
                    .map(|handover| match handover {
                        Handover::Granted(_) => Answer::Handed,
                        Handover::NotHeld => Answer::NotHeld,
                        _ => Answer::Released,
                    }),
            )
        }
        Step::Renew { holds, lease, .. } => {
            let names: Vec<String> = holds.iter().map(|(name, ..)| ids.name(*name)).collect();
            let owners: Vec<OwnerId> = holds
                .iter()
                .map(|(_, kind, owner)| ids.owner(*owner, *kind))
                .collect();
            let refs: Vec<HoldRef<'_>> = holds
                .iter()
                .zip(&names)
                .zip(&owners)
                .map(|(((_, kind, _), name), owner)| HoldRef {
                    lock: LockRef::new(name, lock_kind(*kind)),
                    owner,
                })
                .collect();
            // One batch, as a client's watchdog sends it; the holds of both clients in one
            // batch are the contract's to take too.
            match backend.renew(&refs, lease_of(*lease)) {
                Ok(found) if found.contains(&Renewal::Unanswered) => {
                    Observed::Error("a part of the renewal was unanswered".into())
                }
                Ok(found) => Observed::Answer(Answer::Renewed(
                    found.iter().map(|r| *r == Renewal::Renewed).collect(),
                )),
                Err(error) => answer(Err(error)),
            }
        }
        Step::Status { name, kind, owner } => {
            let name = ids.name(*name);
            let owner = ids.owner(*owner, *kind);
            answer(
                backend
                    .status(LockRef::new(&name, lock_kind(*kind)), &owner)
                    .map(|status| Answer::Status {
                        locked: status.locked,
                        mine: status.held_by_owner,
                    }),
            )
        }
        Step::ForceUnlock { name, kind } => {
            let name = ids.name(*name);
            answer(
                backend
                    .force_unlock(LockRef::new(&name, lock_kind(*kind)))
                    .map(Answer::Forced),
            )
        }
        Step::Counter { name, step } => {
            let name = ids.name(*name);
            use dlock_protocol_model::Counter;
            let step = match step {
                Counter::TrySetPermits(permits) => CounterStep::TrySetPermits {
                    name: &name,
                    permits: *permits,
                },
                Counter::AddPermits(permits) => CounterStep::AddPermits {
                    name: &name,
                    permits: *permits,
                },
                Counter::AvailablePermits => CounterStep::AvailablePermits { name: &name },
                Counter::TrySetCount(count) => CounterStep::TrySetCount {
                    name: &name,
                    count: *count,
                },
                Counter::CountDown => CounterStep::CountDown { name: &name },
                Counter::Count => CounterStep::Count { name: &name },
            };
            answer(backend.counter(step).map(Answer::Count))
        }
        Step::Leader { name } => {
            let name = ids.name(*name);
            answer(
                backend
                    .leader(LockRef::new(&name, LockKind::Election))
                    .map(|leader| Answer::Leader(leader.and_then(|l| ids.hold_of(&l.candidate)))),
            )
        }
        Step::CancelWait { name, kind, waiter } => {
            let name = ids.name(*name);
            let waiter = ids.waiter(*waiter);
            answer(
                backend
                    .cancel_wait(
                        LockRef::new(&name, lock_kind(*kind)),
                        &waiter,
                        lease_of(long()),
                    )
                    .map(|()| Answer::Done),
            )
        }
    }
}

/// Whether `observed` is a fresh acquire's "gone" for a hold some earlier step may have taken:
/// the hold ended since, and the store does not make it again under its id.
fn gone_conservatively(step: &Step, observed: &Observed, maybe_taken: &[HoldId]) -> bool {
    matches!(
        (step, observed),
        (Step::Acquire(acquire), Observed::Answer(Answer::Gone))
            if !acquire.reentry && maybe_taken.contains(&acquire.owner)
    )
}
