//! The pub/sub thread: it owns the connection, subscribes and unsubscribes, reads what the
//! server pushes and wakes the waiters of the channel a release was announced on.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::LockError;
use parking_lot::MutexGuard;
use redis::{Connection, RedisError, Value};

use super::{Phase, Shared, State, MAX_BACKOFF, MIN_BACKOFF};

/// What the pub/sub connection delivered.
enum Event {
    /// A message on a channel, and its payload: a wake-up, whatever it says, but a reminder.
    Message(String, String),
    Subscribed(String),
    /// A sharded channel unsubscribed: by us, or by the node when the slot moved away.
    Unsubscribed(String),
    /// The node refused a subscription (`MOVED`: the channel's slot is served elsewhere).
    Refused(redis::ServerError),
    Other,
}

impl Shared {
    pub(super) fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// How long a poke may go unanswered before the connection counts as broken.
    fn answer_within(&self) -> Duration {
        self.connector.endpoint.response_timeout
    }

    /// Starts a pub/sub thread serving connection `state.generation`.
    pub(super) fn spawn_reader(
        self: &Arc<Self>,
        state: &mut State,
        reconnect: bool,
    ) -> Result<(), LockError> {
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
    pub(super) fn thread_ended(&self, generation: Option<u64>) {
        let mut state = self.state.lock();
        if generation.is_none_or(|generation| generation == state.generation) {
            state.live_threads = state.live_threads.saturating_sub(1);
            self.changed.notify_all();
        }
    }

    /// When the connection counts as broken if the thread has not answered by then: a poke
    /// unanswered while the thread is meant to be reading.
    pub(super) fn stall_deadline(&self, state: &State) -> Option<Instant> {
        if state.phase != Phase::Connected || state.subscribing {
            return None;
        }
        state.owed_since.map(|since| since + self.answer_within())
    }

    /// Gives the current connection up: its thread is left blocked on it (it ends, touching
    /// nothing, when its read returns) and a new thread reconnects and resubscribes everything.
    pub(super) fn replace_connection(self: &Arc<Self>, state: &mut MutexGuard<'_, State>) {
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

    pub(super) fn poke(&self) -> Result<(), LockError> {
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
            state.heard.missed();
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
            state.heard.missed();
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

    /// Wakes the channel's waiters. Any message is a wake-up, a grant's too: anyone allowed
    /// to `PUBLISH` may send one, so the waiter claims a grant with a step of its own. But a
    /// reminder (`remind:<ms>`, sent by a release that granted the head of a queue to the
    /// dlock waiter behind it) owes the channel a wake-up that much later, which the timer
    /// thread makes, unless the channel is woken before.
    fn deliver(&self, channel: &str, payload: &str) {
        let mut state = self.state.lock();
        // Counted now, a reminder's too: a waiter not subscribed yet keeps no reminder, so it
        // looks again once subscribed.
        state.heard.heard(channel);
        if let Some(after) = reminder(payload) {
            if state.channels.get(channel).is_some_and(|c| c.count > 0) {
                state.reminders.remind(channel, after, Instant::now());
                self.timer.notify_all();
            }
            return;
        }
        state.reminders.forget(channel);
        if let Some(entry) = state.channels.get(channel) {
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
            if !unsubscribe.is_empty() {
                // Their messages stop being heard.
                state.heard.missed();
            }
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

/// The delay a reminder's payload (`remind:<ms>`) owes its channel's waiters, if it is one.
fn reminder(payload: &str) -> Option<Duration> {
    let millis = payload.strip_prefix("remind:")?.parse::<u64>().ok()?;
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::reminder;

    #[test]
    fn a_reminder_says_when_and_anything_else_wakes_at_once() {
        assert_eq!(reminder("remind:2000"), Some(Duration::from_secs(2)));
        assert_eq!(reminder("remind:"), None);
        assert_eq!(reminder("remind:-5"), None);
        assert_eq!(reminder("0"), None);
        assert_eq!(reminder("grant:7"), None);
    }
}
