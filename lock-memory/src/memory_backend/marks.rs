//! Waiters' marks, in the order the waiters were first refused, each with the instant it runs
//! out. The plain lock's waiters and a read-write lock's writers go in turn by that order (a
//! free lock goes to the first live mark alone, so a waiter waits for the holds of those
//! marked before it at most); the readers that waited behind a writer's hold are marked too,
//! and go in together.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use dlock_core::backend::{instant_after, AcquireRequest, OwnerId};

use super::remaining;

/// Marks (waiter id, the instant it runs out), in the order the waiters were first refused.
#[derive(Debug, Default)]
pub(super) struct Marks(VecDeque<(OwnerId, Instant)>);

impl Marks {
    /// Drops the marks that ran out at `now`.
    pub(super) fn purge(&mut self, now: Instant) {
        self.0.retain(|(_, until)| *until > now);
    }

    /// Whether no mark is kept.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `waiter` has a mark (live or not: [`purge`](Self::purge) first).
    pub(super) fn contains(&self, waiter: &OwnerId) -> bool {
        self.0.iter().any(|(w, _)| w == waiter)
    }

    /// Whose turn a free lock is, if not `waiter`'s: how long the first live mark of another
    /// waiter has left (marks that ran out are dropped).
    pub(super) fn of_other(&mut self, waiter: &OwnerId, now: Instant) -> Option<Duration> {
        self.purge(now);
        match self.0.front() {
            Some((first, until)) if first != waiter => Some(remaining(*until, now)),
            _ => None,
        }
    }

    /// How long the last live mark has left, if one lives at `now`.
    pub(super) fn longest(&mut self, now: Instant) -> Option<Duration> {
        self.purge(now);
        self.0
            .iter()
            .map(|(_, until)| *until)
            .max()
            .map(|until| remaining(until, now))
    }

    /// Marks the waiter of `request` for its slot from `now`, if it will wait: in its place
    /// if it has one, else after the others.
    pub(super) fn mark(&mut self, request: &AcquireRequest<'_>, now: Instant) {
        if !request.will_wait {
            return;
        }
        let until = instant_after(now, request.queue_slot);
        match self.0.iter_mut().find(|(w, _)| w == request.waiter) {
            Some((_, mark)) => *mark = until,
            None => self.0.push_back((request.waiter.clone(), until)),
        }
    }

    /// Takes `waiter`'s mark away (it took the lock, or gave up); whether it had one.
    pub(super) fn remove(&mut self, waiter: &OwnerId) -> bool {
        let before = self.0.len();
        self.0.retain(|(w, _)| w != waiter);
        self.0.len() < before
    }
}
