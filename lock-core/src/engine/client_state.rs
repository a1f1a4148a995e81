//! The state one client's handles share with the engine: its backend and clock, the
//! watchdog, the wait queues and the lease events.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::contract::backend::DistributedLock;
use crate::contract::hand_off::HandOff;
use crate::contract::lease::ClockDrift;
use crate::engine::events::LeaseEvents;
use crate::engine::metrics::MetricName;
use crate::engine::presence::Presence;
use crate::engine::step_aside::StepAside;
use crate::engine::wait_queue::WaitQueues;
use crate::engine::watchdog::Watchdog;
use crate::time::clock::Clock;
use crate::time::signal::Signal;

/// A client's state, shared by every handle it made and by the threads that work for it.
pub(crate) struct ClientState {
    /// This client's UUID, the first half of every owner id it uses.
    pub(crate) id: String,
    /// A process-local number for the per-thread hold tables.
    pub(crate) key: u64,
    pub(crate) backend: Arc<dyn DistributedLock>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) watchdog_lease: Duration,
    pub(crate) fair_wait_timeout: Duration,
    /// How the client's plain locks pass from a holder to a waiter.
    pub(crate) lock_hand_off: HandOff,
    /// The margin every local lease deadline keeps: the client's setting or the backend's,
    /// whichever is larger.
    pub(crate) drift: ClockDrift,
    pub(crate) watchdog: Watchdog,
    pub(crate) wait_queues: WaitQueues,
    /// The locks other clients' waiters get a turn on.
    pub(crate) step_aside: StepAside,
    pub(crate) events: Arc<LeaseEvents>,
    /// The signals the client's watching threads sleep on, woken when the client goes.
    pub(crate) watch_signals: WatchSignals,
    /// The client's record in the store: who it is and which holds it has.
    pub(crate) presence: Presence,
    /// The program's map from a lock name to its `name` label, if it gave one.
    pub(crate) metric_name: Option<MetricName>,
    /// The threads that run store steps for futures and for guards dropped by async code.
    #[cfg(feature = "async")]
    pub(crate) workers: crate::engine::workers::Workers,
}

/// The signals of threads that watch on a client's behalf (leader watches): when the client is
/// dropped they are woken, find it gone, and end.
#[derive(Default)]
pub(crate) struct WatchSignals {
    signals: Mutex<Vec<Weak<Signal>>>,
}

impl WatchSignals {
    /// Wakes `signal` when the client goes.
    pub(crate) fn register(&self, signal: &Arc<Signal>) {
        let mut signals = self.signals.lock();
        signals.retain(|signal| signal.strong_count() > 0);
        signals.push(Arc::downgrade(signal));
    }
}

impl Drop for WatchSignals {
    fn drop(&mut self) {
        for signal in self.signals.get_mut().drain(..) {
            if let Some(signal) = signal.upgrade() {
                signal.notify();
            }
        }
    }
}
