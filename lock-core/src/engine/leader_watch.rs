//! Watching an election's leader for [`LeaderElection::observe`](crate::LeaderElection::observe):
//! a thread per [`LeaderChanges`], woken by the election's releases (its subscription) and by
//! the leader's lease end (its timer), like any waiter of the engine, and ended when the
//! `LeaderChanges` is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvError, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;

use crate::time::signal::Signal;

use crate::contract::backend::DistributedLock;
use crate::contract::error::LockError;
use crate::contract::kind::Target;
use crate::contract::owner::OwnerId;
use crate::engine::client_state::ClientState;
use crate::time::clock::TimerRole;
use crate::time::instant_after;

/// The leader changes of an election, from [`LeaderElection::observe`](crate::LeaderElection::observe):
/// the candidate id of each new leader (`None` while nobody leads), in order. A thread of the
/// client watches for them while this lives; dropping it ends that thread.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let election = client.leader_election("scheduler");
/// let changes = election.observe()?;
/// assert_eq!(changes.recv().ok(), Some(None));            // nobody leads yet
/// let leading = election.campaign("node-a")?;
/// assert_eq!(changes.recv().ok(), Some(Some("node-a".to_owned())));
/// drop((leading, changes));                                 // the watching thread ends
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Debug)]
pub struct LeaderChanges {
    receiver: Receiver<Option<String>>,
    watch: Arc<Watch>,
}

/// What the watching thread and its [`LeaderChanges`] share: whether it was dropped, and the
/// signal the thread sleeps on, to wake it then.
#[derive(Debug, Default)]
struct Watch {
    dropped: AtomicBool,
    sleeping_on: Mutex<Option<Arc<Signal>>>,
}

impl Watch {
    fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// The thread sleeps on `signal` from now on (woken there when its `LeaderChanges` goes).
    fn sleep_on(&self, signal: &Arc<Signal>) {
        *self.sleeping_on.lock() = Some(signal.clone());
    }
}

impl LeaderChanges {
    /// Waits for the next change; an error once the client is dropped (nobody watches then).
    pub fn recv(&self) -> Result<Option<String>, RecvError> {
        self.receiver.recv()
    }

    /// The next change if there is one now.
    pub fn try_recv(&self) -> Result<Option<String>, TryRecvError> {
        self.receiver.try_recv()
    }

    /// Waits at most `timeout` for the next change.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<String>, RecvTimeoutError> {
        self.receiver.recv_timeout(timeout)
    }

    /// The channel the changes arrive on, to wait on it with others (`crossbeam_channel::select!`).
    pub fn receiver(&self) -> &Receiver<Option<String>> {
        &self.receiver
    }

    /// The changes, one at a time as they come, until the client is dropped.
    pub fn iter(&self) -> crossbeam_channel::Iter<'_, Option<String>> {
        self.receiver.iter()
    }
}

impl Drop for LeaderChanges {
    fn drop(&mut self) {
        self.watch.dropped.store(true, Ordering::Release);
        // The thread sleeps on the election's release signal (or a signal of its own while it
        // cannot subscribe); a wake-up there costs other local waiters of the election at most
        // one look.
        if let Some(signal) = self.watch.sleeping_on.lock().take() {
            signal.notify();
        }
    }
}

/// Sends the current leader of `target` at once, then each change, from a thread of the client
/// that ends when the client is dropped or the returned `LeaderChanges` is (either wakes it).
pub(crate) fn observe(
    client: &Arc<ClientState>,
    target: &Target,
) -> Result<LeaderChanges, LockError> {
    let first = current(&*client.backend, target)?;
    let (sender, receiver) = crossbeam_channel::unbounded();
    // The receiver holds it: the send cannot fail.
    let _ = sender.send(first.clone());
    let weak = Arc::downgrade(client);
    let target = target.clone();
    let watch = Arc::new(Watch::default());
    let watching = watch.clone();
    std::thread::Builder::new()
        .name("dlock-leader-watch".into())
        .spawn(move || self::watch(&weak, &target, first, &sender, &watching))
        .map_err(|error| LockError::thread_spawn("leader watch", error))?;
    Ok(LeaderChanges { receiver, watch })
}

/// The current leader's candidate id.
fn current(backend: &dyn DistributedLock, target: &Target) -> Result<Option<String>, LockError> {
    Ok(backend
        .leader(target.as_ref())
        .map_err(|error| error.on_lock(&target.name))?
        .map(|leader| leader.candidate))
}

fn watch(
    client: &Weak<ClientState>,
    target: &Target,
    mut last: Option<String>,
    sender: &Sender<Option<String>>,
    watch: &Watch,
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
                let signal = Arc::new(crate::time::signal::Signal::new());
                strong.watch_signals.register(&signal);
                watch.sleep_on(&signal);
                let seen = signal.generation();
                if watch.is_dropped() {
                    return;
                }
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
        watch.sleep_on(&signal);
        drop(strong);
        while !subscription.lapsed() {
            let Some(strong) = client.upgrade() else {
                return;
            };
            let seen = signal.generation();
            if watch.is_dropped() {
                return;
            }
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
            if subscription.lapsed() {
                // It lapsed after the loop's check: `seen` may count the lapse's own wake-up,
                // and no message would end this wait. Subscribe again.
                break;
            }
            timer.wait(&signal, seen);
        }
    }
}
