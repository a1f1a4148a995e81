//! How a call meets the injected faults: counted and observed, delayed, failed, its reply
//! lost, or its step held back, repeated or judged node by node.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlock_core::backend::{DistributedLock, HoldRef, Renewal};
use dlock_core::LockError;

use super::{Applied, FaultyBackend, Held};
use crate::fault::{Call, Effect, Fault, Op};
use crate::faulty_subscription::{Delivery, Relay};
use crate::held_step::{HeldStep, OwnedHold};

impl FaultyBackend {
    /// Counts the call, shows it to the observer, and takes the effects of the faults that
    /// match it. `node_names`: for a renewal batch, the names node faults are judged on hold by
    /// hold (they are left to the caller, in the second list).
    pub(super) fn take_effects(&self, op: Op, names: &[&str]) -> (Applied, Vec<Fault>) {
        self.shared.calls[op.index()].fetch_add(1, Ordering::SeqCst);
        let observer = self.shared.observer.lock().clone();
        if let Some(observer) = observer {
            observer(&Call {
                op,
                names: names.iter().map(|name| (*name).to_owned()).collect(),
                thread: thread::current().id(),
            });
        }
        let mut faults = self.shared.faults.lock();
        let mut effects = Vec::new();
        let mut node_faults = Vec::new();
        for fault in faults.iter_mut().filter(|fault| fault.matches(op, names)) {
            if let Some(times) = &mut fault.times {
                *times -= 1;
            }
            if fault.node && op == Op::Renew {
                node_faults.push(fault.clone());
            } else {
                effects.push(fault.effect);
            }
        }
        faults.retain(|fault| fault.times != Some(0));
        (Applied { effects }, node_faults)
    }

    /// Lets `by` pass: real time, or the manual clock's.
    fn wait(&self, by: Duration) {
        match &self.shared.manual_clock {
            Some(clock) => clock.skip(by),
            None => thread::sleep(by),
        }
    }

    pub(super) fn hold(&self, step: HeldStep) {
        self.shared.held.lock().push(Held::Step(step));
    }

    /// Runs one call through its faults: `f` makes it on the inner backend; `copy` makes the
    /// request to keep in the network (`None`: a read, lost instead of held).
    pub(super) fn call<T>(
        &self,
        op: Op,
        names: &[&str],
        copy: impl Fn() -> Option<HeldStep>,
        f: impl FnOnce(&dyn DistributedLock) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let (applied, _) = self.take_effects(op, names);
        let result = self.run(op, applied, copy, f);
        self.shared.answered[op.index()].fetch_add(1, Ordering::SeqCst);
        result
    }

    pub(super) fn run<T>(
        &self,
        op: Op,
        applied: Applied,
        copy: impl Fn() -> Option<HeldStep>,
        f: impl FnOnce(&dyn DistributedLock) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        let mut after = Vec::new();
        for effect in applied.effects {
            match effect {
                Effect::Delay(by) => self.wait(by),
                Effect::Fail => return Err(injected(op, "the request was lost")),
                Effect::HoldBack => {
                    if let Some(step) = copy() {
                        self.hold(step);
                    }
                    return Err(injected(op, "the request is held back in the network"));
                }
                other => after.push(other),
            }
        }
        let result = f(&*self.shared.inner);
        for effect in after {
            match effect {
                Effect::DelayReply(by) => self.wait(by),
                Effect::LoseReply => return Err(injected(op, "the reply was lost")),
                Effect::Duplicate => {
                    if let Some(step) = copy() {
                        self.hold(step);
                    }
                }
                _ => {}
            }
        }
        result
    }

    /// What happens to one message to a subscription of `name` (see [`Op::Message`]).
    pub(super) fn message(&self, name: &str, relay: &Arc<Relay>) -> Delivery {
        let (applied, _) = self.take_effects(Op::Message, &[name]);
        let mut delivery = Delivery::Now;
        for effect in applied.effects {
            delivery = match effect {
                Effect::Fail => Delivery::Lost,
                Effect::HoldBack => Delivery::Held,
                Effect::Duplicate => Delivery::Twice,
                _ => continue,
            };
        }
        match delivery {
            Delivery::Held | Delivery::Twice => {
                self.shared.held.lock().push(Held::Message {
                    relay: relay.clone(),
                    blocking: matches!(delivery, Delivery::Held),
                });
            }
            Delivery::Now | Delivery::Lost => {}
        }
        self.shared.answered[Op::Message.index()].fetch_add(1, Ordering::SeqCst);
        delivery
    }

    /// A renewal batch, with the faults of one node applied to that node's holds alone, each
    /// node's part told as it is answered: the healthy nodes' at once, a slow node's once its
    /// delay has passed (a slow node holds up only its own holds). As a store of several nodes
    /// does, the call waits for a slow node a third of the lease at most: then its holds are
    /// told unanswered, and a request that had not reached it by then never does.
    pub(super) fn renew_by_node(
        &self,
        holds: &[HoldRef<'_>],
        lease: Duration,
        node_faults: &[Fault],
        answered: &(dyn Fn(&[usize], &[Renewal]) + Sync),
    ) -> Result<(), LockError> {
        // Per hold: the node fault's effect on it, if any (the last one injected).
        let effects: Vec<Option<Effect>> = holds
            .iter()
            .map(|hold| {
                node_faults
                    .iter()
                    .rev()
                    .find(|fault| fault.covers(hold.lock.name))
                    .map(|fault| fault.effect)
            })
            .collect();
        let copies = |matching: &dyn Fn(&Effect) -> bool| -> Vec<OwnedHold> {
            holds
                .iter()
                .zip(&effects)
                .filter(|(_, effect)| effect.as_ref().is_some_and(matching))
                .map(|(hold, _)| OwnedHold::of(hold))
                .collect()
        };
        let later = copies(&|effect| matches!(effect, Effect::HoldBack | Effect::Duplicate));
        if !later.is_empty() {
            self.hold(HeldStep::new(move |store| {
                let refs: Vec<HoldRef<'_>> = later.iter().map(OwnedHold::as_ref).collect();
                let _ = store.renew(&refs, lease);
            }));
        }
        // Renewed now: every hold but those whose request is lost, held back or slow.
        let now: Vec<usize> = (0..holds.len())
            .filter(|&index| {
                !matches!(
                    effects[index],
                    Some(Effect::Fail | Effect::HoldBack | Effect::Delay(_))
                )
            })
            .collect();
        let refs: Vec<HoldRef<'_>> = now.iter().map(|&index| holds[index]).collect();
        let mut answers = vec![Renewal::Unanswered; holds.len()];
        for (&index, renewal) in now.iter().zip(self.shared.inner.renew(&refs, lease)?) {
            if !matches!(effects[index], Some(Effect::LoseReply)) {
                answers[index] = renewal;
            }
        }
        // The parts, by when they are answered: at once, or after a node's delay.
        let patience = lease / 3;
        let delay_of = |effect: &Option<Effect>| match effect {
            Some(Effect::Delay(by) | Effect::DelayReply(by)) => (*by).min(patience),
            _ => Duration::ZERO,
        };
        let too_slow = |effect: &Option<Effect>| match effect {
            Some(Effect::Delay(by) | Effect::DelayReply(by)) => *by > patience,
            _ => false,
        };
        let mut delays: Vec<Duration> = effects.iter().map(delay_of).collect();
        delays.sort();
        delays.dedup();
        let mut waited = Duration::ZERO;
        for delay in delays {
            self.wait(delay - waited);
            waited = delay;
            let part: Vec<usize> = (0..holds.len())
                .filter(|&index| delay_of(&effects[index]) == delay)
                .collect();
            for &index in &part {
                if too_slow(&effects[index]) {
                    answers[index] = Renewal::Unanswered;
                }
            }
            let slow: Vec<usize> = part
                .iter()
                .copied()
                .filter(|&index| {
                    matches!(effects[index], Some(Effect::Delay(_))) && !too_slow(&effects[index])
                })
                .collect();
            if !slow.is_empty() {
                // A slow request reaches the store only now.
                let refs: Vec<HoldRef<'_>> = slow.iter().map(|&index| holds[index]).collect();
                for (&index, renewal) in slow.iter().zip(self.shared.inner.renew(&refs, lease)?) {
                    answers[index] = renewal;
                }
            }
            let found: Vec<Renewal> = part.iter().map(|&index| answers[index]).collect();
            answered(&part, &found);
        }
        Ok(())
    }
}

fn injected(op: Op, what: &str) -> LockError {
    LockError::unavailable(
        format!("fault injected into {op:?}: {what}"),
        "FaultyBackend",
    )
}
