//! A waiter's subscription to a name's releases: it keeps the entry alive while it waits.

use std::sync::Arc;

use dlock_core::backend::{OwnerId, ReleaseSubscription, Signal};

use super::Inner;

/// Interest in one name's releases (or, for a fair lock, in one waiter's turn); dropping it
/// lets the entry go once idle.
pub(super) struct MemorySubscription {
    pub(super) backend: Arc<Inner>,
    pub(super) name: String,
    /// The waiter whose own signal this is, for a fair lock.
    pub(super) owner: Option<OwnerId>,
    pub(super) signal: Arc<Signal>,
}

impl ReleaseSubscription for MemorySubscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

impl Drop for MemorySubscription {
    fn drop(&mut self) {
        self.backend
            .with_entry(&self.name, |entry, _| match &self.owner {
                Some(owner) => {
                    if let Some(own) = entry.owner_signals.get_mut(owner) {
                        own.subscriptions -= 1;
                        if own.subscriptions == 0 {
                            entry.owner_signals.remove(owner);
                        }
                    }
                }
                None => entry.subscribers = entry.subscribers.saturating_sub(1),
            });
    }
}
