//! Each thread deciding as the client's engine does: re-enter locally, extend, take a new hold,
//! wait in a fair queue and claim a grant, give back, hand over, release, count; and a call
//! queued behind others, whose caller may give up before it is sent.

use crate::action::Net;
use crate::kind::Kind;
use crate::step::{
    Acquire, Answer, Counter, Grant, HoldId, Name, Offer, Step, Tenure, Time, WaiterId,
};
use crate::transition::Violation;
use crate::world::{Call, Config, InFlight, LocalHold, Waiting, World};

impl World {
    pub(crate) fn lock(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        kind: Kind,
        fixed: bool,
        net: Net,
    ) -> Result<(), Violation> {
        let lease = lease_of(config, fixed);
        let now = self.now;
        if !kind.held_by_thread() {
            if !self.settle_client(config, config.threads[t]) {
                return Ok(());
            }
            // A hold of its own (a permit, a leadership) under a new id, or passing a latch.
            let owner = self.fresh_hold();
            let tenure = self.tenure(config, t, fixed, lease);
            let step = Step::Acquire(acquire(name, kind, owner, t, lease, false, tenure));
            match self.call(config, step, net) {
                Some(Answer::Acquired { token }) if kind != Kind::Latch => {
                    self.take_new(t, name, kind, owner, now + lease, !fixed, token)?;
                }
                None if kind != Kind::Latch => {
                    self.remember_attempt(config, t, name, kind, owner, now + lease, tenure);
                }
                _ => {}
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
            Some(_) => None,
            None => None,
        };
        // A step goes to the store: the backend settles what it remembers first.
        if !self.settle_client(config, config.threads[t]) {
            return Ok(());
        }
        if extending.is_none() {
            // Lost or run out: its guards stay lost, and a new hold is taken.
            self.abandon(t, name, kind);
        }
        let owner = match extending {
            Some(id) => id,
            None => self.fresh_owner(t, name, kind),
        };
        let tenure = self.tenure(config, t, fixed, lease);
        let mut request = acquire(name, kind, owner, t, lease, extending.is_some(), tenure);
        if kind == Kind::Read {
            request.write_hold = self.threads[t]
                .hold(name, Kind::Write)
                .filter(|h| h.believed(now))
                .map(|h| h.id);
        }
        let outcome = self.call(config, Step::Acquire(request), net);
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
            (Some(Answer::Gone), extending) => {
                if extending.is_some() {
                    // The store ended it: its guards are lost.
                    self.abandon(t, name, kind);
                } else {
                    // The id's hold was force-unlocked (an earlier copy of this acquire made
                    // it), or its lease is gone.
                    self.threads[t]
                        .unknown
                        .retain(|(n, k, _)| !(*n == name && *k == kind));
                }
                // The acquire takes a hold with an id of its own.
                let owner = self.fresh_hold();
                let tenure = self.tenure(config, t, fixed, lease);
                let request = acquire(name, kind, owner, t, lease, false, tenure);
                if let Some(Answer::Acquired { token }) =
                    self.call(config, Step::Acquire(request), Net::Answered)
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
                self.remember_attempt(config, t, name, kind, owner, now + lease, tenure);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A lock call put in its client's queue: the thread waits for it to be sent.
    pub(crate) fn queue_call(&mut self, t: usize, name: Name, kind: Kind, fixed: bool) {
        self.threads[t].calling = true;
        self.network.push(InFlight::Call(Call {
            thread: t as u8,
            name,
            kind,
            fixed,
        }));
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

    pub(crate) fn wait(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        fixed: bool,
    ) -> Result<(), Violation> {
        let now = self.now;
        let lease = lease_of(config, fixed);
        if !self.settle_client(config, config.threads[t]) {
            return Ok(());
        }
        let (owner, retry) = match &self.threads[t].waiting {
            Some(waiting) => (waiting.hold, true),
            None => (self.fresh_owner(t, name, Kind::Fair), false),
        };
        let attempt = self.fresh_attempt();
        let tenure = self.tenure(config, t, fixed, lease);
        let mut request = acquire(name, Kind::Fair, owner, t, lease, false, tenure);
        request.will_wait = true;
        request.offer = Some(Offer {
            attempt,
            hold: owner,
            lease: config.leases.grant.min(lease),
        });
        match self.call(config, Step::Acquire(request), Net::Answered) {
            Some(Answer::Acquired { token }) => {
                self.threads[t].waiting = None;
                self.take_new(t, name, Kind::Fair, owner, now + lease, !fixed, token)?;
            }
            Some(Answer::Held) => {
                self.threads[t].waiting = Some(Waiting {
                    name,
                    attempt,
                    hold: owner,
                    fixed,
                    granted_until: now + config.leases.grant.min(lease),
                });
            }
            _ if retry => self.give_up(t),
            _ => {}
        }
        Ok(())
    }

    /// A grant message reaches a waiter: a hint (whoever reads the store knows the offer's
    /// number and may send one), unless it carries the offer's secret. The waiter claims the
    /// offered hold with a step of its own, and believes the store's answer.
    pub(crate) fn granted(&mut self, config: &Config, grant: Grant) -> Result<(), Violation> {
        let t = grant.waiter.0 as usize;
        let Some(waiting) = self.threads.get(t).and_then(|t| t.waiting.clone()) else {
            return Ok(());
        };
        if waiting.attempt != grant.attempt {
            return Ok(());
        }
        let now = self.now;
        let fixed = waiting.fixed;
        if config.store.turns && !fixed {
            // Its turn, seen on its watch: the store's own change. Believed at once, to the
            // end of the grant's lease as the store has it (the waiter's backend keeps that
            // lease alive and knows its end); its renewal makes it a hold on the watchdog's
            // lease. A grant gone by now (run out, force-unlocked) is nothing.
            let until = self.store.names[usize::from(waiting.name)]
                .holder
                .filter(|holder| holder.hold == waiting.hold && holder.until > now)
                .map(|holder| holder.until);
            if let Some(until) = until {
                self.threads[t].waiting = None;
                return self.take_new(t, waiting.name, Kind::Fair, waiting.hold, until, true, None);
            }
            return Ok(());
        }
        let lease = lease_of(config, fixed);
        if grant.proven && !fixed {
            // Sent by the store's own release: believed at once, for the grant's lease from
            // when its offer was sent, if half of it is left; renewed then as any hold. The
            // grant may have ended since it was sent (force-unlocked, the store lost): then
            // it is believed no longer than the store kept it, as any hold the store ended.
            let grant_lease = config.leases.grant.min(lease);
            let left = waiting.granted_until.saturating_sub(now);
            if 2 * left >= grant_lease {
                self.threads[t].waiting = None;
                let (name, hold) = (waiting.name, waiting.hold);
                return self.believe(t, name, Kind::Fair, hold, waiting.granted_until, true, None);
            }
        }
        let tenure = self.tenure(config, t, fixed, lease);
        let claim = acquire(
            waiting.name,
            Kind::Fair,
            waiting.hold,
            t,
            lease,
            false,
            tenure,
        );
        match self.call(config, Step::Acquire(claim), Net::Answered) {
            Some(Answer::Acquired { token }) => {
                self.threads[t].waiting = None;
                let (name, hold) = (waiting.name, waiting.hold);
                self.take_new(t, name, Kind::Fair, hold, now + lease, !fixed, token)
            }
            Some(Answer::Held) => Ok(()),
            _ => {
                self.give_up(t);
                Ok(())
            }
        }
    }

    /// A thread gives up: a call still in its client's queue is never sent; a fair waiter
    /// leaves the queue and gives back a grant made to it meanwhile.
    pub(crate) fn give_up(&mut self, t: usize) {
        if self.threads[t].calling {
            self.threads[t].calling = false;
            self.network
                .retain(|m| !matches!(m, InFlight::Call(call) if usize::from(call.thread) == t));
            return;
        }
        let Some(waiting) = self.threads[t].waiting.take() else {
            return;
        };
        let cancel = Step::CancelWait {
            name: waiting.name,
            kind: Kind::Fair,
            waiter: WaiterId(t as u32),
        };
        let request = self.fresh_request();
        self.apply(&cancel, request);
        let request = self.fresh_request();
        let status = self
            .apply(
                &Step::Status {
                    name: waiting.name,
                    kind: Kind::Fair,
                    owner: waiting.hold,
                },
                request,
            )
            .answer;
        if let Answer::Status { mine: true, .. } = status {
            let request = self.fresh_request();
            self.apply(
                &Step::Release {
                    name: waiting.name,
                    kind: Kind::Fair,
                    owner: waiting.hold,
                },
                request,
            );
        }
    }

    pub(crate) fn unlock(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        kind: Kind,
        net: Net,
    ) -> Result<(), Violation> {
        let Some(hold) = self.threads[t].hold_mut(name, kind) else {
            return Ok(());
        };
        hold.count = hold.count.saturating_sub(1);
        if hold.count > 0 {
            return Ok(());
        }
        // Settled while the thread still holds it (one over is found gone, not released).
        let settled = self.settle_client(config, config.threads[t]);
        let Some(hold) = self.threads[t].hold(name, kind).cloned() else {
            return Ok(());
        };
        self.abandon(t, name, kind);
        if hold.lost || !settled {
            return Ok(());
        }
        // Even a hold whose lease looks run out is given back: the store may still have it.
        let step = Step::Release {
            name,
            kind,
            owner: hold.id,
        };
        let (_, sent) = self.call_as(config, step, net);
        self.check_released(t, &hold, &sent.outcome, sent.removed)?;
        if sent.outcome.is_none() {
            self.remember_release(config, t, &hold);
        }
        Ok(())
    }

    /// A thread told that its release released its hold had that hold on the store until a
    /// copy of the release removed it: an answer given without the store's record of it
    /// ("no tombstone, so it must have been mine") is "gone" or "unknown", never "released".
    fn check_released(
        &self,
        t: usize,
        hold: &LocalHold,
        outcome: &Option<Answer>,
        removed: bool,
    ) -> Result<(), Violation> {
        if *outcome == Some(Answer::Released) && !removed {
            return Err(Violation(format!(
                "thread {t} was told its release of its {:?} hold on n{} released it, though \
                 no copy of the release found it there: the store had ended it otherwise",
                hold.kind, hold.name
            )));
        }
        Ok(())
    }

    pub(crate) fn hand_over(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        to: usize,
    ) -> Result<(), Violation> {
        let now = self.now;
        if !self.settle_client(config, config.threads[t]) {
            return Ok(());
        }
        let Some(hold) = self.threads[t].hold(name, Kind::Reentrant).cloned() else {
            return Ok(());
        };
        self.abandon(t, name, Kind::Reentrant);
        if hold.lost {
            return Ok(());
        }
        let successor = self.fresh_hold();
        let lease = config.leases.watchdog;
        let step = Step::ReleaseTo {
            name,
            kind: Kind::Reentrant,
            owner: hold.id,
            successor,
            lease,
        };
        let (_, sent) = self.call_as(config, step, Net::Answered);
        self.check_released(t, &hold, &sent.outcome, sent.removed)?;
        if sent.outcome == Some(Answer::Handed) {
            // The successor holds from when the release was sent.
            self.take_new(
                to,
                name,
                Kind::Reentrant,
                successor,
                now + lease,
                true,
                None,
            )?;
        }
        Ok(())
    }

    pub(crate) fn count(
        &mut self,
        config: &Config,
        t: usize,
        name: Name,
        step: Counter,
        net: Net,
    ) -> Result<(), Violation> {
        if !self.settle_client(config, config.threads[t]) {
            return Ok(());
        }
        let (request, sent) = self.call_as(config, Step::Counter { name, step }, net);
        if step.is_set_once() {
            self.check_resent(sent.outcome.as_ref().map(|answer| (request, answer)))?;
        }
        Ok(())
    }
}

/// An acquire request of thread `t`'s hold `owner`.
/// The lease a thread's hold asks for: a fixed one, or the watchdog's.
fn lease_of(config: &Config, fixed: bool) -> Time {
    if fixed {
        config.leases.fixed
    } else {
        config.leases.watchdog
    }
}

pub(crate) fn acquire(
    name: Name,
    kind: Kind,
    owner: HoldId,
    t: usize,
    lease: Time,
    reentry: bool,
    tenure: Tenure,
) -> Acquire {
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
        tenure,
    }
}
