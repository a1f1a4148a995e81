//! The lease watchdog: per client, a thread that keeps the schedule and a thread that talks to
//! the store. The first renews every watchdog-leased hold in one batch per tick (handing the
//! batch to the second), reports fixed leases that run out while still held, and reports every
//! hold whose deadline passes, at its deadline, whatever the store call in flight is doing: a
//! renewal stuck in a dead connection never holds up a `Lost` event.
//!
//! Its schedule (the next tick, the earliest deadline) lives on a clock [`Timer`] that is set by
//! whichever thread changes it: the thread that takes a lock sets it before its call returns,
//! so a clock moved by hand knows about the tick before the watchdog thread has even gone to
//! sleep. The renewer's timer is set when a batch is handed to it and cleared when its answer
//! is applied, so such a clock also waits for the renewal it started.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;

use crate::contract::backend::DistributedLock;
use crate::contract::error::LockError;
use crate::contract::loss::LossReason;
use crate::engine::events::LeaseEvents;
use crate::engine::hold::{Hold, LeaseMode};
use crate::engine::renewer::{Batch, Renewer};
use crate::time::clock::{Clock, Timer, TimerRole};
use crate::time::signal::Signal;

/// Counters of a client's watchdog, for monitoring and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogStats {
    /// Ticks that renewed at least one hold.
    pub ticks: u64,
    /// Renewal calls made to the backend (one per tick).
    pub batches: u64,
    /// Holds found still held and extended.
    pub renewed: u64,
    /// Watchdog holds found gone, or whose lease ran out while the backend could not be reached.
    pub lost: u64,
    /// Fixed-lease holds whose lease ran out while still held.
    pub expired: u64,
    /// Renewal calls that failed (backend unreachable or erroring).
    pub failures: u64,
    /// Holds the watchdog is renewing now.
    pub holds: u64,
}

/// What the watchdog's threads share with the client.
pub(crate) struct Shared {
    pub(crate) backend: Arc<dyn DistributedLock>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) lease: Duration,
    pub(crate) events: Arc<LeaseEvents>,
    pub(crate) state: Mutex<State>,
    /// Wakes the watchdog thread: an earlier deadline was scheduled, a renewal answered, or
    /// shutdown.
    pub(crate) signal: Arc<Signal>,
    /// The watchdog thread's next wake-up, set under `state`'s lock by whoever changes the
    /// schedule.
    pub(crate) timer: Box<dyn Timer>,
    /// The thread that makes the renewal calls.
    pub(crate) renewer: Renewer,
    pub(crate) shutdown: AtomicBool,
    pub(crate) ticks: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) renewed: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) failures: AtomicU64,
}

#[derive(Default)]
pub(crate) struct State {
    /// Watchdog-leased holds, renewed at each tick.
    pub(crate) renewing: HashMap<u64, Arc<Hold>>,
    /// Fixed-lease holds by id, with the deadline they are watched for.
    fixed: HashMap<u64, (Instant, Arc<Hold>)>,
    /// The same, ordered by deadline.
    fixed_by_deadline: BTreeSet<(Instant, u64)>,
    /// The next renewal tick; `None` while there is nothing to renew.
    pub(crate) next_tick: Option<Instant>,
    /// The earliest deadline of a renewed hold, as last computed (a hold that left since may
    /// make it early: the thread then wakes for nothing and computes it again).
    pub(crate) earliest_deadline: Option<Instant>,
    /// The last tick found nothing to renew: the schedule stops after one more empty period,
    /// so a lock taken and released in a loop never has to wake the thread.
    lingering: bool,
    /// Renewal calls failed in a row.
    pub(crate) failures: u32,
    /// Holds told that their renewal is failing, with how many times in a row, to be told when
    /// it works again; their leases run out as `Unreachable`.
    pub(crate) warned: HashMap<u64, u32>,
    /// A batch is with the renewer.
    pub(crate) in_flight: bool,
}

impl State {
    pub(crate) fn remove(&mut self, id: u64) {
        self.renewing.remove(&id);
        if let Some((deadline, _)) = self.fixed.remove(&id) {
            self.fixed_by_deadline.remove(&(deadline, id));
        }
    }

    /// The next instant the watchdog thread has work at: a tick (none while a renewal is in
    /// flight: its answer wakes the thread), a fixed lease's end, a renewed hold's deadline.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let tick = if self.in_flight { None } else { self.next_tick };
        [
            tick,
            self.fixed_by_deadline.first().map(|(at, _)| *at),
            self.earliest_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Recomputes the earliest deadline of the holds renewed.
    pub(crate) fn note_deadlines(&mut self) {
        self.earliest_deadline = self.renewing.values().map(|hold| hold.deadline()).min();
    }
}

/// A client's watchdog. Its threads start with the first hold and stop when the client is
/// dropped.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Watchdog {
    pub(crate) fn new(
        backend: Arc<dyn DistributedLock>,
        clock: Arc<dyn Clock>,
        lease: Duration,
        events: Arc<LeaseEvents>,
    ) -> Self {
        let timer = clock.timer(TimerRole::Background);
        let renewer = Renewer::new(&*clock);
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                clock,
                lease,
                events,
                state: Mutex::new(State::default()),
                signal: Arc::new(Signal::new()),
                timer,
                renewer,
                shutdown: AtomicBool::new(false),
                ticks: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                renewed: AtomicU64::new(0),
                lost: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Watches `hold`: renews it every lease/3 (watchdog lease; once half of what it has left
    /// has passed if it was granted for less than two thirds of a lease, at once if that is
    /// under a second) or reports it if its fixed lease runs out before it is
    /// released. Called again when a hold changes its lease mode.
    pub(crate) fn register(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        let shared = &self.shared;
        let wake_thread = {
            let mut state = shared.state.lock();
            state.remove(hold.id);
            let now = shared.clock.now();
            match hold.mode() {
                LeaseMode::Watchdog => {
                    state.renewing.insert(hold.id, hold.clone());
                    state.lingering = false;
                    let deadline = hold.deadline();
                    // A hold granted for less than the lease (a store that grants a waiter its
                    // turn for a short while, until the first renewal makes it a hold like any
                    // other) would run out before a tick's renewal: renewed once half of what
                    // it has left has passed (a hold released before then needs none), at once
                    // if that is under a second.
                    if deadline < now + shared.lease * 2 / 3 {
                        let left = deadline.saturating_duration_since(now);
                        let at = match left >= Duration::from_secs(1) {
                            true => now + left / 2,
                            false => now,
                        };
                        state.next_tick = Some(state.next_tick.map_or(at, |tick| tick.min(at)));
                    } else if state.next_tick.is_none() {
                        state.next_tick = Some(now + shared.lease / 3);
                    }
                    if state.earliest_deadline.is_none_or(|at| deadline < at) {
                        state.earliest_deadline = Some(deadline);
                    }
                }
                LeaseMode::Fixed(_) => {
                    let deadline = hold.deadline();
                    state.fixed.insert(hold.id, (deadline, hold.clone()));
                    state.fixed_by_deadline.insert((deadline, hold.id));
                }
            }
            // The schedule is known to the clock now, before this call returns.
            shared.reschedule(&state)
        };
        if let Err(error) = self.ensure_threads() {
            shared.state.lock().remove(hold.id);
            return Err(LockError::thread_spawn("watchdog", error));
        }
        if wake_thread {
            // It may be asleep until a later instant (or none): let it see the earlier one.
            shared.signal.notify();
        }
        Ok(())
    }

    /// Stops watching `hold`.
    pub(crate) fn deregister(&self, hold: &Hold) {
        self.shared.state.lock().remove(hold.id);
    }

    pub(crate) fn stats(&self) -> WatchdogStats {
        let s = &self.shared;
        WatchdogStats {
            ticks: s.ticks.load(Ordering::Relaxed),
            batches: s.batches.load(Ordering::Relaxed),
            renewed: s.renewed.load(Ordering::Relaxed),
            lost: s.lost.load(Ordering::Relaxed),
            expired: s.expired.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            holds: s.state.lock().renewing.len() as u64,
        }
    }

    fn ensure_threads(&self) -> std::io::Result<()> {
        let mut threads = self.threads.lock();
        if threads.is_empty() {
            let shared = self.shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("dlock-watchdog".into())
                    .spawn(move || shared.run())?,
            );
            let shared = self.shared.clone();
            let renewer = std::thread::Builder::new()
                .name("dlock-renewer".into())
                .spawn(move || Renewer::run(&shared));
            match renewer {
                Ok(renewer) => threads.push(renewer),
                Err(error) => {
                    self.stop(&mut threads);
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Stops and joins the threads.
    fn stop(&self, threads: &mut Vec<JoinHandle<()>>) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.signal.notify();
        self.shared.renewer.wake();
        for thread in threads.drain(..) {
            // Each thread is waiting on its signal, just notified; the renewer may be inside a
            // backend call, which its timeouts bound.
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("lease", &self.shared.lease)
            .finish_non_exhaustive()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let mut threads = std::mem::take(&mut *self.threads.lock());
        self.stop(&mut threads);
        // Nothing is scheduled any more.
        self.shared.timer.set(None);
        self.shared.renewer.clear();
    }
}

impl Shared {
    /// Sets the watchdog thread's timer to its next work; whether that is earlier than it was.
    pub(crate) fn reschedule(&self, state: &State) -> bool {
        let wake = state.next_wake();
        let earlier = match (wake, self.timer.at()) {
            (Some(wake), Some(at)) => wake < at,
            (Some(_), None) => true,
            (None, _) => false,
        };
        self.timer.set(wake);
        earlier
    }

    /// Reports what is due, hands a due renewal to the renewer, sets the timer to the next
    /// work, sleeps until then (or until something earlier is scheduled), and again, until
    /// shutdown.
    fn run(&self) {
        loop {
            // Read the generation before anything else: a registration or shutdown notified in
            // between then ends the wait below instead of being missed.
            let seen = self.signal.generation();
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            let now = self.clock.now();
            self.expire_fixed_leases(now);
            self.expire_overdue(now);
            let batch = self.due_batch(now);
            if let Some(batch) = batch {
                self.renewer.hand(batch, now);
            }
            {
                let state = self.state.lock();
                self.reschedule(&state);
            }
            self.timer.wait(&self.signal, seen);
        }
        self.timer.set(None);
    }

    /// Reports fixed-lease holds whose deadline has passed while still held.
    fn expire_fixed_leases(&self, now: Instant) {
        let due: Vec<Arc<Hold>> = {
            let mut state = self.state.lock();
            let mut due = Vec::new();
            while let Some(&(deadline, id)) = state.fixed_by_deadline.first() {
                if deadline > now {
                    break;
                }
                state.fixed_by_deadline.pop_first();
                if let Some((_, hold)) = state.fixed.remove(&id) {
                    due.push(hold);
                }
            }
            due
        };
        for hold in due {
            if !hold.is_released()
                && now >= hold.deadline()
                && self.events.lose(&hold, LossReason::Expired, now)
            {
                self.expired.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops released holds, and reports the renewed ones whose deadline passed, at once: lost
    /// for good, since renewing one now would make a guard that already reported the loss valid
    /// again. Unrenewed because the store did not answer (`Unreachable`: a renewal failed or is
    /// still in flight), or because this client was kept off the CPU (`Expired`).
    fn expire_overdue(&self, now: Instant) {
        let overdue: Vec<(Arc<Hold>, LossReason)> = {
            let mut state = self.state.lock();
            state.renewing.retain(|_, hold| !hold.is_released());
            let in_flight = state.in_flight;
            let overdue: Vec<(Arc<Hold>, LossReason)> = state
                .renewing
                .values()
                .filter_map(|hold| {
                    let reason = match hold.loss(now)? {
                        LossReason::Expired if in_flight || state.warned.contains_key(&hold.id) => {
                            LossReason::Unreachable
                        }
                        reason => reason,
                    };
                    Some((hold.clone(), reason))
                })
                .collect();
            for (hold, _) in &overdue {
                state.renewing.remove(&hold.id);
                state.warned.remove(&hold.id);
            }
            state.note_deadlines();
            overdue
        };
        for (hold, reason) in overdue {
            self.report_loss(&hold, reason, now);
        }
    }

    /// The batch to hand to the renewer now, if it is free: holds waiting to be confirmed, or,
    /// at a tick, every renewed hold (a tick with nothing to renew schedules the next or stops).
    fn due_batch(&self, now: Instant) -> Option<Batch> {
        let mut state = self.state.lock();
        if state.in_flight {
            return None;
        }
        if state.next_tick.is_none_or(|tick| now < tick) {
            return None;
        }
        if state.renewing.is_empty() {
            state.next_tick = if state.lingering {
                None
            } else {
                Some(now + self.lease / 3)
            };
            state.lingering = true;
            state.failures = 0;
            state.warned.clear();
            return None;
        }
        state.in_flight = true;
        self.ticks.fetch_add(1, Ordering::Relaxed);
        Some(Batch::tick(state.renewing.values().cloned().collect()))
    }

    /// Marks `hold` lost for `reason` and forgets it; counts and reports the loss the first
    /// time.
    pub(crate) fn lose(&self, hold: &Arc<Hold>, reason: LossReason, now: Instant) {
        {
            let mut state = self.state.lock();
            state.remove(hold.id);
            state.warned.remove(&hold.id);
        }
        self.report_loss(hold, reason, now);
    }

    fn report_loss(&self, hold: &Arc<Hold>, reason: LossReason, now: Instant) {
        if !hold.is_released() && self.events.lose(hold, reason, now) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}
