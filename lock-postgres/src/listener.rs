//! Wake-ups: one `LISTEN` connection per backend, on the schema's channel and on the channels
//! of the clients whose fair waiters wait here, whose notifications are handed to the waiters
//! of this process.
//!
//! Releases `NOTIFY` in their own transaction (only for a lock a waiter marked contended, on the
//! schema's channel; and for a fair lock's next waiters, each on its client's channel), with the
//! lock's or the waiter's key as payload (`keys.rs`). The listening connection is not pooled: it
//! belongs to one thread (`dlock-pg-listen`) that blocks reading it with no timeout (no
//! polling), started with the first subscription:
//!
//! - a subscription registers its key and returns once its channel is listened to (at once
//!   when it already is: one `LISTEN` covers every lock of the schema, and one every fair wait
//!   of a client), so no later release is missed;
//! - a notification notifies the [`Signal`] of its key (a grant to a fair waiter is a wake-up
//!   like any other: anyone may `NOTIFY`, so the waiter claims it with a step of its own,
//!   unless the grant brought back its offer's secret: [`GrantProofs`]);
//! - a reminder (`d<µs>:<waiter>`, sent by a release that granted the head of a queue to the
//!   waiter behind it) notifies its key's signal once that time has passed, unless the key was
//!   woken or left meanwhile: the thread waits for notifications no longer than the next one
//!   owed ([`Reminders`]);
//! - if the connection drops (`pg_terminate_backend`, a restart, a network failure), waiters
//!   keep working on their lease-capped waits; the thread reconnects with backoff (50 ms
//!   doubling to 2 s), listens again, and notifies every signal once, since a release may have
//!   been missed meanwhile. TCP keepalive (10 s idle, 5 s × 3 probes) finds a server that
//!   vanished silently;
//! - when the backend is dropped, the thread is woken and joined (for at most the connect and
//!   statement timeouts: one blocked on a stalled server is left to end on its own).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use dlock_core::backend::{HeardCounts, ReleaseSubscription, Reminders, Signal};
use dlock_core::LockError;

use crate::connection::Connection;
use crate::error::to_lock_error;
use crate::grant_proofs::GrantProofs;
use crate::keys::{client_channel, parse_payload, Told};
use crate::tls::Tls;

/// The first pause before reconnecting; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The backend's listening side.
pub(crate) struct Listener {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Notified when the phase changes or the thread ends.
    changed: Condvar,
    /// Wakes the thread out of its wait for a notification.
    wake: tokio::sync::Notify,
    config: tokio_postgres::Config,
    tls: Tls,
    /// The notifications delivered, by key; all move when one may have been missed (a
    /// reconnect, a channel let go). Counted under `state`'s lock.
    heard: HeardCounts,
    /// The fair waiters' offers, proven by the grants that bring their secrets back.
    proofs: GrantProofs,
    /// `LISTEN "<schema>"`.
    listen: String,
    /// The schema, whose name the clients' channels hash.
    schema: String,
    connect_within: Duration,
    statement_timeout: Duration,
    server: String,
    shutdown: AtomicBool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No thread yet: nobody has waited.
    Idle,
    /// The thread is connecting for the first time.
    Connecting,
    /// Listening.
    Listening,
    /// The connection is down; the thread is reconnecting.
    Down,
    /// The thread has ended.
    Ended,
}

struct State {
    phase: Phase,
    keys: HashMap<String, Entry>,
    /// The clients' channels fair waiters of this backend listen on.
    channels: HashMap<String, Channel>,
    /// Wake-ups owed later to subscribed keys.
    reminders: Reminders,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A client's channel: whether the connection listens to it, and how many subscriptions wait
/// on it. One nobody waits on is kept (a client waits again, as a rule) until
/// [`IDLE_CHANNELS`] such pile up.
struct Channel {
    listened: bool,
    count: usize,
}

/// How many channels nobody waits on the connection keeps listening to.
const IDLE_CHANNELS: usize = 16;

struct Entry {
    signal: Arc<Signal>,
    count: usize,
}

impl Listener {
    pub(crate) fn new(
        config: tokio_postgres::Config,
        tls: Tls,
        schema: &str,
        connect_within: Duration,
        statement_timeout: Duration,
        server: String,
    ) -> Listener {
        Listener {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    phase: Phase::Idle,
                    keys: HashMap::new(),
                    channels: HashMap::new(),
                    reminders: Reminders::new(),
                    thread: None,
                }),
                changed: Condvar::new(),
                wake: tokio::sync::Notify::new(),
                heard: HeardCounts::new(),
                proofs: GrantProofs::default(),
                config,
                tls,
                listen: format!("LISTEN \"{schema}\""),
                schema: schema.to_owned(),
                connect_within,
                statement_timeout,
                server,
                shutdown: AtomicBool::new(false),
            }),
        }
    }

    /// Registers interest in `key`, told on the schema's channel, and returns once that is
    /// listened to, so that no later release is missed. If the listening connection is down (or
    /// does not come up within the connect and statement timeouts), it returns anyway: the
    /// waiter relies on its lease-capped wait until the connection is back.
    pub(crate) fn subscribe(&self, key: String) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        self.subscribe_on(key, None)
    }

    /// Registers interest in fair waiter `owner`'s `key`, told on its client's channel, and
    /// returns once that is listened to (as [`Listener::subscribe`]).
    pub(crate) fn subscribe_waiter(
        &self,
        key: String,
        owner: &str,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let channel = client_channel(&self.shared.schema, owner);
        self.subscribe_on(key, Some(channel))
    }

    /// Registers interest in a plain lock's `key`, told on the schema's channel (a release with
    /// no waiter marked) and on the channel of waiter `owner`'s client (a release with a waiter
    /// of that client marked first); returns once both are listened to (as
    /// [`Listener::subscribe`]).
    pub(crate) fn subscribe_marked(
        &self,
        key: String,
        owner: &str,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let channel = client_channel(&self.shared.schema, owner);
        let by_schema = self.subscribe_on(key.clone(), None)?;
        let by_client = self.subscribe_on(key, Some(channel))?;
        Ok(Box::new(Joined {
            by_schema,
            _by_client: by_client,
        }))
    }

    fn subscribe_on(
        &self,
        key: String,
        channel: Option<String>,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        if state.phase == Phase::Idle {
            let thread_shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name("dlock-pg-listen".into())
                .spawn(move || thread_shared.run())
                .map_err(|error| LockError::thread_spawn("PostgreSQL listener", error))?;
            state.thread = Some(thread);
            state.phase = Phase::Connecting;
        }
        let entry = state.keys.entry(key.clone()).or_insert_with(|| Entry {
            signal: Arc::new(Signal::new()),
            count: 0,
        });
        entry.count += 1;
        let signal = entry.signal.clone();
        if let Some(channel) = &channel {
            let listened = state.channels.entry(channel.clone()).or_insert(Channel {
                listened: false,
                count: 0,
            });
            listened.count += 1;
            if !listened.listened {
                // The thread listens to it between two notifications.
                shared.wake.notify_one();
            }
        }
        let subscription = Box::new(Subscription {
            shared: shared.clone(),
            signal,
            key,
            channel: channel.clone(),
        });
        let deadline = Instant::now() + shared.connect_within + shared.statement_timeout;
        let heard = |state: &State| match &channel {
            None => true,
            Some(channel) => state.channels.get(channel).is_some_and(|c| c.listened),
        };
        while state.phase == Phase::Connecting
            || (state.phase == Phase::Listening && !heard(&state))
        {
            if shared.changed.wait_until(&mut state, deadline).timed_out() {
                tracing::warn!(server = %shared.server, "the listening connection did not come up in time; waiting on the lease alone");
                break;
            }
        }
        Ok(subscription)
    }

    /// How many notifications for the key `key` makes (told on the schema's channel, or on
    /// `owner`'s client's for a fair waiter) have been heard, while the connection listens to
    /// its channel: see [`DistributedLock::releases_heard`]. A notification is counted and
    /// delivered under the lock subscriptions register under.
    ///
    /// [`DistributedLock::releases_heard`]: dlock_core::backend::DistributedLock::releases_heard
    pub(crate) fn heard(&self, key: impl FnOnce() -> String, owner: Option<&str>) -> Option<u64> {
        let state = self.shared.state.lock();
        if state.phase != Phase::Listening {
            return None;
        }
        if let Some(owner) = owner {
            let channel = client_channel(&self.shared.schema, owner);
            if !state.channels.get(&channel).is_some_and(|c| c.listened) {
                return None;
            }
        }
        Some(self.shared.heard.count(&key()))
    }

    /// The fair waiters' offers and the proofs their grants brought.
    pub(crate) fn proofs(&self) -> &GrantProofs {
        &self.shared.proofs
    }

    /// Whether the channel is listened to now.
    pub(crate) fn is_listening(&self) -> bool {
        self.shared.state.lock().phase == Phase::Listening
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let shared = &self.shared;
        shared.shutdown.store(true, Ordering::Release);
        shared.wake.notify_one();
        shared.changed.notify_all();
        let mut state = shared.state.lock();
        let Some(thread) = state.thread.take() else {
            return;
        };
        let deadline = Instant::now() + shared.connect_within + shared.statement_timeout;
        while state.phase != Phase::Ended {
            if shared.changed.wait_until(&mut state, deadline).timed_out() {
                // Blocked on a stalled server: it ends when its call does.
                return;
            }
        }
        drop(state);
        let _ = thread.join();
    }
}

impl Shared {
    fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// The thread: listens, and reconnects whenever the connection is lost, until shutdown.
    fn run(&self) {
        let mut backoff = MIN_BACKOFF;
        let mut reconnect = false;
        while !self.stopping() {
            match self.serve(reconnect) {
                Ok(()) => break,
                Err(error) => {
                    let mut state = self.state.lock();
                    if !self.stopping() {
                        tracing::warn!(server = %self.server, %error, "dlock: the listening connection is down; reconnecting");
                    }
                    state.phase = Phase::Down;
                    self.changed.notify_all();
                    if !self.stopping() {
                        let _ = self.changed.wait_for(&mut state, backoff);
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    reconnect = true;
                }
            }
        }
        self.state.lock().phase = Phase::Ended;
        self.changed.notify_all();
    }

    /// Opens the connection, listens, then delivers notifications until shutdown (`Ok`) or a
    /// connection failure.
    fn serve(&self, reconnect: bool) -> Result<(), LockError> {
        let mut con = Connection::open(&self.config, &self.tls, self.connect_within, false, 0)
            .map_err(|error| {
                to_lock_error(error, "opening the listening connection", &self.server)
            })?;
        let channels: Vec<String> = self.state.lock().channels.keys().cloned().collect();
        let listen = channels.iter().fold(self.listen.clone(), |all, channel| {
            format!("{all}; LISTEN \"{channel}\"")
        });
        con.batch(self.statement_timeout, &listen)
            .map_err(|error| to_lock_error(error, "listening (LISTEN)", &self.server))?;
        {
            let mut state = self.state.lock();
            if self.stopping() {
                return Ok(());
            }
            for channel in &channels {
                if let Some(listened) = state.channels.get_mut(channel) {
                    listened.listened = true;
                }
            }
            state.phase = Phase::Listening;
            if reconnect {
                // A release may have happened while the connection was down.
                self.heard.missed();
                for entry in state.keys.values() {
                    entry.signal.notify();
                }
                tracing::info!(server = %self.server, "dlock: listening again");
            }
            self.changed.notify_all();
        }
        loop {
            if self.stopping() {
                return Ok(());
            }
            self.listen_to_channels(&mut con)?;
            let until = self.remind_due();
            let notification = con
                .next_notification(&self.wake, until)
                .map_err(|error| to_lock_error(error, "listening", &self.server))?;
            if let Some(notification) = notification {
                self.deliver(notification.payload());
            }
        }
    }

    /// Listens to the clients' channels subscribed since the last look, and stops listening to
    /// the idle ones once more than [`IDLE_CHANNELS`] pile up.
    fn listen_to_channels(&self, con: &mut Connection) -> Result<(), LockError> {
        let (new, idle) = {
            let state = self.state.lock();
            let new: Vec<String> = state
                .channels
                .iter()
                .filter(|(_, channel)| !channel.listened)
                .map(|(name, _)| name.clone())
                .collect();
            let idle: Vec<String> = state
                .channels
                .iter()
                .filter(|(_, channel)| channel.listened && channel.count == 0)
                .map(|(name, _)| name.clone())
                .collect();
            let idle = match idle.len() > IDLE_CHANNELS {
                true => idle,
                false => Vec::new(),
            };
            (new, idle)
        };
        if new.is_empty() && idle.is_empty() {
            return Ok(());
        }
        // The idle ones leave the map first: a subscription coming meanwhile adds its channel
        // anew, and is listened to at the next look.
        if !idle.is_empty() {
            let mut state = self.state.lock();
            // Nobody waits on them, but their notifications stop being heard.
            self.heard.missed();
            for channel in &idle {
                if state.channels.get(channel).is_some_and(|c| c.count == 0) {
                    state.channels.remove(channel);
                }
            }
        }
        let statements: Vec<String> = new
            .iter()
            .map(|channel| format!("LISTEN \"{channel}\""))
            .chain(idle.iter().map(|channel| format!("UNLISTEN \"{channel}\"")))
            .collect();
        con.batch(self.statement_timeout, &statements.join("; "))
            .map_err(|error| to_lock_error(error, "listening (LISTEN)", &self.server))?;
        let mut state = self.state.lock();
        for channel in &new {
            if let Some(listened) = state.channels.get_mut(channel) {
                listened.listened = true;
            }
        }
        // A channel let go above but subscribed again meanwhile must be listened to again.
        for channel in &idle {
            if let Some(listened) = state.channels.get_mut(channel) {
                listened.listened = false;
            }
        }
        self.changed.notify_all();
        Ok(())
    }

    fn deliver(&self, payload: &str) {
        let Some(told) = parse_payload(payload) else {
            return;
        };
        if let Told::Granted {
            key,
            attempt,
            proof: Some(proof),
        } = &told
        {
            // Proven before the waiter is woken, so that its look finds the proof.
            self.proofs.prove(key, *attempt, proof);
        }
        let mut state = self.state.lock();
        match told {
            Told::Now(key) | Told::Granted { key, .. } => {
                self.heard.heard(&key);
                state.reminders.forget(&key);
                if let Some(entry) = state.keys.get(&key) {
                    entry.signal.notify();
                }
            }
            Told::After(key, after) => {
                // Counted now: a waiter not subscribed yet keeps no reminder, so it looks
                // again once subscribed.
                self.heard.heard(&key);
                if state.keys.contains_key(&key) {
                    state.reminders.remind(&key, after, Instant::now());
                }
            }
        }
    }

    /// Wakes the keys whose reminder is due; answers when the next one is.
    fn remind_due(&self) -> Option<Instant> {
        let state = &mut *self.state.lock();
        for key in state.reminders.take_due(Instant::now()) {
            self.heard.heard(&key);
            if let Some(entry) = state.keys.get(&key) {
                entry.signal.notify();
            }
        }
        state.reminders.next()
    }
}

/// One waiter's interest in a key (told on a client's channel, for a fair waiter).
struct Subscription {
    shared: Arc<Shared>,
    signal: Arc<Signal>,
    key: String,
    channel: Option<String>,
}

impl ReleaseSubscription for Subscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

/// A plain lock's subscription on two channels: one key, so one signal.
struct Joined {
    by_schema: Box<dyn ReleaseSubscription>,
    _by_client: Box<dyn ReleaseSubscription>,
}

impl ReleaseSubscription for Joined {
    fn signal(&self) -> &Arc<Signal> {
        self.by_schema.signal()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        if let Some(entry) = state.keys.get_mut(&self.key) {
            entry.count -= 1;
            if entry.count == 0 {
                state.keys.remove(&self.key);
                state.reminders.forget(&self.key);
                self.shared.proofs.forget(&self.key);
            }
        }
        if let Some(channel) = &self.channel {
            if let Some(listened) = state.channels.get_mut(channel) {
                listened.count -= 1;
            }
        }
    }
}
