//! The lease watchdog: one thread per client renewing every watchdog-leased hold in one batch.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::{DistributedLock, HoldRef};
use crate::clock::Clock;
use crate::hold::Hold;
use crate::signal::Signal;

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
    /// Holds found gone, or whose lease ran out while the backend could not be reached.
    pub lost: u64,
    /// Renewal calls that failed (backend unreachable or erroring).
    pub failures: u64,
    /// Holds the watchdog is renewing now.
    pub holds: u64,
}

/// How a tick went.
enum Tick {
    /// No holds to renew.
    Idle,
    /// The backend answered for every hold.
    Renewed,
    /// The backend could not be reached or answered wrongly.
    Failed,
}

/// What the watchdog thread shares with the client.
#[derive(Debug)]
struct Shared {
    backend: Arc<dyn DistributedLock>,
    clock: Arc<dyn Clock>,
    lease: Duration,
    holds: Mutex<HashMap<u64, Arc<Hold>>>,
    /// Notified when a hold is registered and on shutdown.
    signal: Arc<Signal>,
    shutdown: AtomicBool,
    /// The thread sleeps without a tick schedule and must be woken for a new hold.
    idle: AtomicBool,
    ticks: AtomicU64,
    batches: AtomicU64,
    renewed: AtomicU64,
    lost: AtomicU64,
    failures: AtomicU64,
}

/// A client's watchdog. The thread starts with the first watchdog-leased hold and stops when
/// the client is dropped.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Watchdog {
    pub(crate) fn new(
        backend: Arc<dyn DistributedLock>,
        clock: Arc<dyn Clock>,
        lease: Duration,
    ) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                clock,
                lease,
                holds: Mutex::new(HashMap::default()),
                signal: Arc::new(Signal::new()),
                shutdown: AtomicBool::new(false),
                idle: AtomicBool::new(false),
                ticks: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                renewed: AtomicU64::new(0),
                lost: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Starts renewing `hold` every lease/3 until it is released or lost.
    pub(crate) fn register(&self, hold: &Arc<Hold>) -> std::io::Result<()> {
        self.shared.holds.lock().insert(hold.id, hold.clone());
        self.ensure_thread()?;
        // A thread on its tick schedule picks the hold up at the next tick, less than a third
        // of a lease away; only an idle one needs waking.
        if self.shared.idle.swap(false, Ordering::SeqCst) {
            self.shared.signal.notify();
        }
        Ok(())
    }

    /// Stops renewing `hold`.
    pub(crate) fn deregister(&self, hold: &Hold) {
        self.shared.holds.lock().remove(&hold.id);
    }

    pub(crate) fn stats(&self) -> WatchdogStats {
        let s = &self.shared;
        WatchdogStats {
            ticks: s.ticks.load(Ordering::Relaxed),
            batches: s.batches.load(Ordering::Relaxed),
            renewed: s.renewed.load(Ordering::Relaxed),
            lost: s.lost.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            holds: s.holds.lock().len() as u64,
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

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.signal.notify();
        if let Some(thread) = self.thread.lock().take() {
            // The thread is between bounded backend calls or waiting on the signal just notified.
            let _ = thread.join();
        }
    }
}

impl Shared {
    /// Ticks every lease/3 while there are holds, and for one more period after the last one
    /// goes (so a lock taken and released in a loop never has to wake this thread); then
    /// sleeps until a hold is registered.
    fn run(&self) {
        let period = self.lease / 3;
        let mut next_tick: Option<Instant> = None;
        loop {
            // Read the generation before the shutdown flag: a shutdown notified in between
            // then ends the wait below instead of being missed.
            let seen = self.signal.generation();
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            let Some(tick_at) = next_tick else {
                // Idle is announced before looking at the holds: a hold registered after
                // the look finds the flag set and notifies.
                self.idle.store(true, Ordering::SeqCst);
                if self.holds.lock().is_empty() {
                    self.clock.wait(&self.signal, seen, None);
                } else {
                    self.idle.store(false, Ordering::SeqCst);
                    next_tick = Some(self.clock.now() + period);
                }
                continue;
            };
            if self.clock.now() < tick_at {
                self.clock.wait(&self.signal, seen, Some(tick_at));
                continue;
            }
            next_tick = match self.tick() {
                Tick::Idle => None,
                Tick::Renewed => Some(self.clock.now() + period),
                // Retry sooner: the remaining two thirds of the lease get several attempts.
                Tick::Failed => Some(self.clock.now() + period / 4),
            };
        }
        self.clock.settle();
    }

    /// Renews every live hold in one backend call.
    fn tick(&self) -> Tick {
        let holds: Vec<Arc<Hold>> = {
            let mut registered = self.holds.lock();
            registered.retain(|_, hold| !hold.is_released());
            registered.values().cloned().collect()
        };
        if holds.is_empty() {
            return Tick::Idle;
        }
        self.ticks.fetch_add(1, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        let refs: Vec<HoldRef<'_>> = holds
            .iter()
            .map(|hold| HoldRef {
                name: &hold.name,
                owner: &hold.owner,
            })
            .collect();
        let sent_at = self.clock.now();
        match self.backend.renew(&refs, self.lease) {
            Ok(still_held) if still_held.len() == holds.len() => {
                for (hold, held) in holds.iter().zip(still_held) {
                    if held {
                        hold.extend(hold.mode(), sent_at + self.lease);
                        self.renewed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.lose(hold, "the lock was gone when the watchdog renewed it");
                    }
                }
                Tick::Renewed
            }
            Ok(still_held) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    sent = holds.len(),
                    answered = still_held.len(),
                    "dlock watchdog: backend answered a renewal batch with the wrong length"
                );
                self.expire_overdue(&holds);
                Tick::Failed
            }
            Err(error) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, holds = holds.len(), "dlock watchdog: renewal failed, retrying soon");
                self.expire_overdue(&holds);
                Tick::Failed
            }
        }
    }

    /// After a failed renewal: holds whose lease deadline has passed are lost.
    fn expire_overdue(&self, holds: &[Arc<Hold>]) {
        let now = self.clock.now();
        for hold in holds {
            if now >= hold.deadline() {
                self.lose(
                    hold,
                    "the lease ran out while the backend could not be reached",
                );
            }
        }
    }

    fn lose(&self, hold: &Hold, why: &str) {
        self.holds.lock().remove(&hold.id);
        if hold.is_released() {
            return;
        }
        hold.mark_lost();
        self.lost.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(lock = %hold.name, owner = %hold.owner, "dlock watchdog: lease lost: {why}");
    }
}
