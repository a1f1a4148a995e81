//! Lease events: the holder is told when its lease is lost or in danger, not only asked.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::Mutex;

use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;
use crate::engine::hold::Hold;

/// How many events a [`LockClient::lease_events`](crate::LockClient::lease_events) receiver
/// buffers; further events are dropped (and counted) until it is read.
pub const LEASE_EVENT_BUFFER: usize = 1024;

/// What happened to a lease.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeaseChange {
    /// The lease is lost: the guards report [`is_lost`](crate::LockGuard::is_lost) and their
    /// unlock fails with [`LockError::LeaseLost`].
    Lost {
        /// How.
        reason: LossReason,
    },
    /// A watchdog renewal failed; the lease is still valid until `deadline` and renewal keeps
    /// trying. A warning: if it keeps failing, a `Lost` event follows.
    RenewalFailed {
        /// The backend's error.
        error: Arc<LockError>,
        /// Until when the lease is known to last.
        deadline: Instant,
    },
    /// Renewal works again after failures; nothing was lost.
    RenewalRecovered {
        /// How many attempts had failed in a row.
        failures: u32,
    },
}

/// One lease event, pushed to the client's callback and receivers.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LeaseEvent {
    /// The lock's name.
    pub name: Arc<str>,
    /// The lock's kind.
    pub kind: LockKind,
    /// The owner whose lease it is (`<client id>:<thread number>`).
    pub owner: OwnerId,
    /// What happened.
    pub change: LeaseChange,
    /// When, on the client's clock (the backend's clock; a `ManualClock` in tests).
    pub at: Instant,
    /// When, on the wall clock, for logs.
    pub time: SystemTime,
}

/// A callback for lease events.
pub(crate) type LeaseCallback = Arc<dyn Fn(&LeaseEvent) + Send + Sync>;

/// Where a client's lease events go: a callback, receivers, and `tracing`.
pub(crate) struct LeaseEvents {
    callback: Option<LeaseCallback>,
    receivers: Mutex<Vec<Sender<LeaseEvent>>>,
    dropped: AtomicU64,
}

impl LeaseEvents {
    pub(crate) fn new(callback: Option<LeaseCallback>) -> Self {
        LeaseEvents {
            callback,
            receivers: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
        }
    }

    /// A new receiver of every event from now on.
    pub(crate) fn subscribe(&self) -> Receiver<LeaseEvent> {
        let (sender, receiver) = crossbeam_channel::bounded(LEASE_EVENT_BUFFER);
        self.receivers.lock().push(sender);
        receiver
    }

    /// Events not delivered to a receiver because its buffer was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Marks `hold` lost for `reason` and reports it, unless it was already lost; returns
    /// whether this call was the one that did.
    pub(crate) fn lose(&self, hold: &Hold, reason: LossReason, at: Instant) -> bool {
        if !hold.mark_lost(reason) {
            return false;
        }
        self.emit_for(hold, LeaseChange::Lost { reason }, at);
        true
    }

    /// Reports `change` of `hold`'s lease.
    pub(crate) fn emit_for(&self, hold: &Hold, change: LeaseChange, at: Instant) {
        self.emit(LeaseEvent {
            name: hold.target.name.clone(),
            kind: hold.target.kind,
            owner: hold.owner.clone(),
            change,
            at,
            time: SystemTime::now(),
        });
    }

    /// Logs `event` and hands it to the callback and every live receiver.
    pub(crate) fn emit(&self, event: LeaseEvent) {
        log(&event);
        if let Some(callback) = &self.callback {
            // A panicking callback must not take the watchdog thread (or a caller) down with it.
            if catch_unwind(AssertUnwindSafe(|| callback(&event))).is_err() {
                tracing::error!(lock = %event.name, "dlock: the lease event callback panicked");
            }
        }
        let mut receivers = self.receivers.lock();
        receivers.retain(|sender| match sender.try_send(event.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
    }
}

impl fmt::Debug for LeaseEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseEvents")
            .field("callback", &self.callback.is_some())
            .field("receivers", &self.receivers.lock().len())
            .finish_non_exhaustive()
    }
}

fn log(event: &LeaseEvent) {
    let (name, owner, kind) = (&*event.name, &event.owner, event.kind);
    match &event.change {
        LeaseChange::Lost { reason } => {
            tracing::error!(lock = name, %owner, %kind, %reason, "dlock: lease lost");
        }
        LeaseChange::RenewalFailed { error, .. } => {
            tracing::warn!(lock = name, %owner, %kind, %error, "dlock: lease renewal failed, retrying");
        }
        LeaseChange::RenewalRecovered { failures } => {
            tracing::info!(lock = name, %owner, %kind, failures, "dlock: lease renewal works again");
        }
    }
}
