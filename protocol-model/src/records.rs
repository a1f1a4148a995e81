//! What a store keeps besides its holds, each for a while: tombstones of holds an operator
//! ended (a late copy of their acquire finds them gone, not made again) and answers latched by
//! request id (a release or a set-once step sent again replays its first answer). Each lapses
//! on the store's clock, after as long as the store's settings keep it: a real store cannot
//! keep them forever (etcd keeps no release record at all, Redis's unlock latch and
//! PostgreSQL's latched answers run out). A record may lapse only once nothing that depends on
//! it can still arrive; an answer given without it is "unknown" or "gone", never an inferred
//! "released".

use crate::kind::Kind;
use crate::step::{Answer, HoldId, Name, RequestId, Step, Time};
use crate::store::{Lease, Store};

/// How long a store keeps one kind of record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Keep {
    /// Not at all (etcd keeps no release record).
    Never,
    /// For this many ticks after it is made.
    For(Time),
    /// For good (a model whose network may deliver a request any time later).
    Always,
}

impl Keep {
    /// When a record made at `now` lapses, if it is kept at all.
    pub fn until(self, now: Time) -> Option<Time> {
        match self {
            Keep::Never => None,
            Keep::For(ticks) => Some(now.saturating_add(ticks)),
            Keep::Always => Some(Time::MAX),
        }
    }
}

/// How long a store keeps each kind of record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Keeps {
    /// Tombstones of force-unlocked holds.
    pub tombstones: Keep,
    /// A release's answer, for a copy sent again.
    pub releases: Keep,
    /// A set-once step's answer, for a copy sent again.
    pub set_once: Keep,
}

impl Keeps {
    /// Every record kept `ticks`.
    pub const fn all_for(ticks: Time) -> Self {
        Keeps {
            tombstones: Keep::For(ticks),
            releases: Keep::For(ticks),
            set_once: Keep::For(ticks),
        }
    }

    /// Every record kept for good.
    pub const ALWAYS: Keeps = Keeps {
        tombstones: Keep::Always,
        releases: Keep::Always,
        set_once: Keep::Always,
    };
}

/// A hold an operator ended, never made again under its id while the tombstone lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tombstone {
    /// The hold.
    pub hold: HoldId,
    /// When the tombstone lapses.
    pub until: Time,
}

/// A latched answer: a copy of `request` sent again replays it while it lasts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Latched {
    /// The request.
    pub request: RequestId,
    /// Its first answer.
    pub answer: Answer,
    /// When the latch lapses.
    pub until: Time,
}

/// The records that lapse at an instant: tombstones (by hold, with when they were made) and
/// latches (by request).
#[derive(Debug, Default)]
pub struct Lapsing {
    /// The holds whose tombstones lapse, and when each was made.
    pub tombstones: Vec<(HoldId, Time)>,
    /// The requests whose latched answers lapse.
    pub latches: Vec<RequestId>,
}

impl Store {
    /// The answer latched for `request`, if the store still keeps it.
    pub(crate) fn replay(&self, request: RequestId) -> Option<Answer> {
        self.latched
            .iter()
            .find(|latch| latch.request == request)
            .map(|latch| latch.answer.clone())
    }

    /// Latches `answer` for `request` (a step of `step`'s kind), for as long as the store
    /// keeps such answers.
    pub(crate) fn latch(&mut self, step: &Step, request: RequestId, answer: &Answer, now: Time) {
        let keep = match step {
            Step::Release { .. } | Step::ReleaseTo { .. } => self.settings.keeps.releases,
            _ => self.settings.keeps.set_once,
        };
        if let Some(until) = keep.until(now) {
            self.latched.push(Latched {
                request,
                answer: answer.clone(),
                until,
            });
            self.latched.sort_by_key(|latch| latch.request);
        }
    }

    /// Notes that the holds `ended` of `name` were force-unlocked at `now`.
    pub(crate) fn bury(&mut self, name: Name, ended: &[Lease], now: Time) {
        let Some(until) = self.settings.keeps.tombstones.until(now) else {
            return;
        };
        let state = &mut self.names[usize::from(name)];
        for lease in ended {
            state.ended.retain(|t| t.hold != lease.hold);
            state.ended.push(Tombstone {
                hold: lease.hold,
                until,
            });
        }
        state.ended.sort();
    }

    /// Whether `name` keeps a tombstone of `hold`.
    pub fn buried(&self, name: Name, hold: HoldId) -> bool {
        self.names[usize::from(name)]
            .ended
            .iter()
            .any(|t| t.hold == hold)
    }

    /// The records that lapse by `now`.
    pub fn lapsing(&self, now: Time) -> Lapsing {
        let kept = match self.settings.keeps.tombstones {
            Keep::For(ticks) => ticks,
            Keep::Never | Keep::Always => 0,
        };
        Lapsing {
            tombstones: self
                .names
                .iter()
                .flat_map(|state| &state.ended)
                .filter(|t| t.until <= now)
                .map(|t| (t.hold, t.until.saturating_sub(kept)))
                .collect(),
            latches: self
                .latched
                .iter()
                .filter(|latch| latch.until <= now)
                .map(|latch| latch.request)
                .collect(),
        }
    }

    /// Drops the records that lapsed by `now`.
    pub(crate) fn lapse(&mut self, now: Time) {
        for state in &mut self.names {
            state.ended.retain(|t| t.until > now);
        }
        self.latched.retain(|latch| latch.until > now);
    }
}

/// Whether a request for `step` depends on the tombstone of `hold` (an acquire that would make
/// the hold again without it; an extend never makes one). Only copies sent before the hold
/// was ended do: a request sent since is a new attempt, which may take the name.
pub fn needs_tombstone(step: &Step, hold: HoldId) -> bool {
    matches!(
        step,
        Step::Acquire(acquire)
            if acquire.owner == hold && !acquire.reentry && acquire.kind != Kind::Latch
    )
}
