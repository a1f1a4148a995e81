//! A wake-up signal: a generation counter, a condition variable for blocked threads and the
//! wakers of waiting futures.

use std::task::{Context, Poll, Waker};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// A wake-up signal that blocked threads and waiting futures wait on.
///
/// Each [`notify`](Signal::notify) bumps a generation counter. A waiter reads the generation
/// *before* it checks the condition it waits for (for example, before retrying an acquire), then
/// waits for the generation to change, so a notification between the check and the wait is never
/// missed. A thread waits by blocking ([`wait_until`](Signal::wait_until)); a future by
/// [`poll_notified`](Signal::poll_notified), which leaves its waker to be woken by the same
/// notification.
#[derive(Debug, Default)]
pub struct Signal {
    state: Mutex<State>,
    condvar: Condvar,
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    /// The wakers of futures waiting for the next notification (or poke).
    wakers: Vec<Waker>,
}

/// Why a wait on a [`Signal`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// The signal was notified after the generation the waiter had seen.
    Signaled,
    /// The deadline was reached first.
    DeadlineReached,
}

impl Signal {
    /// A signal at generation 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current generation: read it before checking the condition, wait on it after.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Wakes every thread and future waiting on this signal.
    pub fn notify(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.generation = state.generation.wrapping_add(1);
            self.condvar.notify_all();
            std::mem::take(&mut state.wakers)
        };
        // Outside the lock: a woken future may be polled on another thread at once.
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Wakes waiters so they re-check their stop condition, without counting as a notification
    /// (used by clocks whose time moves by hand).
    pub fn poke(&self) {
        let wakers = {
            let mut state = self.state.lock();
            self.condvar.notify_all();
            std::mem::take(&mut state.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Ready once the generation differs from `seen`; until then the task's waker is kept and
    /// woken by the next [`notify`](Signal::notify) (or [`poke`](Signal::poke), after which the
    /// task polls again).
    pub fn poll_notified(&self, seen: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.state.lock();
        if state.generation != seen {
            return Poll::Ready(());
        }
        let waker = cx.waker();
        if !state.wakers.iter().any(|kept| kept.will_wake(waker)) {
            state.wakers.push(waker.clone());
        }
        Poll::Pending
    }

    /// Blocks until the generation differs from `seen` or the real-time `deadline` passes.
    pub fn wait_until(&self, seen: u64, deadline: Option<Instant>) -> Wake {
        let mut state = self.state.lock();
        loop {
            if state.generation != seen {
                return Wake::Signaled;
            }
            match deadline {
                Some(deadline) => {
                    if self.condvar.wait_until(&mut state, deadline).timed_out() {
                        return if state.generation != seen {
                            Wake::Signaled
                        } else {
                            Wake::DeadlineReached
                        };
                    }
                }
                None => self.condvar.wait(&mut state),
            }
        }
    }

    /// Blocks until the generation differs from `seen` or `deadline_reached` returns true.
    ///
    /// `deadline_reached` is evaluated with the signal's lock held, so whoever changes what it
    /// reads and then calls [`poke`](Signal::poke) cannot slip between the check and the wait.
    pub fn wait_while_before(&self, seen: u64, mut deadline_reached: impl FnMut() -> bool) -> Wake {
        let mut state = self.state.lock();
        loop {
            if state.generation != seen {
                return Wake::Signaled;
            }
            if deadline_reached() {
                return Wake::DeadlineReached;
            }
            self.condvar.wait(&mut state);
        }
    }
}
