//! What each action does to a world: the store takes steps, and each thread decides as the
//! client's engine does (re-enter locally, extend, take a new hold, believe a grant, give back,
//! renew). Breaking a rule on the way is a [`Violation`].

use crate::action::{Action, Net};
use crate::few::Few;
use crate::kind::Kind;
use crate::step::{Acquire, Answer, Counter, HoldId, Name, Offer, RequestId, Step, Time, WaiterId};
use crate::world::{Config, InFlight, LocalHold, Waiting, World};

/// A rule broken, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

/// The outcome of a call, as its caller sees it: an answer, or an error (outcome unknown).
type Outcome = Option<Answer>;

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
                net,
            } => self.lock(config, *thread, *name, *kind, *fixed, *net),
            Action::Wait { thread, name } => self.wait(config, *thread, *name),
            Action::GiveUp { thread } => {
                self.give_up(*thread);
                Ok(())
            }
            Action::Unlock {
                thread,
                name,
                kind,
                net,
            } => {
                self.unlock(*thread, *name, *kind, *net);
                Ok(())
            }
            Action::HandOver { thread, name, to } => {
                self.hand_over(config, *thread, *name, *to);
                Ok(())
            }
            Action::Count {
                thread,
                name,
                step,
                net,
            } => self.count(*thread, *name, *step, *net),
            Action::Renew { client, late_node } => {
                self.renew(config, *client, *late_node);
                Ok(())
            }
            Action::Deliver(at) => self.deliver(config, *at),
            Action::Tick => {
                self.now += 1;
                self.store.settle(self.now);
                Ok(())
            }
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
                    InFlight::Grant(_) => true,
                });
                let ended = self.store.lose(*name);
                self.note_ended(&ended);
                Ok(())
            }
            Action::Forge { thread, attempt } => {
                self.faults += 1;
                let forged = crate::step::Grant {
                    waiter: WaiterId(*thread as u32),
                    attempt: *attempt,
                    hold: HoldId(0),
                };
                self.network.push(InFlight::Grant(forged));
                Ok(())
            }
        }
    }

    /// The store takes `step` now: grants it made go on their way (and are heard by an
    /// outsider), holds it ended are noted, and the first answer of a latched request is kept.
    fn apply(&mut self, step: &Step, request: RequestId) -> Answer {
        let applied = self.store.apply(step, request, self.now);
        for grant in &applied.grants {
            self.network.push(InFlight::Grant(*grant));
            self.memory.heard.push(grant.attempt);
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
        applied.answer
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
    fn note_ended(&mut self, ended: &[crate::store::Lease]) {
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

    /// A call of `step` by a thread, met by `net`: the caller's outcome.
    fn call(&mut self, step: Step, net: Net) -> Outcome {
        self.call_as(step, net).1
    }

    /// [`call`](Self::call), with the request id it was sent as.
    fn call_as(&mut self, step: Step, net: Net) -> (RequestId, Outcome) {
        let request = self.fresh_request();
        (request, self.send(step, request, net))
    }

    fn send(&mut self, step: Step, request: RequestId, net: Net) -> Outcome {
        if net.is_fault() {
            self.faults += 1;
        }
        match net {
            Net::Answered => Some(self.apply(&step, request)),
            Net::ReplyLost => {
                self.apply(&step, request);
                None
            }
            Net::Late => {
                self.network.push(InFlight::Request {
                    step,
                    request,
                    renewal: None,
                });
                None
            }
            Net::Resent => {
                self.apply(&step, request);
                Some(self.apply(&step, request))
            }
            Net::ResentFirstLate => {
                let answer = self.apply(&step, request);
                self.network.push(InFlight::Request {
                    step,
                    request,
                    renewal: None,
                });
                Some(answer)
            }
        }
    }

    /// Whether the caller of a latched request got the answer its first attempt had.
    fn check_resent(&self, request_answer: Option<(RequestId, &Answer)>) -> Result<(), Violation> {
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

    fn lock(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        kind: Kind,
        fixed: bool,
        net: Net,
    ) -> Result<(), Violation> {
        let lease = if fixed {
            config.leases.fixed
        } else {
            config.leases.watchdog
        };
        let now = self.now;
        if !kind.held_by_thread() {
            // A hold of its own (a permit, a leadership) under a new id, or passing a latch.
            let owner = self.fresh_hold();
            let step = Step::Acquire(acquire(name, kind, owner, t, lease, false));
            let outcome = self.call(step, net);
            if let Some(Answer::Acquired { token }) = outcome {
                if kind != Kind::Latch {
                    self.take_new(t, name, kind, owner, now + lease, !fixed, token)?;
                }
            }
            return Ok(());
        }
        let extending = match self.threads[t].hold(name, kind) {
            Some(hold) if hold.believed(now) => {
                let covers =
                    !hold.unconfirmed && (hold.watchdog || (fixed && now + lease <= hold.deadline));
                if covers {
                    if let Some(hold) = self.threads[t].hold_mut(name, kind) {
                        // Two guards behave as any number more would.
                        hold.count = (hold.count + 1).min(2);
                    }
                    return Ok(());
                }
                Some(hold.id)
            }
            Some(_) => {
                // Lost or run out: its guards stay lost, and a new hold is taken.
                self.threads[t]
                    .holds
                    .retain(|h| !(h.name == name && h.kind == kind));
                None
            }
            None => None,
        };
        let owner = match extending {
            Some(id) => id,
            None => self.fresh_owner(t, name, kind),
        };
        let mut request = acquire(name, kind, owner, t, lease, extending.is_some());
        if kind == Kind::Read {
            request.write_hold = self.threads[t]
                .hold(name, Kind::Write)
                .filter(|h| h.believed(now))
                .map(|h| h.id);
        }
        let outcome = self.call(Step::Acquire(request), net);
        match (outcome, extending) {
            (Some(Answer::Acquired { .. }), Some(_)) => {
                if let Some(hold) = self.threads[t].hold_mut(name, kind) {
                    hold.deadline = hold.deadline.max(now + lease);
                    hold.watchdog = !fixed;
                    hold.unconfirmed = false;
                    hold.count = (hold.count + 1).min(2);
                }
                Ok(())
            }
            (Some(Answer::Acquired { token }), None) => {
                self.take_new(t, name, kind, owner, now + lease, !fixed, token)
            }
            (Some(Answer::Held), Some(_)) => {
                self.abandon(t, name, kind);
                Ok(())
            }
            (Some(Answer::Gone), Some(_)) => {
                // The store ended it: its guards are lost, and the acquire takes a new hold.
                self.abandon(t, name, kind);
                let owner = self.fresh_hold();
                let request = acquire(name, kind, owner, t, lease, false);
                if let Some(Answer::Acquired { token }) =
                    self.call(Step::Acquire(request), Net::Answered)
                {
                    self.take_new(t, name, kind, owner, now + lease, !fixed, token)?;
                }
                Ok(())
            }
            (Some(Answer::Gone), None) => {
                // The id's hold was force-unlocked (an earlier copy of this acquire made it):
                // a hold with an id of its own.
                self.threads[t]
                    .unknown
                    .retain(|(n, k, _)| !(*n == name && *k == kind));
                let owner = self.fresh_hold();
                let request = acquire(name, kind, owner, t, lease, false);
                if let Some(Answer::Acquired { token }) =
                    self.call(Step::Acquire(request), Net::Answered)
                {
                    self.take_new(t, name, kind, owner, now + lease, !fixed, token)?;
                }
                Ok(())
            }
            (None, Some(_)) => {
                if let Some(hold) = self.threads[t].hold_mut(name, kind) {
                    hold.unconfirmed = true;
                }
                Ok(())
            }
            (None, None) => {
                self.remember_unknown(t, name, kind, owner);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The id of a thread's new hold: the id of its last acquire of the lock whose outcome is
    /// unknown (the store may keep that hold: it is then re-entered, not left to run out), or
    /// a fresh one.
    fn fresh_owner(&mut self, t: usize, name: Name, kind: Kind) -> HoldId {
        let unknown = self.threads[t]
            .unknown
            .iter()
            .position(|(n, k, _)| *n == name && *k == kind);
        match unknown {
            Some(at) => self.threads[t].unknown.remove(at).2,
            None => self.fresh_hold(),
        }
    }

    fn remember_unknown(&mut self, t: usize, name: Name, kind: Kind, owner: HoldId) {
        let thread = &mut self.threads[t];
        thread
            .unknown
            .retain(|(n, k, _)| !(*n == name && *k == kind));
        thread.unknown.push((name, kind, owner));
    }

    /// Records a hold the store just answered it made (or re-entered): whatever was ended under
    /// its id before, the store has it now.
    #[allow(clippy::too_many_arguments)]
    fn take_new(
        &mut self,
        t: usize,
        name: Name,
        kind: Kind,
        id: HoldId,
        deadline: Time,
        watchdog: bool,
        token: Option<u64>,
    ) -> Result<(), Violation> {
        self.memory.ended.retain(|(ended, _)| *ended != id);
        self.believe(t, name, kind, id, deadline, watchdog, token)
    }

    /// Records a new hold of thread `t`, checking its token is above every earlier one.
    #[allow(clippy::too_many_arguments)]
    fn believe(
        &mut self,
        t: usize,
        name: Name,
        kind: Kind,
        id: HoldId,
        deadline: Time,
        watchdog: bool,
        token: Option<u64>,
    ) -> Result<(), Violation> {
        if kind.issues_token() {
            let Some(token) = token else {
                return Err(Violation(format!(
                    "a new {kind:?} hold came without a token"
                )));
            };
            let last = self
                .memory
                .tokens
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, t)| *t);
            if let Some(last) = last.filter(|last| token <= *last) {
                return Err(Violation(format!(
                    "n{name}: a new hold's token {token} is not above the last one, {last}"
                )));
            }
            self.memory.tokens.retain(|(n, _)| *n != name);
            self.memory.tokens.push((name, token));
        }
        let thread = &mut self.threads[t];
        thread.holds.retain(|h| !(h.name == name && h.kind == kind));
        thread.holds.push(LocalHold {
            name,
            kind,
            id,
            count: 1,
            deadline,
            watchdog,
            unconfirmed: false,
            lost: false,
            token,
        });
        thread.holds.sort_by_key(|h| (h.name, h.kind));
        Ok(())
    }

    /// The thread's hold is lost for good (its guards report it) and leaves its table.
    fn abandon(&mut self, t: usize, name: Name, kind: Kind) {
        self.threads[t]
            .holds
            .retain(|h| !(h.name == name && h.kind == kind));
    }

    fn wait(&mut self, config: &Config, t: usize, name: Name) -> Result<(), Violation> {
        let now = self.now;
        let lease = config.leases.watchdog;
        let (owner, retry) = match &self.threads[t].waiting {
            Some(waiting) => (waiting.hold, true),
            None => (self.fresh_owner(t, name, Kind::Fair), false),
        };
        let attempt = self.fresh_attempt();
        let mut request = acquire(name, Kind::Fair, owner, t, lease, false);
        request.will_wait = true;
        request.offer = Some(Offer {
            attempt,
            hold: owner,
            lease: config.leases.grant,
        });
        match self.call(Step::Acquire(request), Net::Answered) {
            Some(Answer::Acquired { token }) => {
                self.threads[t].waiting = None;
                self.take_new(t, name, Kind::Fair, owner, now + lease, true, token)?;
            }
            Some(Answer::Held) => {
                self.threads[t].waiting = Some(Waiting {
                    name,
                    attempt,
                    hold: owner,
                    refused_at: now,
                });
            }
            _ if retry => self.give_up(t),
            _ => {}
        }
        Ok(())
    }

    /// A fair waiter gives up: it leaves the queue, and gives back a grant made to it meanwhile.
    fn give_up(&mut self, t: usize) {
        let Some(waiting) = self.threads[t].waiting.take() else {
            return;
        };
        self.call(
            Step::CancelWait {
                name: waiting.name,
                waiter: WaiterId(t as u32),
            },
            Net::Answered,
        );
        let status = self.call(
            Step::Status {
                name: waiting.name,
                kind: Kind::Fair,
                owner: waiting.hold,
            },
            Net::Answered,
        );
        if let Some(Answer::Status { mine: true, .. }) = status {
            self.call(
                Step::Release {
                    name: waiting.name,
                    kind: Kind::Fair,
                    owner: waiting.hold,
                },
                Net::Answered,
            );
        }
    }

    fn unlock(&mut self, t: usize, name: Name, kind: Kind, net: Net) {
        let Some(hold) = self.threads[t].hold_mut(name, kind) else {
            return;
        };
        hold.count = hold.count.saturating_sub(1);
        if hold.count > 0 {
            return;
        }
        let (id, lost) = (hold.id, hold.lost);
        self.abandon(t, name, kind);
        if !lost {
            // Even a hold whose lease looks run out is given back: the store may still have it.
            let outcome = self.call(
                Step::Release {
                    name,
                    kind,
                    owner: id,
                },
                net,
            );
            let _ = outcome;
        }
    }

    fn hand_over(&mut self, config: &Config, t: usize, name: Name, to: usize) {
        let now = self.now;
        let Some(hold) = self.threads[t].hold(name, Kind::Reentrant).cloned() else {
            return;
        };
        self.abandon(t, name, Kind::Reentrant);
        let successor = self.fresh_hold();
        let lease = config.leases.watchdog;
        let outcome = self.call(
            Step::ReleaseTo {
                name,
                kind: Kind::Reentrant,
                owner: hold.id,
                successor,
                lease,
            },
            Net::Answered,
        );
        if outcome == Some(Answer::Handed) {
            // The successor holds from when the release was sent.
            let _ = self.take_new(
                to,
                name,
                Kind::Reentrant,
                successor,
                now + lease,
                true,
                None,
            );
        }
    }

    fn count(&mut self, t: usize, name: Name, step: Counter, net: Net) -> Result<(), Violation> {
        let _ = t;
        let (request, outcome) = self.call_as(Step::Counter { name, step }, net);
        if step.is_set_once() {
            self.check_resent(outcome.as_ref().map(|answer| (request, answer)))?;
        }
        Ok(())
    }

    fn renew(&mut self, config: &Config, client: u8, late_node: Option<u8>) {
        let now = self.now;
        let holds: Vec<(u8, Name, Kind, HoldId)> = config
            .threads
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == client)
            .flat_map(|(t, _)| self.threads[t].holds.iter())
            .filter(|h| h.watchdog && h.believed(now))
            .map(|h| (config.nodes[usize::from(h.name)], h.name, h.kind, h.id))
            .collect();
        let mut nodes: Vec<u8> = holds.iter().map(|(node, ..)| *node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        if late_node.is_some() {
            self.faults += 1;
        }
        for node in nodes {
            let part: Few<(Name, Kind, HoldId)> = holds
                .iter()
                .filter(|(n, ..)| *n == node)
                .map(|(_, name, kind, id)| (*name, *kind, *id))
                .collect();
            let step = Step::Renew {
                holds: part.clone(),
                lease: config.leases.watchdog,
            };
            let request = self.fresh_request();
            if late_node == Some(node) {
                self.network.push(InFlight::Request {
                    step,
                    request,
                    renewal: Some((client, now)),
                });
                continue;
            }
            let answer = self.apply(&step, request);
            self.renewed(config, &part, &answer, now);
        }
        // Failures stay where they happen: a node that answered renewed its holds now,
        // whatever another node does.
        for (node, _, _, id) in &holds {
            if late_node == Some(*node) {
                continue;
            }
            let stale = self.threads.iter().flat_map(|t| &t.holds).any(|h| {
                h.id == *id
                    && !h.lost
                    && self.store.names[usize::from(h.name)].holds(h.kind, h.id)
                    && h.deadline < now + config.leases.watchdog
            });
            if stale {
                self.memory.unapplied = true;
            }
        }
    }

    /// Applies a renewal part's answer, sent at `sent`: each hold still believed is extended
    /// from then; each one found gone is lost.
    fn renewed(
        &mut self,
        config: &Config,
        part: &[(Name, Kind, HoldId)],
        answer: &Answer,
        sent: Time,
    ) {
        let Answer::Renewed(found) = answer else {
            return;
        };
        let now = self.now;
        for ((_, _, id), renewed) in part.iter().zip(found) {
            for thread in &mut self.threads {
                for hold in thread.holds.iter_mut().filter(|h| h.id == *id) {
                    if !hold.believed(now) {
                        continue;
                    }
                    if *renewed {
                        hold.deadline = hold.deadline.max(sent + config.leases.watchdog);
                        hold.unconfirmed = false;
                    } else {
                        hold.lost = true;
                    }
                }
            }
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
                renewal,
            } => {
                let answer = self.apply(&step, request);
                if let Some((_, sent)) = renewal {
                    if let Step::Renew { holds, .. } = &step {
                        self.renewed(config, holds, &answer, sent);
                    }
                }
                Ok(())
            }
            InFlight::Grant(grant) => {
                let t = grant.waiter.0 as usize;
                let Some(waiting) = self.threads.get(t).and_then(|t| t.waiting.clone()) else {
                    return Ok(());
                };
                // Believed only for the waiter's latest attempt (whose number is secret).
                if waiting.attempt != grant.attempt {
                    return Ok(());
                }
                self.threads[t].waiting = None;
                let deadline = waiting.refused_at + config.leases.grant;
                self.believe(
                    t,
                    waiting.name,
                    Kind::Fair,
                    waiting.hold,
                    deadline,
                    true,
                    None,
                )
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

/// An acquire request of thread `t`'s hold `owner`.
fn acquire(name: Name, kind: Kind, owner: HoldId, t: usize, lease: Time, reentry: bool) -> Acquire {
    Acquire {
        name,
        kind,
        owner,
        waiter: WaiterId(t as u32),
        lease,
        reentry,
        write_hold: None,
        will_wait: false,
        offer: None,
    }
}
