//! A client's local queue of waiters per lock: only the head competes on the backend.
//!
//! Without it, every release would wake every waiting thread of the process and each would send
//! an acquire, of which one wins: a burst of wasted round trips per hand-off, and no order among
//! the process's own waiters. With it, the threads of one client waiting on one lock line up in
//! arrival order; the head alone holds the release subscription and retries, and when it leaves
//! (acquired, timed out, failed) the next one takes its place.
//!
//! A releasing thread of the same client may hand the lock straight to the head (see
//! [`Handoff`]): the head then returns holding it, with no acquire of its own.
//!
//! Locking: the map's mutex, then a queue's mutex, each held only for bookkeeping. Nothing that
//! can block (a backend call, dropping a subscription) ever runs under either. A queue is in the
//! map exactly while it has tickets: tickets are pushed under the map's lock, and the queue is
//! removed (by identity, never by name alone) under the map's lock when its last ticket leaves.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;

use crate::contract::backend::ReleaseSubscription;
use crate::contract::kind::Target;
use crate::contract::owner::OwnerId;
use crate::engine::taken::Taken;
use crate::time::signal::Signal;

/// How long this client's head waiter must have waited before a release hands the lock
/// straight to it rather than letting the releasing thread re-take it first: parking_lot's
/// eventual fairness. Barging keeps a busy lock's throughput; this bounds every waiter's wait.
pub(crate) const HANDOFF_AFTER: Duration = Duration::from_micros(500);

/// The wait queues of one client, by lock.
#[derive(Debug, Default)]
pub(crate) struct WaitQueues {
    queues: Mutex<HashMap<Target, Arc<WaitQueue>>>,
}

/// The threads of one client waiting for one lock, in arrival order.
struct WaitQueue {
    state: Mutex<QueueState>,
    /// Notified when a hand-off in flight ends (granted or not).
    handoff_done: Signal,
}

/// Where the head stands with a direct hand-off from a releasing thread of this client.
///
/// The head opens it only while parked (between a failed attempt and its next one), so a
/// grant never meets an acquire of the head's own in flight; and once a releaser has started
/// one, the head waits for its outcome before anything else, so a grant is never lost to a
/// head that timed out or gave up at the same instant: it then returns holding the lock.
#[derive(Default)]
pub(crate) enum Handoff {
    /// The head is not parked (or there is no head): no hand-off.
    #[default]
    Closed,
    /// The head is parked and takes a hand-off: as `owner`, with `lease`, waiting as
    /// `waiter` (its mark on the store, if its kind marks waiters). It has been head since
    /// `head_since` and parked since `opened_at`.
    Open {
        owner: OwnerId,
        waiter: OwnerId,
        lease: Duration,
        head_since: Instant,
        opened_at: Instant,
    },
    /// A releaser's hand-off is in flight (its backend call).
    Granting { opened_at: Instant },
    /// Handed over: the head holds the lock on these terms.
    Granted(Taken),
    /// Not handed over. `unknown`: the backend call failed, so the head may hold it after all.
    Failed { unknown: bool, opened_at: Instant },
    /// The head left while a releaser's hand-off to it was in flight (its future was dropped):
    /// the releaser gives back what it hands over, and no new hand-off opens until then.
    Deserted,
}

/// What a parked head finds when it wakes.
pub(crate) enum Unparked {
    /// No hand-off: try the backend as usual.
    Retry,
    /// The lock was handed over.
    Granted(Taken),
    /// A hand-off failed with an unknown outcome: the head must ask the backend whether it
    /// holds the lock (granted no earlier than `opened_at`).
    Unknown { opened_at: Instant },
}

/// A hand-off a releaser has started: it must be finished (dropping it unfinished reports an
/// unknown outcome, so the head checks).
pub(crate) struct Grantee {
    queue: Arc<WaitQueue>,
    /// The head's owner id, waiter id and lease.
    pub(crate) owner: OwnerId,
    pub(crate) waiter: OwnerId,
    pub(crate) lease: Duration,
    opened_at: Instant,
    finished: bool,
}

#[derive(Default)]
struct QueueState {
    next_ticket: u64,
    /// Each waiter's number and the signal that tells it it has reached the head: only the new
    /// head is woken when the head leaves.
    tickets: VecDeque<(u64, Arc<Signal>)>,
    /// The backend subscription, kept while anyone waits, so a hand-off between local waiters
    /// does not unsubscribe and resubscribe.
    subscription: Option<Box<dyn ReleaseSubscription>>,
    /// The head's direct hand-off.
    handoff: Handoff,
    /// The head was handed the lock and holds it: it leaves the queue as soon as it runs.
    head_holds: bool,
}

impl std::fmt::Debug for WaitQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitQueue")
            .field("waiting", &self.state.lock().tickets.len())
            .finish_non_exhaustive()
    }
}

/// A place in a wait queue; leaving the queue happens on drop.
pub(crate) struct Ticket<'a> {
    queues: &'a WaitQueues,
    target: Target,
    queue: Arc<WaitQueue>,
    number: u64,
    turn: Arc<Signal>,
}

impl WaitQueues {
    /// Whether a thread of this client waits for `target` now: its queue has a ticket, other
    /// than a head the lock was just handed to (which holds it, and leaves the queue as soon
    /// as it runs).
    pub(crate) fn has_waiters(&self, target: &Target) -> bool {
        let Some(queue) = self.queues.lock().get(target).cloned() else {
            return false;
        };
        let state = queue.state.lock();
        let head_holds = state.head_holds || matches!(state.handoff, Handoff::Granted(_));
        !(state.tickets.len() == 1 && head_holds)
    }

    /// Joins the queue of `target` at its end.
    pub(crate) fn join(&self, target: &Target) -> Ticket<'_> {
        let turn = Arc::new(Signal::new());
        let mut queues = self.queues.lock();
        let queue = queues
            .entry(target.clone())
            .or_insert_with(|| {
                Arc::new(WaitQueue {
                    state: Mutex::new(QueueState::default()),
                    handoff_done: Signal::new(),
                })
            })
            .clone();
        // Pushed before the map's lock is let go: a queue in the map is never empty, so a
        // leaving ticket cannot remove it from under this one.
        let number = {
            let mut state = queue.state.lock();
            let number = state.next_ticket;
            state.next_ticket += 1;
            state.tickets.push_back((number, turn.clone()));
            number
        };
        drop(queues);
        Ticket {
            queues: self,
            target: target.clone(),
            queue,
            number,
            turn,
        }
    }

    /// Tells this client's waiters on `target` that the calling thread just released it. The
    /// backend announces the release too (on Redis, through pub/sub), but the releasing thread
    /// is already awake: waking the head from here saves a hop through another thread.
    pub(crate) fn released(&self, target: &Target) {
        let queue = self.queues.lock().get(target).cloned();
        if let Some(queue) = queue {
            let signal = queue
                .state
                .lock()
                .subscription
                .as_ref()
                .map(|subscription| subscription.signal().clone());
            if let Some(signal) = signal {
                signal.notify();
            }
        }
    }
}

impl WaitQueues {
    /// Starts a hand-off of `target` to this client's head waiter, if it is parked and has been
    /// head for at least `after` (eventual fairness: a releaser may re-take its lock ahead of the
    /// queue, but not for longer than that). The caller must finish the returned hand-off.
    pub(crate) fn start_handoff(
        &self,
        target: &Target,
        now: Instant,
        after: Duration,
    ) -> Option<Grantee> {
        let queue = self.queues.lock().get(target).cloned()?;
        let mut state = queue.state.lock();
        let Handoff::Open {
            owner,
            waiter,
            lease,
            head_since,
            opened_at,
        } = &state.handoff
        else {
            return None;
        };
        if now.saturating_duration_since(*head_since) < after {
            return None;
        }
        let (owner, waiter, lease, opened_at) = (owner.clone(), waiter.clone(), *lease, *opened_at);
        state.handoff = Handoff::Granting { opened_at };
        drop(state);
        Some(Grantee {
            queue,
            owner,
            waiter,
            lease,
            opened_at,
            finished: false,
        })
    }
}

impl Grantee {
    /// The lock was handed over on `taken`'s terms (`Some`), or not (`None`; `unknown` when the
    /// backend call failed). Wakes the head. Whether the head was still there to be told: if
    /// not, the releaser gives back what it may have handed over.
    pub(crate) fn finish(mut self, taken: Option<Taken>, unknown: bool) -> bool {
        self.resolve(match taken {
            Some(taken) => Handoff::Granted(taken),
            None => Handoff::Failed {
                unknown,
                opened_at: self.opened_at,
            },
        })
    }

    fn resolve(&mut self, outcome: Handoff) -> bool {
        self.finished = true;
        let (told, signal) = {
            let mut state = self.queue.state.lock();
            let told = !matches!(state.handoff, Handoff::Deserted);
            state.handoff = if told { outcome } else { Handoff::Closed };
            let signal = state
                .subscription
                .as_ref()
                .map(|subscription| subscription.signal().clone());
            (told, signal)
        };
        self.queue.handoff_done.notify();
        // The head is parked on the release signal.
        if let Some(signal) = signal {
            signal.notify();
        }
        told
    }
}

impl Drop for Grantee {
    fn drop(&mut self) {
        if !self.finished {
            let opened_at = self.opened_at;
            self.resolve(Handoff::Failed {
                unknown: true,
                opened_at,
            });
        }
    }
}

impl Ticket<'_> {
    /// Opens the head's hand-off before it parks: a releaser of this client may now give it
    /// the lock as `owner` with `lease`.
    pub(crate) fn open_handoff(
        &self,
        owner: &OwnerId,
        waiter: &OwnerId,
        lease: Duration,
        head_since: Instant,
        now: Instant,
    ) {
        let mut state = self.queue.state.lock();
        if matches!(state.handoff, Handoff::Closed) {
            state.handoff = Handoff::Open {
                owner: owner.clone(),
                waiter: waiter.clone(),
                lease,
                head_since,
                opened_at: now,
            };
        }
    }

    /// Closes the head's hand-off once it wakes: what happened meanwhile; or, while a
    /// hand-off is in flight, the generation of [`handoff_done`](Self::handoff_done) to wait
    /// past for its outcome (its backend call is bounded by the backend's timeouts).
    pub(crate) fn close_handoff(&self) -> Result<Unparked, u64> {
        let seen = self.queue.handoff_done.generation();
        let mut state = self.queue.state.lock();
        match std::mem::take(&mut state.handoff) {
            Handoff::Granting { opened_at } => {
                state.handoff = Handoff::Granting { opened_at };
                Err(seen)
            }
            Handoff::Granted(taken) => {
                state.head_holds = true;
                Ok(Unparked::Granted(taken))
            }
            Handoff::Failed {
                unknown: true,
                opened_at,
            } => Ok(Unparked::Unknown { opened_at }),
            // Another head's, that left: kept until its releaser is done.
            Handoff::Deserted => {
                state.handoff = Handoff::Deserted;
                Ok(Unparked::Retry)
            }
            Handoff::Closed | Handoff::Open { .. } | Handoff::Failed { .. } => Ok(Unparked::Retry),
        }
    }

    /// Notified when a hand-off in flight ends.
    pub(crate) fn handoff_done(&self) -> &Signal {
        &self.queue.handoff_done
    }

    /// The head leaves before closing its hand-off (its future was dropped): one still in
    /// flight is marked deserted, so its releaser gives the lock back; whether one had already
    /// come (granted, or with an unknown outcome), which the leaver gives back itself.
    pub(crate) fn desert(&self) -> bool {
        let mut state = self.queue.state.lock();
        if state.tickets.front().map(|(n, _)| *n) != Some(self.number) {
            return false;
        }
        match std::mem::take(&mut state.handoff) {
            Handoff::Granting { .. } | Handoff::Deserted => {
                state.handoff = Handoff::Deserted;
                false
            }
            Handoff::Granted(_) | Handoff::Failed { unknown: true, .. } => true,
            Handoff::Closed | Handoff::Open { .. } | Handoff::Failed { .. } => false,
        }
    }

    /// Whether this ticket is at the head of its queue.
    pub(crate) fn is_head(&self) -> bool {
        self.queue.state.lock().tickets.front().map(|(n, _)| *n) == Some(self.number)
    }

    /// The signal notified when this ticket reaches the head.
    pub(crate) fn turn(&self) -> &Arc<Signal> {
        &self.turn
    }

    /// The queue's release signal, if the queue has a live subscription to the lock's
    /// releases; else the head subscribes (with no lock held, however long it takes) and gives
    /// it to [`keep_subscription`](Self::keep_subscription).
    ///
    /// Only the head subscribes, and the head cannot leave while it does, so one subscription
    /// at most is made per queue.
    pub(crate) fn release_signal(&self) -> Option<Arc<Signal>> {
        let lapsed = {
            let mut state = self.queue.state.lock();
            match &state.subscription {
                Some(subscription) if !subscription.lapsed() => {
                    return Some(subscription.signal().clone());
                }
                // Its channel moved (a cluster's slot migrated or failed over): subscribe again.
                Some(_) => state.subscription.take(),
                None => None,
            }
        };
        drop(lapsed);
        None
    }

    /// Whether the queue's subscription lapsed (its channel moved): a park on its signal would
    /// wait for a message that never comes.
    pub(crate) fn subscription_lapsed(&self) -> bool {
        let state = self.queue.state.lock();
        state
            .subscription
            .as_ref()
            .is_some_and(|subscription| subscription.lapsed())
    }

    /// Keeps the head's new subscription for the queue; its signal.
    pub(crate) fn keep_subscription(
        &self,
        subscription: Box<dyn ReleaseSubscription>,
    ) -> Arc<Signal> {
        let signal = subscription.signal().clone();
        let previous = self.queue.state.lock().subscription.replace(subscription);
        // Only the head subscribes, so there was none; were there one, it goes outside the lock.
        drop(previous);
        signal
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut queues = self.queues.queues.lock();
        let (next_head, subscription) = {
            let mut state = self.queue.state.lock();
            let was_head = state.tickets.front().map(|(n, _)| *n) == Some(self.number);
            if was_head {
                state.head_holds = false;
                // A head leaves only after closing (or deserting) its hand-off; this covers an
                // unwinding one.
                match state.handoff {
                    Handoff::Open { .. } => state.handoff = Handoff::Closed,
                    Handoff::Granting { .. } => state.handoff = Handoff::Deserted,
                    _ => {}
                }
            }
            state.tickets.retain(|(number, _)| *number != self.number);
            let next_head = match state.tickets.front() {
                Some((_, turn)) if was_head => Some(turn.clone()),
                _ => None,
            };
            let subscription = if state.tickets.is_empty() {
                // The last one out: the queue leaves the map (if it is still this queue's
                // entry, which it is while it has tickets) and takes its subscription along.
                if queues
                    .get(&self.target)
                    .is_some_and(|queue| Arc::ptr_eq(queue, &self.queue))
                {
                    queues.remove(&self.target);
                }
                state.subscription.take()
            } else {
                None
            };
            (next_head, subscription)
        };
        drop(queues);
        // Unsubscribing may talk to the backend: outside every lock.
        drop(subscription);
        if let Some(turn) = next_head {
            turn.notify();
        }
    }
}
