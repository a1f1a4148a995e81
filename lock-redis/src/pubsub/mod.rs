//! Wake-ups: one pub/sub connection per backend, subscribed to the release channel of every
//! lock this process has waiters on.
//!
//! A blocking connection cannot be written to while a thread is blocked reading it, so the
//! connection belongs to one thread (`dlock-pubsub`) that blocks reading with no timeout (no
//! polling) and does all the subscribing:
//!
//! - A thread that starts waiting on a lock registers the lock's channel. If the channel is not
//!   subscribed yet, it queues the channel and publishes a poke on the backend's private
//!   control channel (through the command pool); the pub/sub thread wakes on the poke, sends
//!   `SUBSCRIBE`, and once the server confirms it, the waiting thread's `subscribe` returns.
//!   From then on no release can be missed.
//! - A release message on a channel notifies the [`Signal`] that every local waiter on that
//!   lock sleeps on; a reminder (to the waiter behind a granted head) does so once its time
//!   has passed, through the timer thread, unless the channel was woken before.
//! - When the last local waiter of a lock leaves, the channel lingers (a waiter often comes
//!   back soon), then a timer thread (`dlock-pubsub-timer`) pokes the pub/sub thread to
//!   `UNSUBSCRIBE` it.
//! - If the connection drops, waiters keep working (each wait is capped by the holder's
//!   lease); the thread reconnects with backoff, resubscribes every live channel, and notifies
//!   every signal once, since a release may have been missed meanwhile.
//! - A poke is answered within the response timeout, or the connection counts as broken: a
//!   connection that stopped delivering (a stalled peer, a half-open TCP connection, a poke
//!   lost on its way) would otherwise leave every new subscription unconfirmed and its waiters
//!   asleep until the holder's lease ends. The timer thread then gives the connection up and
//!   starts a new pub/sub thread, which reconnects and resubscribes everything; the old thread
//!   stays blocked on the old connection until its read returns, and then ends without
//!   touching anything. Subscribing (at connect, and after a poke) is bounded by the
//!   connection's read timeout itself.
//! - When the backend is dropped, both threads are told to stop, the pub/sub thread is poked so
//!   it exits at once, and both are joined (for at most the connect and response timeouts: a
//!   thread blocked on a connection to a stalled server is left to end when its read does).
//!
//! On a cluster there is one such connection per master, with sharded pub/sub (`SSUBSCRIBE`),
//! wired by `cluster::ClusterPubSub`. A channel can move away from its node there (its slot
//! migrated, the node failed): the node says so (`sunsubscribe`, `MOVED`) or its connection
//! drops; the channel's subscriptions then lapse: their waiters are woken and subscribe again
//! wherever the channel lives now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::RedisError;

use dlock_core::backend::{HeardCounts, ReleaseSubscription, Reminders, Signal};
use dlock_core::LockError;

use crate::commands::Commands;
use crate::connection::Connector;
use crate::keys::control_channel;

mod joined;
mod reader;
mod subscription;
mod timer;

pub(crate) use joined::Joined;

use subscription::{Subscription, NEXT_FORWARD};

/// The first pause before reconnecting a dropped pub/sub connection; it doubles up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The control message that wakes the pub/sub thread.
pub(crate) const POKE: &str = "poke";

/// How a pub/sub connection is driven: plainly on one server, or sharded on a cluster node.
pub(crate) trait Wiring: Send + Sync + 'static {
    /// Whether subscriptions are sharded (`SSUBSCRIBE`, `smessage`, one channel per command).
    fn sharded(&self) -> bool;

    /// The channel the connection's thread is woken on, chosen at each (re)connect: on a
    /// cluster it must live on the connection's own node.
    fn control(&self) -> Result<String, RedisError>;

    /// Publishes a poke on `control`; its reply is not waited for when that can be avoided.
    fn poke(&self, control: &str) -> Result<(), LockError>;

    /// Channels lapsed: the slot map that placed them is out of date.
    fn lapsed(&self) {}

    /// Whether `channel` still belongs on this connection's server, asked while it is
    /// unreachable: on a cluster, whether the slot map still names this node for its slot.
    fn still_placed(&self, channel: &str) -> bool {
        let _ = channel;
        true
    }
}

/// A single server's wiring: plain `SUBSCRIBE`, poked through the command pool.
struct ServerWiring {
    commands: Commands,
    control: String,
}

impl Wiring for ServerWiring {
    fn sharded(&self) -> bool {
        false
    }

    fn control(&self) -> Result<String, RedisError> {
        Ok(self.control.clone())
    }

    fn poke(&self, control: &str) -> Result<(), LockError> {
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(control).arg(POKE);
        self.commands
            .send_unanswered("waking the pub/sub connection", &cmd)
    }
}

/// The backend's side of the pub/sub machinery.
pub(crate) struct PubSub {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Notified when subscriptions are confirmed or the connection's phase changes.
    changed: Condvar,
    /// Wakes the timer thread (a channel went idle, or shutdown).
    timer: Condvar,
    connector: Connector,
    wiring: Box<dyn Wiring>,
    /// The control channel of the current connection.
    control: Mutex<String>,
    linger: Duration,
    shutdown: AtomicBool,
    /// The threads started, for the backend's drop to join.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No thread yet: nobody has waited.
    Idle,
    /// The thread is opening the connection for the first time.
    Connecting,
    /// Subscribed to the control channel; requests are served.
    Connected,
    /// The connection dropped; the thread is reconnecting.
    Down,
}

struct State {
    phase: Phase,
    channels: HashMap<String, Channel>,
    /// Channels waiting for the thread to `SUBSCRIBE` them.
    pending: Vec<String>,
    /// A poke was published and the thread has not handled it yet.
    poke_pending: bool,
    /// Since when the pub/sub thread owes an answer: a poke was published and what it asked
    /// for is not done yet. Past the response timeout, the connection counts as broken.
    owed_since: Option<Instant>,
    /// The thread is sending subscriptions and reading their confirmations (bounded by the
    /// connection's read timeout, not by the timer).
    subscribing: bool,
    /// The connection being served: bumped when the timer gives a connection up, so that the
    /// thread still blocked on it ends without touching anything once its read returns.
    generation: u64,
    /// The threads running that the backend's drop waits for (not those left blocked on a
    /// connection given up).
    live_threads: usize,
    /// The messages delivered, by channel; all move when one may have been missed (a channel
    /// let go or lapsed, a connection lost). Counted under this state's lock.
    heard: HeardCounts,
    /// Wake-ups owed later to subscribed channels (see `reader.rs`), made by the timer thread.
    reminders: Reminders,
}

impl State {
    /// The connection is gone: nothing is owed or confirmed on it any more, and every channel
    /// is to be subscribed again on the next one.
    fn connection_lost(&mut self) {
        self.heard.missed();
        self.phase = Phase::Down;
        self.poke_pending = false;
        self.owed_since = None;
        self.subscribing = false;
        for channel in self.channels.values_mut() {
            channel.confirmed = false;
        }
    }
}

struct Channel {
    signal: Arc<Signal>,
    /// More signals to notify on each message (a waiter listening to several servers at once),
    /// by subscription.
    forwards: Vec<(u64, Arc<Signal>)>,
    /// Live subscriptions (local waiters) on this channel.
    count: usize,
    /// The server confirmed the subscription on the current connection.
    confirmed: bool,
    /// Queued in `pending` (or being subscribed).
    requested: bool,
    /// When `count` last fell to zero.
    idle_since: Option<Instant>,
    /// Set when the channel moved away from this connection for good; also tells this entry's
    /// subscriptions from those of a later entry of the same name.
    lapsed: Arc<AtomicBool>,
}

impl PubSub {
    /// The pub/sub connection of a single server (or Sentinel's master), poked through
    /// `commands`.
    pub(crate) fn new(
        connector: Connector,
        commands: Commands,
        backend_id: &str,
        linger: Duration,
    ) -> Self {
        let control = control_channel(backend_id);
        Self::wired(
            connector,
            Box::new(ServerWiring { commands, control }),
            linger,
        )
    }

    /// A pub/sub connection through `connector`, driven as `wiring` says.
    pub(crate) fn wired(connector: Connector, wiring: Box<dyn Wiring>, linger: Duration) -> Self {
        PubSub {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    phase: Phase::Idle,
                    channels: HashMap::new(),
                    pending: Vec::new(),
                    poke_pending: false,
                    owed_since: None,
                    subscribing: false,
                    generation: 0,
                    live_threads: 0,
                    heard: HeardCounts::new(),
                    reminders: Reminders::new(),
                }),
                changed: Condvar::new(),
                timer: Condvar::new(),
                connector,
                wiring,
                control: Mutex::new(String::new()),
                linger,
                shutdown: AtomicBool::new(false),
                threads: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Registers interest in `channel` and returns once the server has confirmed the
    /// subscription, so no later release is missed. If the pub/sub connection is down (or does
    /// not confirm within the response timeout, or `confirm_within` if given) it returns
    /// anyway: the waiter then relies on its lease-capped wait until the connection is back.
    /// Each message notifies the subscription's signal, and `forward` if given.
    pub(crate) fn subscribe_with(
        &self,
        channel: String,
        forward: Option<Arc<Signal>>,
        confirm_within: Option<Duration>,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        if state.phase == Phase::Idle {
            self.start_threads(&mut state)?;
            state.phase = Phase::Connecting;
        }
        let entry = state
            .channels
            .entry(channel.clone())
            .or_insert_with(|| Channel {
                signal: Arc::new(Signal::new()),
                forwards: Vec::new(),
                count: 0,
                confirmed: false,
                requested: false,
                idle_since: None,
                lapsed: Arc::default(),
            });
        entry.count += 1;
        entry.idle_since = None;
        let forward_id = forward.map(|signal| {
            let id = NEXT_FORWARD.fetch_add(1, Ordering::Relaxed);
            entry.forwards.push((id, signal));
            id
        });
        let subscription = Box::new(Subscription {
            shared: shared.clone(),
            signal: entry.signal.clone(),
            channel: channel.clone(),
            forward_id,
            lapsed: entry.lapsed.clone(),
        });
        if entry.confirmed {
            return Ok(subscription);
        }
        let mut poke = None;
        if !entry.requested {
            entry.requested = true;
            state.pending.push(channel.clone());
            if state.phase == Phase::Connected && !state.poke_pending {
                state.poke_pending = true;
                // What was owed before this poke, to restore if it cannot be sent.
                poke = Some(state.owed_since);
                state.owed_since.get_or_insert_with(Instant::now);
            }
        }
        let wait = match state.phase {
            Phase::Connecting => {
                shared.connector.endpoint.connect_timeout
                    + shared.connector.endpoint.response_timeout
            }
            _ => shared.connector.endpoint.response_timeout,
        };
        let wait = confirm_within.map_or(wait, |limit| limit.min(wait));
        drop(state);

        if let Some(owed_before) = poke {
            if let Err(error) = self.poke() {
                let mut state = shared.state.lock();
                state.poke_pending = false;
                state.owed_since = owed_before;
                return Err(error);
            }
            // The timer gives the connection up if the poke is not answered in time.
            shared.timer.notify_all();
        }

        let deadline = Instant::now() + wait;
        let mut state = shared.state.lock();
        loop {
            let confirmed = state.channels.get(&channel).is_some_and(|c| c.confirmed);
            // Lapsed: refused here (its slot is served elsewhere); the caller places it again.
            if confirmed || state.phase == Phase::Down || subscription.lapsed() {
                return Ok(subscription);
            }
            if shared.changed.wait_until(&mut state, deadline).timed_out() {
                tracing::warn!(
                    server = %shared.connector.endpoint.server,
                    channel,
                    "subscription not confirmed within the response timeout; waiting on the lease alone"
                );
                return Ok(subscription);
            }
        }
    }

    /// Wakes the pub/sub thread. Its reply is not waited for: a stalled server would only
    /// hold the waiter up, and the subscription's confirmation is what the waiter waits for.
    fn poke(&self) -> Result<(), LockError> {
        self.shared.poke()
    }

    /// Whether the server has confirmed this connection's subscription to `channel` (a release
    /// announced there reaches this process too).
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        self.shared
            .state
            .lock()
            .channels
            .get(channel)
            .is_some_and(|channel| channel.confirmed)
    }

    /// How many messages on the channels `channels` makes have been heard, while the server
    /// confirms this connection's subscription to each: see
    /// [`DistributedLock::releases_heard`]. A message is counted and delivered under the lock
    /// subscriptions register under.
    ///
    /// [`DistributedLock::releases_heard`]: dlock_core::backend::DistributedLock::releases_heard
    pub(crate) fn heard(&self, channels: impl FnOnce() -> Vec<String>) -> Option<u64> {
        let state = self.shared.state.lock();
        if state.phase != Phase::Connected || state.channels.is_empty() {
            return None;
        }
        let mut heard = 0u64;
        for channel in channels() {
            if !state.channels.get(&channel).is_some_and(|c| c.confirmed) {
                return None;
            }
            heard = heard.wrapping_add(state.heard.count(&channel));
        }
        Some(heard)
    }

    /// Whether no channel is subscribed (or waiting to be) on this connection: a cluster drops
    /// such a node's connection once the node serves no slot any more.
    pub(crate) fn is_unused(&self) -> bool {
        self.shared.state.lock().channels.is_empty()
    }

    fn start_threads(&self, state: &mut State) -> Result<(), LockError> {
        self.shared.spawn_reader(state, false)?;
        let shared = self.shared.clone();
        let timer = std::thread::Builder::new()
            .name("dlock-pubsub-timer".into())
            .spawn(move || {
                shared.run_timer();
                shared.thread_ended(None);
            })
            .map_err(|error| LockError::thread_spawn("pub/sub timer", error))?;
        state.live_threads += 1;
        self.shared.threads.lock().push(timer);
        Ok(())
    }
}

impl Drop for PubSub {
    fn drop(&mut self) {
        let shared = &self.shared;
        shared.shutdown.store(true, Ordering::Release);
        let connected = {
            let state = shared.state.lock();
            shared.changed.notify_all();
            shared.timer.notify_all();
            state.phase == Phase::Connected
        };
        if connected {
            // Wakes the pub/sub thread from its blocking read so it sees the shutdown. If the
            // server is unreachable, the thread is reconnecting and sees it at its next step.
            let _ = self.poke();
        }
        // Each thread is at most one connection attempt or one read away from seeing the
        // shutdown, unless it is blocked on a stalled server: it is not waited for past that.
        let endpoint = &shared.connector.endpoint;
        let deadline = Instant::now() + endpoint.connect_timeout + endpoint.response_timeout;
        {
            let mut state = shared.state.lock();
            while state.live_threads > 0 {
                if shared.changed.wait_until(&mut state, deadline).timed_out() {
                    tracing::debug!(server = %endpoint.server, threads = state.live_threads, "pub/sub threads still running at drop; left to end on their own");
                    break;
                }
            }
        }
        let me = std::thread::current().id();
        for thread in shared.threads.lock().drain(..) {
            if thread.is_finished() && thread.thread().id() != me {
                let _ = thread.join();
            }
        }
    }
}

impl Channel {
    /// Wakes everyone listening on this channel.
    fn notify(&self) {
        self.signal.notify();
        for (_, forward) in &self.forwards {
            forward.notify();
        }
    }
}
