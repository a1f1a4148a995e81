//! A client's local queue of waiters per lock name: only the head competes on the backend.
//!
//! Without it, every release would wake every waiting thread of the process and each would send
//! an acquire, of which one wins: a burst of wasted round trips per hand-off, and no order among
//! the process's own waiters. With it, the threads of one client waiting on one name line up in
//! arrival order; the head alone holds the release subscription and retries, and when it leaves
//! (acquired, timed out, failed) the next one takes its place.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{DistributedLock, ReleaseSubscription};
use crate::signal::Signal;
use crate::LockError;

/// The wait queues of one client, by lock name.
#[derive(Debug, Default)]
pub(crate) struct WaitQueues {
    queues: Mutex<HashMap<Arc<str>, Arc<WaitQueue>>>,
}

/// The threads of one client waiting for one lock, in arrival order.
pub(crate) struct WaitQueue {
    state: Mutex<QueueState>,
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
    name: Arc<str>,
    queue: Arc<WaitQueue>,
    number: u64,
    turn: Arc<Signal>,
}

impl WaitQueues {
    /// Joins the queue of `name` at its end.
    pub(crate) fn join(&self, name: &Arc<str>) -> Ticket<'_> {
        let queue = self
            .queues
            .lock()
            .entry(name.clone())
            .or_insert_with(|| {
                Arc::new(WaitQueue {
                    state: Mutex::new(QueueState::default()),
                })
            })
            .clone();
        let turn = Arc::new(Signal::new());
        let number = {
            let mut state = queue.state.lock();
            let number = state.next_ticket;
            state.next_ticket += 1;
            state.tickets.push_back((number, turn.clone()));
            number
        };
        Ticket {
            queues: self,
            name: name.clone(),
            queue,
            number,
            turn,
        }
    }
}

impl WaitQueues {
    /// Tells this client's waiters on `name` that the calling thread just released it. The
    /// backend announces the release too (on Redis, through pub/sub), but the releasing thread
    /// is already awake: waking the head from here saves a hop through another thread.
    pub(crate) fn released(&self, name: &str) {
        let queue = self.queues.lock().get(name).cloned();
        if let Some(queue) = queue {
            if let Some(subscription) = &queue.state.lock().subscription {
                subscription.signal().notify();
            }
        }
    }
}

impl Ticket<'_> {
    /// Whether this ticket is at the head of its queue.
    pub(crate) fn is_head(&self) -> bool {
        self.queue.state.lock().tickets.front().map(|(n, _)| *n) == Some(self.number)
    }

    /// The signal notified when this ticket reaches the head.
    pub(crate) fn turn(&self) -> &Arc<Signal> {
        &self.turn
    }

    /// The queue's release signal, subscribing to the lock's releases first if nobody has yet.
    pub(crate) fn release_signal(
        &self,
        backend: &dyn DistributedLock,
    ) -> Result<Arc<Signal>, LockError> {
        let mut state = self.queue.state.lock();
        if let Some(subscription) = &state.subscription {
            return Ok(subscription.signal().clone());
        }
        let subscription = backend.subscribe(&self.name)?;
        let signal = subscription.signal().clone();
        state.subscription = Some(subscription);
        Ok(signal)
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // Lock order: the map, then the queue (as in `join`).
        let mut queues = self.queues.queues.lock();
        let (next_head, now_empty, subscription) = {
            let mut state = self.queue.state.lock();
            let was_head = state.tickets.front().map(|(n, _)| *n) == Some(self.number);
            state.tickets.retain(|(number, _)| *number != self.number);
            let next_head = match state.tickets.front() {
                Some((_, turn)) if was_head => Some(turn.clone()),
                _ => None,
            };
            let now_empty = state.tickets.is_empty();
            let subscription = if now_empty {
                state.subscription.take()
            } else {
                None
            };
            (next_head, now_empty, subscription)
        };
        if now_empty {
            queues.remove(&self.name);
        }
        drop(queues);
        // Unsubscribing may talk to the backend: outside every lock.
        drop(subscription);
        if let Some(turn) = next_head {
            turn.notify();
        }
    }
}
