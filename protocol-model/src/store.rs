//! The store: what every backend keeps of each name, and what each step does to it, at an
//! instant of the store's clock. The one definition every backend is held to.

use crate::few::Few;
use crate::kind::Kind;
use crate::name::{extend, extend_holder, grant_to_head, mark, mark_in_turn, remove};
pub use crate::name::{Lease, NameState, Queued};
use crate::records::{Keeps, Latched};
use crate::session::Session;
use crate::step::{Acquire, Answer, Counter, Grant, HoldId, Name, RequestId, Step, Tenure, Time};

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

/// What a store is: what it hands over, how long it keeps its records, and how many
/// operations one step may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Settings {
    /// What `release_to` hands over.
    pub hands_over: HandsOver,
    /// How long each kind of record is kept.
    pub keeps: Keeps,
    /// The most operations one step (a transaction) may carry: a step with more is refused
    /// (etcd's 128 per transaction). `None`: no limit.
    pub ops_per_step: Option<u8>,
    /// A fair release's grant is the store's own change, which the waiter sees on its watch
    /// (etcd: the key before its place deleted makes the place first, its turn): nobody who
    /// may only read the store can make one, and a waiter on the watchdog's lease believes it
    /// at once, to the end of the grant's lease (which its own backend keeps alive, and
    /// knows), and renews it then as any hold. Elsewhere a grant message is a hint, which the
    /// waiter claims with a step of its own.
    pub turns: bool,
    /// A fair release's grant message carries the secret the waiter sent with its offer,
    /// which the store keeps where its readers cannot read it (PostgreSQL: a schema of its
    /// own): nobody but the store's release can make one. A waiter on the watchdog's lease
    /// believes it at once, for the grant's lease counted from when its offer's attempt was
    /// sent, if at least half of that is left (else it claims), and renews it then as any hold.
    pub proofs: bool,
    /// The plain lock's waiters, and a read-write lock's writers, are kept in turn: one refused
    /// while it waits is marked, and a free lock goes to the first marked (every store but a
    /// RedLock's quorum, whose nodes would each keep an order of their own).
    pub lock_turns: bool,
}

/// A step refused because it carried more operations than the store takes in one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oversized {
    /// The operations it carried.
    pub ops: usize,
    /// The store's limit.
    pub limit: u8,
}

/// The whole store: every name's state, the answers of latched steps by request id, and the
/// clients' sessions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    /// Each name's state, by index.
    pub names: Few<NameState>,
    /// The answers of the latched steps (releases, set-once steps), by request id: a request
    /// sent again replays its first answer while it is kept.
    pub latched: Few<Latched>,
    /// Each client's session, by client (those that never had one: none yet).
    pub sessions: Few<Session>,
    /// What the store is.
    pub settings: Settings,
}

impl Store {
    /// A store of `names` free names.
    pub fn new(names: usize, settings: Settings) -> Self {
        Store {
            names: std::iter::repeat_n(NameState::default(), names).collect(),
            latched: Few::new(),
            sessions: Few::new(),
            settings,
        }
    }

    /// Deletes the holds `holds` (an operation each) in one step that also carries `carried`
    /// operations of its own: refused whole if that is more than the store takes.
    pub fn sweep(
        &mut self,
        holds: &[(Name, Kind, HoldId)],
        carried: usize,
    ) -> Result<(), Oversized> {
        let ops = holds.len() + carried;
        if let Some(limit) = self.settings.ops_per_step {
            if ops > usize::from(limit) {
                return Err(Oversized { ops, limit });
            }
        }
        for (name, kind, hold) in holds {
            self.names[usize::from(*name)].end(*kind, *hold);
        }
        Ok(())
    }

    /// Ends every lease that ended at `now` (a permit whose lease ended comes back), and drops
    /// the records that lapsed.
    pub fn settle(&mut self, now: Time) {
        self.lapse(now);
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
    /// writes, a crash of an unlogged table, an eviction, an operator deleting the name's keys)
    /// and what it knew of holds ended: the tokens are kept (they are drawn from the clock on a
    /// real store), and so are the sessions (leases of their own).
    pub fn lose(&mut self, name: Name) -> Few<Lease> {
        let state = &mut self.names[usize::from(name)];
        state.ended.clear();
        state.lock_waiting.clear();
        state.writers_waiting.clear();
        state.readers_waiting.clear();
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
            if let Some(answer) = self.replay(request) {
                let mut replay = Applied::answer(answer);
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
            self.latch(step, request, &applied.answer, now);
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
            Step::Renew {
                holds,
                lease,
                session,
            } => Applied::answer(Answer::Renewed(
                holds
                    .iter()
                    .map(|(name, kind, owner)| match session {
                        Some(client) => self.renew_on_session(*name, *kind, *owner, *client, now),
                        None => self.renew(*name, *kind, *owner, now + lease),
                    })
                    .collect(),
            )),
            Step::Status { name, kind, owner } => self.status(*name, *kind, *owner),
            Step::ForceUnlock { name, kind } => self.force_unlock(*name, *kind, now),
            Step::Counter { name, step } => self.counter(*name, *step),
            Step::Leader { name } => {
                let state = &mut self.names[usize::from(*name)];
                if !state.claim(Kind::Election) {
                    return Applied::answer(Answer::WrongKind);
                }
                Applied::answer(Answer::Leader(state.holder.map(|h| h.hold)))
            }
            Step::CancelWait { name, kind, waiter } => {
                let state = &mut self.names[usize::from(*name)];
                match kind {
                    Kind::Fair => state.queue.retain(|q| q.waiter != *waiter),
                    Kind::Reentrant | Kind::Fenced => state.lock_waiting.retain(|w| w != waiter),
                    Kind::Write => state.writers_waiting.retain(|w| w != waiter),
                    Kind::Read => state.readers_waiting.retain(|w| w != waiter),
                    _ => {}
                }
                Applied::answer(Answer::Done)
            }
        }
    }

    fn acquire(&mut self, request: &Acquire, now: Time) -> Applied {
        let (until, session) = match request.tenure {
            Tenure::Landed => (now + request.lease, None),
            Tenure::Until(end) => (end, None),
            Tenure::Session { client, gate } => match self.session_until(client, gate, now) {
                Some(end) => (end, Some(client)),
                None => (now, None),
            },
        };
        let buried = self.buried(request.name, request.owner);
        let state = &mut self.names[usize::from(request.name)];
        let owner = request.owner;
        if (request.reentry && !state.holds(request.kind, owner)) || buried {
            // An ended hold stays ended: an extend never makes it again, and a copy of the
            // acquire that made a hold since force-unlocked does not either.
            return Applied::answer(Answer::Gone);
        }
        if until <= now {
            // The lease it was sent on is gone (its own ran out, or its session's gate moved):
            // nothing is made.
            return Applied::answer(Answer::Gone);
        }
        if !state.claim(request.kind) {
            return Applied::answer(Answer::WrongKind);
        }
        let taken = |token: Option<u64>| Applied::answer(Answer::Acquired { token });
        match request.kind {
            Kind::Read => {
                let waiter = request.waiter;
                match state.holder {
                    Some(writer) if Some(writer.hold) != request.write_hold => {
                        // Behind a writer's hold: it goes in before the next writer.
                        if request.will_wait {
                            mark(&mut state.readers_waiting, waiter);
                        }
                        Applied::answer(Answer::Held)
                    }
                    // A new reader waits behind a waiting writer; one that waited behind a
                    // writer's hold, a hold that reads already, and the writer's own read, come
                    // in.
                    None if !state.writers_waiting.is_empty()
                        && !state.readers_waiting.contains(&waiter)
                        && !state.readers.iter().any(|r| r.hold == owner) =>
                    {
                        Applied::answer(Answer::Held)
                    }
                    _ => {
                        state.readers_waiting.retain(|w| *w != waiter);
                        extend(&mut state.readers, owner, until, session);
                        taken(None)
                    }
                }
            }
            Kind::Write => {
                // Another writer's turn: the writer refused first takes a free lock.
                let turn_of_other = self.settings.lock_turns
                    && state
                        .writers_waiting
                        .first()
                        .is_some_and(|first| *first != request.waiter);
                let free = state.holder.is_none()
                    && state.readers.is_empty()
                    && state.readers_waiting.is_empty()
                    && !turn_of_other;
                match state.holder {
                    Some(writer) if writer.hold == owner => {
                        extend_holder(state, until);
                        taken(None)
                    }
                    _ if !free => {
                        if request.will_wait {
                            mark_in_turn(&mut state.writers_waiting, request.waiter);
                        }
                        Applied::answer(Answer::Held)
                    }
                    _ => {
                        state.writers_waiting.retain(|w| *w != request.waiter);
                        state.holder = Some(Lease {
                            hold: owner,
                            until,
                            session,
                            unclaimed: false,
                        });
                        taken(None)
                    }
                }
            }
            Kind::Fair => {
                let head_or_none = state
                    .queue
                    .first()
                    .is_none_or(|head| head.waiter == request.waiter);
                match state.holder {
                    None if head_or_none => {
                        state.queue.retain(|q| q.waiter != request.waiter);
                        state.holder = Some(Lease {
                            hold: owner,
                            until,
                            session,
                            unclaimed: false,
                        });
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
                        // The place keeps its latest attempt's offer: one that made none drops
                        // an earlier one (made by an attempt its waiter may have given up).
                        if let Some(place) =
                            state.queue.iter_mut().find(|q| q.waiter == request.waiter)
                        {
                            place.offer = request.offer;
                        }
                        Applied::answer(Answer::Held)
                    }
                }
            }
            Kind::Semaphore => {
                if state.permits_held.iter().any(|p| p.hold == owner) {
                    // The same permit asked again (a request sent again): nothing more taken.
                    extend(&mut state.permits_held, owner, until, session);
                    taken(None)
                } else if state.permits.unwrap_or(0) > 0 {
                    state.permits = state.permits.map(|p| p - 1);
                    extend(&mut state.permits_held, owner, until, session);
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
                // Another waiter's turn: the waiter refused first takes a free plain lock.
                None if kind.is_plain_lock()
                    && self.settings.lock_turns
                    && state
                        .lock_waiting
                        .first()
                        .is_some_and(|first| *first != request.waiter) =>
                {
                    if request.will_wait && !state.lock_waiting.contains(&request.waiter) {
                        state.lock_waiting.push(request.waiter);
                    }
                    Applied::answer(Answer::Held)
                }
                None => {
                    if kind.is_plain_lock() {
                        state.lock_waiting.retain(|w| *w != request.waiter);
                    }
                    state.holder = Some(Lease {
                        hold: owner,
                        until,
                        session,
                        unclaimed: false,
                    });
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
                Some(_) => {
                    if kind.is_plain_lock()
                        && self.settings.lock_turns
                        && request.will_wait
                        && !state.lock_waiting.contains(&request.waiter)
                    {
                        state.lock_waiting.push(request.waiter);
                    }
                    Applied::answer(Answer::Held)
                }
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
            Kind::Reentrant => self.settings.hands_over.reentrant,
            Kind::Semaphore => self.settings.hands_over.permit,
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
            extend(&mut state.permits_held, successor, until, None);
            return Applied::answer(Answer::Handed);
        }
        let Some(holder) = state.holder.filter(|h| h.hold == owner) else {
            return Applied::answer(Answer::NotHeld);
        };
        if !state.lock_waiting.is_empty() {
            // Marked waiters (of other clients, or of this one but not its successor, whose
            // step carries no waiter) take a free lock first: released, not handed over.
            return self.release(name, kind, owner, now);
        }
        // A hold on a session is handed over on the session (kept alive for the successor's
        // lease): the successor is a thread of the same client.
        let until = match holder.session {
            Some(client) => {
                self.keep_alive(client, until, now);
                self.sessions
                    .get(usize::from(client))
                    .map_or(until, |s| s.until)
            }
            None => until,
        };
        self.names[usize::from(name)].holder = Some(Lease {
            hold: successor,
            until,
            session: holder.session,
            unclaimed: false,
        });
        Applied::answer(Answer::Handed)
    }

    fn renew(&mut self, name: Name, kind: Kind, owner: HoldId, until: Time) -> bool {
        let state = &mut self.names[usize::from(name)];
        if !state.holds(kind, owner) {
            return false;
        }
        match kind {
            Kind::Read => extend(&mut state.readers, owner, until, None),
            Kind::Semaphore => extend(&mut state.permits_held, owner, until, None),
            _ => extend_holder(state, until),
        }
        true
    }

    /// A renewal on a store with sessions (etcd's): a hold on `client`'s session is found
    /// there, not extended (the session's keep-alive is what renews it); a hold on a lease of
    /// its own moves onto the session, if the session is alive, and lasts what it does.
    fn renew_on_session(
        &mut self,
        name: Name,
        kind: Kind,
        owner: HoldId,
        client: u8,
        now: Time,
    ) -> bool {
        let session_until = self
            .sessions
            .get(usize::from(client))
            .map(|session| session.until)
            .filter(|until| *until > now);
        let state = &mut self.names[usize::from(name)];
        if !state.holds(kind, owner) {
            return false;
        }
        let lease = match kind {
            Kind::Read => state.readers.iter_mut().find(|l| l.hold == owner),
            Kind::Semaphore => state.permits_held.iter_mut().find(|l| l.hold == owner),
            _ => state.holder.as_mut().filter(|l| l.hold == owner),
        };
        let Some(lease) = lease else {
            return false;
        };
        if lease.session == Some(client) {
            return true;
        }
        // A turn's first renewal writes its id into its place, as the release left it (empty),
        // onto the session; a hold on a lease of its own that is no turn is not its to move.
        let Some(until) = session_until.filter(|_| lease.unclaimed) else {
            return false;
        };
        lease.session = Some(client);
        lease.until = until;
        lease.unclaimed = false;
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

    fn force_unlock(&mut self, name: Name, kind: Kind, now: Time) -> Applied {
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
        self.bury(name, &ended, now);
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
