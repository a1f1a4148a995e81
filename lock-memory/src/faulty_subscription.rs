//! A subscription through a [`FaultyBackend`](crate::FaultyBackend): the store's messages reach
//! its waiter through a relay that faults may make lose, hold back or repeat them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use dlock_core::backend::{ReleaseSubscription, Signal};
use parking_lot::Mutex;

/// What happens to one message of the store.
pub(crate) enum Delivery {
    /// It reaches the waiter now.
    Now,
    /// It is lost.
    Lost,
    /// It is kept in the network until the held steps are delivered.
    Held,
    /// It reaches the waiter now, and a copy later, with the held steps.
    Twice,
}

/// The relay between a store's subscription and its waiter.
pub(crate) struct Relay {
    /// What the waiter waits on.
    outer: Arc<Signal>,
    stop: AtomicBool,
    /// Messages held back and not delivered yet: a grant that came meanwhile is not seen yet.
    held: AtomicU64,
    /// Grants the waiter has seen (their message was delivered).
    seen_grants: Mutex<HashSet<u64>>,
}

impl Relay {
    /// Delivers a message kept in the network; `blocking`: it was the original (a grant in it
    /// becomes visible), not a duplicate.
    pub(crate) fn deliver_held(&self, blocking: bool) {
        if blocking {
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        self.outer.notify();
    }
}

/// The waiter's side: the store's subscription, and the relay that passes its messages on.
pub(crate) struct FaultySubscription {
    inner: Box<dyn ReleaseSubscription>,
    relay: Arc<Relay>,
    thread: Option<JoinHandle<()>>,
    /// Told when the subscription ends (the wrapper's count of live subscriptions).
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl FaultySubscription {
    /// Relays `inner`'s messages, each as `decide` says (`decide` keeps held ones with the
    /// relay, to deliver later); `on_drop` runs when the subscription ends.
    pub(crate) fn new(
        inner: Box<dyn ReleaseSubscription>,
        decide: impl Fn(&Arc<Relay>) -> Delivery + Send + 'static,
        on_drop: impl FnOnce() + Send + 'static,
    ) -> Result<Self, std::io::Error> {
        let relay = Arc::new(Relay {
            outer: Arc::new(Signal::new()),
            stop: AtomicBool::new(false),
            held: AtomicU64::new(0),
            seen_grants: Mutex::new(HashSet::new()),
        });
        let source = inner.signal().clone();
        // Read now: a message after the subscription was made is relayed, none before.
        let mut seen = source.generation();
        let relaying = relay.clone();
        let thread = std::thread::Builder::new()
            .name("dlock-faulty-relay".into())
            .spawn(move || loop {
                source.wait_while_before(seen, || relaying.stop.load(Ordering::Acquire));
                if relaying.stop.load(Ordering::Acquire) {
                    return;
                }
                let now = source.generation();
                for _ in 0..now.wrapping_sub(seen) {
                    match decide(&relaying) {
                        Delivery::Now => relaying.outer.notify(),
                        Delivery::Lost => {}
                        Delivery::Held => {
                            relaying.held.fetch_add(1, Ordering::AcqRel);
                        }
                        Delivery::Twice => relaying.outer.notify(),
                    }
                }
                seen = now;
            })?;
        Ok(FaultySubscription {
            inner,
            relay,
            thread: Some(thread),
            on_drop: Some(Box::new(on_drop)),
        })
    }
}

impl ReleaseSubscription for FaultySubscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.relay.outer
    }

    /// A grant is seen once the message that told it was delivered: while a message is held
    /// back, a grant not seen before stays unseen.
    fn granted(&self, attempt: u64) -> bool {
        if !self.inner.granted(attempt) {
            return false;
        }
        let mut seen = self.relay.seen_grants.lock();
        if self.relay.held.load(Ordering::Acquire) == 0 {
            seen.insert(attempt);
        }
        seen.contains(&attempt)
    }

    fn lapsed(&self) -> bool {
        self.inner.lapsed()
    }
}

impl Drop for FaultySubscription {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
        self.relay.stop.store(true, Ordering::Release);
        // Wakes the relay without a message: it sees the stop.
        self.inner.signal().poke();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
