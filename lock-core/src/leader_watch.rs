//! Watching an election's leader for [`LeaderElection::observe`](crate::LeaderElection::observe):
//! a thread per receiver, woken by the election's releases (its subscription) and by the
//! leader's lease end (its timer), like any waiter of the engine.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::backend::DistributedLock;
use crate::client::ClientInner;
use crate::clock::TimerRole;
use crate::kind::Target;
use crate::limits::instant_after;
use crate::owner::OwnerId;
use crate::LockError;

/// Sends the current leader of `target` at once, then each change, from a thread of the client
/// that ends when the client is dropped (it is woken for that) or when a send finds the
/// receiver gone.
pub(crate) fn observe(
    client: &Arc<ClientInner>,
    target: &Target,
) -> Result<Receiver<Option<String>>, LockError> {
    let first = current(&*client.backend, target)?;
    let (sender, receiver) = crossbeam_channel::unbounded();
    // The receiver holds it: the send cannot fail.
    let _ = sender.send(first.clone());
    let weak = Arc::downgrade(client);
    let target = target.clone();
    std::thread::Builder::new()
        .name("dlock-leader-watch".into())
        .spawn(move || watch(&weak, &target, first, &sender))
        .map_err(|error| LockError::thread_spawn("leader watch", error))?;
    Ok(receiver)
}

/// The current leader's candidate id.
fn current(backend: &dyn DistributedLock, target: &Target) -> Result<Option<String>, LockError> {
    Ok(backend
        .leader(target.as_ref())
        .map_err(|error| error.on_lock(&target.name))?
        .map(|leader| leader.candidate))
}

fn watch(
    client: &Weak<ClientInner>,
    target: &Target,
    mut last: Option<String>,
    sender: &Sender<Option<String>>,
) {
    let Some(timer) = client
        .upgrade()
        .map(|client| client.clock.timer(TimerRole::Background))
    else {
        return;
    };
    loop {
        // The client is held only while working, so dropping it is never held up by this
        // thread; it wakes this thread's signal when it goes.
        let Some(strong) = client.upgrade() else {
            return;
        };
        let owner = OwnerId::unique(&strong.id);
        let subscription = match strong.backend.subscribe(target.as_ref(), &owner) {
            Ok(subscription) => subscription,
            Err(error) => {
                tracing::debug!(election = %target.name, %error, "dlock: the leader watch could not subscribe; it looks again in a while");
                let signal = Arc::new(crate::signal::Signal::new());
                strong.watch_signals.register(&signal);
                let seen = signal.generation();
                timer.set(Some(instant_after(
                    strong.clock.now(),
                    strong.watchdog_lease / 3,
                )));
                drop(strong);
                timer.wait(&signal, seen);
                continue;
            }
        };
        let signal = subscription.signal().clone();
        strong.watch_signals.register(&signal);
        drop(strong);
        while !subscription.lapsed() {
            let Some(strong) = client.upgrade() else {
                return;
            };
            let seen = signal.generation();
            let leader = strong.backend.leader(target.as_ref());
            let cap = match leader {
                Ok(leader) => {
                    let remaining = leader.as_ref().and_then(|leader| leader.remaining_lease);
                    let now = leader.map(|leader| leader.candidate);
                    if now != last {
                        if sender.send(now.clone()).is_err() {
                            return;
                        }
                        last = now;
                    }
                    // Woken by a release, or when the leader's lease runs out (a leader that
                    // died is replaced then); once per watchdog lease at least, in case a
                    // message was lost.
                    remaining
                        .unwrap_or(strong.watchdog_lease)
                        .min(strong.watchdog_lease)
                }
                Err(error) => {
                    tracing::debug!(election = %target.name, %error, "dlock: the leader watch could not read the leader; it looks again in a while");
                    strong.watchdog_lease / 3
                }
            };
            // Just past the lease's end, so a successor that takes over then is seen.
            let cap = cap + Duration::from_millis(1);
            timer.set(Some(instant_after(strong.clock.now(), cap)));
            drop(strong);
            timer.wait(&signal, seen);
        }
    }
}
