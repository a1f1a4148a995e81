//! The lease watchdog: one thread per client that renews every watchdog-leased hold in one
//! batch per tick, and reports fixed leases that run out while still held.
//!
//! Its schedule (the next tick, the earliest fixed-lease end) lives on a clock [`Timer`] that is
//! set by whichever thread changes it: the thread that takes a lock sets it before its call
//! returns, so a clock moved by hand knows about the tick before the watchdog thread has even
//! gone to sleep.

use std::collections::{BTreeSet, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;

use crate::backend::{DistributedLock, HoldRef, Renewal};
use crate::clock::{Clock, Timer, TimerRole};
use crate::events::{LeaseChange, LeaseEvents, LossReason};
use crate::hold::{Hold, LeaseMode};
use crate::lease::Lease;
use crate::signal::Signal;
use crate::LockError;

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

/// What the watchdog thread shares with the client.
struct Shared {
    backend: Arc<dyn DistributedLock>,
    clock: Arc<dyn Clock>,
    lease: Duration,
    events: Arc<LeaseEvents>,
    state: Mutex<State>,
    /// Wakes the thread: an earlier deadline was scheduled, or shutdown.
    signal: Arc<Signal>,
    /// The thread's next wake-up, set under `state`'s lock by whoever changes the schedule.
    timer: Box<dyn Timer>,
    shutdown: AtomicBool,
    ticks: AtomicU64,
    batches: AtomicU64,
    renewed: AtomicU64,
    lost: AtomicU64,
    expired: AtomicU64,
    failures: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Watchdog-leased holds, renewed at each tick.
    renewing: HashMap<u64, Arc<Hold>>,
    /// Fixed-lease holds by id, with the deadline they are watched for.
    fixed: HashMap<u64, (Instant, Arc<Hold>)>,
    /// The same, ordered by deadline.
    fixed_by_deadline: BTreeSet<(Instant, u64)>,
    /// The next renewal tick; `None` while there is nothing to renew.
    next_tick: Option<Instant>,
    /// The last tick found nothing to renew: the schedule stops after one more empty period,
    /// so a lock taken and released in a loop never has to wake the thread.
    lingering: bool,
    /// Renewal calls failed in a row.
    failures: u32,
    /// Holds told that renewal is failing, to be told when it works again.
    warned: HashSet<u64>,
    /// Holds granted on a short lease, to renew at once.
    confirming: Vec<Arc<Hold>>,
}

impl State {
    fn remove(&mut self, id: u64) {
        self.renewing.remove(&id);
        if let Some((deadline, _)) = self.fixed.remove(&id) {
            self.fixed_by_deadline.remove(&(deadline, id));
        }
    }

    /// The next instant the thread has work at.
    fn next_wake(&self) -> Option<Instant> {
        let fixed = self.fixed_by_deadline.first().map(|(at, _)| *at);
        match (self.next_tick, fixed) {
            (Some(tick), Some(fixed)) => Some(tick.min(fixed)),
            (tick, fixed) => tick.or(fixed),
        }
    }
}

/// A client's watchdog. The thread starts with the first hold and stops when the client is
/// dropped.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    pub(crate) fn new(
        backend: Arc<dyn DistributedLock>,
        clock: Arc<dyn Clock>,
        lease: Duration,
        events: Arc<LeaseEvents>,
    ) -> Self {
        let timer = clock.timer(TimerRole::Background);
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                clock,
                lease,
                events,
                state: Mutex::new(State::default()),
                signal: Arc::new(Signal::new()),
                timer,
                shutdown: AtomicBool::new(false),
                ticks: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                renewed: AtomicU64::new(0),
                lost: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Watches `hold`: renews it every lease/3 (watchdog lease) or reports it if its fixed lease
    /// runs out before it is released. Called again when a hold changes its lease mode.
    pub(crate) fn register(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        let shared = &self.shared;
        let wake_thread = {
            let mut state = shared.state.lock();
            state.remove(hold.id);
            match hold.mode() {
                LeaseMode::Watchdog => {
                    state.renewing.insert(hold.id, hold.clone());
                    state.lingering = false;
                    if state.next_tick.is_none() {
                        state.next_tick = Some(shared.clock.now() + shared.lease / 3);
                    }
                }
                LeaseMode::Fixed(_) => {
                    let deadline = hold.deadline();
                    state.fixed.insert(hold.id, (deadline, hold.clone()));
                    state.fixed_by_deadline.insert((deadline, hold.id));
                }
            }
            // The schedule is known to the clock now, before this call returns.
            let wake = state.next_wake();
            let earlier = match (wake, shared.timer.at()) {
                (Some(wake), Some(at)) => wake < at,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if earlier {
                shared.timer.set(wake);
            }
            earlier
        };
        if let Err(error) = self.ensure_thread() {
            shared.state.lock().remove(hold.id);
            return Err(LockError::thread_spawn("watchdog", error));
        }
        if wake_thread {
            // It may be asleep until a later instant (or none): let it see the earlier one.
            shared.signal.notify();
        }
        Ok(())
    }

    /// Renews `hold` now, alone, rather than at the next tick: a hold granted on a short
    /// lease is confirmed this way, off the caller's path and without renewing the client's
    /// other holds early.
    pub(crate) fn confirm(&self, hold: &Arc<Hold>) {
        let shared = &self.shared;
        {
            let mut state = shared.state.lock();
            state.confirming.push(hold.clone());
            // The clock knows the work is due now, before this call returns.
            shared.timer.set(Some(shared.clock.now()));
        }
        shared.signal.notify();
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

    fn ensure_thread(&self) -> std::io::Result<()> {
        let mut thread = self.thread.lock();
        if thread.is_none() {
            let shared = self.shared.clone();
            *thread = Some(
                std::thread::Builder::new()
                    .name("dlock-watchdog".into())
                    .spawn(move || shared.run())?,
            );
        }
        Ok(())
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
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.signal.notify();
        if let Some(thread) = self.thread.lock().take() {
            // The thread is between bounded backend calls or waiting on the signal just notified.
            let _ = thread.join();
        }
        // Nothing is scheduled any more.
        self.shared.timer.set(None);
    }
}

impl Shared {
    /// Runs the work that is due, sets the timer to the next work, sleeps until then (or until
    /// an earlier deadline is scheduled), and again, until shutdown.
    fn run(&self) {
        loop {
            // Read the generation before anything else: a registration or shutdown notified in
            // between then ends the wait below instead of being missed.
            let seen = self.signal.generation();
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            self.expire_fixed_leases();
            self.confirm_grants();
            let tick_due = {
                let state = self.state.lock();
                state.next_tick.is_some_and(|tick| self.clock.now() >= tick)
            };
            if tick_due {
                self.tick();
            }
            {
                let state = self.state.lock();
                self.timer.set(state.next_wake());
            }
            self.timer.wait(&self.signal, seen);
        }
        self.timer.set(None);
    }

    /// Reports fixed-lease holds whose deadline has passed while still held.
    fn expire_fixed_leases(&self) {
        let now = self.clock.now();
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

    /// Renews the holds waiting for confirmation, in one backend call; a failure is handled as
    /// a failed tick for them (retried soon, reported when their short lease runs out).
    fn confirm_grants(&self) {
        let holds: Vec<Arc<Hold>> = std::mem::take(&mut self.state.lock().confirming)
            .into_iter()
            .filter(|hold| !hold.is_released())
            .collect();
        if holds.is_empty() {
            return;
        }
        let refs: Vec<HoldRef<'_>> = holds
            .iter()
            .map(|hold| HoldRef {
                lock: hold.target.as_ref(),
                owner: &hold.owner,
            })
            .collect();
        let sent_at = self.clock.now();
        self.batches.fetch_add(1, Ordering::Relaxed);
        match self.renew(&refs) {
            Ok(found) if found.len() == holds.len() => {
                let now = self.clock.now();
                for (hold, renewal) in holds.iter().zip(&found) {
                    match renewal {
                        Renewal::Renewed => {
                            hold.extend(LeaseMode::Watchdog, Lease::new(sent_at, self.lease));
                            self.renewed.fetch_add(1, Ordering::Relaxed);
                        }
                        Renewal::Lost(reason) => self.lose(hold, *reason, now),
                    }
                }
            }
            Ok(found) => self.failed_batch(
                &holds,
                LockError::protocol(format!(
                    "the backend answered a renewal of {} holds with {} results",
                    holds.len(),
                    found.len()
                )),
            ),
            Err(error) => self.failed_batch(&holds, error),
        }
    }

    /// Renews every live watchdog hold in one backend call, and schedules the next tick.
    fn tick(&self) {
        let now = self.clock.now();
        for (hold, reason) in self.take_overdue(now) {
            self.lose(&hold, reason, now);
        }
        let holds: Vec<Arc<Hold>> = {
            let mut state = self.state.lock();
            if state.renewing.is_empty() {
                state.next_tick = if state.lingering {
                    None
                } else {
                    Some(now + self.lease / 3)
                };
                state.lingering = true;
                state.failures = 0;
                state.warned.clear();
                return;
            }
            state.renewing.values().cloned().collect()
        };
        self.ticks.fetch_add(1, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        let refs: Vec<HoldRef<'_>> = holds
            .iter()
            .map(|hold| HoldRef {
                lock: hold.target.as_ref(),
                owner: &hold.owner,
            })
            .collect();
        let sent_at = self.clock.now();
        let result = match self.renew(&refs) {
            Ok(found) if found.len() == holds.len() => Ok(found),
            Ok(found) => Err(LockError::protocol(format!(
                "the backend answered a renewal of {} holds with {} results",
                holds.len(),
                found.len()
            ))),
            Err(error) => Err(error),
        };
        match result {
            Ok(found) => self.renewed_batch(&holds, &found, sent_at),
            Err(error) => self.failed_batch(&holds, error),
        }
    }

    /// One renewal call. A backend that panics fails the call, as an unreachable store does
    /// (the holds are warned, renewal is retried, and they are reported lost if their deadline
    /// passes first): the watchdog thread lives on for every other hold.
    fn renew(&self, refs: &[HoldRef<'_>]) -> Result<Vec<Renewal>, LockError> {
        catch_unwind(AssertUnwindSafe(|| self.backend.renew(refs, self.lease))).unwrap_or_else(
            |panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".to_owned());
                tracing::error!(%message, "dlock: the backend panicked while renewing leases");
                Err(LockError::protocol(format!(
                    "the backend panicked while renewing leases: {message}"
                )))
            },
        )
    }

    /// Drops released holds, and takes out the ones whose deadline passed unrenewed: lost for
    /// good, since renewing one now would make a guard that already reported the loss valid
    /// again. Unrenewed because the backend kept failing, or because this thread was kept off
    /// the CPU.
    fn take_overdue(&self, now: Instant) -> Vec<(Arc<Hold>, LossReason)> {
        let mut state = self.state.lock();
        state.renewing.retain(|_, hold| !hold.is_released());
        let unreachable = state.failures > 0;
        let overdue: Vec<(Arc<Hold>, LossReason)> = state
            .renewing
            .values()
            .filter_map(|hold| {
                let reason = match hold.loss(now)? {
                    LossReason::Expired if unreachable => LossReason::Unreachable,
                    reason => reason,
                };
                Some((hold.clone(), reason))
            })
            .collect();
        for (hold, _) in &overdue {
            state.renewing.remove(&hold.id);
        }
        overdue
    }

    fn renewed_batch(&self, holds: &[Arc<Hold>], found: &[Renewal], sent_at: Instant) {
        let (failures, warned) = {
            let mut state = self.state.lock();
            state.next_tick = Some(self.clock.now() + self.lease / 3);
            (
                std::mem::take(&mut state.failures),
                std::mem::take(&mut state.warned),
            )
        };
        let now = self.clock.now();
        for (hold, renewal) in holds.iter().zip(found) {
            match renewal {
                Renewal::Renewed => {
                    hold.extend(LeaseMode::Watchdog, Lease::new(sent_at, self.lease));
                    self.renewed.fetch_add(1, Ordering::Relaxed);
                    if warned.contains(&hold.id) {
                        self.events
                            .emit_for(hold, LeaseChange::RenewalRecovered { failures }, now);
                    }
                }
                Renewal::Lost(reason) => self.lose(hold, *reason, now),
            }
        }
    }

    fn failed_batch(&self, holds: &[Arc<Hold>], error: LockError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let error = Arc::new(error);
        let newly_warned: Vec<&Arc<Hold>> = {
            let mut state = self.state.lock();
            state.failures += 1;
            // Retry sooner: the remaining two thirds of the lease get several attempts, and
            // one at the first deadline, so a hold that runs out is reported as it does.
            let first_deadline = holds
                .iter()
                .map(|hold| hold.deadline())
                .filter(|deadline| *deadline > now)
                .min();
            let retry = now + self.lease / 12;
            state.next_tick = Some(first_deadline.map_or(retry, |deadline| deadline.min(retry)));
            holds
                .iter()
                .filter(|hold| now < hold.deadline() && state.warned.insert(hold.id))
                .collect()
        };
        for hold in newly_warned {
            let change = LeaseChange::RenewalFailed {
                error: error.clone(),
                deadline: hold.deadline(),
            };
            self.events.emit_for(hold, change, now);
        }
        for hold in holds {
            if now >= hold.deadline() {
                self.lose(hold, LossReason::Unreachable, now);
            }
        }
    }

    fn lose(&self, hold: &Arc<Hold>, reason: LossReason, now: Instant) {
        {
            let mut state = self.state.lock();
            state.remove(hold.id);
            state.warned.remove(&hold.id);
        }
        if !hold.is_released() && self.events.lose(hold, reason, now) {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}
