//! [`Reminders`]: wake-ups a backend's listener owes its waiters later.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::contract::acquire::GrantOffer;
use crate::time::instant_after;

/// How much later than asked a reminder comes, besides 1 % of the delay (see
/// [`Reminders::remind`]).
const LATE_BY: Duration = Duration::from_millis(5);

/// Wake-ups a backend's listener owes its waiters at a later instant, by key, the earliest
/// one per key.
///
/// A release that grants a queue's head the lock tells the waiter behind it when the grant
/// runs out: should the granted waiter be dead, the lock is the next one's then. Told at once,
/// the next waiter would look at the store now, to be refused while the granted one claims; a
/// reminder wakes it only when looking can find something new. A reminder is a hint like any
/// wake-up (anyone may send the message): one that comes too early costs a refused look, and
/// a later one never puts off an earlier.
///
/// The listener keeps reminders only for keys a waiter subscribes to, forgets one when its
/// key's waiters are woken for another reason or leave, and waits for notifications no longer
/// than [`next`](Self::next). A reminder is owed for a grant's end, so none is kept further
/// off than [`GrantOffer::MAX_LEASE`]: a forged one cannot linger.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use dlocks::backend::Reminders;
///
/// let now = Instant::now();
/// let mut reminders = Reminders::new();
/// reminders.remind("orders", Duration::from_secs(1), now);
/// reminders.remind("orders", Duration::from_millis(1500), now);
/// // A second, and a little (5 ms and 1 %) so that the store has let the grant go.
/// let due = now + Duration::from_millis(1015);
/// assert_eq!(reminders.next(), Some(due));
/// assert!(reminders.take_due(now + Duration::from_secs(1)).is_empty());
/// assert_eq!(reminders.take_due(due), ["orders"]);
/// // Never further off than a grant's longest lease.
/// reminders.remind("stock", Duration::from_secs(3600), now);
/// assert_eq!(reminders.next(), Some(now + Duration::from_millis(2025)));
/// ```
#[derive(Debug, Default)]
pub struct Reminders {
    due: HashMap<String, Instant>,
}

impl Reminders {
    /// No reminders.
    pub fn new() -> Self {
        Self::default()
    }

    /// Owes `key`'s waiters a wake-up `after` from `now` (at most [`GrantOffer::MAX_LEASE`]),
    /// unless one is owed earlier already. It comes a little later than asked (5 ms and 1 %):
    /// the store lets a grant go on its own clock, counted in milliseconds on some, and a look
    /// that lands a moment early is refused and made again.
    pub fn remind(&mut self, key: &str, after: Duration, now: Instant) {
        let after = after.min(GrantOffer::MAX_LEASE);
        let at = instant_after(now, after + LATE_BY + after / 100);
        match self.due.get_mut(key) {
            Some(due) => *due = (*due).min(at),
            None => {
                self.due.insert(key.to_owned(), at);
            }
        }
    }

    /// Owes `key`'s waiters nothing any more: they were woken, or left.
    pub fn forget(&mut self, key: &str) {
        self.due.remove(key);
    }

    /// When the next wake-up is owed.
    pub fn next(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The keys whose wake-up is owed by `now`, no longer owed once taken.
    pub fn take_due(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &due {
            self.due.remove(key);
        }
        due
    }
}
