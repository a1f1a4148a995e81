//! A wake-up signal: a generation counter and a condition variable.

use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// A wake-up signal that blocked threads wait on.
///
/// Each [`notify`](Signal::notify) bumps a generation counter. A waiter reads the generation
/// *before* it checks the condition it waits for (for example, before retrying an acquire), then
/// waits for the generation to change, so a notification between the check and the wait is never
/// missed.
#[derive(Debug, Default)]
pub struct Signal {
    generation: Mutex<u64>,
    condvar: Condvar,
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
        *self.generation.lock()
    }

    /// Wakes every thread waiting on this signal.
    pub fn notify(&self) {
        let mut generation = self.generation.lock();
        *generation = generation.wrapping_add(1);
        self.condvar.notify_all();
    }

    /// Wakes waiters so they re-check their stop condition, without counting as a notification
    /// (used by clocks whose time moves by hand).
    pub fn poke(&self) {
        let _generation = self.generation.lock();
        self.condvar.notify_all();
    }

    /// Blocks until the generation differs from `seen` or the real-time `deadline` passes.
    pub fn wait_until(&self, seen: u64, deadline: Option<Instant>) -> Wake {
        let mut generation = self.generation.lock();
        loop {
            if *generation != seen {
                return Wake::Signaled;
            }
            match deadline {
                Some(deadline) => {
                    if self
                        .condvar
                        .wait_until(&mut generation, deadline)
                        .timed_out()
                    {
                        return if *generation != seen {
                            Wake::Signaled
                        } else {
                            Wake::DeadlineReached
                        };
                    }
                }
                None => self.condvar.wait(&mut generation),
            }
        }
    }

    /// Blocks until the generation differs from `seen` or `deadline_reached` returns true.
    ///
    /// `deadline_reached` is evaluated with the signal's lock held, so whoever changes what it
    /// reads and then calls [`poke`](Signal::poke) cannot slip between the check and the wait.
    pub fn wait_while_before(&self, seen: u64, mut deadline_reached: impl FnMut() -> bool) -> Wake {
        let mut generation = self.generation.lock();
        loop {
            if *generation != seen {
                return Wake::Signaled;
            }
            if deadline_reached() {
                return Wake::DeadlineReached;
            }
            self.condvar.wait(&mut generation);
        }
    }
}
