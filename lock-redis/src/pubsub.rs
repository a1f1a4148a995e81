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
//!   lock sleeps on.
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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use redis::{Connection, RedisError, Value};

use dlock_core::backend::{ReleaseSubscription, Signal};
use dlock_core::LockError;

use crate::commands::Commands;
use crate::connection::Connector;
use crate::keys::{control_channel, GRANT_MESSAGE_PREFIX};

/// The first pause before reconnecting a dropped pub/sub connection; it doubles up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How many grant announcements a channel remembers: a waiter reads its own within moments.
const KEPT_GRANTS: usize = 8;
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
}

impl State {
    /// The connection is gone: nothing is owed or confirmed on it any more, and every channel
    /// is to be subscribed again on the next one.
    fn connection_lost(&mut self) {
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
    /// The wait ids of the grants announced on this channel (a fair waiter's own), newest
    /// last, a few at most.
    grants: Arc<Mutex<VecDeque<u64>>>,
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
    /// not confirm within the response timeout) it returns anyway: the waiter then relies on
    /// its lease-capped wait until the connection is back.
    pub(crate) fn subscribe(
        &self,
        channel: String,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.subscribe_with(channel, None, None)
    }

    /// As [`subscribe`](Self::subscribe), also notifying `forward` on each message, and
    /// waiting at most `confirm_within` for the server's confirmation (instead of the
    /// connection's timeouts).
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
                grants: Arc::default(),
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
            grants: entry.grants.clone(),
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
            if confirmed || state.phase == Phase::Down {
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

/// Numbers the forwarding signals of subscriptions.
static NEXT_FORWARD: AtomicU64 = AtomicU64::new(1);

/// One waiter's interest in one channel.
struct Subscription {
    shared: Arc<Shared>,
    signal: Arc<Signal>,
    grants: Arc<Mutex<VecDeque<u64>>>,
    channel: String,
    forward_id: Option<u64>,
    lapsed: Arc<AtomicBool>,
}

impl ReleaseSubscription for Subscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }

    fn granted(&self, attempt: u64) -> bool {
        self.grants.lock().contains(&attempt)
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

/// What the pub/sub connection delivered.
enum Event {
    /// A message: its channel and payload.
    Message(String, String),
    Subscribed(String),
    /// A sharded channel unsubscribed: by us, or by the node when the slot moved away.
    Unsubscribed(String),
    /// The node refused a subscription (`MOVED`: the channel's slot is served elsewhere).
    Refused(redis::ServerError),
    Other,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// How long a poke may go unanswered before the connection counts as broken.
    fn answer_within(&self) -> Duration {
        self.connector.endpoint.response_timeout
    }

    /// Starts a pub/sub thread serving connection `state.generation`.
    fn spawn_reader(self: &Arc<Self>, state: &mut State, reconnect: bool) -> Result<(), LockError> {
        let shared = self.clone();
        let generation = state.generation;
        let thread = std::thread::Builder::new()
            .name("dlock-pubsub".into())
            .spawn(move || {
                shared.run(generation, reconnect);
                shared.thread_ended(Some(generation));
            })
            .map_err(|error| LockError::thread_spawn("pub/sub", error))?;
        state.live_threads += 1;
        let mut threads = self.threads.lock();
        threads.retain(|thread| !thread.is_finished());
        threads.push(thread);
        Ok(())
    }

    /// A thread ends: the backend's drop may be waiting for it. A pub/sub thread of a
    /// connection given up (`generation` no longer current) was no longer counted.
    fn thread_ended(&self, generation: Option<u64>) {
        let mut state = self.state.lock();
        if generation.is_none_or(|generation| generation == state.generation) {
            state.live_threads = state.live_threads.saturating_sub(1);
            self.changed.notify_all();
        }
    }

    /// When the connection counts as broken if the thread has not answered by then: a poke
    /// unanswered while the thread is meant to be reading.
    fn stall_deadline(&self, state: &State) -> Option<Instant> {
        if state.phase != Phase::Connected || state.subscribing {
            return None;
        }
        state.owed_since.map(|since| since + self.answer_within())
    }

    /// Gives the current connection up: its thread is left blocked on it (it ends, touching
    /// nothing, when its read returns) and a new thread reconnects and resubscribes everything.
    fn replace_connection(self: &Arc<Self>, state: &mut MutexGuard<'_, State>) {
        tracing::warn!(
            server = %self.connector.endpoint.server,
            within = ?self.answer_within(),
            "the pub/sub connection did not answer a poke in time; reconnecting"
        );
        state.generation += 1;
        // The thread left behind is no longer waited for.
        state.live_threads = state.live_threads.saturating_sub(1);
        state.connection_lost();
        // Subscribers waiting for a confirmation go on with their lease-capped waits.
        self.changed.notify_all();
        if let Err(error) = self.spawn_reader(state, true) {
            tracing::error!(%error, "could not start a new pub/sub thread; waiters rely on their lease-capped waits");
        }
    }

    fn poke(&self) -> Result<(), LockError> {
        let control = self.control.lock().clone();
        self.wiring.poke(&control)
    }

    fn is_control(&self, channel: &str) -> bool {
        *self.control.lock() == channel
    }

    /// `name` moved away from this connection: its subscriptions lapse and its waiters are
    /// woken to subscribe again.
    fn lapse(&self, state: &mut State, name: &str) {
        if let Some(channel) = state.channels.remove(name) {
            channel.lapsed.store(true, Ordering::Release);
            channel.notify();
            self.wiring.lapsed();
        }
    }

    /// The pub/sub thread of connection `generation`: connect, serve until the connection
    /// fails, back off, repeat; until shutdown, or until the timer gives the connection up.
    fn run(&self, generation: u64, mut reconnect: bool) {
        let mut backoff = MIN_BACKOFF;
        while !self.stopping() && self.state.lock().generation == generation {
            match self.serve(reconnect, generation) {
                Ok(()) => break,
                Err(error) => {
                    let mut state = self.state.lock();
                    if state.generation != generation {
                        break;
                    }
                    tracing::warn!(server = %self.connector.endpoint.server, %error, "pub/sub connection lost; reconnecting");
                    state.connection_lost();
                    if self.wiring.sharded() {
                        // The node may be gone for good (a failover promoted another): the
                        // channels the slot map now places elsewhere lapse, and their waiters
                        // subscribe where they live now. Checked at each reconnect attempt.
                        let names: Vec<String> = state.channels.keys().cloned().collect();
                        let moved: Vec<String> = MutexGuard::unlocked(&mut state, || {
                            names
                                .into_iter()
                                .filter(|name| !self.wiring.still_placed(name))
                                .collect()
                        });
                        for name in moved {
                            self.lapse(&mut state, &name);
                        }
                    }
                    self.changed.notify_all();
                    if !self.stopping() {
                        let _ = self.changed.wait_for(&mut state, backoff);
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    reconnect = true;
                }
            }
        }
        tracing::debug!(server = %self.connector.endpoint.server, "pub/sub thread stopped");
    }

    /// Opens the connection, subscribes the control channel and every live channel, then
    /// handles messages and requests until shutdown or the end of `generation` (`Ok`), or a
    /// connection error.
    fn serve(&self, reconnect: bool, generation: u64) -> Result<(), RedisError> {
        let control = self.wiring.control()?;
        *self.control.lock() = control.clone();
        // Its reads are bounded by the response timeout while subscribing.
        let mut con = self.connector.open()?;
        let channels: Vec<String> = {
            let mut state = self.state.lock();
            if state.generation != generation {
                return Ok(());
            }
            state.channels.retain(|_, channel| channel.count > 0);
            state.pending.clear();
            state.poke_pending = false;
            state.owed_since = None;
            for channel in state.channels.values_mut() {
                channel.requested = true;
            }
            state.channels.keys().cloned().collect()
        };
        let mut all = Vec::with_capacity(channels.len() + 1);
        all.push(control.clone());
        all.extend(channels.iter().cloned());
        self.subscribe_all(&mut con, &all)?;
        // From now on reads block until a message comes: no polling. A dead peer is found by
        // TCP keepalive, or by a poke left unanswered.
        con.set_read_timeout(None)?;
        {
            let mut state = self.state.lock();
            if state.generation != generation {
                return Ok(());
            }
            state.phase = Phase::Connected;
            for name in &channels {
                if let Some(channel) = state.channels.get_mut(name) {
                    channel.confirmed = true;
                    if reconnect {
                        // A release may have happened while the connection was down.
                        channel.notify();
                    }
                }
            }
            self.changed.notify_all();
            self.timer.notify_all();
        }
        if reconnect {
            tracing::info!(server = %self.connector.endpoint.server, channels = channels.len(), "pub/sub connection re-established");
        }
        loop {
            if !self.handle_requests(&mut con, generation)? || self.stopping() {
                return Ok(());
            }
            let event = read_event(&mut con)?;
            if self.state.lock().generation != generation {
                // The timer gave this connection up while the thread was blocked on it.
                return Ok(());
            }
            match event {
                Event::Message(channel, _) if channel == control => {}
                Event::Message(channel, payload) => self.deliver(&channel, &payload),
                Event::Unsubscribed(channel) => self.unsubscribed(&channel)?,
                Event::Subscribed(_) | Event::Refused(_) | Event::Other => {}
            }
        }
    }

    /// A sharded channel was unsubscribed. Ours are dropped from the map when we unsubscribe
    /// them, so a confirmed channel still in it was dropped by the node: its slot moved.
    fn unsubscribed(&self, channel: &str) -> Result<(), RedisError> {
        if self.is_control(channel) {
            // The control channel's slot moved: reconnect, with a control channel of this node.
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "the pub/sub connection's control channel moved to another node",
            )));
        }
        let mut state = self.state.lock();
        if state.channels.get(channel).is_some_and(|c| c.confirmed) {
            tracing::debug!(server = %self.connector.endpoint.server, channel, "channel moved to another node");
            self.lapse(&mut state, channel);
        }
        Ok(())
    }

    fn deliver(&self, channel: &str, payload: &str) {
        if let Some(entry) = self.state.lock().channels.get(channel) {
            let grant = payload
                .strip_prefix(GRANT_MESSAGE_PREFIX)
                .and_then(|id| id.parse::<u64>().ok());
            if let Some(attempt) = grant {
                let mut grants = entry.grants.lock();
                if grants.len() >= KEPT_GRANTS {
                    grants.pop_front();
                }
                grants.push_back(attempt);
            }
            entry.notify();
        }
    }

    /// Subscribes the queued channels and unsubscribes the ones idle past the linger; false
    /// if the timer gave this connection (`generation`) up.
    fn handle_requests(&self, con: &mut Connection, generation: u64) -> Result<bool, RedisError> {
        let (subscribe, unsubscribe) = {
            let mut state = self.state.lock();
            if state.generation != generation {
                return Ok(false);
            }
            state.poke_pending = false;
            let now = Instant::now();
            let linger = self.linger;
            let mut unsubscribe = Vec::new();
            state.channels.retain(|name, channel| {
                let expired = channel.count == 0
                    && channel
                        .idle_since
                        .is_some_and(|idle| now.saturating_duration_since(idle) >= linger);
                if expired && (channel.confirmed || channel.requested) {
                    unsubscribe.push(name.clone());
                }
                !expired
            });
            let pending = std::mem::take(&mut state.pending);
            let subscribe: Vec<String> = pending
                .into_iter()
                .filter(|name| state.channels.get(name).is_some_and(|c| !c.confirmed))
                .collect();
            if subscribe.is_empty() {
                // Whatever the poke asked for is done (an unsubscription is only written).
                state.owed_since = None;
            } else {
                state.subscribing = true;
            }
            (subscribe, unsubscribe)
        };
        if !unsubscribe.is_empty() {
            // The confirmations are skipped as they come in; nothing waits for them.
            con.send_packed_command(&self.subscription_commands("UNSUBSCRIBE", &unsubscribe))?;
            self.timer.notify_all();
        }
        if !subscribe.is_empty() {
            // Confirmations are owed within the response timeout, like any reply.
            con.set_read_timeout(Some(self.answer_within()))?;
            self.subscribe_all(con, &subscribe)?;
            con.set_read_timeout(None)?;
            let mut state = self.state.lock();
            if state.generation != generation {
                return Ok(false);
            }
            state.subscribing = false;
            // A poke sent meanwhile is owed from now on.
            state.owed_since = state.poke_pending.then(Instant::now);
            for name in &subscribe {
                if let Some(channel) = state.channels.get_mut(name) {
                    channel.confirmed = true;
                }
            }
            self.changed.notify_all();
        }
        Ok(true)
    }

    /// `command` (`SUBSCRIBE` or `UNSUBSCRIBE`) for `channels`, packed: one command for all
    /// of them, or with sharded pub/sub one each (channels of several slots cannot share one).
    fn subscription_commands(&self, command: &str, channels: &[String]) -> Vec<u8> {
        if !self.wiring.sharded() {
            return redis::cmd(command).arg(channels).get_packed_command();
        }
        let sharded = format!("S{command}");
        let mut pipe = redis::pipe();
        for channel in channels {
            pipe.cmd(&sharded).arg(channel);
        }
        pipe.get_packed_pipeline()
    }

    /// Subscribes `channels` and reads until each is confirmed (or, sharded, refused: it lives
    /// on another node and lapses), delivering the release messages that arrive meanwhile.
    fn subscribe_all(&self, con: &mut Connection, channels: &[String]) -> Result<(), RedisError> {
        con.send_packed_command(&self.subscription_commands("SUBSCRIBE", channels))?;
        // Answers come in the order asked; a refusal does not name its channel.
        let mut missing: VecDeque<&str> = channels.iter().map(String::as_str).collect();
        while !missing.is_empty() {
            match read_event(con)? {
                Event::Subscribed(channel) => missing.retain(|name| *name != channel),
                Event::Refused(error) => {
                    let Some(channel) = missing.pop_front() else {
                        continue;
                    };
                    if self.is_control(channel) {
                        return Err(RedisError::from(error));
                    }
                    tracing::debug!(server = %self.connector.endpoint.server, channel, %error, "subscription refused; the channel lives elsewhere");
                    self.lapse(&mut self.state.lock(), channel);
                }
                Event::Message(channel, payload) if !self.is_control(&channel) => {
                    self.deliver(&channel, &payload)
                }
                Event::Unsubscribed(channel) => self.unsubscribed(&channel)?,
                Event::Message(..) | Event::Other => {}
            }
        }
        Ok(())
    }

    /// The timer thread: gives the connection up when a poke goes unanswered past the
    /// response timeout, and when a channel has been idle for the linger, pokes the pub/sub
    /// thread to unsubscribe it.
    fn run_timer(self: &Arc<Self>) {
        let mut state = self.state.lock();
        while !self.stopping() {
            let now = Instant::now();
            let stall = self.stall_deadline(&state);
            if stall.is_some_and(|at| at <= now) {
                self.replace_connection(&mut state);
                continue;
            }
            let unsubscribe_at = match next_expiry(&state, self.linger) {
                Some(at) if state.phase == Phase::Connected && !state.poke_pending => {
                    if at <= now {
                        state.poke_pending = true;
                        let owed_before = state.owed_since;
                        state.owed_since.get_or_insert(now);
                        let poked = MutexGuard::unlocked(&mut state, || self.poke());
                        if poked.is_err() {
                            state.poke_pending = false;
                            state.owed_since = owed_before;
                            // The server is unreachable; try again after a linger.
                            let _ = self
                                .timer
                                .wait_for(&mut state, self.linger.max(MIN_BACKOFF));
                        }
                        continue;
                    }
                    Some(at)
                }
                // The pub/sub thread is busy (a poke is in flight, or it is reconnecting, which
                // drops idle channels anyway): look again after a linger.
                Some(_) => Some(now + self.linger.max(MIN_BACKOFF)),
                None => None,
            };
            match stall.into_iter().chain(unsubscribe_at).min() {
                Some(at) => {
                    let _ = self.timer.wait_until(&mut state, at);
                }
                None => self.timer.wait(&mut state),
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

/// When the first idle channel's linger ends.
fn next_expiry(state: &State, linger: Duration) -> Option<Instant> {
    state
        .channels
        .values()
        .filter(|channel| channel.count == 0)
        .filter_map(|channel| channel.idle_since)
        .min()
        .map(|idle| idle + linger)
}

/// Reads one push from the pub/sub connection (RESP2 arrays, or RESP3 pushes).
fn read_event(con: &mut Connection) -> Result<Event, RedisError> {
    let value = con.recv_response()?;
    let items = match value {
        Value::ServerError(error) => return Ok(Event::Refused(error)),
        Value::Array(items) => items,
        Value::Push { kind, data } => {
            let mut items = vec![Value::BulkString(kind.to_string().into_bytes())];
            items.extend(data);
            items
        }
        _ => return Ok(Event::Other),
    };
    let text = |value: Option<&Value>| match value {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Some(Value::SimpleString(text)) => Some(text.clone()),
        _ => None,
    };
    let kind = text(items.first()).unwrap_or_default().to_ascii_lowercase();
    let Some(channel) = text(items.get(1)) else {
        return Ok(Event::Other);
    };
    Ok(match kind.as_str() {
        "message" | "smessage" => Event::Message(channel, text(items.get(2)).unwrap_or_default()),
        "subscribe" | "ssubscribe" => Event::Subscribed(channel),
        "sunsubscribe" => Event::Unsubscribed(channel),
        _ => Event::Other,
    })
}
