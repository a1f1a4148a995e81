//! The store: what every backend keeps of each name, and what each step does to it, at an
//! instant of the store's clock. The one definition every backend is held to.

use crate::few::Few;
use crate::kind::{Family, Kind};
use crate::step::{
    Acquire, Answer, Counter, Grant, HoldId, Name, Offer, RequestId, Step, Time, WaiterId,
};

/// A hold on the store and the end of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// The hold.
    pub hold: HoldId,
    /// When its lease ends (the hold is over at this instant).
    pub until: Time,
}

/// A fair waiter in the queue, with its latest attempt's offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Queued {
    /// The waiter.
    pub waiter: WaiterId,
    /// Its offer, if it made one.
    pub offer: Option<Offer>,
}

/// One name's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NameState {
    /// What it was taken as, while in use.
    pub family: Option<Family>,
    /// The exclusive holder (lock, fair lock, writer, leader).
    pub holder: Option<Lease>,
    /// A read-write lock's readers, by hold.
    pub readers: Few<Lease>,
    /// A semaphore's available permits (`None`: never set).
    pub permits: Option<u64>,
    /// A semaphore's permits held, by hold.
    pub permits_held: Few<Lease>,
    /// A latch's count (`None`: open).
    pub count: Option<u64>,
    /// The last token issued under the name (outlives its holds).
    pub token: u64,
    /// The fair lock's queue, in arrival order.
    pub queue: Few<Queued>,
    /// Holds an operator force-unlocked: never made again under their ids (a copy of their
    /// acquire that arrives late finds them gone).
    pub ended: Few<HoldId>,
}

impl NameState {
    /// Whether it is in use (so another family is refused).
    fn in_use(&self) -> bool {
        self.holder.is_some()
            || !self.readers.is_empty()
            || self.permits.is_some()
            || !self.permits_held.is_empty()
            || self.count.is_some()
            || !self.queue.is_empty()
    }

    /// Takes the name as `kind`'s family, unless it is in use as another.
    fn claim(&mut self, kind: Kind) -> bool {
        let wanted = kind.family();
        if !self.in_use() {
            self.family = None;
        }
        match self.family {
            Some(family) if family != wanted => false,
            _ => {
                self.family = Some(wanted);
                true
            }
        }
    }

    /// Whether the name is in use as another family than `kind`'s.
    fn used_as_other(&self, kind: Kind) -> bool {
        self.in_use() && self.family.is_some_and(|family| family != kind.family())
    }

    /// Whether `owner` has a hold of `kind` here.
    pub fn holds(&self, kind: Kind, owner: HoldId) -> bool {
        if self.used_as_other(kind) {
            return false;
        }
        match kind {
            Kind::Read => self.readers.iter().any(|r| r.hold == owner),
            Kind::Semaphore => self.permits_held.iter().any(|p| p.hold == owner),
            Kind::Latch => false,
            _ => self.holder.is_some_and(|h| h.hold == owner),
        }
    }

    /// The lease end of `owner`'s hold of `kind`, if it has one.
    pub fn lease_of(&self, kind: Kind, owner: HoldId) -> Option<Time> {
        if !self.holds(kind, owner) {
            return None;
        }
        let of = |leases: &[Lease]| leases.iter().find(|l| l.hold == owner).map(|l| l.until);
        match kind {
            Kind::Read => of(&self.readers),
            Kind::Semaphore => of(&self.permits_held),
            _ => self.holder.map(|h| h.until),
        }
    }
}

/// Sets `hold`'s lease in `leases` to end no earlier than `until` (adding it if absent).
fn extend(leases: &mut Few<Lease>, hold: HoldId, until: Time) {
    match leases.iter_mut().find(|l| l.hold == hold) {
        Some(lease) => lease.until = lease.until.max(until),
        None => {
            leases.push(Lease { hold, until });
            leases.sort();
        }
    }
}

/// What applying a step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// Its answer.
    pub answer: Answer,
    /// The grants it made (a fair release hands the lock to the head waiter).
    pub grants: Few<Grant>,
    /// The holds it ended other than by their owner's release (a force unlock), with the
    /// ends their leases had.
    pub ended: Few<Lease>,
    /// It was a request sent again whose answer the store replayed (nothing else was done).
    pub replayed: bool,
}

impl Applied {
    fn answer(answer: Answer) -> Self {
        Applied {
            answer,
            grants: Few::new(),
            ended: Few::new(),
            replayed: false,
        }
    }
}

/// Which kinds a store hands over in place on `release_to` (the others release).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandsOver {
    /// The reentrant lock.
    pub reentrant: bool,
    /// A semaphore's permit.
    pub permit: bool,
}

/// The whole store: every name's state, and the answers of latched steps by request id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    /// Each name's state, by index.
    pub names: Few<NameState>,
    /// The answers of the latched steps (releases, set-once steps), by request id: a request
    /// sent again replays its first answer.
    pub latched: Few<(RequestId, Answer)>,
    /// What `release_to` hands over.
    pub hands_over: HandsOver,
}

impl Store {
    /// A store of `names` free names.
    pub fn new(names: usize, hands_over: HandsOver) -> Self {
        Store {
            names: std::iter::repeat_n(NameState::default(), names).collect(),
            latched: Few::new(),
            hands_over,
        }
    }

    /// Ends every lease that ended at `now` (a permit whose lease ended comes back).
    pub fn settle(&mut self, now: Time) {
        for state in &mut self.names {
            if state.holder.is_some_and(|h| h.until <= now) {
                state.holder = None;
            }
            state.readers.retain(|r| r.until > now);
            let before = state.permits_held.len();
            state.permits_held.retain(|p| p.until > now);
            let back = (before - state.permits_held.len()) as u64;
            if back > 0 {
                state.permits = Some(state.permits.unwrap_or(0) + back);
            }
        }
    }

    /// Loses what the store kept of `name`'s holds (a failover to a replica without the last
    /// writes, a crash of an unlogged table, an eviction), and what it knew of holds ended:
    /// the tokens are kept (they are drawn from the clock on a real store).
    pub fn lose(&mut self, name: Name) -> Few<Lease> {
        let state = &mut self.names[usize::from(name)];
        state.ended.clear();
        let mut ended: Few<Lease> = state.holder.take().into_iter().collect();
        ended.extend(state.readers.drain(..));
        ended.extend(state.permits_held.drain(..));
        ended
    }

    /// Takes `step` sent as `request` at `now` (after settling what ended by then). A request
    /// taken before whose answer is latched replays it.
    pub fn apply(&mut self, step: &Step, request: RequestId, now: Time) -> Applied {
        self.settle(now);
        if step.is_latched() {
            if let Some((_, answer)) = self.latched.iter().find(|(id, _)| *id == request) {
                let mut replay = Applied::answer(answer.clone());
                replay.replayed = true;
                return replay;
            }
        }
        let applied = self.take(step, now);
        let keep = match (step, &applied.answer) {
            // A release that found nothing keeps nothing: sent again, it finds nothing again.
            (Step::Release { .. } | Step::ReleaseTo { .. }, Answer::NotHeld) => false,
            (_, Answer::WrongKind | Answer::Unsupported) => false,
            _ => step.is_latched(),
        };
        if keep {
            self.latched.push((request, applied.answer.clone()));
            self.latched.sort_by_key(|(id, _)| *id);
        }
        applied
    }

    fn take(&mut self, step: &Step, now: Time) -> Applied {
        match step {
            Step::Acquire(acquire) => self.acquire(acquire, now),
            Step::Release { name, kind, owner } => self.release(*name, *kind, *owner, now),
            Step::ReleaseTo {
                name,
                kind,
                owner,
                successor,
                lease,
            } => self.release_to(*name, *kind, *owner, *successor, now + lease, now),
            Step::Renew { holds, lease } => Applied::answer(Answer::Renewed(
                holds
                    .iter()
                    .map(|(name, kind, owner)| self.renew(*name, *kind, *owner, now + lease))
                    .collect(),
            )),
            Step::Status { name, kind, owner } => self.status(*name, *kind, *owner),
            Step::ForceUnlock { name, kind } => self.force_unlock(*name, *kind),
            Step::Counter { name, step } => self.counter(*name, *step),
            Step::Leader { name } => {
                let state = &mut self.names[usize::from(*name)];
                if !state.claim(Kind::Election) {
                    return Applied::answer(Answer::WrongKind);
                }
                Applied::answer(Answer::Leader(state.holder.map(|h| h.hold)))
            }
            Step::CancelWait { name, waiter } => {
                let state = &mut self.names[usize::from(*name)];
                state.queue.retain(|q| q.waiter != *waiter);
                Applied::answer(Answer::Done)
            }
        }
    }

    fn acquire(&mut self, request: &Acquire, now: Time) -> Applied {
        let state = &mut self.names[usize::from(request.name)];
        let owner = request.owner;
        let until = now + request.lease;
        if (request.reentry && !state.holds(request.kind, owner)) || state.ended.contains(&owner) {
            // An ended hold stays ended: an extend never makes it again, and a copy of the
            // acquire that made a hold since force-unlocked does not either.
            return Applied::answer(Answer::Gone);
        }
        if !state.claim(request.kind) {
            return Applied::answer(Answer::WrongKind);
        }
        let taken = |token: Option<u64>| Applied::answer(Answer::Acquired { token });
        match request.kind {
            Kind::Read => match state.holder {
                Some(writer) if Some(writer.hold) != request.write_hold => {
                    Applied::answer(Answer::Held)
                }
                _ => {
                    extend(&mut state.readers, owner, until);
                    taken(None)
                }
            },
            Kind::Write => match state.holder {
                Some(writer) if writer.hold == owner => {
                    extend_holder(state, until);
                    taken(None)
                }
                Some(_) => Applied::answer(Answer::Held),
                None if !state.readers.is_empty() => Applied::answer(Answer::Held),
                None => {
                    state.holder = Some(Lease { hold: owner, until });
                    taken(None)
                }
            },
            Kind::Fair => {
                let head_or_none = state
                    .queue
                    .first()
                    .is_none_or(|head| head.waiter == request.waiter);
                match state.holder {
                    None if head_or_none => {
                        state.queue.retain(|q| q.waiter != request.waiter);
                        state.holder = Some(Lease { hold: owner, until });
                        taken(None)
                    }
                    Some(holder) if holder.hold == owner => {
                        extend_holder(state, until);
                        taken(None)
                    }
                    _ => {
                        let queued = state.queue.iter().any(|q| q.waiter == request.waiter);
                        if !queued && request.will_wait {
                            state.queue.push(Queued {
                                waiter: request.waiter,
                                offer: None,
                            });
                        }
                        if let Some(offer) = request.offer {
                            if let Some(place) =
                                state.queue.iter_mut().find(|q| q.waiter == request.waiter)
                            {
                                place.offer = Some(offer);
                            }
                        }
                        Applied::answer(Answer::Held)
                    }
                }
            }
            Kind::Semaphore => {
                if state.permits_held.iter().any(|p| p.hold == owner) {
                    // The same permit asked again (a request sent again): nothing more taken.
                    extend(&mut state.permits_held, owner, until);
                    taken(None)
                } else if state.permits.unwrap_or(0) > 0 {
                    state.permits = state.permits.map(|p| p - 1);
                    extend(&mut state.permits_held, owner, until);
                    taken(None)
                } else {
                    Applied::answer(Answer::Held)
                }
            }
            Kind::Latch => match state.count {
                Some(count) if count > 0 => Applied::answer(Answer::Held),
                _ => taken(None),
            },
            kind => match state.holder {
                None => {
                    state.holder = Some(Lease { hold: owner, until });
                    if kind.issues_token() {
                        state.token += 1;
                        taken(Some(state.token))
                    } else {
                        taken(None)
                    }
                }
                Some(holder) if holder.hold == owner => {
                    extend_holder(state, until);
                    taken(kind.issues_token().then_some(state.token))
                }
                Some(_) => Applied::answer(Answer::Held),
            },
        }
    }

    fn release(&mut self, name: Name, kind: Kind, owner: HoldId, now: Time) -> Applied {
        let state = &mut self.names[usize::from(name)];
        if state.used_as_other(kind) {
            return Applied::answer(Answer::NotHeld);
        }
        let released = match kind {
            Kind::Read => remove(&mut state.readers, owner),
            Kind::Semaphore => {
                let released = remove(&mut state.permits_held, owner);
                if released {
                    state.permits = Some(state.permits.unwrap_or(0) + 1);
                }
                released
            }
            Kind::Latch => false,
            _ => {
                let mine = state.holder.is_some_and(|h| h.hold == owner);
                if mine {
                    state.holder = None;
                }
                mine
            }
        };
        if !released {
            return Applied::answer(Answer::NotHeld);
        }
        let mut applied = Applied::answer(Answer::Released);
        if kind == Kind::Fair {
            applied.grants.extend(grant_to_head(state, now));
        }
        applied
    }

    fn release_to(
        &mut self,
        name: Name,
        kind: Kind,
        owner: HoldId,
        successor: HoldId,
        until: Time,
        now: Time,
    ) -> Applied {
        let hands_over = match kind {
            Kind::Reentrant => self.hands_over.reentrant,
            Kind::Semaphore => self.hands_over.permit,
            _ => false,
        };
        if !hands_over {
            return self.release(name, kind, owner, now);
        }
        let state = &mut self.names[usize::from(name)];
        if state.used_as_other(kind) {
            return Applied::answer(Answer::NotHeld);
        }
        if kind == Kind::Semaphore {
            if !remove(&mut state.permits_held, owner) {
                return Applied::answer(Answer::NotHeld);
            }
            extend(&mut state.permits_held, successor, until);
            return Applied::answer(Answer::Handed);
        }
        match state.holder {
            Some(holder) if holder.hold == owner => {
                state.holder = Some(Lease {
                    hold: successor,
                    until,
                });
                Applied::answer(Answer::Handed)
            }
            _ => Applied::answer(Answer::NotHeld),
        }
    }

    fn renew(&mut self, name: Name, kind: Kind, owner: HoldId, until: Time) -> bool {
        let state = &mut self.names[usize::from(name)];
        if !state.holds(kind, owner) {
            return false;
        }
        match kind {
            Kind::Read => extend(&mut state.readers, owner, until),
            Kind::Semaphore => extend(&mut state.permits_held, owner, until),
            _ => extend_holder(state, until),
        }
        true
    }

    fn status(&mut self, name: Name, kind: Kind, owner: HoldId) -> Applied {
        let state = &mut self.names[usize::from(name)];
        if !state.claim(kind) {
            return Applied::answer(Answer::WrongKind);
        }
        let (locked, mine) = match kind {
            Kind::Semaphore => (
                !state.permits_held.is_empty(),
                state.permits_held.iter().any(|p| p.hold == owner),
            ),
            Kind::Latch => (state.count.is_some_and(|c| c > 0), false),
            Kind::Read => (
                !state.readers.is_empty(),
                state.readers.iter().any(|r| r.hold == owner),
            ),
            _ => (
                state.holder.is_some(),
                state.holder.is_some_and(|h| h.hold == owner),
            ),
        };
        Applied::answer(Answer::Status { locked, mine })
    }

    fn force_unlock(&mut self, name: Name, kind: Kind) -> Applied {
        if matches!(kind, Kind::Semaphore | Kind::Latch) {
            return Applied::answer(Answer::Unsupported);
        }
        let state = &mut self.names[usize::from(name)];
        if !state.claim(kind) {
            return Applied::answer(Answer::WrongKind);
        }
        let ended: Few<Lease> = match kind {
            Kind::Read => state.readers.drain(..).collect(),
            Kind::Write if state.holder.is_some() => {
                // The readers next to a writer are its own (a writer may read): they end
                // with it.
                let mut ended: Few<Lease> = state.holder.take().into_iter().collect();
                ended.extend(state.readers.drain(..));
                ended
            }
            _ => state.holder.take().into_iter().collect(),
        };
        state.ended.extend(ended.iter().map(|lease| lease.hold));
        state.ended.sort();
        Applied {
            answer: Answer::Forced(!ended.is_empty()),
            grants: Few::new(),
            ended,
            replayed: false,
        }
    }

    fn counter(&mut self, name: Name, step: Counter) -> Applied {
        let state = &mut self.names[usize::from(name)];
        if !state.claim(step.kind()) {
            return Applied::answer(Answer::WrongKind);
        }
        let number = match step {
            Counter::TrySetPermits(permits) => {
                if state.permits.is_some() {
                    0
                } else {
                    state.permits = Some(permits);
                    1
                }
            }
            Counter::AddPermits(permits) => {
                let available = state.permits.unwrap_or(0) + permits;
                state.permits = Some(available);
                available
            }
            Counter::AvailablePermits => state.permits.unwrap_or(0),
            Counter::TrySetCount(count) => {
                if state.count.is_some() {
                    0
                } else {
                    state.count = (count > 0).then_some(count);
                    1
                }
            }
            Counter::CountDown => match state.count {
                Some(count) if count > 1 => {
                    state.count = Some(count - 1);
                    count - 1
                }
                _ => {
                    state.count = None;
                    0
                }
            },
            Counter::Count => state.count.unwrap_or(0),
        };
        Applied::answer(Answer::Count(number))
    }
}

/// Extends the exclusive holder's lease to end no earlier than `until`.
fn extend_holder(state: &mut NameState, until: Time) {
    if let Some(holder) = &mut state.holder {
        holder.until = holder.until.max(until);
    }
}

/// Removes `hold` from `leases`; whether it was there.
fn remove(leases: &mut Few<Lease>, hold: HoldId) -> bool {
    let before = leases.len();
    leases.retain(|l| l.hold != hold);
    leases.len() < before
}

/// Gives the freed fair lock to the head waiter if it made an offer: its offer's hold holds
/// on the offer's lease, and it is told.
fn grant_to_head(state: &mut NameState, now: Time) -> Option<Grant> {
    let head = *state.queue.first()?;
    let offer = head.offer?;
    state.queue.remove(0);
    state.holder = Some(Lease {
        hold: offer.hold,
        until: now + offer.lease,
    });
    Some(Grant {
        waiter: head.waiter,
        attempt: offer.attempt,
        hold: offer.hold,
    })
}
