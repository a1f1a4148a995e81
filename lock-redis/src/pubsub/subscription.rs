//! A waiter's subscription to a lock's channel: what it listens on, and the bookkeeping its
//! drop undoes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dlock_core::backend::{ReleaseSubscription, Signal};

use super::Shared;

/// Numbers the forwarding signals of subscriptions.
pub(super) static NEXT_FORWARD: AtomicU64 = AtomicU64::new(1);

/// One waiter's interest in one channel.
pub(super) struct Subscription {
    pub(super) shared: Arc<Shared>,
    pub(super) signal: Arc<Signal>,
    pub(super) channel: String,
    pub(super) forward_id: Option<u64>,
    pub(super) lapsed: Arc<AtomicBool>,
}

impl ReleaseSubscription for Subscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }

    fn lapsed(&self) -> bool {
        self.lapsed.load(Ordering::Acquire)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        // Only this subscription's own entry: a lapsed one is gone, maybe replaced.
        let entry = state
            .channels
            .get_mut(&self.channel)
            .filter(|entry| Arc::ptr_eq(&entry.lapsed, &self.lapsed));
        if let Some(entry) = entry {
            if let Some(id) = self.forward_id {
                entry.forwards.retain(|(forward, _)| *forward != id);
            }
            entry.count = entry.count.saturating_sub(1);
            if entry.count == 0 {
                entry.idle_since = Some(Instant::now());
                self.shared.timer.notify_all();
            }
        }
    }
}
