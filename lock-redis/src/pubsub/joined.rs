//! A waiter's subscriptions to two channels, woken through the first's signal.

use std::sync::Arc;

use dlock_core::backend::{ReleaseSubscription, Signal};

/// A waiter's own subscription, and one to a second channel whose messages notify the own
/// one's signal (subscribed with it as the forward): the waiter sleeps on one signal, and a
/// message on either channel wakes it. Dropped, both go.
pub(crate) struct Joined {
    pub(crate) own: Box<dyn ReleaseSubscription>,
    pub(crate) also: Box<dyn ReleaseSubscription>,
}

impl ReleaseSubscription for Joined {
    fn signal(&self) -> &Arc<Signal> {
        self.own.signal()
    }

    /// Either lapsed: the waiter subscribes again, to both.
    fn lapsed(&self) -> bool {
        self.own.lapsed() || self.also.lapsed()
    }
}
