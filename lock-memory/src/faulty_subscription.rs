//! A subscription through a [`FaultyBackend`](crate::FaultyBackend): the store's messages reach
//! its waiter through a relay that faults may make lose, hold back or repeat them.

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

/// How the relay treats each message (it may keep one with the relay, to deliver later).
type Decide = Box<dyn Fn(&Arc<Relay>) -> Delivery + Send + Sync>;

/// The relay between a store's subscription and its waiter.
///
/// A message is decided (passed on, lost, held back) in the order the store sent it, by the
/// relay's thread or by whoever needs every message sent so far decided first
/// ([`relay_sent`](Relay::relay_sent)): a test that delivers what is held back never runs
/// ahead of a message the store already sent.
pub(crate) struct Relay {
    /// What the waiter waits on.
    outer: Arc<Signal>,
    /// The store's subscription's signal: one generation per message.
    source: Arc<Signal>,
    /// The store's generation up to which messages were decided.
    relayed: Mutex<u64>,
    decide: Decide,
    stop: AtomicBool,
    /// Messages held back and not delivered yet.
    held: AtomicU64,
}

impl Relay {
    /// Decides every message the store sent and the relay has not decided yet.
    pub(crate) fn relay_sent(self: &Arc<Self>) {
        let mut relayed = self.relayed.lock();
        let now = self.source.generation();
        for _ in 0..now.wrapping_sub(*relayed) {
            match (self.decide)(self) {
                Delivery::Now | Delivery::Twice => self.outer.notify(),
                Delivery::Lost => {}
                Delivery::Held => {
                    self.held.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        *relayed = now;
    }

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
    /// Lapsed as it was made ([`Effect::Lapse`](crate::Effect::Lapse)): it hears nothing.
    lapsed: bool,
}

impl FaultySubscription {
    /// Relays `inner`'s messages, each as `decide` says (`decide` keeps held ones with the
    /// relay, to deliver later), or none if it `lapsed` as it was made; `on_drop` runs when
    /// the subscription ends.
    pub(crate) fn new(
        inner: Box<dyn ReleaseSubscription>,
        lapsed: bool,
        decide: impl Fn(&Arc<Relay>) -> Delivery + Send + Sync + 'static,
        on_drop: impl FnOnce() + Send + 'static,
    ) -> Result<Self, std::io::Error> {
        let source = inner.signal().clone();
        let relay = Arc::new(Relay {
            outer: Arc::new(Signal::new()),
            // Read now: a message after the subscription was made is relayed, none before.
            relayed: Mutex::new(source.generation()),
            source,
            decide: if lapsed {
                Box::new(|_: &Arc<Relay>| Delivery::Lost) as Decide
            } else {
                Box::new(decide)
            },
            stop: AtomicBool::new(false),
            held: AtomicU64::new(0),
        });
        let relaying = relay.clone();
        let thread = std::thread::Builder::new()
            .name("dlock-faulty-relay".into())
            .spawn(move || loop {
                let relayed = *relaying.relayed.lock();
                relaying
                    .source
                    .wait_while_before(relayed, || relaying.stop.load(Ordering::Acquire));
                if relaying.stop.load(Ordering::Acquire) {
                    return;
                }
                relaying.relay_sent();
            })?;
        Ok(FaultySubscription {
            inner,
            relay,
            thread: Some(thread),
            on_drop: Some(Box::new(on_drop)),
            lapsed,
        })
    }
}

impl FaultySubscription {
    /// The relay, for the wrapper to decide the messages sent so far on demand.
    pub(crate) fn relay(&self) -> &Arc<Relay> {
        &self.relay
    }
}

impl ReleaseSubscription for FaultySubscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.relay.outer
    }

    fn lapsed(&self) -> bool {
        self.lapsed || self.inner.lapsed()
    }
}

impl Drop for FaultySubscription {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
        // What the store sent while the subscription lived is decided (a fault meant for it is
        // used, a message held back stays held), as a network would have carried it.
        self.relay.relay_sent();
        self.relay.stop.store(true, Ordering::Release);
        // Wakes the relay without a message: it sees the stop.
        self.inner.signal().poke();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use dlock_core::backend::{DistributedLock, LockRef, OwnerId};
    use dlock_core::{LockClient, LockKind};

    use crate::{Effect, Fault, FaultyBackend, MemoryBackend, Op};

    /// Whatever the relay's thread is doing, a message the store already sent counts as held
    /// back as soon as the step that sent it returned.
    #[test]
    fn a_message_sent_is_held_back_at_once() {
        let store = MemoryBackend::new();
        let faulty = FaultyBackend::new(store.clone());
        let holder = LockClient::new(store);
        for round in 0..50 {
            let name = format!("jobs-{round}");
            let guard = holder.lock(name.clone()).lock().expect("lock");
            let waiter = OwnerId::from_raw(format!("waiter-{round}"));
            let subscription = faulty
                .subscribe(LockRef::new(&name, LockKind::Reentrant), &waiter)
                .expect("subscribe");
            faulty.inject(Fault::new(Op::Message, Effect::HoldBack).times(1));
            guard.unlock().expect("unlock");
            assert_eq!(faulty.held(), 1, "round {round}: the release's message");
            assert_eq!(faulty.deliver_held(), 1);
            drop(subscription);
        }
    }
}
