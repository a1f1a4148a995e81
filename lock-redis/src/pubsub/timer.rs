//! The timer thread: it gives up a connection whose poke went unanswered, unsubscribes the
//! channels left idle past the linger, and wakes the channels whose reminder is due.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::{Phase, Shared, State, MIN_BACKOFF};

impl Shared {
    /// The timer thread: gives the connection up when a poke goes unanswered past the
    /// response timeout, when a channel has been idle for the linger, pokes the pub/sub
    /// thread to unsubscribe it, and wakes the channels whose reminder is due.
    pub(super) fn run_timer(self: &Arc<Self>) {
        let mut state = self.state.lock();
        while !self.stopping() {
            let now = Instant::now();
            for channel in state.reminders.take_due(now) {
                if let Some(entry) = state.channels.get(&channel) {
                    state.heard.heard(&channel);
                    entry.notify();
                }
            }
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
            let reminder = state.reminders.next();
            match stall
                .into_iter()
                .chain(unsubscribe_at)
                .chain(reminder)
                .min()
            {
                Some(at) => {
                    let _ = self.timer.wait_until(&mut state, at);
                }
                None => self.timer.wait(&mut state),
            }
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
