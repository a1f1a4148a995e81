//! A random sequence of backend steps, made from its seed alone, in the model's terms (small
//! ids, leases in microseconds).

use dlock_protocol_model::{
    Acquire, Counter, HoldId, Kind, Name, Offer, Step, Tenure, Time, WaiterId,
};
use dlocks::backend::DistributedLock;
use dlocks::LockKind;

use super::{Fault, LONG_LEASE};

/// One operation of a sequence.
#[derive(Clone, Debug)]
pub enum Op {
    /// A backend step, with a fault armed for it if any.
    Step(Step, Option<Fault>),
    /// Time passes until every short lease taken so far has run out.
    Wait,
    /// What the network held up is delivered.
    Deliver,
}

/// The short lease's placeholder in generated steps; the target's own short lease replaces it.
pub(super) const SHORT: Time = 1;
/// The long lease, in microseconds.
pub(super) fn long() -> Time {
    LONG_LEASE.as_micros() as Time
}

/// The dlock kind of a model kind.
pub(crate) fn lock_kind(kind: Kind) -> LockKind {
    match kind {
        Kind::Reentrant => LockKind::Reentrant,
        Kind::Fenced => LockKind::Fenced,
        Kind::Fair => LockKind::Fair,
        Kind::Read => LockKind::Read,
        Kind::Write => LockKind::Write,
        Kind::Semaphore => LockKind::Semaphore,
        Kind::Latch => LockKind::Latch,
        Kind::Election => LockKind::Election,
    }
}

/// The most steps held up at once.
const MOST_HELD: usize = 3;

/// The sequence of seed `seed`: `steps` operations on three names, each used as one kind
/// (sometimes two, to see names refused as another kind), the kinds `backend` keeps.
pub fn generate(seed: u64, steps: usize, backend: &dyn DistributedLock) -> Vec<Op> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let grants = backend.hands_over(LockKind::Fair);
    let kept: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|kind| backend.supports(lock_kind(*kind)))
        .collect();
    let families: Vec<Vec<Kind>> = (0..3)
        .map(|_| {
            let first = kept[rng.usize(..kept.len())];
            let mut kinds = vec![first];
            // A read-write lock's two sides, a fenced lock's plain side.
            match first {
                Kind::Read => kinds.push(Kind::Write),
                Kind::Write => kinds.push(Kind::Read),
                Kind::Fenced if kept.contains(&Kind::Reentrant) => kinds.push(Kind::Reentrant),
                _ => {}
            }
            if rng.u8(..5) == 0 {
                kinds.push(kept[rng.usize(..kept.len())]);
            }
            kinds.retain(|kind| kept.contains(kind));
            kinds.dedup();
            kinds
        })
        .collect();
    let mut next_id = 1u32;
    let mut fresh = || {
        next_id += 1;
        HoldId(next_id)
    };
    // The holds asked for so far, to extend, release, renew or ask about again.
    let mut holds: Vec<(Name, Kind, HoldId)> = Vec::new();
    let mut ops = Vec::with_capacity(steps);
    // Steps held up and not yet delivered: at most `MOST_HELD` (their orders are all followed).
    let mut held = 0;
    for _ in 0..steps {
        let name = rng.u8(..3);
        let kinds = &families[usize::from(name)];
        let kind = kinds[rng.usize(..kinds.len())];
        let known: Vec<HoldId> = holds
            .iter()
            .filter(|(n, k, _)| *n == name && *k == kind)
            .map(|(_, _, id)| *id)
            .collect();
        let known_one = |rng: &mut fastrand::Rng| -> Option<HoldId> {
            (!known.is_empty()).then(|| known[rng.usize(..known.len())])
        };
        let lease = if rng.u8(..3) == 0 { SHORT } else { long() };
        let step = match rng.u8(..100) {
            0..=34 => {
                let existing = if rng.bool() {
                    known_one(&mut rng)
                } else {
                    None
                };
                let owner = existing.unwrap_or_else(&mut fresh);
                let reentry = existing.is_some() && rng.bool();
                let queues = kind == Kind::Fair && rng.bool();
                let waiter = WaiterId(rng.u32(..3));
                // A lock of any exclusive kind, a writer or a reader waits (a writer and a
                // reader mark themselves on the store) unless it is waiter 0, which only
                // tries: no draw of its own, so the seeds found earlier keep their sequences.
                let exclusive_or_read_write = matches!(
                    kind,
                    Kind::Reentrant | Kind::Fenced | Kind::Election | Kind::Write | Kind::Read
                );
                let waits = queues || (exclusive_or_read_write && waiter.0 > 0);
                holds.push((name, kind, owner));
                Step::Acquire(Acquire {
                    name,
                    kind,
                    owner,
                    waiter,
                    lease,
                    reentry,
                    write_hold: None,
                    will_wait: waits,
                    // Drawn on every backend (the same sequences), and sent only to one
                    // whose fair release grants.
                    offer: queues
                        .then(|| Offer {
                            attempt: rng.u64(1..u64::MAX >> 1),
                            hold: owner,
                            lease: long(),
                        })
                        .filter(|_| grants),
                    // The lease a backend puts a hold on is its own business: the model's
                    // store counts it from when the step lands, as every store's answers show.
                    tenure: Tenure::Landed,
                })
            }
            35..=54 => Step::Release {
                name,
                kind,
                owner: known_one(&mut rng).unwrap_or_else(&mut fresh),
            },
            55..=58 => {
                let successor = fresh();
                holds.push((name, kind, successor));
                Step::ReleaseTo {
                    name,
                    kind,
                    owner: known_one(&mut rng).unwrap_or_else(&mut fresh),
                    successor,
                    lease: long(),
                }
            }
            59..=66 => {
                if holds.is_empty() {
                    continue;
                }
                let count = 1 + rng.usize(..3);
                Step::Renew {
                    holds: (0..count)
                        .map(|_| holds[rng.usize(..holds.len())])
                        .collect(),
                    lease,
                    session: None,
                }
            }
            67..=73 => Step::Status {
                name,
                kind,
                owner: known_one(&mut rng).unwrap_or_else(&mut fresh),
            },
            74..=78 => Step::ForceUnlock { name, kind },
            79..=90 => {
                // On a semaphore or latch name, its steps; on another, the other kind's (a
                // name used as another kind).
                let semaphore = match kind {
                    Kind::Semaphore => true,
                    Kind::Latch => false,
                    _ => !kept.contains(&Kind::Latch),
                };
                let step = match (semaphore, rng.u8(..3)) {
                    (true, 0) => Counter::TrySetPermits(2),
                    (true, 1) => Counter::AddPermits(1),
                    (true, _) => Counter::AvailablePermits,
                    (false, 0) => Counter::TrySetCount(2),
                    (false, 1) => Counter::CountDown,
                    (false, _) => Counter::Count,
                };
                if !kept.contains(&step.kind()) {
                    continue;
                }
                Step::Counter { name, step }
            }
            91..=93 if kept.contains(&Kind::Election) => Step::Leader { name },
            94..=95 if kept.contains(&Kind::Fair) => Step::CancelWait {
                name,
                // A plain lock's, a writer's or a reader's wait on a name of that kind, else a
                // fair waiter's.
                kind: match kind {
                    Kind::Reentrant | Kind::Fenced | Kind::Write | Kind::Read => kind,
                    _ => Kind::Fair,
                },
                waiter: WaiterId(rng.u32(..3)),
            },
            91..=95 => continue,
            96..=97 => {
                ops.push(Op::Wait);
                continue;
            }
            _ => {
                ops.push(Op::Deliver);
                held = 0;
                continue;
            }
        };
        // Set-once steps are few and the faults that matter to them (a reply lost, the step
        // sent again) rare: they meet faults more often than other steps.
        let odds = if matches!(step, Step::Counter { .. }) {
            4
        } else {
            20
        };
        let fault = match rng.u8(..odds) {
            0 => Some(Fault::CutReply),
            1 => Some(Fault::HoldBack),
            _ => None,
        };
        if fault == Some(Fault::HoldBack) {
            if held == MOST_HELD {
                ops.push(Op::Deliver);
                held = 0;
            }
            held += 1;
        }
        ops.push(Op::Step(step, fault));
    }
    ops
}
