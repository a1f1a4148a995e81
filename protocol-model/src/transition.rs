//! What each action does to a world, and the network between the threads and the store: a
//! step applied now, its reply lost, its request held up (landing within the network's bound,
//! or never), sent twice. The threads' decisions are the engine's ([`crate::engine`]), the
//! renewals the watchdog's ([`crate::renewal`]), what a backend remembers its own
//! ([`crate::backend`]). Breaking a rule on the way is a [`Violation`].

use crate::action::{Action, Net};
use crate::kind::Kind;
use crate::records::needs_tombstone;
use crate::step::{Answer, Counter, Grant, HoldId, Name, RequestId, Step, Tenure, Time, WaiterId};
use crate::store::Applied;
use crate::world::{Config, InFlight, World};

/// A rule broken, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

/// The outcome of a call, as its caller sees it: an answer, or an error (outcome unknown).
pub(crate) type Outcome = Option<Answer>;

/// What a call came to: its caller's outcome, and whether a copy of it removed the hold it
/// names (a release the store really made, not one it answered from a record or inferred).
pub(crate) struct Sent {
    /// The caller's outcome.
    pub outcome: Outcome,
    /// A copy of a release removed its hold.
    pub removed: bool,
}

impl World {
    /// The world after `action`, or the rule it broke.
    pub fn after(&self, config: &Config, action: &Action) -> Result<World, Violation> {
        let mut next = self.clone();
        next.take(config, action)?;
        Ok(next)
    }

    /// Takes `action` in place (the world is left half-changed if it breaks a rule).
    pub fn take(&mut self, config: &Config, action: &Action) -> Result<(), Violation> {
        match action {
            Action::Lock {
                thread,
                name,
                kind,
                fixed,
                net: Net::Queued,
            } => {
                self.faults += 1;
                self.queue_call(*thread, *name, *kind, *fixed);
                Ok(())
            }
            Action::Lock {
                thread,
                name,
                kind,
                fixed,
                net,
            } => self.lock(config, *thread, *name, *kind, *fixed, *net),
            Action::Wait {
                thread,
                name,
                fixed,
            } => self.wait(config, *thread, *name, *fixed),
            Action::GiveUp { thread } => {
                self.give_up(*thread);
                Ok(())
            }
            Action::Unlock {
                thread,
                name,
                kind,
                net,
            } => self.unlock(config, *thread, *name, *kind, *net),
            Action::HandOver { thread, name, to } => self.hand_over(config, *thread, *name, *to),
            Action::Count {
                thread,
                name,
                step,
                net,
            } => self.count(config, *thread, *name, *step, *net),
            Action::Renew { client, late_node } => {
                self.renew(config, *client, *late_node);
                Ok(())
            }
            Action::Deliver(at) => self.deliver(config, *at),
            Action::Tick => self.tick(config),
            Action::ForceUnlock { name, kind } => {
                if self.forced < config.faults.extra_force_unlocks {
                    self.forced += 1;
                } else {
                    self.faults += 1;
                }
                let request = self.fresh_request();
                self.apply(
                    &Step::ForceUnlock {
                        name: *name,
                        kind: *kind,
                    },
                    request,
                );
                Ok(())
            }
            Action::Lose { name } => {
                self.faults += 1;
                // The connections to the store are reset: nothing sent before reaches it.
                let node = config.nodes[usize::from(*name)];
                self.network.retain(|m| match m {
                    InFlight::Request { step, .. } => !step_touches(step, config, node),
                    InFlight::Grant(_) | InFlight::Call(_) => true,
                });
                let ended = self.store.lose(*name);
                self.note_ended(&ended);
                Ok(())
            }
            Action::Forge { thread, attempt } => {
                self.faults += 1;
                // Without the offer's secret, which the store keeps from its readers.
                let forged = crate::step::Grant {
                    waiter: WaiterId(*thread as u32),
                    attempt: *attempt,
                    hold: HoldId(0),
                    proven: false,
                };
                self.network.push(InFlight::Grant(forged));
                Ok(())
            }
        }
    }

    /// Time passes a tick: requests that can no longer land are dropped (their connections
    /// closed), leases and records run out. A record may lapse only once nothing that depends
    /// on it can still arrive.
    fn tick(&mut self, config: &Config) -> Result<(), Violation> {
        self.now += 1;
        let now = self.now;
        self.network.retain(|m| match m {
            InFlight::Request { sent, .. } => config.network.is_none_or(|n| *sent + n >= now),
            InFlight::Grant(_) | InFlight::Call(_) => true,
        });
        let lapsing = self.store.lapsing(now);
        for message in &self.network {
            let InFlight::Request {
                step,
                request,
                sent,
                ..
            } = message
            else {
                continue;
            };
            if let Some((hold, _)) = lapsing
                .tombstones
                .iter()
                .find(|(hold, made)| *sent <= *made && needs_tombstone(step, *hold))
            {
                return Err(Violation(format!(
                    "the tombstone of the force-unlocked hold {hold:?} lapsed while a copy of \
                     its acquire could still land"
                )));
            }
            if lapsing.latches.contains(request) {
                return Err(Violation(format!(
                    "the answer latched for {request:?} lapsed while a copy of it could still \
                     land"
                )));
            }
        }
        self.store.settle(now);
        Ok(())
    }

    /// The store takes `step` now: grants it made go on their way (and are heard by an
    /// outsider), holds it ended are noted, and the first answer of a latched request is kept.
    pub(crate) fn apply(&mut self, step: &Step, request: RequestId) -> Applied {
        let applied = self.store.apply(step, request, self.now);
        for grant in &applied.grants {
            let proven = self.store.settings.proofs;
            self.network
                .push(InFlight::Grant(Grant { proven, ..*grant }));
            self.memory.heard.push(grant.attempt);
            if self.store.settings.turns {
                // A turn is asked for by its waiter's place, which the waiter's backend keeps
                // alive while it waits: it lasts the grant's lease from now.
                self.promise_grant(grant.hold);
            }
        }
        self.note_ended(&applied.ended);
        if let (Step::Counter { name, step }, Answer::Count(number)) = (step, &applied.answer) {
            if !applied.replayed {
                self.note_counted(*name, *step, *number, request);
            }
        }
        if step.is_latched()
            && !self
                .memory
                .first_answers
                .iter()
                .any(|(id, _)| *id == request)
        {
            self.memory
                .first_answers
                .push((request, applied.answer.clone()));
        }
        applied
    }

    /// What a counter step the store took changed: the permits there are in all (never more
    /// believed held), and which requests set a count or permits (each sets once).
    fn note_counted(&mut self, name: Name, step: Counter, number: u64, request: RequestId) {
        let total = self
            .memory
            .permits
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, p)| *p);
        let total = match (step, number) {
            (Counter::TrySetPermits(permits), 1) => permits,
            (Counter::AddPermits(added), _) => total + added,
            _ => total,
        };
        self.memory.permits.retain(|(n, _)| *n != name);
        self.memory.permits.push((name, total));
        self.memory.permits.sort_unstable();
        if step.is_set_once() && number == 1 {
            self.memory.armed.push(request);
        }
    }

    /// Holds the store ended: never believed past the deadline a thread believing one had
    /// then, or (none did) past the end of its lease on the store (a grant on its way).
    pub(crate) fn note_ended(&mut self, ended: &[crate::store::Lease]) {
        for lease in ended {
            let believed = self
                .threads
                .iter()
                .flat_map(|t| &t.holds)
                .find(|h| h.id == lease.hold && h.believed(self.now))
                .map(|h| h.deadline);
            self.memory
                .ended
                .push((lease.hold, believed.unwrap_or(lease.until)));
        }
    }

    /// Notes the end of the grant that made `hold`: its waiter's place asked for it.
    fn promise_grant(&mut self, hold: HoldId) {
        let until = self
            .store
            .names
            .iter()
            .filter_map(|name| name.holder)
            .find(|holder| holder.hold == hold)
            .map(|holder| holder.until);
        if let Some(until) = until {
            match self.memory.promised.iter_mut().find(|(id, _)| *id == hold) {
                Some((_, promised)) => *promised = (*promised).max(until),
                None => self.memory.promised.push((hold, until)),
            }
        }
    }

    /// Notes the deadline `step`, sent now, gives the holds it names: the request lands by
    /// now plus the network's bound, and asks for its lease from then at the latest.
    pub(crate) fn note_promised(&mut self, config: &Config, step: &Step) {
        if !config.sessions {
            return;
        }
        let latest = self.now + config.network.unwrap_or(0);
        // A hold handed over on a session goes on with the session.
        let handed_on_session = match step {
            Step::ReleaseTo { name, owner, .. } => self.store.names[usize::from(*name)]
                .holder
                .is_some_and(|holder| holder.hold == *owner && holder.session.is_some()),
            _ => false,
        };
        let mut promise = |hold: HoldId, until: Time| match self
            .memory
            .promised
            .iter_mut()
            .find(|(id, _)| *id == hold)
        {
            Some((_, promised)) => *promised = (*promised).max(until),
            None => self.memory.promised.push((hold, until)),
        };
        match step {
            Step::Acquire(acquire) if acquire.kind != Kind::Latch => {
                let until = match acquire.tenure {
                    Tenure::Until(end) => end,
                    // The session, kept alive for it, lasts a session's lease.
                    Tenure::Session { .. } => latest + acquire.lease.max(config.leases.session),
                    Tenure::Landed => latest + acquire.lease,
                };
                promise(acquire.owner, until);
            }
            Step::Renew { holds, lease, .. } => {
                // Watchdog holds, on their client's session: its keep-alive lasts a session's
                // lease.
                for (_, _, hold) in holds {
                    promise(*hold, latest + (*lease).max(config.leases.session));
                }
            }
            Step::ReleaseTo {
                successor, lease, ..
            } if handed_on_session => {
                promise(*successor, latest + (*lease).max(config.leases.session));
            }
            Step::ReleaseTo {
                successor, lease, ..
            } => promise(*successor, latest + lease),
            _ => {}
        }
    }

    /// A call of `step` by a thread, met by `net`: the caller's outcome.
    pub(crate) fn call(&mut self, config: &Config, step: Step, net: Net) -> Outcome {
        self.call_as(config, step, net).1.outcome
    }

    /// [`call`](Self::call), with the request id it was sent as and what it came to.
    pub(crate) fn call_as(&mut self, config: &Config, step: Step, net: Net) -> (RequestId, Sent) {
        let request = self.fresh_request();
        (request, self.send(config, step, request, net))
    }

    fn send(&mut self, config: &Config, step: Step, request: RequestId, net: Net) -> Sent {
        if net.is_fault() {
            self.faults += 1;
        }
        self.note_promised(config, &step);
        let sent = self.now;
        let mut removed = false;
        let mut land = |world: &mut World| {
            let applied = world.apply(&step, request);
            removed |= applied.answer == Answer::Released && !applied.replayed;
            applied.answer
        };
        let outcome = match net {
            Net::Answered => Some(land(self)),
            Net::ReplyLost => {
                land(self);
                None
            }
            Net::Late | Net::Queued => {
                self.network.push(InFlight::Request {
                    step: step.clone(),
                    request,
                    sent,
                    renewal: None,
                });
                None
            }
            Net::Resent => {
                land(self);
                Some(land(self))
            }
            Net::ResentFirstLate => {
                let answer = land(self);
                self.network.push(InFlight::Request {
                    step: step.clone(),
                    request,
                    sent,
                    renewal: None,
                });
                Some(answer)
            }
        };
        Sent { outcome, removed }
    }

    /// Whether the caller of a latched request got the answer its first attempt had.
    pub(crate) fn check_resent(
        &self,
        request_answer: Option<(RequestId, &Answer)>,
    ) -> Result<(), Violation> {
        let Some((request, answer)) = request_answer else {
            return Ok(());
        };
        match self
            .memory
            .first_answers
            .iter()
            .find(|(id, _)| *id == request)
        {
            Some((_, first)) if first != answer => Err(Violation(format!(
                "a step sent again answered {answer:?}, its first attempt {first:?}"
            ))),
            _ => Ok(()),
        }
    }

    fn deliver(&mut self, config: &Config, at: usize) -> Result<(), Violation> {
        if at >= self.network.len() {
            return Ok(());
        }
        match self.network.remove(at) {
            InFlight::Request {
                step,
                request,
                sent,
                renewal,
            } => {
                if let (Some(client), true) = (renewal, config.sessions) {
                    // The renewal's keep-alive of its client's session lands with it.
                    self.store
                        .keep_alive(client, self.now + config.leases.session, self.now);
                }
                let answer = self.apply(&step, request).answer;
                if renewal.is_some() {
                    if let Step::Renew { holds, .. } = &step {
                        self.renewed(config, holds, &answer, sent);
                    }
                }
                Ok(())
            }
            InFlight::Grant(grant) => self.granted(config, grant),
            InFlight::Call(call) => {
                let t = usize::from(call.thread);
                self.threads[t].calling = false;
                self.lock(config, t, call.name, call.kind, call.fixed, Net::Answered)
            }
        }
    }
}

/// Whether `step` goes to `node`.
fn step_touches(step: &Step, config: &Config, node: u8) -> bool {
    let on = |name: Name| config.nodes[usize::from(name)] == node;
    match step {
        Step::Acquire(acquire) => on(acquire.name),
        Step::Release { name, .. }
        | Step::ReleaseTo { name, .. }
        | Step::Status { name, .. }
        | Step::ForceUnlock { name, .. }
        | Step::Counter { name, .. }
        | Step::Leader { name }
        | Step::CancelWait { name, .. } => on(*name),
        Step::Renew { holds, .. } => holds.iter().any(|(name, ..)| on(*name)),
    }
}
