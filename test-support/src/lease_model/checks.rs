//! What the model checks after every step.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use dlocks::backend::{LockRef, OwnerId};
use dlocks::{LeaseChange, LockKind};

use super::sequence::{Sequence, Step, LATCH_COUNT, PERMITS};
use super::worker::{Belief, Cmd, Outcome, Reply, WorkerId};

/// What the model remembers from step to step.
#[derive(Default)]
pub(crate) struct Tracked {
    /// The last fencing token (of a fenced hold, or a leadership) per name and kind, and the
    /// token of each hold seen (a re-entry keeps its hold's).
    tokens: HashMap<(String, LockKind), u64>,
    tokens_of: HashMap<OwnerId, u64>,
    /// Count-downs that answered, and those whose outcome is unknown (they may have counted,
    /// now or once delivered).
    counted: u64,
    maybe_counted: u64,
    /// Holds reported lost by their client's events.
    lost: HashSet<OwnerId>,
    /// Holds whose guard said it was lost: lost is final.
    seen_lost: HashSet<OwnerId>,
}

impl Sequence<'_> {
    /// Notes what a step's outcome tells: a new token, a count-down.
    pub(crate) fn note(&mut self, step: &Step, outcome: &Outcome) {
        match (step, outcome) {
            (Step::Take { name, kind, .. }, Outcome::Taken(Some((token, owner)))) => {
                self.new_token(name, *kind, *token, owner);
            }
            (Step::Campaign { name, .. }, Outcome::Taken(Some((token, owner)))) => {
                self.new_token(name, LockKind::Election, *token, owner);
            }
            (Step::Take { name, .. }, Outcome::Taken(_)) if *name == "alias" => {
                self.fail("a name that shares another's keys was taken");
            }
            (Step::CountDown { .. }, Outcome::Counted(Ok(()))) => self.tracked.counted += 1,
            (Step::CountDown { .. }, Outcome::Counted(Err(_))) => self.tracked.maybe_counted += 1,
            (Step::AwaitLatch { .. }, Outcome::Opened(true)) => {
                let at_most = self.tracked.counted + self.tracked.maybe_counted;
                if at_most < LATCH_COUNT {
                    self.fail(&format!(
                        "the latch opened after {at_most} count-downs of {LATCH_COUNT} at most"
                    ));
                }
            }
            _ => {}
        }
    }

    fn new_token(&mut self, name: &str, kind: LockKind, token: u64, owner: &OwnerId) {
        if let Some(known) = self.tracked.tokens_of.get(owner) {
            if *known != token {
                self.fail(&format!(
                    "{name}: the hold {owner} re-entered with the token {token}, not its own {known}"
                ));
            }
            return;
        }
        self.tracked.tokens_of.insert(owner.clone(), token);
        if token == 0 {
            self.fail(&format!("a new hold of {name} got the token 0"));
        }
        let last = self.tracked.tokens.insert((name.to_owned(), kind), token);
        if let Some(last) = last.filter(|last| token <= *last) {
            self.fail(&format!(
                "{name}: a new hold's token {token} is not above the last one, {last}"
            ));
        }
    }

    pub(crate) fn now(&self) -> Instant {
        self.store.raw.clock().now()
    }

    pub(crate) fn check(&mut self) {
        let mut beliefs: Vec<(WorkerId, Belief)> = Vec::new();
        // Every worker holding a guard is asked at once: they read their guards side by side
        // while time stands still, and the answers are gathered after.
        let asked: Vec<WorkerId> = (self.holding.get().into_iter().enumerate())
            .filter_map(|(worker, held)| (held > 0).then_some(worker))
            .collect();
        for worker in &asked {
            self.send(*worker, Cmd::Report);
        }
        for worker in asked {
            match self.answer(worker) {
                Reply::Report(some) => {
                    beliefs.extend(some.into_iter().map(|belief| (worker, belief)));
                }
                Reply::Done(..) => self.fail("a worker answered out of turn"),
            }
        }
        for events in &self.events {
            for event in events.try_iter() {
                if let LeaseChange::Lost { .. } = event.change {
                    self.tracked.lost.insert(event.owner);
                }
            }
        }
        if std::env::var("DLOCK_MODEL_TRACE").is_ok() {
            let now = self.now();
            eprintln!("after {:?}:", self.log.last());
            for (worker, belief) in &beliefs {
                eprintln!(
                    "   w{worker} {:?} lost={} left={:?}",
                    belief.holds,
                    belief.lost,
                    belief.deadline.checked_duration_since(now)
                );
            }
        }
        self.check_losses_told(beliefs.iter().map(|(_, belief)| belief));
        self.check_lost_is_final(beliefs.iter().map(|(_, belief)| belief));
        let held: Vec<(WorkerId, &Belief)> = beliefs
            .iter()
            .filter(|(_, belief)| !belief.lost)
            .map(|(worker, belief)| (*worker, belief))
            .collect();
        for (_, belief) in &held {
            for (name, kind, owner) in &belief.holds {
                self.check_store(belief, name, *kind, owner);
            }
        }
        if self.store.clock.is_some() {
            // Time stands still while the guards are read: what they believe is at one instant.
            self.check_exclusion(&held);
        }
    }

    /// A guard whose deadline has passed was told it lost its lease, by its client's events,
    /// within the model's bound.
    fn check_losses_told<'b>(&self, beliefs: impl Iterator<Item = &'b Belief>) {
        let now = self.now();
        for belief in beliefs {
            let overdue = belief.deadline + self.model.loss_slack <= now;
            if !belief.lost || !overdue {
                continue;
            }
            let told = belief
                .holds
                .iter()
                .any(|(_, _, owner)| self.tracked.lost.contains(owner));
            if !told {
                self.fail(&format!(
                    "a lease lost {:?} ago was not reported: {belief:?}",
                    now.saturating_duration_since(belief.deadline)
                ));
            }
        }
    }

    /// A guard that said its lease was lost says so ever after (a multi-lock's guard is lost
    /// with one member, so only single holds are followed).
    fn check_lost_is_final<'b>(&mut self, beliefs: impl Iterator<Item = &'b Belief>) {
        for belief in beliefs {
            let [(name, _, owner)] = belief.holds.as_slice() else {
                continue;
            };
            if belief.lost {
                self.tracked.seen_lost.insert(owner.clone());
            } else if self.tracked.seen_lost.contains(owner) {
                self.fail(&format!(
                    "{name}: the hold {owner} said it was lost, and trusts its lease again"
                ));
            }
        }
    }

    /// Never two believing holders of a name, unless both read (or a writer reads too); never
    /// more believing permit holders than permits; never two believing leaders.
    fn check_exclusion(&self, held: &[(WorkerId, &Belief)]) {
        type Holder<'b> = (LockKind, &'b OwnerId, WorkerId);
        let mut by_name: HashMap<&str, Vec<Holder<'_>>> = HashMap::new();
        for (worker, belief) in held {
            for (name, kind, owner) in &belief.holds {
                let holders = by_name.entry(name.as_str()).or_default();
                // A multi-lock member or a reentrant guard may show a hold twice.
                if !holders
                    .iter()
                    .any(|(other_kind, other, _)| *other == owner && *other_kind == *kind)
                {
                    holders.push((*kind, owner, *worker));
                }
            }
        }
        for (name, holders) in by_name {
            if holders.len() < 2 {
                continue;
            }
            let permits = holders
                .iter()
                .filter(|(kind, ..)| *kind == LockKind::Semaphore)
                .count();
            let readers = holders
                .iter()
                .filter(|(kind, ..)| *kind == LockKind::Read)
                .count();
            // A writer's own reads: one writer, and every reader of the writer's thread.
            let writers: Vec<WorkerId> = holders
                .iter()
                .filter(|(kind, ..)| *kind == LockKind::Write)
                .map(|(_, _, worker)| *worker)
                .collect();
            let writer_reading = writers.len() == 1
                && readers + 1 == holders.len()
                && holders.iter().all(|(_, _, worker)| *worker == writers[0]);
            let shared = permits == holders.len() || readers == holders.len() || writer_reading;
            if !shared {
                self.fail(&format!(
                    "{name} has {} believing holders at once: {holders:?}",
                    holders.len()
                ));
            }
            if permits as u64 > PERMITS {
                self.fail(&format!(
                    "{name} has {permits} believing permit holders of {PERMITS} permits"
                ));
            }
        }
    }

    fn check_store(&self, belief: &Belief, name: &str, kind: LockKind, owner: &OwnerId) {
        let status = match self.store.raw.status(LockRef::new(name, kind), owner) {
            Ok(status) => status,
            Err(error) => {
                if self.store.clock.is_some() {
                    self.fail(&format!("the store's status of {name} failed: {error}"));
                }
                // A real store may be unreachable for a moment (a paused replica does not
                // stop the master; a loaded machine may): nothing to check then.
                return;
            }
        };
        let after = self.now();
        if !status.held_by_owner {
            // The store answered for some moment before `after` (a loaded machine may hold the
            // question up for a while, and the lease end naturally meanwhile): the guard's
            // belief must have ended by then.
            if belief.deadline > after {
                self.fail(&format!(
                    "{name}: the guard trusts its lease {:?} past the moment the store no longer \
                     held it for {owner} ({status:?})",
                    belief.deadline - after,
                ));
            }
            return;
        }
        let Some(remaining) = status.remaining_lease else {
            return; // no expiry at all
        };
        let store_end = after + remaining + Duration::from_millis(1);
        if belief.deadline > store_end {
            self.fail(&format!(
                "{name}: the guard of {owner} trusts its lease {:?} longer than the store keeps it",
                belief.deadline - store_end
            ));
        }
    }
}
